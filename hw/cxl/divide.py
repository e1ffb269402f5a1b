"""Exact division by the constant 3, pipelined: what the 3/6/12-way HDM interleave needs."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["DivideBy3"]


class DivideBy3(wiring.Component):
    """``floor(x / 3)`` and ``x mod 3`` of an unsigned ``width``-bit ``x``.

    Long division, most significant bit first: the partial remainder is always 0, 1 or 2, so
    each dividend bit costs one 3-input step (``t = 2r + bit``; quotient bit ``t >= 3``; ``r =
    t mod 3``) and no multiplier or subtractor is needed. ``stage_bits`` steps run per pipeline
    stage, so ``latency`` is ``ceil(width / stage_bits)`` cycles; one division starts per
    cycle.

    Members: ``i`` (``x``, always ready) and ``o`` (``quotient``, ``remainder``), ``latency``
    cycles after ``i``.
    """

    def __init__(self, *, width, stage_bits=12):
        if not isinstance(width, int) or not 1 <= width <= 128:
            raise ValueError(f"Width must be an integer in 1..128, not {width!r}")
        if not isinstance(stage_bits, int) or stage_bits < 1:
            raise ValueError(f"Bits per stage must be a positive integer, not {stage_bits!r}")
        self._width = width
        self._stage_bits = min(stage_bits, width)
        super().__init__({
            "i": In(stream.Signature(unsigned(width), always_ready=True)),
            "o": Out(stream.Signature(data.StructLayout({
                "quotient": unsigned(width), "remainder": unsigned(2)}), always_ready=True)),
        })

    @property
    def width(self):
        return self._width

    @property
    def latency(self):
        return -(-self._width // self._stage_bits)

    def elaborate(self, platform):
        m = Module()
        dividend, quotient = self.i.payload, Const(0, self._width)
        remainder, valid = Const(0, 2), self.i.valid
        bit = self._width - 1
        for stage in range(self.latency):
            step_remainder = remainder
            next_quotient = Signal(self._width, name=f"quotient_{stage}")
            m.d.comb += next_quotient.eq(quotient)
            for _ in range(self._stage_bits):
                if bit < 0:
                    break
                # Named signals, not nested expressions: each step uses the previous one twice.
                partial = Signal(3, name=f"partial_{bit}")
                remainder_after = Signal(2, name=f"remainder_{bit}")
                m.d.comb += [
                    partial.eq(Cat(dividend[bit], step_remainder)),  # 2r + bit, in 0..5
                    next_quotient[bit].eq(partial >= 3),
                    remainder_after.eq(Mux(partial >= 3, partial - 3, partial)),
                ]
                step_remainder = remainder_after
                bit -= 1
            stage_dividend = Signal(self._width, name=f"dividend_{stage + 1}")
            stage_quotient = Signal(self._width, name=f"quotient_{stage + 1}")
            stage_remainder = Signal(2, name=f"remainder_{stage + 1}")
            stage_valid = Signal(name=f"valid_{stage + 1}")
            m.d.sync += [
                stage_dividend.eq(dividend),
                stage_quotient.eq(next_quotient),
                stage_remainder.eq(step_remainder),
                stage_valid.eq(valid),
            ]
            dividend, quotient, remainder, valid = (
                stage_dividend, stage_quotient, stage_remainder, stage_valid)
        m.d.comb += [
            self.o.valid.eq(valid),
            self.o.payload.quotient.eq(quotient),
            self.o.payload.remainder.eq(remainder),
        ]
        return m
