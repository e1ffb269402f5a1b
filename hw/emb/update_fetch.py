"""Address generators of the update engine: gradient lines per occurrence, row lines per slot."""

from amaranth.hdl import Module, Shape, Signal, unsigned
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from .layouts import row_first_line, table_layout
from .update_walker import occurrence_layout

__all__ = ["GradientFetch", "RowFetch", "chunk_occurrence_layout", "row_context_layout"]


def chunk_occurrence_layout(*, line_width) -> data.StructLayout:
    """What the accumulation needs of an occurrence besides its (table, row) key."""
    return data.StructLayout({"scale": 32, "lines": unsigned(line_width)})


def row_context_layout(*, slot_width, line_width, line_address_width) -> data.StructLayout:
    """Which slot and line a row read belongs to, and where the result is written back."""
    return data.StructLayout({
        "slot": unsigned(slot_width),
        "line": unsigned(line_width),
        "address": unsigned(line_address_width),
    })


class GradientFetch(wiring.Component):
    """Asks for each occurrence's gradient lines, then passes the occurrence on.

    The gradient lines come back (through the router) in the same order, so the accumulation
    pairs them with the occurrences it receives from :class:`~.update_rows.UniqueRows`.

    Members
    -------
    i : ``In(stream.Signature(occurrence_layout(...)))``
    request : ``Out(stream.Signature(line_address_width))``
        Gradient line reads.
    o : ``Out(stream.Signature({"table", "row": 32, "data": chunk_occurrence_layout}))``
        The key and data for :class:`~.update_rows.UniqueRows`.
    idle : ``Out(1)``
        Holds no occurrence.
    """

    def __init__(self, *, table_width, line_width, line_address_width):
        self._occurrence = occurrence_layout(table_width=table_width, line_width=line_width,
                                             line_address_width=line_address_width)
        super().__init__({
            "i": In(stream.Signature(self._occurrence)),
            "request": Out(stream.Signature(line_address_width)),
            "o": Out(stream.Signature(data.StructLayout({
                "table": unsigned(table_width), "row": 32,
                "data": chunk_occurrence_layout(line_width=line_width)}))),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        current = Signal(self._occurrence)
        held = Signal()
        line = Signal.like(current.lines)
        # line + 1 == current.lines, kept as a register: it drives i.ready.
        last = Signal()
        o_free = ~self.o.valid | self.o.ready
        asked = self.request.valid & self.request.ready

        m.d.comb += [
            # The next occurrence comes in with the last request of this one: a line per cycle.
            self.i.ready.eq(~held | (last & asked)),
            # The last request also hands the occurrence on, so it waits for room there.
            self.request.valid.eq(held & (~last | o_free)),
            self.request.payload.eq(current.gradient + line),
            self.idle.eq(~held & ~self.o.valid),
        ]
        with m.If(self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        with m.If(asked):
            with m.If(last):
                m.d.sync += [
                    held.eq(0),
                    self.o.valid.eq(1),
                    self.o.payload.table.eq(current.table),
                    self.o.payload.row.eq(current.row),
                    self.o.payload.data.scale.eq(current.scale),
                    self.o.payload.data.lines.eq(current.lines),
                ]
            with m.Else():
                m.d.sync += [line.eq(line + 1), last.eq(line + 2 == current.lines)]
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [current.eq(self.i.payload), held.eq(1), line.eq(0),
                         last.eq(self.i.payload.lines == 1)]
        return m


class RowFetch(wiring.Component):
    """Reads every line of every row of a chunk, slot by slot, and records why.

    Members
    -------
    start : ``In(1)``, count : ``In(range(capacity + 1))``
        Fetch slots ``0 .. count-1`` (sampled on ``start``).
    key_slot : ``Out(range(capacity))``, key : ``In({"table", "row": 32})``
        Reads the (table, row) of a slot from :class:`~.update_rows.UniqueRows`.
    descriptors : ``In(ArrayLayout(table_layout, max_tables))``
    request : ``Out(stream.Signature(line_address_width))``
        Row line reads.
    context : ``Out(stream.Signature(row_context_layout(...)))``
        One entry per request, in request order (the router returns lines in that order).
    busy : ``Out(1)``
        Requests remain to be issued, or contexts remain to be taken: the chunk's rows are
        not all in the datapath yet.
    row_started : ``Out(1)``
        A row's reads begin this cycle (for the ``rows_read`` counter).
    """

    def __init__(self, *, capacity, max_tables, table_width, line_width, addr_width,
                 context_depth):
        self._capacity = capacity
        self._table_width = table_width
        self._context = row_context_layout(slot_width=Shape.cast(range(capacity)).width,
                                           line_width=line_width,
                                           line_address_width=addr_width - 6)
        self._context_depth = context_depth
        self._line_width = line_width
        super().__init__({
            "start": In(1),
            "count": In(range(capacity + 1)),
            "key_slot": Out(range(capacity)),
            "key": In(data.StructLayout({"table": unsigned(table_width), "row": 32})),
            "descriptors": In(data.ArrayLayout(table_layout(addr_width), max_tables)),
            "request": Out(stream.Signature(addr_width - 6)),
            "context": Out(stream.Signature(self._context)),
            "busy": Out(1),
            "row_started": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        contexts = m.submodules.contexts = fifo.SyncFIFOBuffered(
            width=self._context.size, depth=self._context_depth)
        m.d.comb += [
            self.context.valid.eq(contexts.r_rdy),
            self.context.payload.eq(contexts.r_data),
            contexts.r_en.eq(self.context.ready),
        ]

        # Three stages, so the next row's key and address are ready while this row's lines go
        # out (a line per cycle): the key of slot ``next_slot`` -> ``keyed`` (table, row) ->
        # ``current`` (first line and line count) -> a request per line.
        count = Signal.like(self.count)
        running = Signal()
        next_slot = Signal(range(self._capacity + 1))
        # ``keyed`` holds its table's line count and first line, chosen as the key is read, and
        # only the row's bits that reach a line address: the first line's multiply-add then
        # starts at flip-flops, not behind the descriptor's choice (a LUT level in front of a
        # multiplier, 13.05 ns in a ULX3S build).
        address_width = len(self.request.payload)
        keyed = Signal(data.StructLayout({
            "valid": 1, "slot": range(self._capacity), "row": address_width,
            "lines": self._line_width, "base_line": address_width}))
        current = Signal(data.StructLayout({
            "valid": 1, "slot": range(self._capacity), "first_line": len(self.request.payload),
            "lines": self._line_width}))
        line = Signal(self._line_width)

        # Lines asked for and not yet taken from ``context`` (the FIFO shows a new entry only a
        # cycle or two after it is written, so its ``valid`` alone cannot say "all taken").
        pending = Signal(range(self._context_depth + 1))
        asked = self.request.valid & self.request.ready
        taken = self.context.valid & self.context.ready
        m.d.sync += pending.eq(pending + asked - taken)
        m.d.comb += [
            self.key_slot.eq(next_slot),
            self.busy.eq(running | keyed.valid | current.valid | (pending != 0)),
            self.request.valid.eq(current.valid & contexts.w_rdy),
            self.request.payload.eq(current.first_line + line),
        ]
        context = Signal(self._context)
        m.d.comb += [
            context.slot.eq(current.slot),
            context.line.eq(line),
            context.address.eq(current.first_line + line),
            contexts.w_data.eq(context),
            contexts.w_en.eq(asked),
        ]
        # line + 1 == current.lines, kept as a register: the next row's key and address
        # stages move on it.
        on_last_line = Signal()
        issue_free = ~current.valid | (asked & on_last_line)
        keyed_moves = keyed.valid & issue_free
        key_free = ~keyed.valid | keyed_moves
        key_go = running & (next_slot != count) & key_free

        with m.If(asked):
            m.d.sync += [line.eq(line + 1), on_last_line.eq(line + 2 == current.lines)]
        with m.If(issue_free):
            m.d.sync += current.valid.eq(0)
        with m.If(keyed_moves):
            m.d.sync += [
                current.valid.eq(1),
                current.slot.eq(keyed.slot),
                current.first_line.eq(row_first_line(keyed.base_line, keyed.row, keyed.lines)),
                current.lines.eq(keyed.lines),
                line.eq(0),
                on_last_line.eq(keyed.lines == 1),
                keyed.valid.eq(0),
            ]
        with m.If(key_go):
            descriptor = self.descriptors[self.key.table]
            m.d.comb += self.row_started.eq(1)
            m.d.sync += [keyed.valid.eq(1), keyed.slot.eq(next_slot),
                         keyed.row.eq(self.key.row), keyed.lines.eq(descriptor.dim >> 4),
                         keyed.base_line.eq(descriptor.base >> 6),
                         next_slot.eq(next_slot + 1)]
        with m.If(running & (next_slot == count)):
            m.d.sync += running.eq(0)
        with m.If(self.start & (self.count != 0)):
            m.d.sync += [count.eq(self.count), next_slot.eq(0), running.eq(1)]
        return m

