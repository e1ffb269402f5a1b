"""The MEAN pooling factor ``float32(1) / float32(L)`` for a bag length ``L``, bit-exact.

The golden model (``sw_model.embedding.mean_scale``) converts ``L`` to binary32 (one rounding
for ``L > 2**24``) and divides, one more rounding. :class:`Reciprocal` does the same with a
small sequential long division, so every ``L`` of the 32-bit contract is exact and no bag
length limit exists. :func:`reciprocal_bits` is the same algorithm in Python, step for step.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hw.params import check_bool

__all__ = ["Reciprocal", "reciprocal_bits"]

_INFINITY = 0x7F80_0000
_QUOTIENT_BITS = 24  # below the leading quotient bit: 23 fraction bits plus a guard bit


def _to_binary32_significand(length: int) -> tuple[int, int]:
    """``float32(length)`` as (24-bit significand with its leading one, unbiased exponent)."""
    exponent = length.bit_length() - 1
    normalized = length << (31 - exponent)  # leading one at bit 31
    significand, guard = normalized >> 8, (normalized >> 7) & 1
    sticky = int(normalized & 0x7F != 0)
    significand += guard & (sticky | significand & 1)
    if significand >> 24:  # rounding carried out: 0xFFFFFF + 1
        significand, exponent = 1 << 23, exponent + 1
    return significand, exponent


def reciprocal_bits(length: int) -> int:
    """Bits of ``float32(1) / float32(length)`` for ``0 <= length < 2**32`` (0 gives +inf)."""
    if length == 0:
        return _INFINITY
    divisor, exponent = _to_binary32_significand(length)
    if divisor == 1 << 23:  # a power of two: the reciprocal is exact
        return (127 - exponent) << 23
    # 2**48 / divisor lies in (2**24, 2**25): the first quotient bit is always 1.
    remainder, quotient = (1 << 24) - divisor, 1
    for _ in range(_QUOTIENT_BITS):
        remainder <<= 1
        bit = int(remainder >= divisor)
        remainder -= bit * divisor
        quotient = quotient << 1 | bit
    guard, sticky = quotient & 1, int(remainder != 0)
    significand = quotient >> 1
    significand += guard & (sticky | significand & 1)  # cannot carry: quotient < 2**25 - 2
    return (126 - exponent) << 23 | significand & 0x7F_FFFF


class Reciprocal(wiring.Component):
    """``float32(1) / float32(L)`` for an unsigned 32-bit ``L``, one result at a time.

    ``L = 0`` gives ``+inf`` (what the float division gives); the engine never asks for it.

    Parameters
    ----------
    steps_per_cycle : int
        Quotient bits produced per cycle (a divisor of 24). More is faster and has a longer
        combinational path (one 25-bit compare-and-subtract per step).
    registered_leading : bool
        Find the length's highest set bit a cycle before shifting by it, and whether the
        quotient rounds up a cycle before adding it (two cycles more per result): the 32-bit
        search and the 32-bit shift are then not one path, nor the remainder's 25-bit zero
        test and the 24-bit rounding adder.

    Members
    -------
    i : ``In(stream.Signature(32))``
        The bag length ``L``.
    o : ``Out(stream.Signature(32))``
        The binary32 bits of the reciprocal; held until taken.

    Raises
    ------
    ValueError
        If ``steps_per_cycle`` does not divide 24.
    """

    def __init__(self, *, steps_per_cycle=2, registered_leading=False):
        if (not isinstance(steps_per_cycle, int) or isinstance(steps_per_cycle, bool)
                or steps_per_cycle < 1 or _QUOTIENT_BITS % steps_per_cycle):
            raise ValueError(
                f"Steps per cycle must be a divisor of 24, not {steps_per_cycle!r}")
        self._steps = steps_per_cycle
        self._registered_leading = check_bool("Registered leading", registered_leading)
        super().__init__({
            "i": In(stream.Signature(32)),
            "o": Out(stream.Signature(32)),
        })

    @property
    def steps_per_cycle(self):
        return self._steps

    @property
    def latency(self):
        """Most cycles from accepting ``L`` to ``o.valid`` (powers of two skip the division)."""
        return 3 + 2 * self._registered_leading + _QUOTIENT_BITS // self._steps

    def elaborate(self, platform):
        m = Module()

        length = Signal(32)
        normalized = Signal(32)      # the length shifted so its leading one is bit 31
        exponent = Signal(range(33))  # of float32(L)
        divisor = Signal(24)
        remainder = Signal(25)
        quotient = Signal(_QUOTIENT_BITS + 1)
        step = Signal(range(_QUOTIENT_BITS // self._steps + 1))
        result = Signal(32)
        # Flags loaded with the values they describe, so the result register's enable comes
        # from the state and flip-flops, not from a 32-bit zero test or a 24-bit comparison
        # (a ULX3S build's walker path into its 31 enables, 14.9 ns).
        length_zero = Signal()
        divisor_power = Signal()     # divisor == 1 << 23: L is a power of two

        leading = Signal(range(32))  # position of the highest set bit
        for bit in range(32):  # later assignments take priority: the highest bit wins
            with m.If(length[bit]):
                m.d.comb += leading.eq(bit)
        if self._registered_leading:
            leading_found = Signal.like(leading)
            m.d.sync += leading_found.eq(leading)
            leading = leading_found
        shift = Signal(range(32))
        m.d.comb += shift.eq(31 - leading)

        with m.FSM():
            with m.State("Idle"):
                m.d.comb += self.i.ready.eq(1)
                with m.If(self.i.valid):
                    m.d.sync += [length.eq(self.i.payload), length_zero.eq(self.i.payload == 0)]
                    m.next = "Locate" if self._registered_leading else "Normalize"

            if self._registered_leading:
                with m.State("Locate"):  # (the highest set bit into its register)
                    m.next = "Normalize"

            with m.State("Normalize"):
                m.d.sync += [
                    normalized.eq(length << shift),
                    exponent.eq(leading),
                ]
                with m.If(length_zero):
                    m.d.sync += result.eq(_INFINITY)
                    m.next = "Output"
                with m.Else():
                    m.next = "Round"

            with m.State("Round"):
                significand = normalized[8:]
                guard, sticky = normalized[7], normalized[:7].any()
                rounded = Signal(25)
                m.d.comb += rounded.eq(significand + (guard & (sticky | significand[0])))
                with m.If(rounded[24]):  # carried out: the value is the next power of two
                    m.d.sync += [divisor.eq(1 << 23), divisor_power.eq(1),
                                 exponent.eq(exponent + 1)]
                with m.Else():
                    m.d.sync += [divisor.eq(rounded), divisor_power.eq(rounded == 1 << 23)]
                m.next = "Divide"
                # Prepare the first step of 2**48 / divisor (its leading quotient bit is 1).
                m.d.sync += [
                    remainder.eq((1 << 24) - rounded),
                    quotient.eq(1),
                    step.eq(0),
                ]

            with m.State("Divide"):
                with m.If(divisor_power):
                    m.d.sync += result.eq(Cat(Const(0, 23), (127 - exponent)[:8]))
                    m.next = "Output"
                with m.Else():
                    r, q = remainder, quotient
                    for _ in range(self._steps):
                        shifted = Cat(Const(0, 1), r)  # 2r: 26 bits
                        bit = shifted >= divisor
                        r = (shifted - Mux(bit, divisor, 0))[:25]
                        q = Cat(bit, q)[:_QUOTIENT_BITS + 1]
                    m.d.sync += [remainder.eq(r), quotient.eq(q), step.eq(step + 1)]
                    with m.If(step == _QUOTIENT_BITS // self._steps - 1):
                        m.next = "Sticky" if self._registered_leading else "Pack"

            significand = quotient[1:]
            round_up = quotient[0] & (remainder.any() | significand[0])  # guard & (sticky | odd)
            if self._registered_leading:
                rounds_up = Signal()
                with m.State("Sticky"):  # (whether to round up into its register)
                    m.d.sync += rounds_up.eq(round_up)
                    m.next = "Pack"
                round_up = rounds_up

            with m.State("Pack"):
                fraction = (significand + round_up)[:23]
                m.d.sync += result.eq(Cat(fraction, (126 - exponent)[:8]))
                m.next = "Output"

            with m.State("Output"):
                m.d.comb += [self.o.valid.eq(1), self.o.payload.eq(result)]
                with m.If(self.o.ready):
                    m.next = "Idle"
        return m
