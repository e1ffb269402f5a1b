"""Self-test checks for the FP32 lane units, with results computed at build time by NumPy.

The operands mix IEEE-754 corner cases (signed zeros, subnormals, the normal/subnormal
boundary, the largest finite value, infinities, NaN) with random bit patterns, half of them
paired with a nearby exponent so additions cancel and round rather than return the larger
operand. Each result is one ``np.float32`` operation, which is correctly rounded (round to
nearest even, subnormals kept) as the numeric contract requires.
"""

import numpy as np
from amaranth import Const, Value
from amaranth.lib import data

from .check import Check

__all__ = ["SPECIAL_OPERANDS", "fp32_lanes_match", "fp_lane_checks", "fp_lanes_check",
           "fp_lanes_vectors", "pack_payload"]


SPECIAL_OPERANDS = np.array([
    0x00000000, 0x80000000,     # +0, -0
    0x00000001, 0x807FFFFF,     # smallest subnormal, largest negative subnormal
    0x00800000, 0x80800001,     # smallest normals
    0x3F800000, 0xBF800000,     # +1, -1
    0x3F800001, 0x33800000,     # 1 + ulp, 2^-24 (half an ulp of 1: a rounding tie)
    0x7F7FFFFF, 0xFF7FFFFF,     # largest finite
    0x7F800000, 0xFF800000,     # infinities
    0x7FC00000, 0x7F800001,     # quiet NaN, signalling NaN
], dtype=np.uint32)

_OPS = ("add", "mul")


def fp_lanes_vectors(op, *, lanes, count, seed=0):
    """Operands and NumPy results for ``count`` vectors of ``lanes`` binary32 lanes.

    Returns ``(a, b, sub, result)``: ``a``, ``b`` and ``result`` are ``uint32`` arrays of shape
    ``(count, lanes)`` holding bit patterns, ``sub`` a ``bool`` array of shape ``(count,)``
    (all ``False`` for ``op="mul"``). Every pair of special operands appears once, in a
    seeded order, before the random ones.
    """
    if op not in _OPS:
        raise ValueError(f"Operation must be 'add' or 'mul', not {op!r}")
    for name, value in (("Lane count", lanes), ("Vector count", count)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive integer, not {value!r}")
    rng = np.random.default_rng(seed)
    shape = (count, lanes)
    a = rng.integers(0, 1 << 32, size=shape, dtype=np.uint64).astype(np.uint32)
    b = rng.integers(0, 1 << 32, size=shape, dtype=np.uint64).astype(np.uint32)
    # Give half of the b operands an exponent within 3 of a's.
    near = rng.random(size=shape) < 0.5
    exponent_a = ((a >> 23) & 0xFF).astype(np.int64)
    exponent_b = np.clip(exponent_a + rng.integers(-3, 4, size=shape), 0, 254)
    b = np.where(near, (b & np.uint32(0x807FFFFF)) | (exponent_b.astype(np.uint32) << 23), b)

    # Every pair of special operands, in a seeded order: a short run (few vectors, one lane)
    # still sees varied operands, so synthesis cannot fold a constant operand into the unit.
    order = rng.permutation(len(SPECIAL_OPERANDS) ** 2)
    special_a = np.repeat(SPECIAL_OPERANDS, len(SPECIAL_OPERANDS))[order]
    special_b = np.tile(SPECIAL_OPERANDS, len(SPECIAL_OPERANDS))[order]
    placed = min(a.size, special_a.size)
    a.reshape(-1)[:placed] = special_a[:placed]
    b.reshape(-1)[:placed] = special_b[:placed]

    sub = rng.random(size=count) < 0.5 if op == "add" else np.zeros(count, dtype=bool)
    fa, fb = a.view(np.float32), b.view(np.float32)
    with np.errstate(all="ignore"):
        if op == "add":
            result = np.where(sub[:, None], fa - fb, fa + fb).astype(np.float32)
        else:
            result = fa * fb
    return a, b, sub, result.view(np.uint32)


def pack_payload(shape, value):
    """The integer of ``value`` laid out in ``shape`` (a data layout or a plain shape)."""
    if isinstance(shape, data.Layout):
        return Const.cast(shape.const(value)).value
    return int(value)


def _is_nan(word):
    return (word[23:31] == 0xFF) & (word[0:23] != 0)


def fp32_lanes_match(lanes):
    """Lane-wise comparison of binary32 results: bit-exact, except that any NaN matches any
    NaN (the numeric contract leaves NaN payloads open)."""
    def match(actual, expected):
        actual, expected = Value.cast(actual), Value.cast(expected)
        lane_ok = []
        for lane in range(lanes):
            got, want = actual[32 * lane:32 * (lane + 1)], expected[32 * lane:32 * (lane + 1)]
            lane_ok.append((got == want) | (_is_nan(got) & _is_nan(want)))
        ok = lane_ok[0]
        for lane in lane_ok[1:]:
            ok = ok & lane
        return ok
    return match


def fp_lanes_check(op, *, lanes=16, vectors=64, seed=0, timeout_cycles=64):
    """A :class:`Check` of ``hw.fp.FPLanes(op=op, lanes=lanes)`` on ``vectors`` vectors."""
    from hw.fp import FPLanes

    dut = FPLanes(op=op, lanes=lanes)
    in_shape = dut.signature.members["i"].signature.members["payload"].shape
    out_shape = dut.signature.members["o"].signature.members["payload"].shape
    a, b, sub, result = fp_lanes_vectors(op, lanes=lanes, count=vectors, seed=seed)
    stimulus = []
    for row in range(vectors):
        operands = {"a": a[row].tolist(), "b": b[row].tolist()}
        if op == "add":
            operands["sub"] = int(sub[row])
        stimulus.append(pack_payload(in_shape, operands))
    expected = [pack_payload(out_shape, result[row].tolist()) for row in range(vectors)]
    return Check(name=f"fp_lanes{lanes}_{op}", dut=dut, stimulus=stimulus, expected=expected,
                 match=fp32_lanes_match(lanes), timeout_cycles=timeout_cycles)


def fp_lane_checks(*, lanes=16, vectors=64, seed=0):
    """The board self-test of the FP lane units: an ``add`` check and a ``mul`` check."""
    return [fp_lanes_check(op, lanes=lanes, vectors=vectors, seed=seed + index)
            for index, op in enumerate(_OPS)]
