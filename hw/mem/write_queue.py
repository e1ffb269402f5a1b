"""Line writes: one line per AXI write, completions counted.

A write counts as done (persistent, DESIGN.md section 4) only when its B response has come
back; the update engine waits for ``idle`` before it reads rows again or reports completion,
and the lookup's :class:`~hw.mem.line_writer.LineWriter` before its command ends.
"""

from amaranth.hdl import Const, Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.params import check_bool

__all__ = ["WriteQueue"]


class WriteQueue(wiring.Component):
    """Issues each (line address, data) as an AW beat and a W beat, in order.

    AW and W of one line are offered together and may be accepted in either order; the entry
    is released once both are. After ``stop`` (a bus error), entries not yet offered are
    dropped; an entry already offered is completed, as AXI requires of a raised ``valid``.

    Parameters
    ----------
    line_address_width : int
        Width of a line address.
    line_width : int
        Bits of a line (default 512).
    max_outstanding : int
        Most writes without a B response; AW waits beyond that.
    registered_beats : bool
        Move each entry into AW and W registers of its own, taken only while both are empty,
        and offer the beats from there: ``i.ready`` then comes from flip-flops and ``stop``,
        not from the memory's ``awready`` and ``wready`` behind the beats' ``valid`` (on
        an ECP5 that chain went on into the line FIFO's read-address copies in front of
        ``i``). An entry passes every second cycle at most, the rate of FP lanes folded by
        two; one taken into the registers before ``stop`` is completed.

    Members
    -------
    i : ``In(stream.Signature({"address": line_address_width, "data": line_width}))``
        Lines to write.
    aw : ``Out(stream.Signature(line_address_width))``, w : ``Out(stream.Signature(line_width))``
        The AXI address and data beats (the owner adds ``awlen = 0``, ``wlast = 1``...).
    b : ``In(stream.Signature(2))``
        ``bresp`` of each completion (always accepted).
    stop : ``In(1)``
        Drop the writes not yet offered.
    outstanding : ``Out(range(max_outstanding + 1))``
        Writes accepted on AW and not yet completed.
    idle : ``Out(1)``
        Nothing queued here and nothing outstanding: every write so far is persistent.
    error : ``Out(1)``
        A completion this cycle carries SLVERR/DECERR.
    offered : ``Out(1)``
        The entry on ``i`` has had its beats offered (without ``registered_beats``; always 0
        with, where the registers hold it): it is completed whatever ``stop`` says, and its
        producer must keep ``i.valid`` until it is taken.
    """

    def __init__(self, *, line_address_width, line_width=512, max_outstanding=64,
                 registered_beats=False):
        if not isinstance(max_outstanding, int) or max_outstanding < 1:
            raise ValueError(
                f"Outstanding write limit must be a positive integer, not {max_outstanding!r}")
        self._max_outstanding = max_outstanding
        self._registered_beats = check_bool("Registered beats", registered_beats)
        super().__init__({
            "i": In(stream.Signature(data.StructLayout({
                "address": line_address_width, "data": line_width}))),
            "aw": Out(stream.Signature(line_address_width)),
            "w": Out(stream.Signature(line_width)),
            "b": In(stream.Signature(2)),
            "stop": In(1),
            "outstanding": Out(range(max_outstanding + 1)),
            "idle": Out(1),
            "error": Out(1),
            "offered": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        outstanding = Signal(range(self._max_outstanding + 1))
        room = outstanding != self._max_outstanding
        if self._registered_beats:
            held = self._registered(m, room)
        else:
            held = self._offered_from_input(m, room)
        address_fire = self.aw.valid & self.aw.ready

        completion = self.b.valid  # always ready
        m.d.comb += [
            self.b.ready.eq(1),
            self.error.eq(completion & (self.b.payload != 0)),
            self.outstanding.eq(outstanding),
            self.idle.eq(~self.i.valid & ~held & (outstanding == 0)),
        ]
        m.d.sync += outstanding.eq(outstanding + address_fire - completion)
        return m

    def _registered(self, m, room):
        """``registered_beats``: the beats leave from registers; returns "an entry is held
        there"."""
        address_full = Signal()
        data_full = Signal()
        address = Signal.like(self.aw.payload, reset_less=True)
        line = Signal.like(self.w.payload, reset_less=True)
        # Both registers empty: a register of its own, set with them, so that `i.ready` is
        # one LUT of flip-flops (it goes on into the line FIFO's read-address copies, one
        # per FP lane: a ULX3S build's 13.8 ns path through the two flags' logic).
        empty = Signal(init=1)
        address_full_next = Signal()
        data_full_next = Signal()
        m.d.comb += [address_full_next.eq(address_full), data_full_next.eq(data_full)]
        m.d.sync += [address_full.eq(address_full_next), data_full.eq(data_full_next),
                     empty.eq(~address_full_next & ~data_full_next)]
        # The registers load whenever empty, not only as an entry is taken: their enable
        # then starts at the flip-flops.
        with m.If(empty):
            m.d.sync += [address.eq(self.i.payload.address), line.eq(self.i.payload.data)]
        m.d.comb += [
            # Dropped after `stop`, taken while both registers are empty.
            self.i.ready.eq(self.i.valid & (empty | self.stop)),
            self.aw.valid.eq(address_full & room),
            self.aw.payload.eq(address),
            self.w.valid.eq(data_full),
            self.w.payload.eq(line),
        ]
        with m.If(self.i.valid & empty & ~self.stop):
            m.d.comb += [address_full_next.eq(1), data_full_next.eq(1)]
        with m.Else():
            with m.If(self.aw.valid & self.aw.ready):
                m.d.comb += address_full_next.eq(0)
            with m.If(self.w.valid & self.w.ready):
                m.d.comb += data_full_next.eq(0)
        return ~empty

    def _offered_from_input(self, m, room):
        """The beats are offered straight from ``i``; returns "an entry is held" (never:
        ``i`` holds it)."""
        address_sent = Signal()
        data_sent = Signal()
        offered = Signal()  # valid has been raised for the head entry: it must complete
        m.d.comb += self.offered.eq(offered)

        live = self.i.valid & (offered | ~self.stop)
        m.d.comb += [
            self.aw.valid.eq(live & ~address_sent & room),
            self.aw.payload.eq(self.i.payload.address),
            self.w.valid.eq(live & ~data_sent),
            self.w.payload.eq(self.i.payload.data),
        ]
        address_fire = self.aw.valid & self.aw.ready
        data_fire = self.w.valid & self.w.ready
        complete = (address_sent | address_fire) & (data_sent | data_fire)
        dropped = self.i.valid & ~offered & self.stop
        m.d.comb += self.i.ready.eq(self.i.valid & (complete | dropped))

        with m.If(self.i.ready):
            m.d.sync += [address_sent.eq(0), data_sent.eq(0), offered.eq(0)]
        with m.Else():
            with m.If(address_fire):
                m.d.sync += address_sent.eq(1)
            with m.If(data_fire):
                m.d.sync += data_sent.eq(1)
            with m.If(self.aw.valid | self.w.valid):
                m.d.sync += offered.eq(1)
        return Const(0)
