"""Several binary32 units side by side, sharing one valid and one pipeline."""

from amaranth.hdl import Module, Mux
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.fanout import replicated_register

from .add import FPAdd
from .common import check_dsp, check_stages, delay
from .mul import FPMul

__all__ = ["FPLanes", "check_fold", "folded_latency", "fp_lanes_signature"]

_UNITS = {"add": FPAdd, "mul": FPMul}


def fp_lanes_signature(*, op, lanes, tag_width=0):
    """The signature of ``FPLanes(op=op, lanes=lanes, tag_width=tag_width)``: ``i`` (operands)
    and ``o`` (results). A client that uses lanes built elsewhere takes it flipped,
    ``In(fp_lanes_signature(...))``, and drives ``i`` and reads ``o`` as it would those of a
    unit of its own."""
    vector = data.ArrayLayout(32, lanes)
    operands = {"a": vector, "b": vector}
    if op == "add":
        operands["sub"] = 1
    if tag_width:
        operands["tag"] = tag_width
        results = data.StructLayout({"result": vector, "tag": tag_width})
    else:
        results = vector
    return wiring.Signature({
        "i": In(stream.Signature(data.StructLayout(operands), always_ready=True)),
        "o": Out(stream.Signature(results, always_ready=True)),
    })


def check_fold(fold, *, lanes):
    """Validate a ``fold`` argument of :class:`FPLanes`, or of a client that builds or shares
    such lanes, for ``lanes`` lanes, and return it."""
    if not isinstance(fold, int) or isinstance(fold, bool):
        raise TypeError(f"Lane fold must be an integer, not {fold!r}")
    if fold < 1 or lanes % fold:
        raise ValueError(f"Lane fold must be a positive divisor of the lane count {lanes}, "
                         f"not {fold!r}")
    return fold


def folded_latency(stages, fold):
    """:attr:`FPLanes.latency` of lanes with units of ``stages`` folded by ``fold``: folded, the
    operands wait a cycle in registers and the later parts enter the units ``fold - 1``
    cycles after the first."""
    return stages if fold == 1 else stages + fold


class FPLanes(wiring.Component):
    """``lanes`` independent :class:`FPAdd` or :class:`FPMul` units behind one stream.

    Lane ``k`` computes ``a[k] op b[k]``; for ``op="add"`` a single ``sub`` bit selects
    subtraction for every lane. Sixteen lanes of binary32 are one 64-byte line. The lanes share
    ``valid`` (and the optional tag), so the latency is that of one unit.

    With ``fold`` > 1 the lanes are *folded*: ``lanes / fold`` units compute them, a part of
    ``lanes / fold`` lanes a cycle, so a line takes ``fold`` cycles and the whole line comes
    out ``fold`` cycles later than from unfolded lanes (:attr:`latency`). Every operand is
    still taken in the cycle of ``i.valid``; all parts wait in registers loaded every cycle
    (the first for one cycle, so that the units' operand multiplexer starts at flip-flops and
    not behind the client's logic), and the earlier results likewise, so no enable spans the
    line. The price is the
    rate: ``i.valid`` may be high at most once in any :attr:`issue_interval` cycles (a client
    that issues more often gets wrong results). An FPGA build uses this to save area: folded
    by 2, the ``emb`` board design has 9,500 LUT4 and 32 DSPs fewer (``boards.synth
    --lane-fold 2``).

    Parameters
    ----------
    op : ``"add"`` or ``"mul"``
        The operation.
    lanes : int
        Number of lanes, at least 1.
    stages : int or None
        Register stages of each unit (see :class:`FPAdd` / :class:`FPMul`); ``None`` selects
        the unit's default.
    tag_width : int
        Width of a user tag carried alongside the operands and returned with the results
        (for example a row slot). 0, the default, leaves the payloads without a tag.
    dsp : ``"ecp5"``, ``"generic"`` or None
        For ``op="mul"``: how each :class:`FPMul` builds its partial products (see there);
        ``None``, the default, decides by the platform. The adder has no multipliers, so
        ``op="add"`` takes only ``None``.
    fold : int
        Cycles a line of ``lanes`` takes through ``lanes / fold`` units (see above); 1, the
        default, gives every lane a unit. It must divide ``lanes``.

    Members
    -------
    i : ``In(stream.Signature(..., always_ready=True))``
        ``{"a": ArrayLayout(32, lanes), "b": ArrayLayout(32, lanes)}``, plus ``"sub": 1``
        when ``op="add"`` and ``"tag": tag_width`` when ``tag_width > 0``.
    o : ``Out(stream.Signature(..., always_ready=True))``
        ``ArrayLayout(32, lanes)``; with a tag, ``{"result": ArrayLayout(32, lanes),
        "tag": tag_width}``.

    Raises
    ------
    TypeError
        If ``lanes``, ``stages``, ``tag_width`` or ``fold`` is not an integer, or ``dsp`` is
        not ``None`` or a string.
    ValueError
        If ``op`` is unknown, ``lanes``, ``stages``, ``tag_width`` or ``fold`` is out of range
        (``fold`` must divide ``lanes``), or ``dsp`` is not a mapping of :class:`FPMul` (or not
        ``None`` for ``op="add"``).
    """

    def __init__(self, *, op, lanes=16, stages=None, tag_width=0, dsp=None, fold=1):
        if op not in _UNITS:
            raise ValueError(f"Operation must be 'add' or 'mul', not {op!r}")
        if not isinstance(lanes, int) or isinstance(lanes, bool):
            raise TypeError(f"Lane count must be an integer, not {lanes!r}")
        if lanes < 1:
            raise ValueError(f"Lane count must be at least 1, not {lanes!r}")
        if not isinstance(tag_width, int) or isinstance(tag_width, bool):
            raise TypeError(f"Tag width must be an integer, not {tag_width!r}")
        if tag_width < 0:
            raise ValueError(f"Tag width must be at least 0, not {tag_width!r}")
        check_fold(fold, lanes=lanes)
        check_dsp(dsp)
        if op != "mul" and dsp is not None:
            raise ValueError(f"DSP mapping applies only to op='mul', not {op!r}")
        unit = _UNITS[op]
        self._op = op
        self._dsp = dsp
        self._lanes = lanes
        self._tag_width = tag_width
        self._fold = fold
        self._stages = check_stages(stages, default=unit.DEFAULT_STAGES,
                                    maximum=len(unit.CUTS) - 1)

        super().__init__(fp_lanes_signature(op=op, lanes=lanes, tag_width=tag_width))

    @property
    def op(self):
        return self._op

    @property
    def lanes(self):
        return self._lanes

    @property
    def tag_width(self):
        return self._tag_width

    @property
    def dsp(self):
        """The partial-product mapping passed to every :class:`FPMul` lane (``None`` for
        automatic, and always for ``op="add"``)."""
        return self._dsp

    @property
    def fold(self):
        """Cycles a line takes through the units (1: a unit per lane)."""
        return self._fold

    @property
    def issue_interval(self):
        """The fewest cycles from one ``i.valid`` to the next: :attr:`fold`."""
        return self._fold

    @property
    def units(self):
        """The units built: ``lanes / fold``."""
        return self._lanes // self._fold

    @property
    def latency(self):
        """Cycles from ``i.valid`` to the matching ``o.valid``: the register stages, plus
        ``fold`` when folded."""
        return folded_latency(self._stages, self._fold)

    def elaborate(self, platform):
        m = Module()
        results = self.o.payload.result if self._tag_width else self.o.payload
        fold, width = self._fold, self.units
        operands = self.i.payload
        # Folded, part p (lanes p * width ...) enters the units p + 1 cycles after i.valid:
        # each unit picks it from the operands delayed by p cycles, with its own copies of
        # the delayed valid (so no one register steers every unit's operands), into entry
        # registers of its own. The units' first stage then starts at flip-flops, not behind
        # the choice of part (in front of the multipliers' classification on a ULX3S build).
        parts = [delay(m, operands, p, name=f"part_{p}", reset_less=True) for p in range(fold)]
        for index in range(width):
            options = {"dsp": self._dsp} if self._op == "mul" else {}
            unit = m.submodules[f"lane_{index}"] = _UNITS[self._op](stages=self._stages,
                                                                   **options)
            a, b = parts[0].a[index], parts[0].b[index]
            sub = parts[0].sub if self._op == "add" else None
            turn = self.i.valid
            for p in range(1, fold):
                turn = _turn_copy(m, turn, name=f"part_{p}_turn_{index}")
                lane = p * width + index
                a = Mux(turn, parts[p].a[lane], a)
                b = Mux(turn, parts[p].b[lane], b)
                if sub is not None:
                    sub = Mux(turn, parts[p].sub, sub)
            if fold > 1:
                a = delay(m, a, 1, name=f"entry_a_{index}", reset_less=True)
                b = delay(m, b, 1, name=f"entry_b_{index}", reset_less=True)
                if sub is not None:
                    sub = delay(m, sub, 1, name=f"entry_sub_{index}", reset_less=True)
            # (A unit's valid only times its own o.valid, which is not used.)
            m.d.comb += [unit.i.valid.eq(self.i.valid), unit.i.payload.a.eq(a),
                         unit.i.payload.b.eq(b)]
            if sub is not None:
                m.d.comb += unit.i.payload.sub.eq(sub)
            # Part p's result leaves the unit fold - 1 - p cycles before the line does.
            for p in range(fold):
                m.d.comb += results[p * width + index].eq(
                    delay(m, unit.o.payload, fold - 1 - p, name=f"result_{p}_{index}",
                          reset_less=True))
        m.d.comb += self.o.valid.eq(delay(m, self.i.valid, self.latency, name="valid"))
        if self._tag_width:
            m.d.comb += self.o.payload.tag.eq(
                delay(m, self.i.payload.tag, self.latency, name="tag", reset_less=True))
        return m


def _turn_copy(m, turn, *, name):
    """``turn`` a cycle later, in a register of one unit's own (a replica, so that Yosys does
    not merge the units' copies back into one wide net)."""
    return replicated_register(m, turn, copies=1, name=name)[0]
