"""Pipelined binary32 adder/subtractor."""

from amaranth.hdl import Cat, Const, Module, Mux, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .common import (
    Pipeline,
    check_stages,
    delay,
    leading_zeros,
    lost_bits_mask,
    round_and_pack,
    shift_right_jam,
    unpack,
    wire,
)

__all__ = ["ADD_OPERANDS", "FPAdd"]

#: Operands of :class:`FPAdd`: the result is ``a + b``, or ``a - b`` when ``sub`` is set.
ADD_OPERANDS = data.StructLayout({"a": 32, "b": 32, "sub": 1})

# Width of the aligned significands: 24 bits plus guard, round and sticky below them.
_ALIGNED_WIDTH = 27
# The sum has one more bit for the carry out of an effective addition.
_SUM_WIDTH = _ALIGNED_WIDTH + 1


class FPAdd(wiring.Component):
    """IEEE-754 binary32 adder/subtractor, round to nearest even, fully pipelined.

    Subnormal inputs and outputs are exact (no flush to zero); overflow gives infinity; the
    sign of an exact zero follows IEEE-754 (``x - x`` is ``+0``, ``-0 + -0`` is ``-0``); every
    NaN result is the canonical quiet NaN ``0x7FC00000``. Non-NaN results are bit-identical to
    ``np.float32(a) + np.float32(b)``.

    One operation per cycle, no back-pressure: ``o.valid`` is ``i.valid`` delayed by
    :attr:`latency` cycles.

    The datapath is a sequence of steps, each ending at a named register boundary:

    ============= ===============================================================================
    ``compare``   unpack and classify; compare magnitudes; both exponent differences
    ``swap``      order the operands so that ``|big| >= |small|``; alignment shift and its
                  lost-bit mask
    ``align``     shift the smaller significand right, jamming lost bits into a sticky bit;
                  precompute the exponent floor marker for normalization
    ``sum``       add or subtract the aligned significands (one carry chain)
    ``lzc``       count leading zeros; the marker stops the count where the exponent would
                  drop below 1, which yields subnormal results (gradual underflow)
    ``normalize`` shift left, compute the result exponent, detect overflow
    ``output``    round to nearest even, substitute infinity/NaN, pack
    ============= ===============================================================================

    Parameters
    ----------
    stages : int or None
        Number of register stages, from 0 (combinational) to 7; ``None`` selects
        :data:`DEFAULT_STAGES` (7). Stage ``k`` registers the boundaries ``CUTS[k]``.

    Members
    -------
    i : ``In(stream.Signature(ADD_OPERANDS, always_ready=True))``
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

    BOUNDARIES = ("compare", "swap", "align", "sum", "lzc", "normalize", "output")

    #: Register boundaries at each depth (index = depth). At the full depth every step gets its
    #: own stage, each 5-6.5 ns on ECP5-85F speed grade 6; shallower pipelines merge adjacent
    #: steps into the most even groups by those measured delays.
    CUTS = (
        (),
        ("output",),
        ("sum", "output"),
        ("align", "lzc", "output"),
        ("swap", "sum", "lzc", "output"),
        ("compare", "align", "sum", "lzc", "output"),
        ("compare", "align", "sum", "lzc", "normalize", "output"),
        ("compare", "swap", "align", "sum", "lzc", "normalize", "output"),
    )

    #: About 155-160 MHz for one unit on ECP5-85F speed grade 6 (one fewer stage: about 95).
    DEFAULT_STAGES = 7

    def __init__(self, *, stages=None):
        self._stages = check_stages(stages, default=self.DEFAULT_STAGES,
                                    maximum=len(self.CUTS) - 1)
        super().__init__({
            "i": In(stream.Signature(ADD_OPERANDS, always_ready=True)),
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

        # compare: which operand is larger in magnitude, and both exponent differences (the
        # one that turns out non-negative is the alignment shift). For non-NaN binary32 the
        # magnitude order is the integer order of the low 31 bits, so one comparator suffices.
        a = unpack(m, self.i.payload.a, name="a")
        b = unpack(m, self.i.payload.b, name="b")
        b_sign = b.sign ^ self.i.payload.sub
        a_magnitude = self.i.payload.a[:31]
        b_magnitude = self.i.payload.b[:31]
        swap = wire(m, b_magnitude > a_magnitude, name="swap")
        effective_sub = wire(m, a.sign ^ b_sign, name="effective_sub")
        s = pipe.boundary(
            "compare",
            a_significand=a.significand, a_exponent=a.exponent, a_sign=a.sign,
            b_significand=b.significand, b_exponent=b.exponent, b_sign=b_sign,
            swap=swap,
            shift_if_a_larger=_clamp_shift(a.exponent - b.exponent),
            shift_if_b_larger=_clamp_shift(b.exponent - a.exponent),
            exact_cancellation=effective_sub & (a_magnitude == b_magnitude),
            effective_sub=effective_sub,
            is_inf=a.is_inf | b.is_inf,
            is_nan=a.is_nan | b.is_nan | (a.is_inf & b.is_inf & effective_sub),
        )

        # swap: order the operands so that |big| >= |small|. An exact cancellation is +0 under
        # round to nearest; otherwise the larger operand's sign wins (which also gives
        # -0 + -0 = -0 and the sign of an infinite operand).
        shift = wire(m, Mux(s.swap, s.shift_if_b_larger, s.shift_if_a_larger), name="shift")
        s = pipe.boundary(
            "swap",
            big=Mux(s.swap, s.b_significand, s.a_significand),
            small=Mux(s.swap, s.a_significand, s.b_significand),
            exponent=Mux(s.swap, s.b_exponent, s.a_exponent),
            shift=shift,
            lost_mask=lost_bits_mask(m, shift, _ALIGNED_WIDTH, name="lost_mask"),
            sign=Mux(s.swap, s.b_sign, s.a_sign) & ~s.exact_cancellation,
            effective_sub=s.effective_sub, is_inf=s.is_inf, is_nan=s.is_nan,
        )

        # align: both significands get three zero bits below (guard, round, sticky) and the
        # smaller one is shifted right. In parallel, get ready for normalization: the sum's
        # bit 27 weighs 2**(exponent + 1 - 127), each left shift takes one off that, and the
        # shift must stop where the exponent would drop below 1 (gradual underflow). A marker
        # bit at position 27 - exponent makes the leading-zero count stop there by itself.
        marker = Cat(s.exponent == _SUM_WIDTH - 1 - bit for bit in range(_SUM_WIDTH))
        s = pipe.boundary(
            "align",
            big=s.big,
            small=shift_right_jam(m, Cat(Const(0, 3), s.small), s.shift, s.lost_mask,
                                  name="aligned"),
            marker=marker,
            exponent_plus_one=s.exponent + 1,
            near_overflow=s.exponent == 0xFE,
            sign=s.sign, effective_sub=s.effective_sub, is_inf=s.is_inf, is_nan=s.is_nan,
        )

        # sum: big - small is big + ~small + 1. Putting effective_sub below both operands
        # makes that +1 the carry into bit 1, so addition and subtraction share one chain.
        # The result is never negative because |big| >= |small|.
        inverted_small = s.small ^ s.effective_sub.replicate(_ALIGNED_WIDTH)
        total = (Cat(s.effective_sub, Const(0, 3), s.big, Const(0, 1))
                 + Cat(s.effective_sub, inverted_small, s.effective_sub))
        # The marker is merged here, one LUT after the carry chain, so that the next stage is
        # a bare leading-zero count: with the OR inside it, that stage was the slowest.
        total = wire(m, total[1:_SUM_WIDTH + 1], name="total")
        s = pipe.boundary(
            "sum",
            total=total, marked_total=total | s.marker,
            exponent_plus_one=s.exponent_plus_one,
            near_overflow=s.near_overflow, sign=s.sign, is_inf=s.is_inf, is_nan=s.is_nan,
        )

        # lzc: the normalizing shift. A zero sum counts all 28 bits (or stops at the marker)
        # and shifts out to zero.
        s = pipe.boundary(
            "lzc",
            total=s.total,
            normalize_shift=leading_zeros(m, s.marked_total, name="normalize_shift"),
            exponent_plus_one=s.exponent_plus_one,
            near_overflow=s.near_overflow, sign=s.sign, is_inf=s.is_inf, is_nan=s.is_nan,
        )

        # normalize: the result exponent is in 1..255, and 255 (overflow) happens only for
        # exponent 254 with a carry out, i.e. no shift.
        s = pipe.boundary(
            "normalize",
            normalized=(s.total << s.normalize_shift)[:_SUM_WIDTH],
            exponent=(s.exponent_plus_one - s.normalize_shift)[:8],
            sign=s.sign,
            is_inf=s.is_inf | (s.near_overflow & (s.normalize_shift == 0)),
            is_nan=s.is_nan,
        )

        # output: significand in bits 27..4, guard in bit 3, everything below is sticky.
        s = pipe.boundary("output", result=round_and_pack(
            sign=s.sign, exponent=s.exponent,
            significand=s.normalized[4:], guard=s.normalized[3],
            sticky=s.normalized[:3].any(), is_nan=s.is_nan, is_inf=s.is_inf))

        assert pipe.finish() == self.latency
        m.d.comb += [
            self.o.payload.eq(s.result),
            self.o.valid.eq(delay(m, self.i.valid, self.latency, name="valid")),
        ]
        return m


def _clamp_shift(difference):
    """An exponent difference as a 5-bit alignment shift: any shift of 27 or more already
    moves every bit into the sticky bit, so larger ones become 31. Only meaningful when the
    difference is non-negative."""
    return Mux(difference[5:8].any(), 31, difference[:5])
