"""Reads for the update engine: one AXI read channel shared by several line streams.

Every read is one 64-byte line (``arlen = 0``) with the same ID, so AXI returns the responses
in request order, whatever the memory's latency; a context FIFO says whose line each response
is. Each source owns a response FIFO and may only have as many reads in flight as it has free
entries there (credits), so a response always has a place to go and one slow consumer can
never block another's responses (no deadlock between the engine's phases).
"""

from amaranth.hdl import Module, Shape, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["LINE_BITS", "ReadRouter", "WordReader"]

LINE_BITS = 512
_WORDS_PER_LINE = 16


class ReadRouter(wiring.Component):
    """Arbitrates line reads from named sources onto one AR channel and routes responses back.

    Parameters
    ----------
    line_address_width : int
        Width of a line address (byte address bits above the 6 line-offset bits).
    sources : sequence of (name, depth)
        Source names in priority order (first wins) and the depth of each response FIFO,
        which is also the most reads the source can have in flight.

    Members
    -------
    <name>_request : ``In(stream.Signature(line_address_width))``
        Line addresses to read, per source.
    <name>_response : ``Out(stream.Signature(512))``
        The lines, in the order the source asked for them.
    ar : ``Out(stream.Signature(line_address_width))``
        Line address of each AXI read (the owner drives ``arlen = 0``, one ID).
    r : ``In(stream.Signature({"data": 512, "resp": 2}))``
        AXI read data.
    stop : ``In(1)``
        Accept no new request (error drain); responses still come back.
    outstanding : ``Out(range(...))``
        Reads accepted and not yet answered.
    error : ``Out(1)``
        A response this cycle carries SLVERR/DECERR (its data is delivered anyway).
    """

    def __init__(self, *, line_address_width, sources):
        sources = tuple((str(name), depth) for name, depth in sources)
        if not sources:
            raise ValueError("At least one source is required")
        for name, depth in sources:
            if not isinstance(depth, int) or depth < 3:
                raise ValueError(f"Source {name!r} needs a response FIFO depth of at least 3, "
                                 f"not {depth!r}")
        self._sources = sources
        self._line_address_width = line_address_width
        self._total = sum(depth for _, depth in sources)
        members = {}
        for name, _ in sources:
            members[f"{name}_request"] = In(stream.Signature(line_address_width))
            members[f"{name}_response"] = Out(stream.Signature(LINE_BITS))
        members.update({
            "ar": Out(stream.Signature(line_address_width)),
            "r": In(stream.Signature(data.StructLayout({"data": LINE_BITS, "resp": 2}))),
            "stop": In(1),
            "outstanding": Out(range(self._total + 1)),
            "error": Out(1),
        })
        super().__init__(members)

    @property
    def max_outstanding(self):
        return self._total

    def elaborate(self, platform):
        m = Module()
        count = len(self._sources)
        context = m.submodules.context = fifo.SyncFIFO(width=Shape.cast(range(count)).width,
                                                      depth=self._total)
        m.d.comb += self.outstanding.eq(context.level)

        ar_free = ~self.ar.valid | self.ar.ready
        with m.If(self.ar.ready):
            m.d.sync += self.ar.valid.eq(0)
        can_issue = ar_free & context.w_rdy & ~self.stop

        responses, in_flight = [], []
        granted = Signal()  # an earlier (higher-priority) source took this cycle's slot
        for index, (name, depth) in enumerate(self._sources):
            request = getattr(self, f"{name}_request")
            response = getattr(self, f"{name}_response")
            lines = m.submodules[f"{name}_lines"] = fifo.SyncFIFOBuffered(width=LINE_BITS,
                                                                          depth=depth)
            flying = Signal(range(depth + 1), name=f"{name}_in_flight")
            responses.append(lines)
            in_flight.append(flying)
            m.d.comb += [
                response.valid.eq(lines.r_rdy),
                response.payload.eq(lines.r_data),
                lines.r_en.eq(response.ready),
            ]
            has_credit = lines.level + flying < depth
            take = Signal(name=f"{name}_take")
            m.d.comb += take.eq(request.valid & has_credit & can_issue & ~granted)
            later_granted = Signal(name=f"{name}_granted")
            m.d.comb += later_granted.eq(granted | take)
            granted = later_granted
            with m.If(take):
                m.d.comb += [
                    request.ready.eq(1),
                    context.w_en.eq(1),
                    context.w_data.eq(index),
                ]
                m.d.sync += [self.ar.valid.eq(1), self.ar.payload.eq(request.payload)]

        # Responses come back in request order: the context FIFO's head names the owner.
        owner = context.r_data
        owner_ready = Signal()
        with m.Switch(owner):
            for index, lines in enumerate(responses):
                with m.Case(index):
                    m.d.comb += owner_ready.eq(lines.w_rdy)
        m.d.comb += self.r.ready.eq(context.r_rdy & owner_ready)
        arrived = self.r.valid & self.r.ready
        m.d.comb += [
            context.r_en.eq(arrived),
            self.error.eq(arrived & (self.r.payload.resp != 0)),
        ]
        for index, (lines, flying) in enumerate(zip(responses, in_flight, strict=True)):
            landed = arrived & (owner == index)
            issued = context.w_en & (context.w_data == index)
            m.d.comb += [lines.w_en.eq(landed), lines.w_data.eq(self.r.payload.data)]
            m.d.sync += flying.eq(flying + issued - landed)
        return m


class WordReader(wiring.Component):
    """Streams ``words`` consecutive 32-bit words starting at a line address.

    It asks for exactly ``ceil(words / 16)`` lines and releases each line once its last
    needed word is taken, so after a complete read nothing is left behind in the router.

    Members
    -------
    start : ``In(1)``
        Begin a new read of ``words`` words from line ``base`` (abandons any old one).
    base : ``In(line_address_width)``, words : ``In(32)``
        Sampled on ``start``.
    request : ``Out(stream.Signature(line_address_width))``
        Line reads, to a :class:`ReadRouter` source.
    lines : ``In(stream.Signature(512))``
        The lines, in order.
    o : ``Out(stream.Signature(32))``
        The words, little-endian within each line.
    """

    def __init__(self, *, line_address_width):
        super().__init__({
            "start": In(1),
            "base": In(line_address_width),
            "words": In(32),
            "request": Out(stream.Signature(line_address_width)),
            "lines": In(stream.Signature(LINE_BITS)),
            "o": Out(stream.Signature(32)),
        })

    def elaborate(self, platform):
        m = Module()
        words = Signal(32)
        line_count = Signal(29)
        issued = Signal(29)
        delivered = Signal(32)
        next_line = Signal.like(self.request.payload)

        with m.If(self.start):
            m.d.sync += [
                words.eq(self.words),
                line_count.eq((self.words + _WORDS_PER_LINE - 1) >> 4),
                issued.eq(0),
                delivered.eq(0),
                next_line.eq(self.base),
            ]
        with m.Else():
            m.d.comb += [
                self.request.valid.eq(issued != line_count),
                self.request.payload.eq(next_line),
            ]
            with m.If(self.request.valid & self.request.ready):
                m.d.sync += [issued.eq(issued + 1), next_line.eq(next_line + 1)]

            lane = delivered[:4]
            m.d.comb += [
                self.o.valid.eq(self.lines.valid & (delivered != words)),
                self.o.payload.eq(self.lines.payload.word_select(lane, 32)),
            ]
            with m.If(self.o.valid & self.o.ready):
                m.d.sync += delivered.eq(delivered + 1)
                last_of_line = (lane == _WORDS_PER_LINE - 1) | (delivered + 1 == words)
                m.d.comb += self.lines.ready.eq(last_of_line)
        return m
