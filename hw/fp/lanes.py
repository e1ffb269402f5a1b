"""Several binary32 units side by side, sharing one valid and one pipeline."""

from amaranth.hdl import Module
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .add import FPAdd
from .common import check_dsp, check_stages, delay
from .mul import FPMul

__all__ = ["FPLanes", "fp_lanes_signature"]

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


class FPLanes(wiring.Component):
    """``lanes`` independent :class:`FPAdd` or :class:`FPMul` units behind one stream.

    Lane ``k`` computes ``a[k] op b[k]``; for ``op="add"`` a single ``sub`` bit selects
    subtraction for every lane. Sixteen lanes of binary32 are one 64-byte line. The lanes share
    ``valid`` (and the optional tag), so the latency is that of one unit.

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
        If ``lanes``, ``stages`` or ``tag_width`` is not an integer, or ``dsp`` is not
        ``None`` or a string.
    ValueError
        If ``op`` is unknown, ``lanes``, ``stages`` or ``tag_width`` is out of range, or
        ``dsp`` is not a mapping of :class:`FPMul` (or not ``None`` for ``op="add"``).
    """

    def __init__(self, *, op, lanes=16, stages=None, tag_width=0, dsp=None):
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
        check_dsp(dsp)
        if op != "mul" and dsp is not None:
            raise ValueError(f"DSP mapping applies only to op='mul', not {op!r}")
        unit = _UNITS[op]
        self._op = op
        self._dsp = dsp
        self._lanes = lanes
        self._tag_width = tag_width
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
    def latency(self):
        """Cycles from ``i.valid`` to the matching ``o.valid``; equal to the register stages."""
        return self._stages

    def elaborate(self, platform):
        m = Module()
        results = self.o.payload.result if self._tag_width else self.o.payload
        units = []
        for index in range(self._lanes):
            options = {"dsp": self._dsp} if self._op == "mul" else {}
            unit = m.submodules[f"lane_{index}"] = _UNITS[self._op](stages=self._stages,
                                                                   **options)
            units.append(unit)
            m.d.comb += [
                unit.i.valid.eq(self.i.valid),
                unit.i.payload.a.eq(self.i.payload.a[index]),
                unit.i.payload.b.eq(self.i.payload.b[index]),
                results[index].eq(unit.o.payload),
            ]
            if self._op == "add":
                m.d.comb += unit.i.payload.sub.eq(self.i.payload.sub)
        # Every lane's valid chain is identical; synthesis drops all but the one used here.
        m.d.comb += self.o.valid.eq(units[0].o.valid)
        if self._tag_width:
            m.d.comb += self.o.payload.tag.eq(
                delay(m, self.i.payload.tag, self.latency, name="tag", reset_less=True))
        return m
