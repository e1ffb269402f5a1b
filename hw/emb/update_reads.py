"""Reads for the update engine: one AXI read channel shared by several line streams.

Every read is one 64-byte line (``arlen = 0``) with the same ID, so AXI returns the responses
in request order, whatever the memory's latency; a context FIFO says whose line each response
is. Each source owns a response FIFO and may only have as many reads in flight as it has free
entries there (credits), so a response always has a place to go and one slow consumer can
never block another's responses (no deadlock between the engine's phases).

Sources that take lines slowly (a word stream uses a line per 16 cycles) can instead keep
their entries in one *shared* buffer: a single 512-bit memory with a fixed region per source
and one read port, from which each source's output register is refilled. The credits are the
same, but the FIFOs of the word streams, each a 512-bit memory a few lines deep, become one
memory (on an FPGA one set of LUT RAM, read asynchronously at a registered address, instead
of one per source). A shared source delivers at most one line every third cycle.
"""

import functools
import operator

from amaranth.hdl import Cat, Module, Mux, ResetInserter, Shape, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.fanout import word_of_line
from hw.mem.line_stream import registered_lines_left
from hw.mem.sliced_fifo import SlicedFIFO, check_slices, registered_sliced_memory
from hw.params import check_bool
from hw.skid import SkidBuffer

__all__ = ["LINE_BITS", "LineRequester", "ReadRouter", "WordReader"]

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
    shared : sequence of str
        Sources whose entries live in the shared buffer (module docstring); the others get a
        FIFO each.
    line_slices : int
        Slices of each FIFO's line with their own write enable and pointers
        (:class:`hw.mem.sliced_fifo.SlicedFIFO`; default 1, FPGA builds one per FP lane).
    ar_skid : bool
        The chosen request leaves through a :class:`~hw.skid.SkidBuffer` in place of the AR
        register: whether a request may be taken then comes from its flip-flop, not from
        the memory's ``arready``, so the port's handshake stops there and the arbitration
        (and every source's ``ready`` behind it) starts at flip-flops. Same latency; a
        request more may wait while the memory stalls. Default False.

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

    def __init__(self, *, line_address_width, sources, shared=(), line_slices=1,
                 ar_skid=False):
        sources = tuple((str(name), depth) for name, depth in sources)
        if not sources:
            raise ValueError("At least one source is required")
        for name, depth in sources:
            if not isinstance(depth, int) or depth < 3:
                raise ValueError(f"Source {name!r} needs a response FIFO depth of at least 3, "
                                 f"not {depth!r}")
        names = [name for name, _ in sources]
        shared = tuple(shared)
        for name in shared:
            if name not in names:
                raise ValueError(f"Shared source {name!r} is not one of the sources "
                                 f"{', '.join(map(repr, names))}")
        check_slices(LINE_BITS, line_slices)
        self._line_slices = line_slices
        self._ar_skid = check_bool("AR skid", ar_skid)
        self._sources = sources
        self._shared = frozenset(shared)
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

    @property
    def shared(self):
        """The sources whose entries live in the shared buffer."""
        return self._shared

    def elaborate(self, platform):
        m = Module()
        count = len(self._sources)
        # Buffered: the head's owner comes from a register, not through the LUT RAM's read,
        # in front of `r.ready` and the chosen FIFO's write (a ULX3S build's path into the
        # shared buffer's write address). An entry is readable two cycles after its request
        # is taken, no later than its response can come (`ar` is a register).
        # An entry per read in flight, which the sources' credits keep to `_total`: one
        # more than that, so the FIFO (whose inner part holds one entry fewer) always has
        # room for a read a source has credit for, and `w_rdy` stays out of the arbitration.
        context = m.submodules.context = fifo.SyncFIFOBuffered(
            width=Shape.cast(range(count)).width, depth=self._total + 1)
        m.d.comb += self.outstanding.eq(context.level)

        if self._ar_skid:
            m.submodules.ar_skid = ar_skid = SkidBuffer(shape=self.ar.payload.shape())
            wiring.connect(m, ar_skid.o, wiring.flipped(self.ar))
            ar_free = ar_skid.i.ready
        else:
            ar_free = ~self.ar.valid | self.ar.ready
            with m.If(self.ar.ready):
                m.d.sync += self.ar.valid.eq(0)
        can_issue = ar_free & ~self.stop

        shared = [(index, name, depth) for index, (name, depth) in enumerate(self._sources)
                  if name in self._shared]
        if shared:
            # A landed line is written a cycle later, from registers (its source counts it
            # stored once written), and a refill's read address is a register too, read
            # asynchronously: the addresses and the write enable reach every cell of the
            # 512-bit-wide LUT RAM, and in front of them were the response's handshake and
            # the refill's priority chain (a ULX3S build's paths into the write address and,
            # 15.5 ns, through the read into the read port's data register). With line slices
            # each slice has copies of its own. A region's slot is written only while free
            # and read only while full, so a read never meets a write to its address.
            buffer_write_enable = Signal()
            buffer_write_address = Signal(range(sum(depth for _, _, depth in shared)))
            buffer_read_address = Signal.like(buffer_write_address)
            _, buffer_read_data = registered_sliced_memory(
                m, width=LINE_BITS, depth=sum(depth for _, _, depth in shared),
                slices=self._line_slices, write_enable=buffer_write_enable,
                write_address=buffer_write_address, write_data=self.r.payload.data,
                read_address=buffer_read_address, name="shared_lines")

        responses, levels, in_flight, used = [], [], [], []
        # The sources that ask and have credit, by priority. Each source's take looks at
        # all the earlier ones at once (an OR tree), not through a chain of takes: with
        # seven sources the chain was the router's longest path in a ULX3S netlist.
        asking = []
        for index, (name, depth) in enumerate(self._sources):
            request = getattr(self, f"{name}_request")
            response = getattr(self, f"{name}_response")
            flying = Signal(range(depth + 1), name=f"{name}_in_flight")
            if name in self._shared:
                level = Signal(range(depth + 1), name=f"{name}_stored")
                lines = None
            else:
                lines = m.submodules[f"{name}_lines"] = SlicedFIFO(
                    width=LINE_BITS, depth=depth, slices=self._line_slices)
                level = lines.level
                m.d.comb += [
                    response.valid.eq(lines.r_rdy),
                    response.payload.eq(lines.r_data),
                    lines.r_en.eq(response.ready),
                ]
            responses.append(lines)
            levels.append(level)
            in_flight.append(flying)
            # level + flying, counted in a register of its own: the credit check is then a
            # comparison of flip-flops, not behind an adder, in front of the arbitration.
            entries = Signal(range(depth + 1), name=f"{name}_entries")
            used.append(entries)
            has_credit = entries != depth
            asks = Signal(name=f"{name}_asks")
            m.d.comb += asks.eq(request.valid & has_credit)
            take = Signal(name=f"{name}_take")
            m.d.comb += take.eq(asks & can_issue & ~Cat(*asking).any())
            asking.append(asks)
            with m.If(take):
                m.d.comb += [
                    request.ready.eq(1),
                    context.w_en.eq(1),
                    context.w_data.eq(index),
                ]
                if self._ar_skid:
                    m.d.comb += [ar_skid.i.valid.eq(1), ar_skid.i.payload.eq(request.payload)]
                else:
                    m.d.sync += [self.ar.valid.eq(1), self.ar.payload.eq(request.payload)]

        # Responses come back in request order: the context FIFO's head names the owner.
        # Every source has room for a line it asked for: its credits count the lines in
        # flight with those it holds. So `r.ready` is the context's flip-flop alone, not the
        # owner's FIFO level behind the head's choice (in front of the memory's response
        # logic and what a landed line moves, on a ULX3S build).
        owner = context.r_data
        m.d.comb += self.r.ready.eq(context.r_rdy)
        arrived = self.r.valid & self.r.ready
        m.d.comb += [
            context.r_en.eq(arrived),
            self.error.eq(arrived & (self.r.payload.resp != 0)),
        ]
        landed = [arrived & (owner == index) for index in range(count)]
        issued = [context.w_en & (context.w_data == index) for index in range(count)]
        for index, (lines, flying) in enumerate(zip(responses, in_flight, strict=True)):
            if lines is not None:
                m.d.comb += [lines.w_en.eq(landed[index]),
                             lines.w_data.eq(self.r.payload.data)]
                # A landed line goes from in flight to the FIFO: only a read frees an entry.
                m.d.sync += used[index].eq(used[index] + issued[index]
                                           - (lines.r_en & lines.r_rdy))
            m.d.sync += flying.eq(flying + issued[index] - landed[index])

        if shared:
            m.d.comb += buffer_write_enable.eq(
                Cat(*(landed[index] for index, _, _ in shared)).any())
        base = 0
        wanting, read_addresses, write_addresses = [], [], []
        for index, name, depth in shared:
            wants, refill, read_address, write_address = self._shared_source(
                m, buffer_read_data, base, depth, landed[index], levels[index],
                getattr(self, f"{name}_response"), name)
            # The read port goes to the first source that wants it, each looking at all the
            # earlier ones at once (an OR, not a chain of grants), and its address is an OR
            # of the exclusive refills' terms (a chain of choices was in front of the read
            # address copies on a ULX3S build).
            m.d.comb += refill.eq(wants & ~Cat(*wanting).any())
            wanting.append(wants)
            read_addresses.append(Mux(refill, read_address, 0))
            # The slot a line would land in is chosen by the owner alone (the context FIFO's
            # head, a register), not by the landing: only the write enable waits for the
            # response's valid (which comes through the engine's bus dispatch; in front of
            # the write address copies on a ULX3S build). The owners are exclusive: an OR.
            write_addresses.append(Mux(owner == index, write_address, 0))
            m.d.sync += used[index].eq(used[index] + issued[index] - refill)
            base += depth
        if shared:
            m.d.comb += [
                buffer_read_address.eq(functools.reduce(operator.or_, read_addresses)),
                buffer_write_address.eq(functools.reduce(operator.or_, write_addresses)),
            ]
        return m

    @staticmethod
    def _shared_source(m, read_data, base, depth, landed, stored, response, name):
        """One shared source: a ring of ``depth`` slots from ``base`` in the buffer, and an
        output register refilled through the read port when it wants a line and no earlier
        source does (the read port is always enabled: only its address says whose line it
        reads). Returns whether it wants the port, its refill signal (for the caller to
        drive), the buffer address it would read and the one its next landed line goes
        to."""
        tail = Signal(range(depth), name=f"{name}_tail")
        head = Signal(range(depth), name=f"{name}_head")
        loading = Signal(name=f"{name}_loading")  # the read port's data is ours this cycle
        out_valid = Signal(name=f"{name}_valid")
        out_data = Signal(LINE_BITS, name=f"{name}_data", reset_less=True)  # (see out_valid)

        def advance(pointer):
            return Mux(pointer == depth - 1, 0, pointer + 1)

        written = Signal(name=f"{name}_written")  # landed last cycle, written this one
        m.d.sync += written.eq(landed)
        with m.If(landed):
            m.d.sync += tail.eq(advance(tail))
        # Refill only an empty register: not one being taken, which would put the consumer's
        # ready in front of the read address (the update engine's longest path on ECP5). A
        # source then delivers a line every third cycle, plenty for a word stream.
        wants = Signal(name=f"{name}_wants")
        refill = Signal(name=f"{name}_refill")
        m.d.comb += wants.eq((stored != 0) & ~loading & ~out_valid)
        with m.If(refill):
            m.d.sync += head.eq(advance(head))
        m.d.sync += [stored.eq(stored + written - refill), loading.eq(refill)]
        with m.If(loading):
            m.d.sync += [out_data.eq(read_data), out_valid.eq(1)]
        with m.Elif(out_valid & response.ready):
            m.d.sync += out_valid.eq(0)
        m.d.comb += [response.valid.eq(out_valid), response.payload.eq(out_data)]
        return wants, refill, base + head, base + tail


class LineRequester(wiring.Component):
    """Asks for ``lines`` consecutive line addresses from ``base``, one per accepted request.

    Members
    -------
    start : ``In(1)``
        Begin a new run (abandons any old one); ``base`` and ``lines`` are sampled.
    base : ``In(line_address_width)``, lines : ``In(29)``
    request : ``Out(stream.Signature(line_address_width))``
        Line reads, to a :class:`ReadRouter` source. With ``registered_request`` through a
        :class:`~hw.skid.SkidBuffer` (emptied by ``start``): a request reaches the router a
        cycle later, the router's arbitration starts from the buffer's flip-flops, not from
        ``start`` and the count behind it, and its ``ready`` stops at the buffer.
    """

    def __init__(self, *, line_address_width, registered_request=False):
        self._registered_request = check_bool("Registered request", registered_request)
        super().__init__({
            "start": In(1),
            "base": In(line_address_width),
            "lines": In(29),
            "request": Out(stream.Signature(line_address_width)),
        })

    def elaborate(self, platform):
        m = Module()
        line_count = Signal(29)
        issued = Signal(29)
        next_line = Signal.like(self.request.payload)
        request = self.request
        if self._registered_request:
            skid = m.submodules.skid = ResetInserter(self.start)(
                SkidBuffer(shape=self.request.payload.shape()))
            wiring.connect(m, skid.o, wiring.flipped(self.request))
            request = skid.i
        # Whether lines are left (issued != line_count) is a register, so a request's valid
        # comes from a flip-flop, not from a 29-bit comparison (a ULX3S build's index line
        # requests, nine LUT levels in front of the skid buffer and the line register).
        taken = request.valid & request.ready
        lines_left = registered_lines_left(m, issued=issued, end=line_count, advance=taken,
                                           restart=self.start, first=0,
                                           at_restart=self.lines != 0)
        with m.If(self.start):
            m.d.sync += [line_count.eq(self.lines), issued.eq(0), next_line.eq(self.base)]
        with m.Else():
            m.d.comb += [
                request.valid.eq(lines_left),
                request.payload.eq(next_line),
            ]
            with m.If(taken):
                m.d.sync += [issued.eq(issued + 1), next_line.eq(next_line + 1)]
        return m


class WordReader(wiring.Component):
    """Streams ``words`` consecutive 32-bit words starting at a word of a line address.

    It asks for exactly ``ceil(words / 16)`` lines and releases each line once its last
    needed word is taken, so after a complete read nothing is left behind in the router.

    Members
    -------
    start : ``In(1)``
        Begin a new read of ``words`` words from word ``first`` of line ``base`` (abandons any
        old one).
    base : ``In(line_address_width)``, first : ``In(4)``, words : ``In(32)``
        Sampled on ``start``.
    request : ``Out(stream.Signature(line_address_width))``
        Line reads, to a :class:`ReadRouter` source.
    lines : ``In(stream.Signature(512))``
        The lines, in order.
    o : ``Out(stream.Signature(32))``
        The words, little-endian within each line. With ``registered_output`` each word is
        chosen into a register of its own and leaves through a :class:`~hw.skid.SkidBuffer`:
        the first word leaves two cycles after its line arrives, then one per cycle, and
        ``o.ready`` reaches only the buffer's register; and its line requests pass one too
        (:class:`LineRequester`'s ``registered_request``). The consumer then takes no word
        in the cycle of ``start`` (what ``o`` shows then is the old read's).
    """

    def __init__(self, *, line_address_width, registered_output=False):
        self._registered_output = check_bool("Registered output", registered_output)
        super().__init__({
            "start": In(1),
            "base": In(line_address_width),
            "first": In(4),
            "words": In(32),
            "request": Out(stream.Signature(line_address_width)),
            "lines": In(stream.Signature(LINE_BITS)),
            "o": Out(stream.Signature(32)),
        })

    def elaborate(self, platform):
        m = Module()
        requester = m.submodules.requester = LineRequester(
            line_address_width=len(self.request.payload),
            registered_request=self._registered_output)
        wiring.connect(m, requester.request, wiring.flipped(self.request))
        # Words still to deliver, and whether that is none or one, kept in registers: the
        # decisions on a word (its availability, its line's release, the lane copies behind
        # them) then start from flip-flops, not from 33-bit comparisons of a position with
        # the end (a ULX3S build's paths into the lane copies, 15.3 ns).
        left = Signal(32)
        none_left = Signal(init=1)
        one_left = Signal()
        lane = Signal(4)  # the word's position in its line

        m.d.comb += [
            requester.start.eq(self.start),
            requester.base.eq(self.base),
            # (No line at all for no words, whatever ``first`` says.)
            requester.lines.eq(Mux(self.words == 0, 0,
                                   (self.words + self.first + _WORDS_PER_LINE - 1) >> 4)),
        ]
        with m.If(self.start):
            m.d.sync += [
                left.eq(self.words),
                none_left.eq(self.words == 0),
                one_left.eq(self.words == 1),
                lane.eq(self.first),
            ]
        take = Signal()  # the word at ``lane`` leaves its line this cycle
        # With ``registered_output`` each group of the word's bits is chosen by a copy of the
        # lane of its own.
        next_lane = Mux(self.start, self.first, Mux(take, (lane + 1)[:4], lane))
        # (The lane's copies take no reset: a reset leaves no word to deliver, and `start`
        # loads them with `first`. The engine's per-command clear was otherwise a LUT of
        # its own in front of every copy, the last level of the paths into them.)
        word = word_of_line(m, self.lines.payload, next_lane, lane, name="lane",
                            replicate=self._registered_output, reset_less=True)
        if self._registered_output:
            # The consumer's decision on a word (a comparison that drives its ready) then
            # starts from flip-flops, not from a 16-way word choice behind the counter, and
            # its ready stops at the skid buffer's register (a word may wait there while the
            # next is taken): emptied by ``start``, as the old read is dropped. Its output
            # is not held off in the cycle of ``start`` (the consumer takes nothing then):
            # ``start`` stays out of the consumer's valid, word and ready (a ULX3S build's
            # paths from the walk's launch through the indices into the walker's state).
            output = m.submodules.output = ResetInserter(self.start)(SkidBuffer(shape=32))
            wiring.connect(m, output.o, wiring.flipped(self.o))
            # The word is chosen into a register of its own, the buffer's only input: the
            # 16-way choice then ends at one flip-flop per bit, not behind the buffer's
            # choice of its waiting word in front of both its registers (a ULX3S build's
            # worst path, 14.43 ns, 4 LUT levels, from a lane copy into `out_payload`). It
            # takes a word whenever the buffer is ready (a register), as the buffer takes
            # the word it holds in that cycle: a word still leaves every cycle, a cycle
            # more per read, and the take's decision has no more inputs than before (with
            # `~chosen_valid` as well, two LUT levels more in front of the lane copies; a
            # word that comes while two wait on a stalled consumer now waits a cycle). It
            # loads whenever it may (a word loaded with no valid is never used), so its
            # enable is the buffer's register, not `start`.
            chosen = Signal(32, name="chosen", reset_less=True)
            chosen_valid = Signal()
            chosen_free = output.i.ready
            m.d.comb += [output.i.valid.eq(chosen_valid), output.i.payload.eq(chosen)]
            with m.If(chosen_free):
                m.d.sync += chosen.eq(word)
            with m.If(self.start):
                m.d.sync += chosen_valid.eq(0)
        with m.If(~self.start):
            available = self.lines.valid & ~none_left
            if self._registered_output:
                m.d.comb += take.eq(available & chosen_free)
                with m.If(chosen_free):
                    m.d.sync += chosen_valid.eq(available)
            else:
                m.d.comb += [self.o.valid.eq(available), self.o.payload.eq(word),
                             take.eq(available & self.o.ready)]
            with m.If(take):
                m.d.sync += [
                    left.eq(left - 1),
                    none_left.eq(one_left),
                    one_left.eq(left == 2),
                    lane.eq(lane + 1),
                ]
                last_of_line = (lane == _WORDS_PER_LINE - 1) | one_left
                m.d.comb += self.lines.ready.eq(last_of_line)
        return m
