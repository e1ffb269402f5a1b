"""Sends a fixed-length line of characters, each driven by the parent, as a byte stream."""

from amaranth import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["MessageWriter", "hex_digit", "text"]


def text(string):
    """The byte values of an ASCII ``string``, for driving :class:`MessageWriter` characters."""
    return list(string.encode("ascii"))


def hex_digit(nibble):
    """The ASCII character of a 4-bit value: ``0``-``9``, ``A``-``F``."""
    return Mux(nibble < 10, ord("0") + nibble, ord("A") - 10 + nibble)


class MessageWriter(wiring.Component):
    """On ``send``, streams ``chars[0]``, ``chars[1]``, ... ``chars[length - 1]`` out of ``o``.

    The characters are sampled as they are sent, so the parent keeps them steady while
    ``busy``.

    Members
    -------
    chars : In(ArrayLayout(8, length))
        The line.
    send : In(1)
        Start sending (ignored while busy).
    busy : Out(1)
        A line is being sent.
    o : Out(stream.Signature(8))
        The characters.
    """
    def __init__(self, *, length):
        if not isinstance(length, int) or length < 1:
            raise ValueError(f"Message length must be a positive integer, not {length!r}")
        self.length = length
        super().__init__({
            "chars": In(data.ArrayLayout(8, length)),
            "send": In(1),
            "busy": Out(1),
            "o": Out(stream.Signature(8)),
        })

    def elaborate(self, platform):
        m = Module()
        position = Signal(range(self.length))
        m.d.comb += [
            self.o.valid.eq(self.busy),
            self.o.payload.eq(self.chars[position]),
        ]
        with m.If(~self.busy):
            with m.If(self.send):
                m.d.sync += [self.busy.eq(1), position.eq(0)]
        with m.Elif(self.o.ready):
            with m.If(position == self.length - 1):
                m.d.sync += self.busy.eq(0)
            with m.Else():
                m.d.sync += position.eq(position + 1)
        return m
