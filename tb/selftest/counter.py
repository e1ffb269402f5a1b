"""A deliberately small design for testing the simulation flow itself (sim.runner)."""

from amaranth import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["Accumulator"]


class Accumulator(wiring.Component):
    """Adds every accepted input to a running total (modulo 2**width).

    Members: ``i`` (stream of addends), ``total`` (the running sum, registered).
    """

    def __init__(self, *, width=16):
        if not isinstance(width, int) or width < 1:
            raise ValueError(f"Width must be a positive integer, not {width!r}")
        self._width = width
        super().__init__({"i": In(stream.Signature(width)), "total": Out(width)})

    @property
    def latency(self):
        return 1

    def elaborate(self, platform):
        m = Module()
        total = Signal(self._width)
        m.d.comb += [self.i.ready.eq(1), self.total.eq(total)]
        with m.If(self.i.valid):
            m.d.sync += total.eq(total + self.i.payload)
        return m
