"""Pipelined binary32 multiplier."""

from types import SimpleNamespace

from amaranth.hdl import Cat, ClockSignal, Const, Instance, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .common import (
    Pipeline,
    check_dsp,
    check_stages,
    delay,
    is_ecp5_platform,
    leading_zeros,
    lost_bits_mask,
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
# Operand and product widths of the ECP5 MULT18X18D.
_DSP_OPERAND = 18
_DSP_PRODUCT = 36
# The product reduced for rounding: 24 significand bits, guard, round and a sticky bit.
_REDUCED_WIDTH = 27


class FPMul(wiring.Component):
    """IEEE-754 binary32 multiplier, round to nearest even, fully pipelined.

    Subnormal inputs and outputs are exact (no flush to zero); overflow gives infinity; the
    sign is always the XOR of the operand signs (also for zeros and infinities); ``0 * inf``
    and NaN operands give the canonical quiet NaN ``0x7FC00000``. Non-NaN results are
    bit-identical to ``np.float32(a) * np.float32(b)``.

    One operation per cycle, no back-pressure: ``o.valid`` is ``i.valid`` delayed by
    :attr:`latency` cycles.

    Subnormal operands are normalized *before* the multiplier, so a nonzero product always has
    its leading one in one of its top two bits; the only variable shift after the multiplier
    is the right shift that produces a subnormal result. The datapath steps, each ending at a
    named register boundary:

    ================ ============================================================================
    ``classify``     unpack and classify; leading zeros of subnormal fractions and the
                     multiple-of-8 part of their left shift; exponent sum
    ``prenormalize`` the rest of the left shift (0 to 7); total shift and biased exponent
    ``multiply``     four 12x12 partial products (one MULT18X18D each); result exponent
    ``product``      carry-save add of the partial products, then one carry chain; exponent,
                     underflow shift and overflow for both positions of the leading one
    ``normalize``    one-bit normalization, sticky reduction to 27 bits, lost-bit mask
    ``denormalize``  right shift for subnormal results, jamming lost bits into the sticky bit
    ``output``       round to nearest even, substitute infinity/NaN, pack
    ================ ============================================================================

    The partial products either use Amaranth's ``*`` (``dsp="generic"``: any target; Yosys
    maps each to a MULT18X18D on ECP5, but without its registers, so the multiplier's 3.9 ns
    plus the routing to and from the DSP blocks lands in one fabric-to-fabric stage) or
    instantiate ``MULT18X18D`` directly (``dsp="ecp5"``) with the DSP block's own registers:
    its input registers hold the ``prenormalize`` significands and its output register is the
    ``multiply`` boundary, whenever the depth cuts there. The registers move, their number
    does not, so both mappings have the same :attr:`latency` and :attr:`cuts` at every depth;
    the routing into and out of the DSP blocks then falls into the ``prenormalize`` and
    ``product`` stages, next to short fabric logic.

    Parameters
    ----------
    stages : int or None
        Number of register stages, from 0 (combinational) to 7; ``None`` selects
        :data:`DEFAULT_STAGES` (7). Stage ``k`` registers the boundaries ``CUTS[k]``.
    dsp : ``"ecp5"``, ``"generic"`` or None
        How the partial products are built (see above). ``None``, the default, chooses
        ``"ecp5"`` when elaborated for an ECP5 :class:`~amaranth.vendor.LatticePlatform` and
        ``"generic"`` otherwise (simulation, Verilog without a platform, other FPGAs).
        ``"ecp5"`` needs a model of ``MULT18X18D`` to simulate: the Amaranth simulator has
        none; ``tb/fp/ecp5_mult18x18d.v`` serves Verilator.

    Members
    -------
    i : ``In(stream.Signature(MUL_OPERANDS, always_ready=True))``
        Operands.
    o : ``Out(stream.Signature(unsigned(32), always_ready=True))``
        Result bits.

    Raises
    ------
    TypeError
        If ``stages`` is not ``None`` or an integer, or ``dsp`` is not ``None`` or a string.
    ValueError
        If ``stages`` is out of range or ``dsp`` is not one of the mappings above.
    """

    BOUNDARIES = ("classify", "prenormalize", "multiply", "product", "normalize", "denormalize",
                  "output")

    #: Register boundaries at each depth (index = depth), the same for both ``dsp`` mappings.
    #: At the full depth every step gets its own stage; shallower pipelines merge adjacent
    #: steps into the most even groups by the measured ECP5 delays (with the generic mapping
    #: the DSP stage is the slowest, about 7.1 ns).
    CUTS = (
        (),
        ("output",),
        ("multiply", "output"),
        ("prenormalize", "product", "output"),
        ("prenormalize", "multiply", "normalize", "output"),
        ("classify", "prenormalize", "multiply", "normalize", "output"),
        ("classify", "prenormalize", "multiply", "normalize", "denormalize", "output"),
        ("classify", "prenormalize", "multiply", "product", "normalize", "denormalize",
         "output"),
    )

    #: On ECP5-85F speed grade 6 (``python -m boards.blocks``): with ``dsp="ecp5"`` a single
    #: unit reaches about 168 MHz (limited by ``classify``), 16 lanes about 113 MHz (limited by
    #: the routing from the 64 DSP blocks into the ``product`` carry chain, 4.7 ns). With
    #: ``dsp="generic"`` the unregistered MULT18X18D path limits one unit to about 142 MHz.
    DEFAULT_STAGES = 7

    def __init__(self, *, stages=None, dsp=None):
        self._stages = check_stages(stages, default=self.DEFAULT_STAGES,
                                    maximum=len(self.CUTS) - 1)
        self._dsp = check_dsp(dsp)
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

    @property
    def dsp(self):
        """The requested partial-product mapping: ``"ecp5"``, ``"generic"`` or ``None``
        (automatic, decided by the platform at elaboration; see :meth:`dsp_for`)."""
        return self._dsp

    def dsp_for(self, platform):
        """The mapping used when elaborating for ``platform``: ``"ecp5"`` or ``"generic"``."""
        if self._dsp is not None:
            return self._dsp
        return "ecp5" if is_ecp5_platform(platform) else "generic"

    def elaborate(self, platform):
        m = Module()
        pipe = Pipeline(m, boundaries=self.BOUNDARIES, cuts=self.cuts)
        ecp5 = self.dsp_for(platform) == "ecp5"

        # classify: a subnormal significand is its fraction shifted left by one (see
        # UNPACKED), so its leading zeros are those of the 23-bit fraction, counted straight
        # from the input bits in parallel with unpacking. Normal significands have none.
        # The multiple-of-8 part of the normalizing shift is applied here already, from its
        # own zero detectors, which are shallower than the count; prenormalize shifts by the
        # rest (the count's low three bits), keeping that stage short in front of the DSPs.
        a = unpack(m, self.i.payload.a, name="a")
        b = unpack(m, self.i.payload.b, name="b")
        a_fraction_zeros = leading_zeros(m, self.i.payload.a[:23], name="a_fraction_zeros")
        b_fraction_zeros = leading_zeros(m, self.i.payload.b[:23], name="b_fraction_zeros")
        s = pipe.boundary(
            "classify",
            a_significand=_shift_by_eighths(m, a, self.i.payload.a[:23], name="a_coarse"),
            a_zeros=Mux(a.exponent == 0, a_fraction_zeros, 0),
            b_significand=_shift_by_eighths(m, b, self.i.payload.b[:23], name="b_coarse"),
            b_zeros=Mux(b.exponent == 0, b_fraction_zeros, 0),
            exponent_sum=a.exponent + b.exponent,
            sign=a.sign ^ b.sign,
            is_inf=a.is_inf | b.is_inf,
            is_nan=a.is_nan | b.is_nan | (a.is_inf & b.is_zero) | (a.is_zero & b.is_inf),
        )

        # prenormalize: after the shift each nonzero significand is in [2**23, 2**24), so a
        # nonzero product is in [2**46, 2**48). A zero operand stays zero and gives a zero
        # product (its exponent is then low enough never to signal overflow).
        a_significand = (s.a_significand << s.a_zeros[:3])[:24]
        b_significand = (s.b_significand << s.b_zeros[:3])[:24]
        fields = dict(
            zeros=s.a_zeros + s.b_zeros,
            biased_exponent_sum=s.exponent_sum - 126,
            sign=s.sign, is_inf=s.is_inf, is_nan=s.is_nan,
        )
        if ecp5:
            # The DSP blocks' input registers hold the significands (when this is a cut).
            a_significand = wire(m, a_significand, name="prenormalize_a_significand")
            b_significand = wire(m, b_significand, name="prenormalize_b_significand")
            s = pipe.boundary("prenormalize", **fields)
        else:
            s = pipe.boundary("prenormalize", a_significand=a_significand,
                              b_significand=b_significand, **fields)
            a_significand, b_significand = s.a_significand, s.b_significand

        # multiply: a * b = (ah*2**12 + al) * (bh*2**12 + bl). In parallel, the biased result
        # exponent for a product whose leading one is in bit 47:
        # (ea - za) + (eb - zb) - 126, with value = significand * 2**(exponent - 150).
        a_low, a_high = a_significand[:_HALF], a_significand[_HALF:]
        b_low, b_high = b_significand[:_HALF], b_significand[_HALF:]
        factors = {"low_low": (a_low, b_low), "low_high": (a_low, b_high),
                   "high_low": (a_high, b_low), "high_high": (a_high, b_high)}
        fields = dict(
            exponent=s.biased_exponent_sum - s.zeros,
            sign=s.sign, is_inf=s.is_inf, is_nan=s.is_nan,
        )
        if ecp5:
            # The DSP blocks' output registers are the boundary (when it is a cut).
            partial = SimpleNamespace(**{
                key: _ecp5_product(m, x, y, name=f"multiply_{key}",
                                   register_inputs=pipe.is_cut("prenormalize"),
                                   register_output=pipe.is_cut("multiply"))
                for key, (x, y) in factors.items()})
            s = pipe.boundary("multiply", **fields)
        else:
            s = pipe.boundary("multiply", **{key: x * y for key, (x, y) in factors.items()},
                              **fields)
            partial = s

        # product: low_low and high_high do not overlap, so concatenated they are one operand;
        # a carry-save step folds in the two cross terms and leaves a single carry chain.
        # In parallel, everything normalization needs for both positions of the leading one
        # (bit 47, or bit 46 and one more left shift): exponent, underflow shift, overflow.
        outer = Cat(partial.low_low, partial.high_high)
        low_high = partial.low_high << _HALF
        high_low = partial.high_low << _HALF
        carry_save_sum = outer ^ low_high ^ high_low
        carry_save_carry = (outer & low_high) | (outer & high_low) | (low_high & high_low)
        product = (carry_save_sum + (carry_save_carry << 1))[:48]
        # Each of these is one carry chain or LUTs on the registered exponent, never two
        # chains in a row.
        s = pipe.boundary(
            "product",
            product=product,
            exponent_if_high=s.exponent[:8], exponent_if_low=(s.exponent - 1)[:8],
            shift_if_high=_underflow_shift(1 - s.exponent),
            shift_if_low=_underflow_shift(2 - s.exponent),
            overflow_if_high=_at_least(s.exponent, 0xFF),
            overflow_if_low=_at_least(s.exponent, 0x100),
            sign=s.sign, is_inf=s.is_inf, is_nan=s.is_nan,
        )

        # normalize: move the leading one to bit 47, keep the top 26 bits and jam the rest
        # into a sticky bit 0 (the guard bit lands in bit 2 of the 27-bit result).
        high = s.product[47]
        normalized = Mux(high, s.product, s.product << 1)[:48]
        below_kept = Mux(high, s.product[:21].any(), s.product[:20].any())
        shift = wire(m, Mux(high, s.shift_if_high, s.shift_if_low), name="shift")
        s = pipe.boundary(
            "normalize",
            reduced=Cat(normalized[21] | below_kept, normalized[22:48]),
            shift=shift,
            lost_mask=lost_bits_mask(m, shift, _REDUCED_WIDTH, name="lost_mask"),
            exponent=Mux(high, s.exponent_if_high, s.exponent_if_low),
            sign=s.sign,
            is_inf=s.is_inf | Mux(high, s.overflow_if_high, s.overflow_if_low),
            is_nan=s.is_nan,
        )

        # denormalize: results below the normal range shift right by 1 - exponent; a no-op
        # otherwise. The shifted result has a clear hidden bit, which is what makes
        # round_and_pack emit a zero exponent field.
        s = pipe.boundary(
            "denormalize",
            shifted=shift_right_jam(m, s.reduced, s.shift, s.lost_mask, name="shifted"),
            exponent=s.exponent, sign=s.sign, is_inf=s.is_inf, is_nan=s.is_nan,
        )

        # output: significand in bits 26..3, guard in bit 2, sticky in bits 1..0.
        s = pipe.boundary("output", result=round_and_pack(
            sign=s.sign, exponent=s.exponent,
            significand=s.shifted[3:], guard=s.shifted[2],
            sticky=s.shifted[:2].any(), is_nan=s.is_nan, is_inf=s.is_inf))

        assert pipe.finish() == self.latency
        m.d.comb += [
            self.o.payload.eq(s.result),
            self.o.valid.eq(delay(m, self.i.valid, self.latency, name="valid")),
        ]
        return m


def _shift_by_eighths(m, operand, fraction, *, name):
    """The :data:`UNPACKED` ``operand``'s significand shifted left by its leading zeros rounded
    down to a multiple of 8 (0, 8 or 16): for a subnormal, ``leading_zeros(fraction) & 24``,
    found by checking the top 16 and top 8 bits of the 23-bit ``fraction`` for zeros; a normal
    significand is not shifted. The bits shifted out are zeros, so 24 bits keep the value."""
    subnormal = operand.exponent == 0
    top_16_zero = ~fraction[23 - 16:].any()
    top_8_zero = ~fraction[23 - 8:].any()
    significand = operand.significand
    return wire(m, Mux(subnormal & top_16_zero, significand << 16,
                       Mux(subnormal & top_8_zero, significand << 8, significand))[:24],
                name=name)


def _ecp5_product(m, a, b, *, name, register_inputs, register_output):
    """The unsigned product ``a * b`` (each at most 18 bits) from one ECP5 ``MULT18X18D``,
    with its input registers (both operands) and output register enabled as asked, all on
    the ``sync`` clock, always enabled and never reset; the pipeline register stays off.
    Returns the ``len(a) + len(b)`` low bits of the product as a signal named ``name``."""
    assert len(a) <= _DSP_OPERAND and len(b) <= _DSP_OPERAND
    product = Signal(_DSP_PRODUCT, name=f"{name}_p")
    clock = "CLK0" if register_inputs else "NONE"
    ports = {
        **{f"i_A{k}": a[k] if k < len(a) else Const(0, 1) for k in range(_DSP_OPERAND)},
        **{f"i_B{k}": b[k] if k < len(b) else Const(0, 1) for k in range(_DSP_OPERAND)},
        **{f"i_C{k}": Const(0, 1) for k in range(_DSP_OPERAND)},
        **{f"o_P{k}": product[k] for k in range(_DSP_PRODUCT)},
    }
    m.submodules[name] = Instance(
        "MULT18X18D",
        p_REG_INPUTA_CLK=clock, p_REG_INPUTA_CE="CE0", p_REG_INPUTA_RST="RST0",
        p_REG_INPUTB_CLK=clock, p_REG_INPUTB_CE="CE0", p_REG_INPUTB_RST="RST0",
        p_REG_INPUTC_CLK="NONE",
        p_REG_PIPELINE_CLK="NONE",
        p_REG_OUTPUT_CLK="CLK0" if register_output else "NONE",
        p_REG_OUTPUT_CE="CE0", p_REG_OUTPUT_RST="RST0",
        p_GSR="DISABLED", p_RESETMODE="SYNC", p_MULT_BYPASS="DISABLED",
        p_SOURCEB_MODE="B_SHIFT", p_CAS_MATCH_REG="FALSE",
        i_SIGNEDA=Const(0, 1), i_SIGNEDB=Const(0, 1),
        i_SOURCEA=Const(0, 1), i_SOURCEB=Const(0, 1),
        i_CLK0=ClockSignal("sync"), i_CE0=Const(1, 1), i_RST0=Const(0, 1),
        **ports,
    )
    return wire(m, product[:len(a) + len(b)], name=name)


def _underflow_shift(amount):
    """The right shift that takes a result into the subnormal range, from ``amount`` =
    1 - (its biased exponent), signed: 0 when not positive (a normal result). Shifts of 27 or
    more leave only the sticky bit of the 27-bit reduced significand, so it saturates at 31."""
    return Mux(amount[-1], 0, Mux(amount[5:].any(), 31, amount[:5]))


def _at_least(exponent, limit):
    """``exponent >= limit`` for a signed exponent and ``limit`` in 0x100 - 1 .. 0x100, written
    on the bits so that it becomes LUTs rather than a carry chain."""
    assert limit in (0xFF, 0x100)
    non_negative = ~exponent[-1]
    at_least_0x100 = non_negative & exponent[8:-1].any()
    if limit == 0x100:
        return at_least_0x100
    return at_least_0x100 | (non_negative & (exponent[:9] == 0xFF))
