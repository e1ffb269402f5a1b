"""A minimal UART transmitter: 8 data bits, no parity, one stop bit (8N1), LSB first."""

from amaranth import Cat, Const, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["UARTTransmitter"]


class UARTTransmitter(wiring.Component):
    """Sends each byte of ``i`` as one 8N1 frame on ``tx``.

    Parameters
    ----------
    divisor : int
        Clock cycles per bit: ``round(clock_frequency / baud_rate)``.

    Members
    -------
    i : In(stream.Signature(8))
        Bytes to send; accepted one at a time, when the line is idle.
    tx : Out(1)
        The serial line; idles high.
    """
    i: In(stream.Signature(8))
    tx: Out(1, init=1)

    def __init__(self, *, divisor):
        if not isinstance(divisor, int) or divisor < 2:
            raise ValueError(f"Divisor must be an integer of at least 2, not {divisor!r}")
        self.divisor = divisor
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        # Start bit, data, stop bit; shifted out LSB first. Idle line = stop-bit level.
        frame = Signal(10, init=0b11_1111_1111)
        bits_left = Signal(range(11))
        ticks = Signal(range(self.divisor))

        m.d.comb += [self.i.ready.eq(bits_left == 0), self.tx.eq(frame[0])]
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [
                frame.eq(Cat(Const(0, 1), self.i.payload, Const(1, 1))),
                bits_left.eq(10),
                ticks.eq(self.divisor - 1),
            ]
        with m.Elif(bits_left != 0):
            with m.If(ticks == 0):
                m.d.sync += [
                    frame.eq(Cat(frame[1:], Const(1, 1))),
                    bits_left.eq(bits_left - 1),
                    ticks.eq(self.divisor - 1),
                ]
            with m.Else():
                m.d.sync += ticks.eq(ticks - 1)
        return m
