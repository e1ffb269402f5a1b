"""Stream a buffer from memory, one 64-byte line per read, into an on-chip line window.

The window is a ring of ``capacity`` lines. A line is requested only when the ring has room
for it (lines in flight count as taken), so the read data is always accepted: the AXI R
channel is never held up, whatever the consumers do. Consumers say how far they are done
with ``freed``; when everything fits (count <= capacity) nothing ever has to be freed and the
window simply holds the whole buffer.

All reads of one stream use one AXI ID, so they return in order and land in order.
"""

from amaranth.hdl import Array, Module, Mux, Signal, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from hw.fanout import lane_copies, replicated_register
from hw.mem.sliced_fifo import slice_widths
from hw.params import check_bool

__all__ = ["LinePrefetch", "LineStream", "registered_lines_left"]

COUNT_WIDTH = 32


# Copies of each window slot's enable with ``landing_ahead``, a quarter line each.
_LANDING_COPIES = 4


def registered_lines_left(m, *, issued, end, advance, restart, first, at_restart,
                          name="lines_left"):
    """``issued != end`` as a register, for a count ``issued`` of lines asked for that moves up
    by one on ``advance`` and starts again from ``first`` on ``restart`` (the register then
    takes ``at_restart``; ``issued`` is 0 after a reset). Loaded every cycle with the
    comparison for the count ``issued`` will hold, so a request's ``valid`` comes from a
    flip-flop, not from a wide comparison; ``end`` is seen a cycle late (safe where it only
    grows, or is constant, until the next restart)."""
    left = Signal(name=name)
    # `issued + 1` is a register of its own, kept with `issued`, so neither comparison has a
    # carry chain in front of it; both are kept wires, and `advance` chooses between them last:
    # unkept, ABC (which takes every input to arrive at once) folded the choice into the
    # comparison's first LUTs, so `advance` and `restart` (the request's handshake) came before
    # the adder and four LUT levels of the inequality: 13.1 ns into the lookup offsets
    # prefetch's `lines_left` at seed 1.
    issued_after = Signal.like(issued, name=f"{name}_count_after", init=1)
    with m.If(restart):
        m.d.sync += issued_after.eq(first + 1)
    with m.Elif(advance):
        m.d.sync += issued_after.eq(issued_after + 1)
    left_after = Signal(name=f"{name}_after", attrs={"keep": 1})
    left_now = Signal(name=f"{name}_now", attrs={"keep": 1})
    m.d.comb += [left_after.eq(issued_after != end), left_now.eq(issued != end)]
    with m.If(restart):
        m.d.sync += left.eq(at_restart)
    with m.Elif(advance):
        m.d.sync += left.eq(left_after)
    with m.Else():
        m.d.sync += left.eq(left_now)
    return left


class LineStream(wiring.Component):
    """Read ``count`` consecutive lines from line address ``base`` into a line window.

    Parameters
    ----------
    capacity : int
        Lines the window holds (a power of two).
    addr_width : int
        Width of a line address.
    line_width : int
        Bits per line.

    Members
    -------
    start : ``In(1)``
        Pulse: forget everything and stream ``count`` lines from ``base``. Only while
        :attr:`idle`.
    base, count : ``In``
        Sampled with ``start``.
    stop : ``In(1)``
        Issue no further reads (reads in flight still land).
    ar : ``Out(stream.Signature({"addr"}))``
    response : ``In(stream.Signature({"data", "error"}, always_ready=True))``
    response_ahead : ``In(1)``
        With ``landing_ahead``: ``response.valid`` of the next cycle.
    written : ``Out(32)``
        Lines landed in the window since ``start`` (line ``k`` is at ring slot ``k % capacity``).
    freed : ``In(32)``
        Lines the consumers are done with; the reader keeps ``issued - freed <= capacity``.
    idle : ``Out(1)``
        No read in flight.
    error : ``Out(1)``
        A response carried an error since ``start``.
    check_addr, check_data, use_addr, use_data :
        Two read ports into the window (line numbers since ``start``; data one cycle later).

    With ``registered_fetch`` ``ar.valid`` comes from flip-flops: whether lines are left to
    read and whether the window has room for the next one are registers, loaded each cycle from
    the next ``issued`` count and this cycle's ``freed``. ``freed`` only grows after ``start``,
    so a value a cycle old is a safe bound: a read waits a cycle longer only when the window is
    full and a line has just been freed. Without, ``ar.valid`` is a 32-bit subtraction and
    comparison of ``freed``, which sits in front of the read-address arbiter that ranks this
    stream's reads above the others (the lookup's longest path on an ECP5).

    With ``landing_ahead`` the window is a register per slot, and the slot a response lands in
    is enabled by registers (a copy per quarter line) set the cycle before, from
    ``response_ahead``: no enable that reaches a whole line is a decode of ``written`` (a
    ULX3S build's 12.4 ns path into the offsets window, 168 inputs). The same cycles as
    without. For windows of a few lines, as on an FPGA.
    """

    def __init__(self, *, capacity, addr_width, line_width=512, registered_fetch=False,
                 landing_ahead=False):
        if not isinstance(capacity, int) or capacity < 2 or capacity & (capacity - 1):
            raise ValueError(f"Capacity must be a power of two, at least 2, not {capacity!r}")
        self._capacity = capacity
        self._registered_fetch = check_bool("Registered fetch", registered_fetch)
        self._landing_ahead = check_bool("Landing ahead", landing_ahead)
        self._line_width = line_width
        super().__init__({
            "start": In(1),
            "base": In(addr_width),
            "count": In(COUNT_WIDTH),
            "stop": In(1),
            "ar": Out(stream.Signature(data.StructLayout({"addr": unsigned(addr_width)}))),
            "response": In(stream.Signature(data.StructLayout({
                "data": unsigned(line_width), "error": 1}), always_ready=True)),
            **({"response_ahead": In(1)} if landing_ahead else {}),
            "written": Out(COUNT_WIDTH),
            "freed": In(COUNT_WIDTH),
            "idle": Out(1),
            "error": Out(1),
            "check_addr": In(COUNT_WIDTH),
            "check_data": Out(line_width),
            "use_addr": In(COUNT_WIDTH),
            "use_data": Out(line_width),
        })

    @property
    def capacity(self):
        return self._capacity

    @property
    def registered_fetch(self):
        return self._registered_fetch

    def _landing_slots(self, m, slot_bits, data):
        """``landing_ahead``'s window: a register per slot, loaded from ``data`` under a
        one-hot enable decided a cycle ahead from ``response_ahead`` (a register, copied per
        quarter of the line), so no enable is a decode of ``written`` spread over the line.
        Returns the two read ports' data (registered, as a block RAM's would be)."""
        arriving = Signal(max(slot_bits, 1))  # the slot the next response lands in
        with m.If(self.start):
            m.d.sync += arriving.eq(0)
        with m.Elif(self.response_ahead):
            m.d.sync += arriving.eq(arriving + 1)
        slots = [Signal(self._line_width, name=f"slot_{k}", reset_less=True)
                 for k in range(self._capacity)]
        widths = slice_widths(self._line_width, min(_LANDING_COPIES, self._line_width))
        for k, slot in enumerate(slots):
            lands = replicated_register(
                m, self.response_ahead & ~self.start & (arriving[:slot_bits] == k),
                copies=len(widths), name=f"lands_{k}")
            low = 0
            for enable, width in zip(lands, widths, strict=True):
                with m.If(enable):
                    m.d.sync += slot[low:low + width].eq(data[low:low + width])
                low += width
        check_data = Signal(self._line_width, reset_less=True)
        use_data = Signal(self._line_width, reset_less=True)
        m.d.sync += [check_data.eq(Array(slots)[self.check_addr[:slot_bits]]),
                     use_data.eq(Array(slots)[self.use_addr[:slot_bits]])]
        return check_data, use_data

    def elaborate(self, platform):
        m = Module()
        slot_bits = exact_log2(self._capacity)
        response = self.response
        if self._landing_ahead:
            check_data, use_data = self._landing_slots(m, slot_bits, response.payload.data)
        else:
            m.submodules.window = window = memory.Memory(
                shape=unsigned(self._line_width), depth=self._capacity, init=[])
            write = window.write_port()
            check = window.read_port()
            use = window.read_port()
            m.d.comb += [
                write.addr.eq(self.written[:slot_bits]),
                write.data.eq(response.payload.data),
                write.en.eq(response.valid),
                check.addr.eq(self.check_addr[:slot_bits]),
                use.addr.eq(self.use_addr[:slot_bits]),
            ]
            check_data, use_data = check.data, use.data

        base = Signal.like(self.base)
        count = Signal(COUNT_WIDTH)
        issued = Signal(COUNT_WIDTH)
        written = Signal(COUNT_WIDTH)

        def has_room(lines_issued):
            return (lines_issued - self.freed)[:COUNT_WIDTH] < self._capacity

        fetched = self.ar.valid & self.ar.ready
        if self._registered_fetch:
            lines_left = registered_lines_left(m, issued=issued, end=count, advance=fetched,
                                               restart=self.start, first=0,
                                               at_restart=self.count != 0)
            room = Signal()        # issued - freed < capacity
            # Both outcomes are computed from registers and `freed`, and `fetched` (which
            # the read-address arbiter decides late in the cycle) only picks one.
            with m.If(self.start):
                # Nothing issued and (freed counting from this start) nothing freed: room.
                m.d.sync += room.eq(1)
            with m.Elif(fetched):
                m.d.sync += room.eq(has_room((issued + 1)[:COUNT_WIDTH]))
            with m.Else():
                m.d.sync += room.eq(has_room(issued))
        else:
            lines_left = issued != count
            room = has_room(issued)
        m.d.comb += [
            self.ar.valid.eq(lines_left & room & ~self.stop),
            self.ar.payload.addr.eq(base + issued),
            self.check_data.eq(check_data),
            self.use_data.eq(use_data),
            self.written.eq(written),
        ]
        if self._registered_fetch:
            # Idle as a register too: the lookup's ends of pass and of abort wait for three
            # windows' idle at once, and each was a 32-bit comparison (a ULX3S build's path
            # into Locate's start). A fetch makes the window busy; a response with no fetch
            # beside it makes it idle when it is the last read in flight.
            idle = Signal(init=1)
            with m.If(self.start):
                m.d.sync += idle.eq(1)  # (`start` comes only while idle)
            with m.Elif(fetched):
                m.d.sync += idle.eq(0)
            with m.Elif(response.valid):
                m.d.sync += idle.eq(issued == written + 1)
            m.d.comb += self.idle.eq(idle)
        else:
            m.d.comb += self.idle.eq(issued == written)
        with m.If(self.start):
            m.d.sync += [base.eq(self.base), count.eq(self.count), issued.eq(0), written.eq(0),
                         self.error.eq(0)]
        with m.Else():
            with m.If(fetched):
                m.d.sync += issued.eq(issued + 1)
            with m.If(response.valid):
                m.d.sync += written.eq(written + 1)
                with m.If(response.payload.error):
                    m.d.sync += self.error.eq(1)
        return m


class LinePrefetch(wiring.Component):
    """Turn a window read port into a stream of consecutive lines.

    Lines ``0, 1, 2, ...`` (since ``restart``) are read as soon as they are below ``limit`` and
    offered on ``lines`` at up to one per cycle; a small buffer covers the port's one-cycle
    read latency so that a consumer taking a line every cycle never waits.

    Parameters
    ----------
    line_width : int
        Bits of a line (default 512).
    pointer_copies : int
        The read pointer that picks a buffered line for ``lines.payload`` is held in this many
        registers, each choosing an equal part of the line (:func:`hw.fanout.lane_copies`):
        on an FPGA one pointer steering all 512 bits is a net spread over the die. Default 1.
    registered_issue : bool
        Whether a line is left below ``limit`` is a register, compared with the limit of the
        cycle before: a read then starts from flip-flops, not from a 32-bit comparison, and
        waits a cycle longer when a line has only just landed, and the cycle after a
        restart. Default False.

    Members
    -------
    restart : ``In(1)``
        Pulse: start again from line ``first``.
    first : ``In(32)``
    limit : ``In(32)``
        Lines below this may be read (the window's ``written``). It only grows between
        restarts.
    addr : ``Out(32)``, data : ``In(line_width)``
        The window read port.
    lines : ``Out(stream.Signature(line_width))``
    """

    DEPTH = 3

    def __init__(self, *, line_width=512, pointer_copies=1, registered_issue=False):
        if (not isinstance(pointer_copies, int) or isinstance(pointer_copies, bool)
                or pointer_copies < 1 or line_width % pointer_copies):
            raise ValueError(f"Pointer copies must be a positive integer that divides the "
                             f"line width {line_width}, not {pointer_copies!r}")
        self._line_width = line_width
        self._pointer_copies = pointer_copies
        self._registered_issue = check_bool("Registered issue", registered_issue)
        super().__init__({
            "restart": In(1),
            "first": In(COUNT_WIDTH),
            "limit": In(COUNT_WIDTH),
            "addr": Out(COUNT_WIDTH),
            "data": In(line_width),
            "lines": Out(stream.Signature(line_width)),
        })

    def elaborate(self, platform):
        m = Module()
        depth = self.DEPTH
        # A tiny register FIFO: reads land one cycle after they are issued.
        slots = [Signal(self._line_width, name=f"slot_{k}") for k in range(depth)]
        level = Signal(range(depth + 1))
        in_flight = Signal()
        fetch_ptr = Signal(COUNT_WIDTH)
        out_ptr = Signal(range(depth))
        in_ptr = Signal(range(depth))

        issue = Signal()
        if self._registered_issue:
            # (A limit a cycle old is a safe bound: it only grows until the next restart. The
            # cycle after a restart compares with the new limit before any read.)
            lines_left = registered_lines_left(m, issued=fetch_ptr, end=self.limit,
                                               advance=issue, restart=self.restart,
                                               first=self.first, at_restart=0)
        else:
            lines_left = fetch_ptr != self.limit
        m.d.comb += [
            issue.eq(~self.restart & lines_left & (level + in_flight < depth)),
            self.addr.eq(fetch_ptr),
            self.lines.valid.eq(level != 0),
        ]
        pop = self.lines.valid & self.lines.ready
        out_ptr_next = Signal(range(depth))
        m.d.comb += out_ptr_next.eq(out_ptr)
        with m.If(self.restart):
            m.d.comb += out_ptr_next.eq(0)
        with m.Elif(pop):
            m.d.comb += out_ptr_next.eq(_wrap_increment(out_ptr, depth))
        m.d.sync += out_ptr.eq(out_ptr_next)
        part = self._line_width // self._pointer_copies
        pointers = lane_copies(m, out_ptr_next, out_ptr, copies=self._pointer_copies,
                               name="out_ptr", replicate=self._pointer_copies > 1)
        for j, pointer in enumerate(pointers):
            bits = slice(part * j, part * (j + 1))
            with m.Switch(pointer):
                for k in range(depth):
                    with m.Case(k):
                        m.d.comb += self.lines.payload[bits].eq(slots[k][bits])

        # The slot a landing line goes to, chosen per part of the line by copies of its own
        # of `in_flight` and `in_ptr`: one decode enabling all of a slot's bits was a net to
        # 512 flip-flops (13 ns, most of it routing, on a ULX3S build).
        in_flight_next = issue  # (0 on a restart)
        in_ptr_next = Mux(self.restart, 0,
                          Mux(in_flight, _wrap_increment(in_ptr, depth), in_ptr))
        replicate = self._pointer_copies > 1
        landing = lane_copies(m, in_flight_next, in_flight, copies=self._pointer_copies,
                              name="in_flight", replicate=replicate)
        landing_slot = lane_copies(m, in_ptr_next, in_ptr, copies=self._pointer_copies,
                                   name="in_ptr", replicate=replicate)
        for j, (lands, slot) in enumerate(zip(landing, landing_slot, strict=True)):
            bits = slice(part * j, part * (j + 1))
            with m.If(lands):
                with m.Switch(slot):
                    for k in range(depth):
                        with m.Case(k):
                            m.d.sync += slots[k][bits].eq(self.data[bits])
        with m.If(self.restart):
            m.d.sync += [fetch_ptr.eq(self.first), level.eq(0), in_flight.eq(0), in_ptr.eq(0)]
        with m.Else():
            m.d.sync += [in_flight.eq(issue), level.eq(level + in_flight - pop)]
            with m.If(issue):
                m.d.sync += fetch_ptr.eq(fetch_ptr + 1)
            with m.If(in_flight):
                m.d.sync += in_ptr.eq(_wrap_increment(in_ptr, depth))
        return m


def _wrap_increment(value, depth):
    return Mux(value == depth - 1, 0, value + 1)
