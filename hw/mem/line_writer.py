"""Buffer 64-byte lines and write each one to memory as a single-beat AXI4 write."""

from amaranth.hdl import Module, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .sliced_fifo import SlicedFIFO, check_slices

__all__ = ["LineWriter"]


class LineWriter(wiring.Component):
    """An output buffer in front of the AXI write channels (AW, W, B).

    Lines wait in a FIFO of ``depth`` entries (:class:`hw.mem.sliced_fifo.SlicedFIFO`, in
    ``slices`` parts with their own write enable and pointers) until ``enable``; each leaves
    as one AW and one W beat (issued independently, as AXI allows), all with ID 0. ``flush``
    drops lines that have not started; a line whose AW or W is already on the bus is always
    completed, as AXI requires.

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

    def __init__(self, *, depth, addr_width, line_width=512, slices=1):
        if not isinstance(depth, int) or depth < 2:
            raise ValueError(f"Depth must be an integer of at least 2, not {depth!r}")
        check_slices(line_width, slices)
        self._slices = slices
        self._depth = depth
        self._addr_width = addr_width
        self._line_width = line_width
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
        m.d.comb += [
            queue.w_en.eq(self.lines.valid),
            queue.w_data.eq(self.lines.payload),
            self.level.eq(queue.level),
        ]

        head = data.View(layout, queue.r_data)
        address_sent = Signal()
        data_sent = Signal()
        started = Signal()  # the head's AW or W has been offered: it must complete
        outstanding = Signal(range(self.MAX_OUTSTANDING + 1))
        go = started | (self.enable & ~self.flush & (outstanding != self.MAX_OUTSTANDING))
        m.d.comb += [
            self.aw.valid.eq(queue.r_rdy & ~address_sent & go),
            self.aw.payload.addr.eq(head.line << 6),
            self.w.valid.eq(queue.r_rdy & ~data_sent & go),
            self.w.payload.data.eq(head.data),
            self.b.ready.eq(1),
            self.beat_written.eq(self.w.valid & self.w.ready),
        ]
        address_done = address_sent | (self.aw.valid & self.aw.ready)
        data_done = data_sent | (self.w.valid & self.w.ready)
        drop = queue.r_rdy & ~started & self.flush
        complete = queue.r_rdy & address_done & data_done
        m.d.comb += queue.r_en.eq(complete | drop)
        with m.If(complete | drop):
            m.d.sync += [address_sent.eq(0), data_sent.eq(0), started.eq(0)]
        with m.Else():
            m.d.sync += [address_sent.eq(address_done), data_sent.eq(data_done),
                         started.eq(started | self.aw.valid | self.w.valid)]

        accepted = self.aw.valid & self.aw.ready
        answered = self.b.valid
        m.d.sync += outstanding.eq(outstanding + accepted - answered)
        m.d.comb += self.idle.eq((queue.level == 0) & (outstanding == 0))
        with m.If(self.start):
            m.d.sync += self.error.eq(0)
        with m.Elif(answered & (self.b.payload.resp != 0)):
            m.d.sync += self.error.eq(1)
        return m
