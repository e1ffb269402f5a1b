"""A stream register that cuts both directions of a handshake: a skid buffer.

A stream stage whose ``ready`` is computed from the consumer's ``ready`` chains every stage's
decision into one cycle: on the ULX3S the update engine's walker, word readers, read router
and fetches did so through 17 LUT levels (``docs/measurements.md``, "where the misses are").
Here ``i.ready`` and ``o.valid`` both come from flip-flops. The price is a cycle of latency and
a second register for the payload that arrives while the consumer stalls; a word can pass
every cycle.
"""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["SkidBuffer"]


class SkidBuffer(wiring.Component):
    """Passes a stream on a cycle later, with ``i.ready`` and ``o`` driven by registers.

    Parameters
    ----------
    shape : shape-like
        The payload's shape.

    Members
    -------
    i : ``In(stream.Signature(shape))``
    o : ``Out(stream.Signature(shape))``
    empty : ``Out(1)``
        Holds no payload (for a caller that waits for its stream to drain).
    """

    def __init__(self, *, shape):
        super().__init__({
            "i": In(stream.Signature(shape)),
            "o": Out(stream.Signature(shape)),
            "empty": Out(1),
        })

    @property
    def latency(self):
        """Cycles from a payload's acceptance to its first cycle on ``o``."""
        return 1

    def elaborate(self, platform):
        m = Module()
        # The payload registers have no reset: they count only with a `valid` that has one,
        # and a reset (an engine's per-command clear) would reach every payload bit.
        skid = Signal.like(self.i.payload, reset_less=True)
        out_payload = Signal.like(self.i.payload, reset_less=True, name="out_payload")
        skid_valid = Signal()
        taken = self.i.valid & self.i.ready
        o_free = ~self.o.valid | self.o.ready

        m.d.comb += [
            self.i.ready.eq(~skid_valid),
            self.empty.eq(~self.o.valid & ~skid_valid),
            self.o.payload.eq(out_payload),
        ]
        # The payload registers load whenever they may (the skid register while empty, the
        # output whenever it is free), not only when a payload moves: their enables, which
        # reach every payload bit, then start at a flip-flop and at the consumer's ready, not
        # behind the handshakes. A payload loaded with no `valid` is never used.
        with m.If(~skid_valid):
            m.d.sync += skid.eq(self.i.payload)
        with m.If(o_free):
            m.d.sync += [out_payload.eq(Mux(skid_valid, skid, self.i.payload)),
                         self.o.valid.eq(skid_valid | taken), skid_valid.eq(0)]
        with m.Elif(taken):
            # The consumer stalls this cycle: the payload waits in the skid register.
            m.d.sync += skid_valid.eq(1)
        return m
