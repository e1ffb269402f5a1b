"""Building blocks shared by the binary32 adder and multiplier.

Everything here is combinational except :class:`Pipeline`, which decides where registers go,
and :func:`delay`. A unit reads as a list of datapath steps with named register boundaries
between them.

A note on timing, since it shapes every helper: on ECP5 each LUT level costs about 1 ns with
routing and every carry chain (adders, and *also* comparisons, which Yosys maps to carry
chains) about 2-3 ns, so a 150 MHz stage holds roughly one carry chain plus two LUT levels, or
four to five LUT levels. Comparisons against constants are therefore written as lookups, and
values that a later stage needs are precomputed in parallel where an earlier stage has slack.
"""

from types import SimpleNamespace

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import data

__all__ = [
    "BINARY32",
    "DSP_MAPPINGS",
    "INFINITY",
    "QUIET_NAN",
    "UNPACKED",
    "Pipeline",
    "check_dsp",
    "check_stages",
    "delay",
    "is_ecp5_platform",
    "leading_zeros",
    "lost_bits_mask",
    "round_and_pack",
    "shift_right_jam",
    "unpack",
    "wire",
]

#: IEEE-754 binary32 bit fields, least significant first.
BINARY32 = data.StructLayout({"fraction": 23, "exponent": 8, "sign": 1})

#: The canonical quiet NaN that every NaN result becomes (the numeric contract only needs
#: "is NaN", and one canonical value keeps waveforms and golden-model diffs readable).
QUIET_NAN = 0x7FC0_0000

#: Positive infinity.
INFINITY = 0x7F80_0000

#: A binary32 operand split into the fields the datapaths work on.
#:
#: ``exponent`` is the raw biased exponent field and ``significand`` is 24 bits: the fraction
#: under a hidden one for normal numbers, and the fraction shifted left by one for subnormals
#: (whose weight is that of exponent 1, i.e. twice that of exponent 0). Either way
#: ``value = significand * 2**(exponent - 150)``, so the datapaths handle subnormal operands
#: with no special case and exponent differences need no "subnormals count as 1" correction.
UNPACKED = data.StructLayout({
    "significand": 24,
    "exponent":    8,
    "sign":        1,
    "is_zero":     1,
    "is_inf":      1,
    "is_nan":      1,
})


def check_stages(stages, *, default, maximum):
    """Validate a ``stages`` constructor argument and return the depth it selects."""
    if stages is None:
        return default
    if not isinstance(stages, int) or isinstance(stages, bool):
        raise TypeError(f"Pipeline stages must be None or an integer, not {stages!r}")
    if not 0 <= stages <= maximum:
        raise ValueError(f"Pipeline stages must be between 0 and {maximum}, not {stages!r}")
    return stages


#: Values of the ``dsp`` parameter of the multiplying units: how the significand product is
#: mapped. ``None`` (automatic) chooses ``"ecp5"`` when elaborated for a Lattice ECP5 platform.
DSP_MAPPINGS = (None, "ecp5", "generic")


def check_dsp(dsp):
    """Validate a ``dsp`` constructor argument (one of :data:`DSP_MAPPINGS`) and return it."""
    if dsp is not None and not isinstance(dsp, str):
        raise TypeError(f"DSP mapping must be None or a string, not {dsp!r}")
    if dsp not in DSP_MAPPINGS:
        raise ValueError(f"DSP mapping must be None, 'ecp5' or 'generic', not {dsp!r}")
    return dsp


def is_ecp5_platform(platform) -> bool:
    """Whether ``platform`` is an Amaranth Lattice platform for an ECP5 device."""
    if platform is None:
        return False
    # Imported here: amaranth.vendor resolves its platforms lazily, and most elaborations
    # (simulation, Verilog for Verilator) have no platform at all.
    from amaranth.vendor import LatticePlatform
    return isinstance(platform, LatticePlatform) and platform.family == "ecp5"


def wire(m: Module, value, *, name: str) -> Signal:
    """A combinational signal named ``name`` driven by ``value``.

    Amaranth does not share common subexpressions: a value used in several places is built
    (and simulated) once per use. Naming it through a signal makes it one net, and readable in
    waveforms.
    """
    signal = Signal(value.shape(), name=name)
    m.d.comb += signal.eq(value)
    return signal


def unpack(m: Module, word, *, name: str):
    """Split a binary32 ``word`` into an :data:`UNPACKED` view (combinational)."""
    fields = data.View(BINARY32, word)
    unpacked = Signal(UNPACKED, name=name)
    exponent_is_zero = wire(m, fields.exponent == 0, name=f"{name}_exponent_is_zero")
    exponent_is_max = fields.exponent == 0xFF
    fraction_is_zero = wire(m, fields.fraction == 0, name=f"{name}_fraction_is_zero")
    m.d.comb += [
        unpacked.sign.eq(fields.sign),
        unpacked.exponent.eq(fields.exponent),
        unpacked.significand.eq(Mux(exponent_is_zero, fields.fraction << 1,
                                    Cat(fields.fraction, 1))),
        unpacked.is_zero.eq(exponent_is_zero & fraction_is_zero),
        unpacked.is_inf.eq(exponent_is_max & fraction_is_zero),
        unpacked.is_nan.eq(exponent_is_max & ~fraction_is_zero),
    ]
    return unpacked


def leading_zeros(m: Module, value, *, name: str) -> Signal:
    """Count the leading zeros of ``value``; an all-zero value gives ``len(value)``.

    A balanced tree (two half-width counts and a mux per level) rather than a priority chain,
    so the depth is logarithmic in the width. The value is padded at the bottom with a single
    one and then zeros up to a power of two: the padding one stops the count at ``len(value)``,
    so no separate all-zero flag is needed.
    """
    value = Value.cast(value)
    width = 1
    while width < len(value) + 1:
        width *= 2
    padded = Cat(Const(0, width - len(value) - 1), Const(1, 1), value)

    def count(low, high):
        # (count, all_zero) for padded[low:high], a power-of-two slice; the count has
        # log2(high - low) bits. Each zero flag feeds three places, hence the wires.
        if high - low == 1:
            return Const(0, 0), ~padded[low]
        middle = (low + high) // 2
        low_count, low_zero = count(low, middle)
        high_count, high_zero = count(middle, high)
        high_zero = wire(m, high_zero, name=f"{name}_zero_{middle}_{high}")
        return Cat(Mux(high_zero, low_count, high_count), high_zero), high_zero & low_zero

    return wire(m, count(0, width)[0], name=name)


def lost_bits_mask(m: Module, amount, width: int, *, name: str) -> Signal:
    """Bit ``k`` is set when shifting right by ``amount`` moves bit ``k`` out (``amount > k``).

    Written as a lookup on ``amount`` rather than ``width`` comparisons: Yosys would turn each
    comparison into its own carry chain, while each mask bit is a function of a handful of
    inputs and fits one or two LUT levels.
    """
    mask = Signal(width, name=name)
    with m.Switch(amount):
        for shift in range(1 << len(amount)):
            with m.Case(shift):
                m.d.comb += mask.eq((1 << min(shift, width)) - 1)
    return mask


def shift_right_jam(m: Module, value, amount, mask, *, name: str) -> Signal:
    """``value >> amount``, with the OR of every bit shifted out jammed into bit 0.

    ``mask`` is :func:`lost_bits_mask` of ``amount``, computed a stage earlier so that the
    lost-bit OR runs in parallel with the shifter. Jamming keeps the result exact enough for
    round to nearest even as long as the guard bit sits above bit 0: only "anything nonzero
    below the guard" matters.
    """
    value = Value.cast(value)
    lost = (value & mask).any()
    shifted = value >> amount
    return wire(m, Cat(shifted[0] | lost, shifted[1:]), name=name)


def round_and_pack(*, sign, exponent, significand, guard, sticky, is_nan, is_inf) -> Value:
    """Round a result to nearest, ties to even, and pack it as binary32.

    ``significand`` is 24 bits with the hidden bit on top; when that bit is clear the result is
    subnormal and ``exponent`` is ignored. ``is_inf`` also covers overflow found before
    rounding. Rounding adds one to the packed exponent and fraction together, so a carry out
    of the fraction bumps the exponent: the largest subnormal rounds up to the smallest normal
    and the largest finite value rounds up to infinity with no extra logic. Special results
    are substituted *before* that adder (with the increment suppressed), so the carry chain
    ends the stage directly at the output register.
    """
    round_up = guard & (sticky | significand[0])
    exponent_field = Mux(significand[23], exponent, 0)
    finite = Cat(significand[:23], exponent_field)
    magnitude = Mux(is_nan, QUIET_NAN, Mux(is_inf, INFINITY, finite))
    increment = round_up & ~is_nan & ~is_inf
    return Cat((magnitude + increment)[:31], sign & ~is_nan)


def delay(m: Module, value, cycles: int, *, name: str, reset_less: bool = False):
    """``value`` delayed by ``cycles`` clock cycles through a chain of registers."""
    for index in range(cycles):
        register = Signal.like(value, name=f"{name}_{index + 1}", reset_less=reset_less)
        m.d.sync += register.eq(value)
        value = register
    return value


class Pipeline:
    """Places registers at the chosen boundaries of a combinational datapath.

    A unit calls :meth:`boundary` once per boundary, in datapath order, passing every value
    the later steps need. At a boundary listed in ``cuts`` the values are registered (without
    reset: they are qualified by ``valid``, which is delayed separately); elsewhere they pass
    through combinationally. The number of cuts taken is the unit's latency.
    """

    def __init__(self, m: Module, *, boundaries, cuts):
        unknown = set(cuts) - set(boundaries)
        assert not unknown, f"unknown boundaries {sorted(unknown)}"
        self._m = m
        self._boundaries = tuple(boundaries)
        self._pending = list(boundaries)
        self._cuts = frozenset(cuts)
        self.latency = 0

    def boundary(self, name: str, **values) -> SimpleNamespace:
        # Boundaries must be visited in the declared order, so a misspelt or reordered name
        # cannot silently drop a register.
        assert self._pending and self._pending[0] == name, \
            f"boundary {name!r} out of order; expected {self._pending[:1]}"
        self._pending.pop(0)
        # Uncut boundaries still get named wires: they show up in waveforms, and later steps
        # share one net instead of each re-expanding the expression tree behind the value.
        domain = self._m.d.sync if name in self._cuts else self._m.d.comb
        self.latency += name in self._cuts
        signals = {}
        for key, value in values.items():
            signal = Signal(value.shape(), name=f"{name}_{key}", reset_less=True)
            domain += signal.eq(value)
            signals[key] = signal
        return SimpleNamespace(**signals)

    def is_cut(self, name: str) -> bool:
        """Whether boundary ``name`` is registered. A unit that registers some values of a
        boundary elsewhere (for example inside a hard multiplier) asks this, and passes only
        the remaining values to :meth:`boundary`, which still counts the stage."""
        assert name in self._boundaries, f"unknown boundary {name!r}"
        return name in self._cuts

    def finish(self):
        assert not self._pending, f"boundaries never visited: {self._pending}"
        return self.latency
