"""An AXI read ID pool that doubles as a reorder buffer (the "cloakroom" pattern).

Every request takes the next slot of a ring; the slot number is the AXI ``arid``. Responses
come back in any order across IDs and are parked in their slot; requests leave in the order
they were made. Because slots are released in that same order, the free list of IDs is just
the ring itself: an ID is reused only after its data has been handed on.
"""

from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from hw.fanout import lane_copies, replicated_register

from .sliced_fifo import slice_widths

__all__ = ["ReadReorderBuffer"]


class ReadReorderBuffer(wiring.Component):
    """In-order read tracking over an out-of-order memory port.

    A request either reads one line (``read=1``: an ``ar`` beat goes out with the slot as its
    ID) or only carries its context through the queue (``read=0``: the slot is complete at
    once, so work that needs no memory stays in order with work that does).

    Parameters
    ----------
    depth : int
        Slots, i.e. IDs and the most reads in flight (a power of two, at least 2). Size it by
        bandwidth x latency: one line per cycle at a round trip of ``L`` cycles needs about
        ``L + 8`` slots.
    addr_width : int
        Width of the request address (passed through to ``ar``).
    data_width : int
        Width of one response beat.
    context : shape
        What the requester stores with each slot and gets back with the data.
    line_slices : int or None
        None (default): the oldest complete slot's data is read into an output register (a
        block RAM's read port) and the slot is free from then on. An integer: the data is read
        asynchronously from its slot, which stays taken until popped, in ``line_slices``
        memories, each with its own copy of the registered slot number (LUT RAM on an FPGA: no
        register's enable and no read address spans the whole line); with more than one
        slice a response's line is written a cycle after it arrives (before it can be read),
        each slice at its own copy of the slot and the write enable.

    Members
    -------
    request : ``In(stream.Signature({"addr", "read", "context"}))``
    ar : ``Out(stream.Signature({"id", "addr"}))``
        Read requests; ``id`` is the slot.
    response : ``In(stream.Signature({"id", "data", "error"}, always_ready=True))``
        Read data for a slot, in any order.
    pop : ``Out(stream.Signature({"context", "data", "error"}))``
        Completed slots in request order (``data`` is undefined for ``read=0`` slots).
    empty : ``Out(1)``
        No slot is in use and nothing waits in ``pop``.
    """

    def __init__(self, *, depth, addr_width, data_width, context, line_slices=None):
        if not isinstance(depth, int) or depth < 2 or depth & (depth - 1):
            raise ValueError(f"Depth must be a power of two, at least 2, not {depth!r}")
        if line_slices is not None and (isinstance(line_slices, bool)
                                        or not isinstance(line_slices, int)
                                        or not 1 <= line_slices <= data_width):
            raise ValueError(f"Line slices must be None or an integer in 1..{data_width} (the "
                             f"data width), not {line_slices!r}")
        self._line_slices = line_slices
        self._depth = depth
        self._id_width = exact_log2(depth)
        self._data_width = data_width
        self._context = context
        super().__init__({
            "request": In(stream.Signature(data.StructLayout({
                "addr": unsigned(addr_width), "read": 1, "context": context}))),
            "ar": Out(stream.Signature(data.StructLayout({
                "id": unsigned(self._id_width), "addr": unsigned(addr_width)}))),
            "response": In(stream.Signature(data.StructLayout({
                "id": unsigned(self._id_width), "data": unsigned(data_width), "error": 1}),
                always_ready=True)),
            "pop": Out(stream.Signature(data.StructLayout({
                "context": context, "data": unsigned(data_width), "error": 1}))),
            "empty": Out(1),
        })

    @property
    def depth(self):
        return self._depth

    @property
    def id_width(self):
        return self._id_width

    def elaborate(self, platform):
        m = Module()
        depth, id_width = self._depth, self._id_width

        m.submodules.contexts = contexts = memory.Memory(
            shape=self._context, depth=depth, init=[])
        context_write = contexts.write_port()
        context_read = contexts.read_port()
        from_slot = self._line_slices is not None
        widths = slice_widths(self._data_width, self._line_slices) if from_slot else [
            self._data_width]
        line_writes, line_reads = [], []
        for k, width in enumerate(widths):
            lines = m.submodules[f"lines_{k}" if from_slot else "lines"] = memory.Memory(
                shape=unsigned(width), depth=depth, init=[])
            line_writes.append(lines.write_port())
            line_reads.append(lines.read_port(domain="comb" if from_slot else "sync"))
        line_data = Cat(read.data for read in line_reads)

        tail = Signal(id_width)          # next slot to hand out
        head = Signal(id_width)          # oldest slot not yet moved to the output register
        complete = Signal(depth)         # slot holds its data (or needs none)
        failed = Signal(depth)           # slot's response carried an error
        out_valid = Signal()
        out_error = Signal()

        # Slots handed out and not yet free: between head and tail, and with from_slot also
        # the one whose data waits in ``pop``.
        taken = Signal(range(depth + 1))
        has_room = taken != depth
        allocate = Signal()
        m.d.comb += [
            self.ar.valid.eq(self.request.valid & has_room & self.request.payload.read),
            self.ar.payload.id.eq(tail),
            self.ar.payload.addr.eq(self.request.payload.addr),
            self.request.ready.eq(has_room & (~self.request.payload.read | self.ar.ready)),
            allocate.eq(self.request.valid & self.request.ready),
            context_write.addr.eq(tail),
            context_write.data.eq(self.request.payload.context),
            context_write.en.eq(allocate),
        ]
        if len(widths) > 1:
            # The line is written a cycle after the response arrives, each slice at its own
            # copy of the slot and the enable: one register's slot number would reach every
            # LUT-RAM cell of the line (16 ns of routing in a ULX3S build). The slot still
            # completes at once: it is read at the earliest two cycles later (fetched, then
            # read at the registered `out_slot`), after the write.
            written_data = Signal(self._data_width, reset_less=True)
            m.d.sync += written_data.eq(self.response.payload.data)
            ids = replicated_register(m, self.response.payload.id, copies=len(widths),
                                      name="write_id")
            enables = replicated_register(m, self.response.valid, copies=len(widths),
                                          name="write_enable")
        else:
            written_data = self.response.payload.data
            ids, enables = [self.response.payload.id], [self.response.valid]
        low = 0
        for k, (write, width) in enumerate(zip(line_writes, widths, strict=True)):
            m.d.comb += [
                write.addr.eq(ids[k]),
                write.data.eq(written_data[low:low + width]),
                write.en.eq(enables[k]),
            ]
            low += width

        # Move the oldest complete slot into the output register (the memories' read
        # registers, or with from_slot the slot number the lines are read at).
        fetch = Signal()
        m.d.comb += [
            fetch.eq(complete.bit_select(head, 1) & (~out_valid | self.pop.ready)),
            context_read.addr.eq(head),
            context_read.en.eq(fetch),
        ]
        popped = out_valid & self.pop.ready
        if from_slot:
            out_slot = Signal(id_width)
            out_slot_next = Mux(fetch, head, out_slot)
            m.d.sync += out_slot.eq(out_slot_next)
            addresses = lane_copies(m, out_slot_next, out_slot, copies=len(widths),
                                    replicate=len(widths) > 1, name="out_slot")
            for read, address in zip(line_reads, addresses, strict=True):
                m.d.comb += read.addr.eq(address)
            m.d.sync += taken.eq(taken + allocate - popped)
        else:
            m.d.comb += [line_reads[0].addr.eq(head), line_reads[0].en.eq(fetch)]
            m.d.sync += taken.eq(taken + allocate - fetch)

        set_at_allocation = Signal(depth)  # slots that need no memory are complete at once
        set_by_response = Signal(depth)
        clear_mask = Signal(depth)
        with m.If(allocate & ~self.request.payload.read):
            m.d.comb += set_at_allocation.eq(1 << tail)
        with m.If(self.response.valid):
            m.d.comb += set_by_response.eq(1 << self.response.payload.id)
        with m.If(fetch):
            m.d.comb += clear_mask.eq(1 << head)
        set_mask = set_at_allocation | set_by_response
        m.d.sync += complete.eq((complete | set_mask) & ~clear_mask)
        # Error bits: written with the data, cleared when a slot is handed out again.
        error_set = Signal(depth)
        error_clear = Signal(depth)
        with m.If(self.response.valid & self.response.payload.error):
            m.d.comb += error_set.eq(1 << self.response.payload.id)
        with m.If(allocate):
            m.d.comb += error_clear.eq(1 << tail)
        m.d.sync += failed.eq((failed & ~error_clear) | error_set)

        with m.If(allocate):
            m.d.sync += tail.eq(tail + 1)
        with m.If(fetch):
            m.d.sync += [head.eq(head + 1), out_valid.eq(1),
                         out_error.eq(failed.bit_select(head, 1))]
        with m.Elif(self.pop.ready):
            m.d.sync += out_valid.eq(0)

        m.d.comb += [
            self.pop.valid.eq(out_valid),
            self.pop.payload.data.eq(line_data),
            self.pop.payload.context.eq(context_read.data),
            self.pop.payload.error.eq(out_error),
            self.empty.eq((taken == 0) & ~out_valid),
        ]
        return m
