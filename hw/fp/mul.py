"""Pipelined binary32 multiplier."""

from amaranth.hdl import Cat, Const, Module, Mux, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .common import (
    QUIET_NAN,
    Pipeline,
    check_stages,
    delay,
    leading_zeros,
    round_and_pack,
    shift_right_jam,
    unpack,
    wire,
)

__all__ = ["MUL_OPERANDS", "FPMul"]

#: Operands of :class:`FPMul`: the result is ``a * b``.
MUL_OPERANDS = data.StructLayout({"a": 32, "b": 32})

# The 24x24 significand product is split into four 12x12 partial products. Each fits one
# ECP5 MULT18X18D, and registering them (the ``multiply`` boundary) keeps the slow DSP path
# and the adder tree that recombines them in different stages.
_HALF = 12


class FPMul(wiring.Component):
    """IEEE-754 binary32 multiplier, round to nearest even, fully pipelined.

    Subnormal inputs and outputs are exact (no flush to zero); overflow gives infinity; the
    sign is always the XOR of the operand signs (also for zeros and infinities); ``0 * inf``
    and NaN operands give the canonical quiet NaN ``0x7FC00000``. Non-NaN results are
    bit-identical to ``np.float32(a) * np.float32(b)``.

    One operation per cycle, no back-pressure: ``o.valid`` is ``i.valid`` delayed by
    :attr:`latency` cycles.

    Subnormal operands are normalized *before* the multiplier, so the product always has its
    leading one in one of its top two bits; the only variable shift after the multiplier is
    the right shift that produces a subnormal result. The datapath steps, each followed by a
    register boundary:

    ================ ============================================================================
    ``classify``     unpack, classify, count leading zeros of each significand
    ``prenormalize`` shift subnormal significands left, sum the exponents
    ``multiply``     four 12x12 partial products (DSP blocks)
    ``product``      add the partial products into the 48-bit product
    ``normalize``    one-bit normalization, sticky reduction to 27 bits, underflow shift amount
    ``denormalize``  shift right for subnormal results, jamming lost bits into the sticky bit
    ``output``       round to nearest even, pack, substitute infinity/NaN
    ================ ============================================================================

    :data:`CUTS` lists which boundaries hold registers at each depth.

    Parameters
    ----------
    stages : int or None
        Number of register stages, from 0 (combinational) to 7; ``None`` selects
        :data:`DEFAULT_STAGES`.

    Members
    -------
    i : ``In(stream.Signature(MUL_OPERANDS, always_ready=True))``
        Operands.
    o : ``Out(stream.Signature(unsigned(32), always_ready=True))``
        Result bits.

    Raises
    ------
    TypeError
        If ``stages`` is not ``None`` or an integer.
    ValueError
        If ``stages`` is out of range.
    """

    BOUNDARIES = ("classify", "prenormalize", "multiply", "product", "normalize", "denormalize",
                  "output")

    #: Register boundaries at each depth (indexed by depth). The DSP blocks are the slowest element, so from
    #: depth 3 on they get registers on both sides.
    CUTS = (
        (),
        ("output",),
        ("multiply", "output"),
        ("prenormalize", "multiply", "output"),
        ("prenormalize", "multiply", "normalize", "output"),
        ("prenormalize", "multiply", "product", "normalize", "output"),
        ("classify", "prenormalize", "multiply", "product", "normalize", "output"),
        ("classify", "prenormalize", "multiply", "product", "normalize", "denormalize",
         "output"),
    )

    DEFAULT_STAGES = 6

    def __init__(self, *, stages=None):
        self._stages = check_stages(stages, default=self.DEFAULT_STAGES,
                                    maximum=len(self.CUTS) - 1)
        super().__init__({
            "i": In(stream.Signature(MUL_OPERANDS, always_ready=True)),
            "o": Out(stream.Signature(unsigned(32), always_ready=True)),
        })

    @property
    def latency(self):
        """Cycles from ``i.valid`` to the matching ``o.valid``; equal to the register stages."""
        return self._stages

    @property
    def cuts(self):
        """The register boundaries used at this depth, in datapath order."""
        return self.CUTS[self._stages]

    def elaborate(self, platform):
        m = Module()
        pipe = Pipeline(m, boundaries=self.BOUNDARIES, cuts=self.cuts)

        # classify
        a = unpack(m, self.i.payload.a, name="a")
        b = unpack(m, self.i.payload.b, name="b")
        s = pipe.boundary(
            "classify",
            a_significand=a.significand, a_exponent=a.exponent,
            a_zeros=leading_zeros(m, a.significand, name="a_zeros"),
            b_significand=b.significand, b_exponent=b.exponent,
            b_zeros=leading_zeros(m, b.significand, name="b_zeros"),
            sign=a.sign ^ b.sign,
            is_inf=a.is_inf | b.is_inf,
            is_nan=a.is_nan | b.is_nan | (a.is_inf & b.is_zero) | (a.is_zero & b.is_inf),
        )

        # prenormalize: after the shift each nonzero significand is in [2**23, 2**24) and its
        # exponent may go below 1 (down to -22). With both in that range the product is in
        # [2**46, 2**48); `exponent` is the biased result exponent when it lands in bit 47.
        # A zero operand gives a zero product and an exponent low enough not to overflow.
        s = pipe.boundary(
            "prenormalize",
            a_significand=(s.a_significand << s.a_zeros)[:24],
            b_significand=(s.b_significand << s.b_zeros)[:24],
            exponent=(s.a_exponent - s.a_zeros) + (s.b_exponent - s.b_zeros) - 126,
            sign=s.sign, is_inf=s.is_inf, is_nan=s.is_nan,
        )

        # multiply: a * b = (ah*2**12 + al) * (bh*2**12 + bl).
        a_low, a_high = s.a_significand[:_HALF], s.a_significand[_HALF:]
        b_low, b_high = s.b_significand[:_HALF], s.b_significand[_HALF:]
        s = pipe.boundary(
            "multiply",
            low_low=a_low * b_low, low_high=a_low * b_high,
            high_low=a_high * b_low, high_high=a_high * b_high,
            exponent=s.exponent, sign=s.sign, is_inf=s.is_inf, is_nan=s.is_nan,
        )

        # product: low_low and high_high do not overlap, so concatenating them is free and
        # only the two cross terms need adding.
        cross = s.low_high + s.high_low
        product = (Cat(s.low_low, s.high_high) + (cross << _HALF))[:48]
        s = pipe.boundary(
            "product",
            product=product,
            exponent=s.exponent, sign=s.sign, is_inf=s.is_inf, is_nan=s.is_nan,
        )

        # normalize: move the leading one to bit 47, then keep the top 26 bits and jam the rest
        # into a sticky bit (the guard bit lands at bit 2 of the 27-bit result). Results
        # below the normal range need a right shift of 1 - exponent; 27 or more leaves only
        # the sticky bit, so the amount is capped at 31.
        top_bit_set = s.product[47]
        normalized = wire(m, Mux(top_bit_set, s.product, s.product << 1)[:48], name="normalized")
        exponent = wire(m, s.exponent - ~top_bit_set, name="normalized_exponent")
        underflow_shift = wire(m, 1 - exponent, name="underflow_shift")
        denormalize_shift = Mux(exponent >= 1, 0,
                                Mux(underflow_shift > 31, 31, underflow_shift[:5]))
        s = pipe.boundary(
            "normalize",
            reduced=Cat(normalized[21] | normalized[:21].any(), normalized[22:48]),
            denormalize_shift=denormalize_shift[:5],
            exponent=exponent[:8], overflow=exponent >= 0xFF,
            sign=s.sign, is_inf=s.is_inf, is_nan=s.is_nan,
        )

        # denormalize: a no-op for normal results. A shifted result has a clear hidden bit,
        # which is what makes round_and_pack emit a zero exponent field.
        s = pipe.boundary(
            "denormalize",
            shifted=shift_right_jam(s.reduced, s.denormalize_shift),
            exponent=s.exponent, overflow=s.overflow,
            sign=s.sign, is_inf=s.is_inf, is_nan=s.is_nan,
        )

        # output: significand in bits 26..3, guard in bit 2, sticky in bits 1..0.
        finite = round_and_pack(
            sign=s.sign, exponent=s.exponent,
            significand=s.shifted[3:], guard=s.shifted[2],
            sticky=s.shifted[:2].any(), overflow=s.overflow)
        infinity = Cat(Const(0x7F80_0000, 31), s.sign)
        result = Mux(s.is_nan, QUIET_NAN, Mux(s.is_inf, infinity, finite))
        s = pipe.boundary("output", result=result)

        assert pipe.finish() == self.latency
        m.d.comb += [
            self.o.payload.eq(s.result),
            self.o.valid.eq(delay(m, self.i.valid, self.latency, name="valid")),
        ]
        return m
