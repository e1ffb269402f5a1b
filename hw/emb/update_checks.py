"""Checks an UPDATE command's descriptors and buffers before any memory access.

Order (the first failure is reported; ``table`` names the table where there is one, the
other location fields are 0). It is the order of the lookup engine's checker
(``hw.emb.checks``), so both commands report the same error for the same mistake:

1. ``opcode`` must be UPDATE (``BAD_OPCODE``; the engine's owner only sends UPDATE);
2. ``tables`` must be in ``1..max_tables`` (``BAD_TABLE_COUNT``);
3. each table ``t`` in order: ``dim`` a non-zero multiple of 16 up to ``max_dim``
   (``BAD_DIMENSION``), ``base`` 64-byte aligned (``MISALIGNED_ADDRESS``), and its
   ``rows * dim * 4`` bytes, if any, inside one enabled region (``ADDRESS_OUT_OF_REGION``);
4. the buffers, each aligned and then inside one enabled region, counted in whole lines since
   the engine reads whole lines: indices (``num_indices`` words), offsets
   (``tables * bags + 1`` words), weights (``num_indices`` words, only when some table is
   WEIGHTED), gradient (``bags`` rows of ``sum(dim)`` floats). A buffer of no lines is not
   checked at all.

A region is ``[base, base + size)``.

With ``registered_region_checks`` each extent's end, ``base + size`` of every region and a
copy of the regions are registers, so the region check compares flip-flops: on an ECP5 the
carry chains of ``start + length`` and ``base + size``, behind the regions' long routes, set
the update engine's clock. It costs a cycle per extent checked.
"""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, enum, wiring
from amaranth.lib.wiring import In, Out

from ..params import check_bool
from .layouts import (
    ErrorCode,
    Opcode,
    PoolingMode,
    command_layout,
    region_layout,
    shifted_product,
    table_layout,
)

__all__ = ["CommandChecker"]

_LENGTH_WIDTH = 52  # rows (32 bits) * dim * 4 (18 bits), bags * row bytes (16 + 26 bits)


class _Item(enum.Enum, shape=3):
    TABLE = 0
    INDICES = 1
    OFFSETS = 2
    WEIGHTS = 3
    GRADIENT = 4


class CommandChecker(wiring.Component):
    """Sequential checker: about three cycles per table and per buffer (four with
    ``registered_region_checks``, module docstring).

    Members
    -------
    start : ``In(1)``
        Check the ``command`` (which, like ``descriptors`` and ``regions``, must stay stable
        until ``status.done``).
    status : ``Out({"done": 1, "error": ErrorCode, "table": 8})``
        Held from the end of a check to the next ``start``.
    row_lines : ``Out(32)``
        Lines per gradient row, ``sum(dim) / 16`` over the command's tables (valid when done).
    use_weights : ``Out(1)``
        Some table of the command is WEIGHTED (valid when done).
    """

    def __init__(self, *, max_tables, max_dim, num_regions, addr_width,
                 registered_region_checks=False):
        self._registered = check_bool("Registered region checks", registered_region_checks)
        self._max_tables = max_tables
        self._max_dim = max_dim
        self._num_regions = num_regions
        self._addr_width = addr_width
        super().__init__({
            "start": In(1),
            "command": In(command_layout(addr_width)),
            "descriptors": In(data.ArrayLayout(table_layout(addr_width), max_tables)),
            "regions": In(data.ArrayLayout(region_layout(addr_width), num_regions)),
            "status": Out(data.StructLayout({"done": 1, "error": ErrorCode, "table": 8})),
            "row_lines": Out(32),
            "use_weights": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        command = self.command
        table = Signal(8)
        item = Signal(_Item)
        start = Signal(self._addr_width)
        factor_a = Signal(40)
        # Extents are counted in lines: a table's rows of dim / 16 lines (dim, a multiple of
        # 16, is checked first), a buffer's lines of one. The multiplier is then
        # 40 x log2(max_dim / 16) bits, not 40 x 28 (on an ECP5 the DSP blocks and their
        # carry chains into `length` were one of the update engine's longest paths). Of so
        # few bits it is shifted copies of `factor_a` added (one carry chain on the ULX3S,
        # whose rows are 1 or 2 lines): as a product synthesis still put it in a multiplier
        # block, 13.7 ns into `length` at seed 3 of `61c3d38`.
        factor_b = Signal(range(self._max_dim // 16 + 1))
        length = Signal(_LENGTH_WIDTH)
        # The sum of dim over the tables checked so far: only good dims are added, so it
        # fits max_tables * max_dim, and `dims >> 4` is a few bits, not 28: the gradient
        # buffer's line count `bags * (dims >> 4)` is then shifted copies of `bags` added
        # (two carry chains on the ULX3S). As two multiplier blocks and the carry chain
        # adding their products it was 11.8 ns into `gradient_lines` at seed 1, 14.3-14.9 ns
        # at seed 3; as one block, 12.5 ns at seed 3 of `61c3d38`.
        dims = Signal(range(self._max_tables * self._max_dim + 1))
        weighted = Signal()
        m.d.comb += [self.row_lines.eq(dims >> 4), self.use_weights.eq(weighted)]

        descriptor = self.descriptors[table[:max(self._max_tables - 1, 1).bit_length()]]

        def fail(code, table_=0):
            m.d.sync += [
                self.status.done.eq(1),
                self.status.error.eq(code),
                self.status.table.eq(table_),
            ]
            m.next = "Idle"

        def extent(kind, base, count, size):
            """Check ``count * size`` lines at ``base`` next (after its alignment). The
            extent's registers load whatever the checks say (only Length and Region look at
            them), so their enables are the state's decode, not the dimension and
            empty-buffer comparisons (a ULX3S build's 12.2 ns path into `start`, 40 inputs);
            a state's later ``fail`` overrides the choice of next state made here."""
            m.d.sync += [item.eq(kind), start.eq(base), factor_a.eq(count), factor_b.eq(size)]
            if kind != _Item.TABLE:
                with m.If(count == 0):  # an empty buffer is never read
                    m.next = "Next"
            with m.If((count != 0) | (kind == _Item.TABLE)):
                with m.If(base[:6] != 0):
                    fail(ErrorCode.MISALIGNED_ADDRESS, table if kind == _Item.TABLE else 0)
                with m.Else():
                    m.next = "Length"

        def lines(words):
            return (words + 15) >> 4

        # The buffers' line counts that need a multiplier are registered every cycle: the
        # command is stable and `dims` final states before they are used, and the multiplier
        # then drives a register, not the FSM's choice of `factor_a`.
        # (The offsets' entries are a register of their own: the multiplier, then the adders
        # of `lines`, were a ULX3S build's 15.4 ns path.) The indices' and weights' lines are
        # a register too: the adder of `lines(num_indices)` in front of the empty-buffer test
        # and the FSM's choice was a ULX3S build's 15.0 ns path.
        offset_entries = Signal(24)
        offset_lines = Signal(32)
        index_lines = Signal(32)
        gradient_lines = Signal(factor_a.shape())
        m.d.sync += [offset_entries.eq(command.tables * command.bags),
                     offset_lines.eq(lines(offset_entries + 1)),
                     index_lines.eq(lines(command.num_indices)),
                     gradient_lines.eq(shifted_product(command.bags, dims >> 4,
                                                        len(command.bags) + len(dims) - 4))]

        with m.FSM():
            with m.State("Idle"):
                with m.If(self.start):
                    m.d.sync += [self.status.eq(0), table.eq(0), dims.eq(0), weighted.eq(0)]
                    m.next = "Command"

            with m.State("Command"):
                with m.If(command.opcode != Opcode.UPDATE):
                    fail(ErrorCode.BAD_OPCODE)
                with m.Elif((command.tables == 0) | (command.tables > self._max_tables)):
                    fail(ErrorCode.BAD_TABLE_COUNT)
                with m.Else():
                    m.next = "Table"

            with m.State("Table"):
                dim = descriptor.dim
                extent(_Item.TABLE, descriptor.base, descriptor.rows, dim >> 4)
                # (After `extent`: a bad dimension is reported before a misaligned base.)
                with m.If((dim == 0) | (dim[:4] != 0) | (dim > self._max_dim)):
                    fail(ErrorCode.BAD_DIMENSION, table)
                with m.Else():
                    m.d.sync += [
                        dims.eq(dims + dim),
                        weighted.eq(weighted | (descriptor.mode == PoolingMode.WEIGHTED)),
                    ]

            with m.State("Length"):
                m.d.sync += length.eq(shifted_product(factor_a, factor_b, _LENGTH_WIDTH - 6) << 6)
                m.next = "End" if self._registered else "Region"

            if self._registered:
                # The regions are stable from before ``start``: their copies and limits are
                # right from two cycles after it, long before the first Region.
                regions = Signal(data.ArrayLayout(region_layout(self._addr_width),
                                                  self._num_regions))
                limits = [Signal(_LENGTH_WIDTH + 1, name=f"limit_{r}")
                          for r in range(self._num_regions)]
                m.d.sync += [regions.eq(self.regions),
                             *(limit.eq(region.base + region.size)
                               for limit, region in zip(limits, regions, strict=True))]
                end = Signal(_LENGTH_WIDTH + 1)
                with m.State("End"):
                    m.d.sync += end.eq(start + length)
                    m.next = "Region"
            else:
                regions = self.regions
                limits = [region.base + region.size for region in regions]
                end = start + length

            with m.State("Region"):
                inside = [region.enable & (start >= region.base) & (end <= limit)
                          for region, limit in zip(regions, limits, strict=True)]
                with m.If((length != 0) & ~Cat(*inside).any()):
                    fail(ErrorCode.ADDRESS_OUT_OF_REGION, Mux(item == _Item.TABLE, table, 0))
                with m.Else():
                    m.next = "Next"

            with m.State("Next"):
                with m.Switch(item):
                    with m.Case(_Item.TABLE):
                        with m.If(table + 1 == command.tables):
                            m.next = "Indices"
                        with m.Else():
                            m.d.sync += table.eq(table + 1)
                            m.next = "Table"
                    with m.Case(_Item.INDICES):
                        m.next = "Offsets"
                    with m.Case(_Item.OFFSETS):
                        with m.If(weighted):
                            m.next = "Weights"
                        with m.Else():
                            m.next = "Gradient"
                    with m.Case(_Item.WEIGHTS):
                        m.next = "Gradient"
                    with m.Case(_Item.GRADIENT):
                        m.d.sync += self.status.done.eq(1)
                        m.next = "Idle"

            with m.State("Indices"):
                extent(_Item.INDICES, command.indices, index_lines, 1)

            with m.State("Offsets"):
                extent(_Item.OFFSETS, command.offsets, offset_lines, 1)

            with m.State("Weights"):
                extent(_Item.WEIGHTS, command.weights, index_lines, 1)

            with m.State("Gradient"):
                extent(_Item.GRADIENT, command.output, gradient_lines, 1)
        return m
