"""Walks a command's offsets and indices in TBE order, checking them as it goes.

The walk is the single definition of "in order" for the update engine: table-major, then bag,
then position in the bag. A walk runs in one of three modes:

* ``OFFSETS``: reads only the offsets and checks each entry ``e`` in order, stopping at the
  first problem: ``offsets[0] != 0`` is ``OFFSETS_NOT_FROM_ZERO``; an entry below the one
  before it is ``OFFSETS_DECREASING``; an entry above ``num_indices``, or a last entry
  (``e = tables * bags``) not equal to it, is ``OFFSETS_PAST_END``. The error names
  position ``e``, table ``e // bags`` and bag ``e % bags`` (0 and 0 when ``bags = 0``).
* ``INDICES``: with the offsets known good, checks that every index is below its table's
  ``rows`` (``INDEX_OUT_OF_RANGE``, naming its position, table and bag).
* ``UPDATE``: emits every occurrence with its gradient line address and its scale: 1.0
  (SUM), its per-sample weight (WEIGHTED) or ``float32(1) / float32(L)`` (MEAN). The checks
  stay active (they can only fire if memory changed since the validation).

Validating all offsets before any index gives the same error as the lookup engine's
validators (``hw.emb.validate``) for a command with several problems.

A walk may cover only tables ``first_table .. tables - 1``: it starts at offsets entry
``first_table * bags``, which must hold ``first_position`` (else ``OFFSETS_NOT_FROM_ZERO``,
naming that entry), and ends where ``num_indices`` says, so the caller gives the last entry's
value there. The relaxed lookup's correction walks each chunk's tables this way; the position
and gradient column of each table start come from ``started`` during an earlier full walk.

With ``registered_checks`` the checks compare registers:

* the offsets stream passes a register stage that compares each entry with the one before it
  and with ``num_indices`` as it is loaded, so a Bag-End decides from flip-flops: on an ECP5
  the 32-bit comparisons of the arriving entry, after the word stream's handshake, into the
  status register's enable set the update engine's clock. The stage passes an entry a cycle
  later, once per walk (it fills while the walker is in Indices);
* whether the bag is the walk's last and its table's last are registers, kept as the walk
  moves from bag to bag, not 24- and 16-bit comparisons in front of the status and of the
  walk's next bag; the bag numbers they are compared with (the walk's last, the one before
  it) are registers loaded as the walk starts, so no adder is in front of the comparisons,
  and with ``given_entries`` the walk's first and end entries (``first_table * bags``,
  ``tables * bags``) come from the caller's registers, not from the walker's own
  multipliers (a ULX3S build's 13.3 ns path into its bag count);
* an index taken ends the bag if the position equals the bag's end less one, a register
  loaded as the bag opens, not if ``position + 1`` (a carry chain) equals the end: the
  comparison is behind the streams' handshake, into ``at_bag_end``;
* the MEAN factor's divider produces one quotient bit a cycle, not two (12 cycles more per
  MEAN bag);
* an index is compared with its table's ``rows`` held in a register (loaded every cycle from
  the descriptor of the current table, which changes at least a cycle before Indices), not
  chosen from the descriptors, and an index (with its weight) is taken whatever it is: a bad
  one ends the walk, so the comparison decides only the occurrence's ``valid`` and the
  state, not the streams' ``ready``; the status names the bad index a cycle later, from a
  state of its own, so the comparison is not in front of the status register's enable
  either.

The walk is otherwise the same, cycle for cycle.
"""

from amaranth.hdl import Module, Mux, Signal, unsigned
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out

from ..params import check_bool
from .layouts import ErrorCode, PoolingMode, table_layout
from .update_reciprocal import Reciprocal

__all__ = ["OccurrenceWalker", "WalkMode", "error_layout", "occurrence_layout"]

_ONE = 0x3F80_0000  # binary32 1.0: the SUM scale, exact for every gradient value


class WalkMode(enum.Enum, shape=2):
    OFFSETS = 0
    INDICES = 1
    UPDATE = 2


def error_layout() -> data.StructLayout:
    """Where a walk stopped: ``done`` with ``error = NONE`` is a clean finish."""
    return data.StructLayout({
        "done": 1, "error": ErrorCode, "table": 8, "bag": 16, "position": 32,
    })


def occurrence_layout(*, table_width, line_width, line_address_width) -> data.StructLayout:
    return data.StructLayout({
        "table": unsigned(table_width),
        "row": 32,
        "scale": 32,                       # binary32 factor for the gradient line(s)
        "lines": unsigned(line_width),     # lines per row of the table (dim / 16)
        "gradient": unsigned(line_address_width),  # first gradient line of this occurrence
    })


class OccurrenceWalker(wiring.Component):
    """The TBE walk over a command (module docstring), in validate or update mode.

    Parameters
    ----------
    max_tables, max_dim : int
        Engine limits (sizes of the table number and of ``lines``).
    addr_width : int
        Byte address width; gradient addresses are line addresses (``addr_width - 6`` bits).
    registered_checks : bool
        Compare offsets entries and indices with registers (module docstring).
    given_entries : bool
        With ``registered_checks``: the walk's first and end entries are the inputs
        ``first_entry`` and ``end_entry`` (else the walker multiplies ``first_table *
        bags`` and ``tables * bags`` itself, and those inputs are unused).

    Members
    -------
    start : ``In(1)``
        Begin a walk with the inputs below (sampled in this cycle, except ``descriptors``,
        which must stay stable during the walk).
    mode : ``In(WalkMode)``
    use_weights : ``In(1)``
        Read one weight per index (some table is WEIGHTED); UPDATE mode only.
    bags, tables, num_indices : command fields; gradient : ``In(line address)``
        The gradient buffer; row_lines : ``In(32)`` lines per gradient row (``sum(dim)/16``).
        A walk of the tables up to ``tables - 1`` ends at position ``num_indices``.
    first_table : ``In(8)``, first_position : ``In(32)``, first_column : ``In(16)``
        Where the walk starts: its first table, that table's first index position and its
        gradient column (lines before it in a row). All 0 for a whole walk.
    first_entry, end_entry : ``In(24)``
        ``first_table * bags`` and ``tables * bags``, with ``given_entries``.
    started : ``Out(1)``, started_table : ``Out(8)``, started_position : ``Out(32)``,
    started_column : ``Out(16)``
        The walk is at the first bag of a table: where that table starts (for a later walk
        from it).
    descriptors : ``In(ArrayLayout(table_layout, max_tables))``
    offsets, indices, weights : ``In(stream.Signature(32))``
        The words of the three arrays from position 0.
    o : ``Out(stream.Signature(occurrence_layout(...)))``
    status : ``Out(error_layout())``
        Held from the end of a walk to the next ``start``.
    """

    def __init__(self, *, max_tables, max_dim, addr_width, registered_checks=False,
                 given_entries=False):
        self._registered_checks = check_bool("Registered checks", registered_checks)
        self._given_entries = check_bool("Given entries", given_entries)
        if given_entries and not registered_checks:
            raise ValueError("Given entries need registered checks")
        self._max_tables = max_tables
        self._max_lines = max_dim // 16
        self._table_width = unsigned(max(max_tables - 1, 1)).width
        self._line_width = unsigned(self._max_lines).width
        line_address_width = addr_width - 6
        super().__init__({
            "start": In(1),
            "mode": In(WalkMode),
            "use_weights": In(1),
            "bags": In(16),
            "tables": In(8),
            "num_indices": In(32),
            "gradient": In(line_address_width),
            "row_lines": In(32),
            "first_table": In(8),
            "first_position": In(32),
            "first_column": In(16),
            "first_entry": In(24),
            "end_entry": In(24),
            "started": Out(1),
            "started_table": Out(8),
            "started_position": Out(32),
            "started_column": Out(16),
            "descriptors": In(data.ArrayLayout(table_layout(addr_width), max_tables)),
            "offsets": In(stream.Signature(32)),
            "indices": In(stream.Signature(32)),
            "weights": In(stream.Signature(32)),
            "o": Out(stream.Signature(occurrence_layout(
                table_width=self._table_width, line_width=self._line_width,
                line_address_width=line_address_width))),
            "status": Out(error_layout()),
        })

    @property
    def table_width(self):
        return self._table_width

    @property
    def line_width(self):
        return self._line_width

    @property
    def offset_latency(self):
        """Cycles from an offsets entry's acceptance to the walker's use of it."""
        return int(self._registered_checks)

    @property
    def reciprocal_steps_per_cycle(self):
        """Quotient bits the MEAN factor's divider produces a cycle."""
        return 1 if self._registered_checks else 2

    def elaborate(self, platform):
        m = Module()
        # One quotient bit a cycle with registered checks: two compare-and-subtracts in a
        # cycle were the next path (12 cycles more per MEAN bag); the length's highest bit
        # found a cycle before the shift by it, and the rounding decided a cycle before its
        # adder (two more).
        reciprocal = m.submodules.reciprocal = Reciprocal(
            steps_per_cycle=self.reciprocal_steps_per_cycle,
            registered_leading=self._registered_checks)

        mode = Signal(WalkMode)
        update = Signal()
        m.d.comb += update.eq(mode == WalkMode.UPDATE)
        use_weights = Signal()
        bags = Signal(16)
        bag_count = Signal(24)        # tables * bags
        # With registered checks: bag_count - 1 and - 2, the numbers of the walk's last bag
        # and of the one before it, so that "the next entry is the last" is an equality of
        # registers, not an adder in front of one.
        last_bag = Signal(24)
        last_but_one = Signal(24)
        num_indices = Signal(32)
        gradient = Signal.like(self.gradient)
        row_lines = Signal(32)

        table = Signal(8)
        bag = Signal(16)
        bag_number = Signal(24)       # table * bags + bag
        position = Signal(32)
        bag_start = Signal(32)
        bag_end = Signal(32)
        # position == bag_end, kept as a register from Bag-End on (where position is
        # bag_start): it decides each step of Indices, in front of the streams' readies.
        at_bag_end = Signal()
        bag_end_less_1 = Signal(32)   # with registered checks, loaded with bag_end
        bag_line = Signal.like(self.gradient)  # gradient row of this bag
        column = Signal(16)                    # lines before this table's block
        mean_scale = Signal(32)

        descriptor = self.descriptors[table[:self._table_width]]
        lines = Signal(self._line_width)
        m.d.comb += lines.eq(descriptor.dim >> 4)
        table_rows = Signal(32)
        if self._registered_checks:
            m.d.sync += table_rows.eq(descriptor.rows)
        else:
            m.d.comb += table_rows.eq(descriptor.rows)

        def fail(code, *, position_, table_=0, bag_=0):
            m.d.sync += [
                self.status.error.eq(code),
                self.status.position.eq(position_),
                self.status.table.eq(table_),
                self.status.bag.eq(bag_),
                self.status.done.eq(1),
            ]
            m.next = "Idle"

        output_free = ~self.o.valid | self.o.ready
        with m.If(self.o.ready):
            m.d.sync += self.o.valid.eq(0)

        # The offsets entry the FSM looks at, and its comparisons with the entry before it
        # (``bag_start`` wherever they are used) and with ``num_indices``.
        idle = Signal()
        take_offset = Signal()    # First and Bag-End take an entry when there is one
        offset_valid = Signal()
        offset = Signal(32)
        below_previous = Signal()
        equals_previous = Signal()
        above_total = Signal()
        equals_total = Signal()
        last_entry = Signal()     # the next entry is the last (bag_number + 1 == bag_count)
        wraps = Signal()          # this bag is its table's last (bag + 1 == bags)
        if self._registered_checks:
            # ``offset`` keeps the entry loaded last (``first_position`` from ``start``): the
            # one before each new entry.
            loaded = self.offsets.valid & self.offsets.ready
            word = self.offsets.payload
            m.d.comb += self.offsets.ready.eq(~idle & (~offset_valid | take_offset))
            with m.If(take_offset):
                m.d.sync += offset_valid.eq(0)
            with m.If(loaded):
                m.d.sync += [offset_valid.eq(1), offset.eq(word),
                             below_previous.eq(word < offset),
                             equals_previous.eq(word == offset),
                             above_total.eq(word > num_indices),
                             equals_total.eq(word == num_indices)]
            with m.If(idle & self.start):
                m.d.sync += [offset_valid.eq(0), offset.eq(self.first_position)]
        else:
            m.d.comb += [
                self.offsets.ready.eq(take_offset),
                offset_valid.eq(self.offsets.valid),
                offset.eq(self.offsets.payload),
                below_previous.eq(offset < bag_start),
                equals_previous.eq(offset == bag_start),
                above_total.eq(offset > num_indices),
                equals_total.eq(offset == num_indices),
                last_entry.eq(bag_number + 1 == bag_count),
                wraps.eq(bag + 1 == bags),
            ]

        with m.FSM():
            with m.State("Idle"):  # a walk starts only from here
                m.d.comb += idle.eq(1)
                with m.If(self.start):
                    if self._given_entries:
                        first_entry, end_entry = self.first_entry, self.end_entry
                    else:
                        first_entry = self.first_table * self.bags
                        end_entry = self.bags * self.tables
                    if self._registered_checks:
                        m.d.sync += [last_bag.eq(end_entry - 1),
                                     last_but_one.eq(end_entry - 2)]
                    m.d.sync += [
                        mode.eq(self.mode),
                        use_weights.eq(self.use_weights),
                        bags.eq(self.bags),
                        bag_count.eq(end_entry),
                        num_indices.eq(self.num_indices),
                        gradient.eq(self.gradient),
                        row_lines.eq(self.row_lines),
                        table.eq(self.first_table),
                        bag.eq(0),
                        bag_number.eq(first_entry),
                        position.eq(self.first_position),
                        bag_start.eq(self.first_position),
                        bag_line.eq(self.gradient),
                        column.eq(self.first_column),
                        self.status.eq(0),
                        self.o.valid.eq(0),
                    ]
                    m.next = "First"

            with m.State("First"):
                m.d.comb += take_offset.eq(1)
                if self._registered_checks:
                    m.d.sync += [last_entry.eq(bag_number == last_bag),
                                 wraps.eq(bag + 1 == bags)]
                with m.If(offset_valid):
                    with m.If(~equals_previous):
                        fail(ErrorCode.OFFSETS_NOT_FROM_ZERO, position_=bag_number,
                             table_=table)
                    with m.Elif((bag_count == 0) & (num_indices != 0)):
                        fail(ErrorCode.OFFSETS_PAST_END, position_=0)
                    with m.Elif(bag_count == 0):
                        m.d.sync += self.status.done.eq(1)
                        m.next = "Idle"
                    with m.Else():
                        m.next = "Bag-End"

            with m.State("Bag-End"):
                m.d.comb += [self.started.eq(bag == 0), self.started_table.eq(table),
                             self.started_position.eq(bag_start),
                             self.started_column.eq(column)]
                m.d.comb += take_offset.eq(1)
                with m.If(offset_valid):
                    # Entry bag_number + 1 opens the next bag (or is the last entry).
                    here = dict(position_=bag_number + 1, table_=table + wraps,
                                bag_=Mux(wraps, 0, bag + 1))
                    with m.If(below_previous):
                        fail(ErrorCode.OFFSETS_DECREASING, **here)
                    with m.Elif(above_total | (last_entry & ~equals_total)):
                        fail(ErrorCode.OFFSETS_PAST_END, **here)
                    with m.Else():
                        m.d.sync += [bag_end.eq(offset), at_bag_end.eq(equals_previous)]
                        if self._registered_checks:
                            m.d.sync += bag_end_less_1.eq(offset - 1)
                        with m.If(update & (descriptor.mode == PoolingMode.MEAN) &
                                  ~equals_previous):
                            m.next = "Reciprocal"
                        with m.Else():
                            m.next = "Indices"

            with m.State("Reciprocal"):
                m.d.comb += [
                    reciprocal.i.valid.eq(1),
                    reciprocal.i.payload.eq(bag_end - bag_start),
                ]
                with m.If(reciprocal.i.ready):
                    m.next = "Reciprocal-Wait"

            with m.State("Reciprocal-Wait"):
                m.d.comb += reciprocal.o.ready.eq(1)
                with m.If(reciprocal.o.valid):
                    m.d.sync += mean_scale.eq(reciprocal.o.payload)
                    m.next = "Indices"

            with m.State("Indices"):
                with m.If(at_bag_end):
                    with m.If(last_entry):
                        m.d.sync += self.status.done.eq(1)
                        m.next = "Idle"
                    with m.Else():
                        m.d.sync += [
                            bag_number.eq(bag_number + 1),
                            bag_start.eq(bag_end),
                        ]
                        if self._registered_checks:
                            m.d.sync += last_entry.eq(bag_number == last_but_one)
                        with m.If(wraps):
                            if self._registered_checks:
                                m.d.sync += wraps.eq(bags == 1)
                            m.d.sync += [
                                bag.eq(0),
                                table.eq(table + 1),
                                column.eq(column + lines),
                                bag_line.eq(gradient),
                            ]
                        with m.Else():
                            if self._registered_checks:
                                m.d.sync += wraps.eq(bag + 2 == bags)
                            m.d.sync += [bag.eq(bag + 1), bag_line.eq(bag_line + row_lines)]
                        m.next = "Bag-End"
                with m.Elif(mode == WalkMode.OFFSETS):
                    # Skip the bag's indices.
                    m.d.sync += [position.eq(bag_end), at_bag_end.eq(1)]
                with m.Else():
                    index = self.indices.payload
                    weighted = update & use_weights
                    ready = (self.indices.valid & (self.weights.valid | ~weighted) &
                             (output_free | ~update))
                    with m.If(ready):
                        bad = index >= table_rows

                        def take():
                            m.d.comb += [
                                self.indices.ready.eq(1),
                                self.weights.ready.eq(weighted),
                            ]
                            m.d.sync += position.eq(position + 1)
                            if self._registered_checks:
                                # An index is taken only short of the bag's end, so
                                # bag_end >= 1 here and the difference does not wrap.
                                m.d.sync += at_bag_end.eq(position == bag_end_less_1)
                            else:
                                m.d.sync += at_bag_end.eq(position + 1 == bag_end)
                            with m.If(update):
                                m.d.sync += [
                                    self.o.payload.table.eq(table),
                                    self.o.payload.row.eq(index),
                                    self.o.payload.lines.eq(lines),
                                    self.o.payload.gradient.eq(bag_line + column),
                                ]
                                with m.Switch(descriptor.mode):
                                    with m.Case(PoolingMode.WEIGHTED):
                                        m.d.sync += self.o.payload.scale.eq(
                                            self.weights.payload)
                                    with m.Case(PoolingMode.MEAN):
                                        m.d.sync += self.o.payload.scale.eq(mean_scale)
                                    with m.Default():
                                        m.d.sync += self.o.payload.scale.eq(_ONE)

                        def emit():
                            with m.If(update):
                                m.d.sync += self.o.valid.eq(1)

                        if self._registered_checks:
                            # Taken whatever the index (a bad one ends the walk anyway), so
                            # the comparison reaches only the output's valid, the status
                            # and the state, not the streams' readies and the registers
                            # they load.
                            take()
                            with m.If(bad):
                                m.next = "Index-Failed"
                            with m.Else():
                                emit()
                        else:
                            with m.If(bad):
                                fail(ErrorCode.INDEX_OUT_OF_RANGE, position_=position,
                                     table_=table, bag_=bag)
                            with m.Else():
                                take()
                                emit()

            if self._registered_checks:
                with m.State("Index-Failed"):
                    # The status of a bad index, a cycle after it was taken (position has
                    # moved past it; table and bag have not).
                    fail(ErrorCode.INDEX_OUT_OF_RANGE, position_=position - 1, table_=table,
                         bag_=bag)

        return m
