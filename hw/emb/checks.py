"""The checks a command must pass before the engine reads anything: table count, table shapes,
alignment, and that every table and buffer lies inside one enabled region.

One item per two cycles (select, then judge), in a fixed order that decides which error a
command with several problems reports:

1. the table count (BAD_TABLE_COUNT);
2. each of the first ``tables`` tables in order: its dimension (BAD_DIMENSION), its base
   (MISALIGNED_ADDRESS), its extent ``rows * dim * 4`` bytes (ADDRESS_OUT_OF_REGION); the
   error names the table;
3. the buffers ``indices``, ``offsets``, ``weights`` (only if a table is WEIGHTED), ``output``:
   alignment, then region. A buffer of zero length is not checked. Lengths are rounded up to
   whole lines, since the engine reads whole lines.

With ``registered_verdicts`` an item's verdict (the error it would report, NONE if it passes)
is a register: judged from the candidate's registers in a cycle of its own and acted on in the
next, as the next item is selected. On an ECP5 the region check's carry chains, the error's
priority and the enables of the item counter, the state and the error were one path (14.1 ns
in the netlist). It costs a cycle per command (the last verdict's).
"""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ..params import check_bool
from .layouts import LINE_BYTES, ErrorCode, PoolingMode, command_layout, region_layout, table_layout

__all__ = ["CommandChecker"]

_BUFFERS = ("indices", "offsets", "weights", "output")


class CommandChecker(wiring.Component):
    """Static checks of one command (see the module docstring for their order).

    Members
    -------
    start : ``In(1)``
        Pulse: check ``command`` (held stable until ``done``).
    command, tables, regions : ``In``
    done : ``Out(1)``
    error : ``Out(ErrorCode)``, table : ``Out(8)``
        The first failed check (NONE if all passed) and the table it concerns.
    row_floats : ``Out(24)``
        ``sum(dim)`` over the command's tables: floats per output row (a register: it
        follows ``command`` and ``tables`` a cycle later, so it is valid from the cycle after
        ``start``).
    weighted : ``Out(1)``
        One of the command's tables pools with per-sample weights.

    ``registered_verdicts``: each item's verdict is a register (module docstring).
    """

    def __init__(self, *, max_tables, max_dim, num_regions, addr_width,
                 registered_verdicts=False):
        self._registered = check_bool("Registered verdicts", registered_verdicts)
        self._max_tables = max_tables
        self._max_dim = max_dim
        self._addr_width = addr_width
        super().__init__({
            "start": In(1),
            "command": In(command_layout(addr_width)),
            "tables": In(data.ArrayLayout(table_layout(addr_width), max_tables)),
            "regions": In(data.ArrayLayout(region_layout(addr_width), num_regions)),
            "done": Out(1),
            "error": Out(ErrorCode),
            "table": Out(8),
            "row_floats": Out(24),
            "weighted": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        command = self.command
        count = command.tables
        max_tables = self._max_tables

        # Per-command totals over the first `tables` tables.
        row_floats = 0
        weighted = 0
        for t in range(max_tables):
            used = t < count
            row_floats = row_floats + Mux(used, self.tables[t].dim, 0)
            weighted = weighted | (used & (self.tables[t].mode == PoolingMode.WEIGHTED))
        # The output buffer's lines (bags * row_floats / 16: an adder tree and a multiplier)
        # from registers, over two cycles: the output is the last item, judged at least
        # 2 * (max_tables + 4) cycles after start.
        output_lines = Signal(40)
        m.d.sync += [self.row_floats.eq(row_floats),
                     output_lines.eq((command.bags * self.row_floats) >> 4)]
        m.d.comb += self.weighted.eq(weighted)

        # Items: 0 = table count, 1..max_tables = tables, then the buffers.
        items = 1 + max_tables + len(_BUFFERS)
        item = Signal(range(items + 1))
        judging = Signal()
        active = Signal()

        # The candidate an item stands for, registered before judging it.
        wide = self._addr_width + 52
        start_addr = Signal(self._addr_width)
        length = Signal(wide)
        applicable = Signal()
        dim_bad = Signal()

        # The index and offsets buffers' lines from registers too, loaded every cycle (the
        # buffers are judged at least 2 * max_tables + 1 cycles after start): the offsets'
        # count is a multiplier, which was 15.6 ns into `length` in a ULX3S build; its
        # product is a register of its own too (16.6 ns through the adders behind it).
        n_lines = Signal(29)
        offset_entries = Signal(24)
        offset_lines = Signal(21)
        m.d.sync += [n_lines.eq((command.num_indices + 15) >> 4),
                     offset_entries.eq(command.bags * count),
                     offset_lines.eq(((offset_entries + 1) + 15) >> 4)]
        select = {
            "start": Signal(self._addr_width), "length": Signal(wide),
            "applicable": Signal(), "dim_bad": Signal(),
        }
        dim_line_bits = (self._max_dim // 16).bit_length()
        # Each table's extent in a register of its own, loaded every cycle: `tables` holds
        # still from `start` on and the first table is selected two cycles later, so the
        # selection reads flip-flops, not a multiplier (16.5 ns into `length` in a ULX3S
        # build). In lines: dim / 16 of them a row (a dim that is not a multiple of 16, or
        # above max_dim, fails first), so each multiplier is rows x log2(max_dim / 16) bits.
        # Its factors are registers too, so the multiplier starts at flip-flops beside it,
        # not at the table registers across the engine (14.8 ns): the product is then right
        # from two cycles after `start`, when the first table is selected.
        extents = [Signal(wide, name=f"extent_{t}") for t in range(max_tables)]
        for t in range(max_tables):
            dim = self.tables[t].dim
            rows = Signal.like(self.tables[t].rows, name=f"extent_rows_{t}")
            row_lines = Signal(dim_line_bits, name=f"extent_row_lines_{t}")
            m.d.sync += [rows.eq(self.tables[t].rows), row_lines.eq(dim[4:4 + dim_line_bits]),
                         extents[t].eq(rows * row_lines * LINE_BYTES)]
        with m.Switch(item):
            for t in range(max_tables):
                with m.Case(1 + t):
                    dim = self.tables[t].dim
                    m.d.comb += [
                        select["start"].eq(self.tables[t].base),
                        select["length"].eq(extents[t]),
                        select["applicable"].eq(t < count),
                        select["dim_bad"].eq((dim == 0) | (dim[:4] != 0)
                                             | (dim > self._max_dim)),
                    ]
            for k, name in enumerate(_BUFFERS):
                with m.Case(1 + max_tables + k):
                    lines = {
                        "indices": n_lines,
                        "offsets": offset_lines,
                        "weights": Mux(weighted, n_lines, 0),
                        "output": output_lines,
                    }[name]
                    m.d.comb += [
                        select["start"].eq(getattr(command, name)),
                        select["length"].eq(lines * LINE_BYTES),
                        select["applicable"].eq(lines != 0),
                    ]

        # Judge: inside one enabled region?
        inside = 0
        for region in self.regions:
            end = start_addr + length
            inside = inside | (region.enable
                               & (start_addr >= region.base)
                               & (end <= region.base + region.size))
        misaligned = start_addr[:6] != 0
        is_table = (item >= 1) & (item <= max_tables)
        # The candidate's verdict: the first check it fails (a buffer's `dim_bad` is 0).
        verdict = Signal(ErrorCode)
        with m.If(~applicable):
            m.d.comb += verdict.eq(ErrorCode.NONE)
        with m.Elif(dim_bad):
            m.d.comb += verdict.eq(ErrorCode.BAD_DIMENSION)
        with m.Elif(misaligned):
            m.d.comb += verdict.eq(ErrorCode.MISALIGNED_ADDRESS)
        with m.Elif((length != 0) & ~inside):
            m.d.comb += verdict.eq(ErrorCode.ADDRESS_OUT_OF_REGION)
        verdict_table = Mux(is_table, item - 1, 0)

        # With registered verdicts: the verdict of the item last judged, waiting to be acted
        # on (`pending`) as the next item is selected.
        judged = Signal(ErrorCode)
        judged_bad = Signal()    # judged != NONE
        judged_table = Signal.like(self.table)
        pending = Signal()
        count_bad = (count == 0) | (count > max_tables)
        if self._registered:
            # The table count's check from a register too (the command holds still from
            # `start`, and the count is judged the cycle after), so that `active` and the
            # item counter follow flip-flops and the item's decode alone.
            count_bad_then = Signal()
            m.d.sync += count_bad_then.eq(count_bad)
            count_bad = count_bad_then

        # The candidate's registers load every cycle: only the cycle after a select reads
        # them, so what they hold at other times does not matter, and their enables are then
        # not the control's decode (with registered verdicts, 46 enables behind the state and
        # the item's decode, a net `active` shared in the netlist: 12.95 ns, 6 levels).
        m.d.sync += [start_addr.eq(select["start"]), length.eq(select["length"]),
                     applicable.eq(select["applicable"]), dim_bad.eq(select["dim_bad"])]

        m.d.comb += self.done.eq(~active)
        with m.If(self.start):
            m.d.sync += [item.eq(0), judging.eq(0), active.eq(1), pending.eq(0),
                         self.error.eq(ErrorCode.NONE), self.table.eq(0)]
        with m.Elif(active & (item == 0)):
            with m.If(count_bad):
                m.d.sync += [self.error.eq(ErrorCode.BAD_TABLE_COUNT), active.eq(0)]
            with m.Else():
                m.d.sync += item.eq(1)
        with m.Elif(active & ~judging):
            # Select: the candidate's registers (below) load the item's values.
            m.d.sync += judging.eq(1)
            if self._registered:
                # ... and the item before is acted on from its registered verdict: the item
                # counter has passed it (`item == items` once the last was judged).
                with m.If(pending & judged_bad):
                    m.d.sync += [self.error.eq(judged), self.table.eq(judged_table),
                                 active.eq(0)]
                with m.Elif(item == items):
                    m.d.sync += active.eq(0)
        with m.Elif(active):
            m.d.sync += judging.eq(0)
            if self._registered:
                m.d.sync += [judged.eq(verdict), judged_bad.eq(verdict != ErrorCode.NONE),
                             judged_table.eq(verdict_table),
                             pending.eq(1), item.eq(item + 1)]
            else:
                with m.If(verdict != ErrorCode.NONE):
                    m.d.sync += [self.error.eq(verdict), active.eq(0),
                                 self.table.eq(verdict_table)]
                with m.Elif(item == items - 1):
                    m.d.sync += active.eq(0)
                with m.Else():
                    m.d.sync += item.eq(item + 1)
        return m

