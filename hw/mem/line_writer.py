"""Buffer 64-byte lines and write each one to memory as a single-beat AXI4 write."""

from amaranth.hdl import Module, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .sliced_fifo import SlicedFIFO, check_slices
from .write_queue import WriteQueue

__all__ = ["LineWriter"]


class LineWriter(wiring.Component):
    """An output buffer in front of the AXI write channels (AW, W, B).

    Lines wait in a FIFO of ``depth`` entries (:class:`hw.mem.sliced_fifo.SlicedFIFO`, in
    ``slices`` parts with their own write enable and pointers) until ``enable``; each leaves
    through a :class:`~hw.mem.write_queue.WriteQueue` as one AW and one W beat (issued
    independently, as AXI allows), all with ID 0. ``flush`` drops lines that have not
    started; a line whose AW or W is already on the bus is always completed, as AXI requires.

    ``registered_beats`` (see :class:`~hw.mem.write_queue.WriteQueue`) offers the beats from
    registers of their own: the FIFO's read side then starts at flip-flops, not at the
    memory's ``awready`` and ``wready``, at a line every second cycle at most.

    Members
    -------
    lines : ``In(stream.Signature({"line", "data"}, always_ready=True))``
        The producer checks :attr:`level` first: a line offered when the FIFO is full is lost.
    level : ``Out(range(depth + 1))``
    enable, flush, start : ``In(1)``
        ``start`` clears the error flag.
    aw, w : ``Out(stream.Signature(...))``, b : ``In(stream.Signature(...))``
        Payloads ``{"addr"}``, ``{"data"}``, ``{"resp"}``; the owner adds the constant AXI
        fields.
    idle : ``Out(1)``
        Nothing buffered and every write acknowledged.
    error : ``Out(1)``
        A write response was not OKAY.
    beat_written : ``Out(1)``
        Strobe per W beat.
    """

    #: Writes awaiting their B response before the writer pauses (keeps the count bounded).
    MAX_OUTSTANDING = 255

    def __init__(self, *, depth, addr_width, line_width=512, slices=1, registered_beats=False):
        if not isinstance(depth, int) or depth < 2:
            raise ValueError(f"Depth must be an integer of at least 2, not {depth!r}")
        check_slices(line_width, slices)
        self._slices = slices
        self._depth = depth
        self._addr_width = addr_width
        self._line_width = line_width
        self._issue = WriteQueue(line_address_width=addr_width - 6, line_width=line_width,
                                 max_outstanding=self.MAX_OUTSTANDING,
                                 registered_beats=registered_beats)
        super().__init__({
            "lines": In(stream.Signature(data.StructLayout({
                "line": unsigned(addr_width - 6), "data": unsigned(line_width)}),
                always_ready=True)),
            "level": Out(range(depth + 1)),
            "enable": In(1),
            "flush": In(1),
            "start": In(1),
            "aw": Out(stream.Signature(data.StructLayout({"addr": unsigned(addr_width)}))),
            "w": Out(stream.Signature(data.StructLayout({"data": unsigned(line_width)}))),
            "b": In(stream.Signature(data.StructLayout({"resp": unsigned(2)}))),
            "idle": Out(1),
            "error": Out(1),
            "beat_written": Out(1),
        })

    @property
    def depth(self):
        return self._depth

    def elaborate(self, platform):
        m = Module()
        layout = self.lines.payload.shape()
        m.submodules.queue = queue = SlicedFIFO(width=layout.size, depth=self._depth,
                                                slices=self._slices)
        m.submodules.issue = issue = self._issue
        head = data.View(layout, queue.r_data)
        # Lines leave once enabled; a flush drops those not offered yet; a line offered
        # stays offered until it completes, enabled or not (with registered beats the
        # issue's registers hold it, and the queue's head is not offered yet).
        m.d.comb += [
            queue.w_en.eq(self.lines.valid),
            queue.w_data.eq(self.lines.payload),
            self.level.eq(queue.level),
            issue.i.valid.eq(queue.r_rdy & (self.enable | self.flush | issue.offered)),
            issue.i.payload.address.eq(head.line),
            issue.i.payload.data.eq(head.data),
            queue.r_en.eq(issue.i.ready),
            issue.stop.eq(self.flush),
            self.aw.valid.eq(issue.aw.valid),
            self.aw.payload.addr.eq(issue.aw.payload << 6),
            issue.aw.ready.eq(self.aw.ready),
            self.w.valid.eq(issue.w.valid),
            self.w.payload.data.eq(issue.w.payload),
            issue.w.ready.eq(self.w.ready),
            issue.b.valid.eq(self.b.valid),
            issue.b.payload.eq(self.b.payload.resp),
            self.b.ready.eq(issue.b.ready),
            self.beat_written.eq(self.w.valid & self.w.ready),
            self.idle.eq((queue.level == 0) & issue.idle),
        ]
        with m.If(self.start):
            m.d.sync += self.error.eq(0)
        with m.Elif(issue.error):
            m.d.sync += self.error.eq(1)
        return m
