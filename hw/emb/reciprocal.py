"""The MEAN pooling factor ``float32(1) / float32(L)`` for an integer bag length ``L``.

The golden model computes it as one float32 division (DESIGN.md section 3), so the hardware
rounds twice exactly as NumPy does: ``L`` to float32 (nearest even), then the reciprocal of
that (nearest even). A restoring long division produces the quotient bits, a few
per pipeline stage.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["Reciprocal"]

# Quotient bits: 24 significand bits plus guard and round; the remainder gives the sticky bit.
_QUOTIENT_BITS = 26
_INFINITY = 0x7F80_0000


class Reciprocal(wiring.Component):
    """``float32(1) / float32(n)`` for an unsigned 32-bit ``n``, bit-exact with NumPy.

    ``n = 0`` gives ``+inf``. A valid-only pipeline: one input per cycle, ``o.valid`` is
    ``i.valid`` delayed by :attr:`latency`. A tag travels alongside.

    Parameters
    ----------
    bits_per_stage : int
        Quotient bits computed between two registers (1..26); fewer means a shorter critical
        path and more latency.
    tag_width : int
        Width of the tag carried from ``i`` to ``o`` (0 for none).

    Members
    -------
    i : ``In(stream.Signature({"n": 32, "tag": tag_width}, always_ready=True))``
    o : ``Out(stream.Signature({"result": 32, "tag": tag_width}, always_ready=True))``
    """

    def __init__(self, *, bits_per_stage=2, tag_width=0):
        if (not isinstance(bits_per_stage, int) or isinstance(bits_per_stage, bool)
                or not 1 <= bits_per_stage <= _QUOTIENT_BITS):
            raise ValueError(
                f"Bits per stage must be an integer in 1..{_QUOTIENT_BITS}, not {bits_per_stage!r}")
        if not isinstance(tag_width, int) or isinstance(tag_width, bool) or tag_width < 0:
            raise ValueError(f"Tag width must be a non-negative integer, not {tag_width!r}")
        self._bits_per_stage = bits_per_stage
        self._tag_width = tag_width
        super().__init__({
            "i": In(stream.Signature(data.StructLayout({"n": 32, "tag": tag_width}),
                                     always_ready=True)),
            "o": Out(stream.Signature(data.StructLayout({"result": 32, "tag": tag_width}),
                                      always_ready=True)),
        })

    @property
    def latency(self):
        """Convert, divide (``ceil(26 / bits_per_stage)`` stages), round: cycles from i to o."""
        return 2 + -(-_QUOTIENT_BITS // self._bits_per_stage)

    def elaborate(self, platform):
        m = Module()
        n = self.i.payload.n

        # Stage 1: n to float32 = significand (24 bits, hidden one on top) x 2**(exponent-23).
        shift = Signal(range(32))
        for bit in range(32):  # highest set bit wins: the last assignment has priority
            with m.If(n[bit]):
                m.d.comb += shift.eq(31 - bit)
        normalized = Signal(32)
        m.d.comb += normalized.eq(n << shift)
        truncated = normalized[8:32]
        round_up = normalized[7] & (normalized[:7].any() | truncated[0])
        rounded = Signal(25)
        m.d.comb += rounded.eq(truncated + round_up)
        carry = rounded[24]

        stage = _Stage(m, "convert", self.i.valid, self.i.payload.tag)
        significand = stage.register(Mux(carry, 1 << 23, rounded[:24]), name="significand")
        exponent = stage.register(31 - shift + carry, shape=unsigned(6), name="exponent")
        is_zero = stage.register(n == 0, name="is_zero")

        # Long division of 2**49 by the significand: 26 quotient bits, the top one always set.
        remainder = Const(1 << 24, 25)
        quotient = Const(0, 0)
        bit = 0
        while bit < _QUOTIENT_BITS:
            for _ in range(min(self._bits_per_stage, _QUOTIENT_BITS - bit)):
                fits = remainder >= significand
                reduced = Mux(fits, remainder - significand, remainder)[:25]
                remainder = Cat(Const(0, 1), reduced)[:25]
                quotient = Cat(fits, quotient)
                bit += 1
            stage = stage.next(f"divide_{bit}")
            remainder = stage.register(remainder, name=f"remainder_{bit}")
            quotient = stage.register(quotient, name=f"quotient_{bit}")
            significand = stage.register(significand, name=f"significand_{bit}")
            exponent = stage.register(exponent, name=f"exponent_{bit}")
            is_zero = stage.register(is_zero, name=f"is_zero_{bit}")

        # Round: 1/m for m in (1, 2) has 24 bits Q[25:2], guard Q[1], sticky Q[0] | remainder.
        # The quotient never rounds up to 2**24, so the exponent is fixed by the power-of-two
        # test alone: 1/2**e is exact.
        mantissa = quotient[2:]
        guard = quotient[1]
        sticky = quotient[0] | remainder.any()
        fraction = (mantissa + (guard & (sticky | mantissa[0])))[:23]
        power_of_two = significand == 1 << 23
        result = Mux(is_zero, _INFINITY,
                     Mux(power_of_two, Cat(Const(0, 23), (127 - exponent)[:8]),
                         Cat(fraction, (126 - exponent)[:8])))
        stage = stage.next("round")
        result = stage.register(result, shape=unsigned(32), name="result")
        m.d.comb += [
            self.o.valid.eq(stage.valid),
            self.o.payload.result.eq(result),
            self.o.payload.tag.eq(stage.tag),
        ]
        return m


class _Stage:
    """One register boundary of a valid-only pipeline: ``register`` copies values across it."""

    def __init__(self, m, name, valid, tag):
        self._m = m
        self._name = name
        self.valid = Signal(name=f"{name}_valid")
        self.tag = Signal.like(tag, name=f"{name}_tag") if len(tag) else tag
        m.d.sync += self.valid.eq(valid)
        if len(tag):
            m.d.sync += self.tag.eq(tag)

    def register(self, value, *, shape=None, name):
        signal = Signal(shape if shape is not None else value.shape(), name=name)
        self._m.d.sync += signal.eq(value)
        return signal

    def next(self, name):
        return _Stage(self._m, name, self.valid, self.tag)
