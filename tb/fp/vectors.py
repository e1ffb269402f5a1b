"""Operand pairs and expected results for the binary32 units, computed with NumPy float32.

Every function returns ``(a, b, expected)`` as ``uint32`` arrays of raw binary32 bits. The
expected result is NumPy's own ``float32`` arithmetic (IEEE-754, round to nearest even,
subnormals kept), one operation per element; ``op`` is ``"add"`` (``a + b``), ``"sub"``
(``a - b``, i.e. :class:`~hw.fp.FPAdd` with ``sub=1``) or ``"mul"`` (``a * b``).

NaN results are only required to be *some* NaN, so compare with :func:`results_match`, never
with ``==``.
"""

import itertools

import numpy as np

__all__ = [
    "CLASSES",
    "OPS",
    "directed_pairs",
    "expected_results",
    "is_nan",
    "random_pairs",
    "results_match",
]

OPS = ("add", "sub", "mul")

_SIGN = np.uint32(0x8000_0000)
_EXPONENT_MASK = np.uint32(0x7F80_0000)
_FRACTION_MASK = np.uint32(0x007F_FFFF)

#: Directed operand classes (positive; :func:`directed_pairs` adds the negatives). The
#: ``random_*`` classes are drawn from a fixed seed, several values each.
CLASSES = {
    "zero":              [0x0000_0000],
    "min_subnormal":     [0x0000_0001],
    "max_subnormal":     [0x007F_FFFF],
    "random_subnormal":  [0x0000_2A5B, 0x0040_0001, 0x0012_3456],
    "min_normal":        [0x0080_0000],
    "max_normal":        [0x7F7F_FFFF],
    "one":               [0x3F80_0000],
    "random_normal":     [0x3FC9_0FDB, 0x0A1B_2C3D, 0x7512_3457, 0x4B00_0001],
    "inf":               [0x7F80_0000],
    "quiet_nan":         [0x7FC0_0000],
    "signaling_nan":     [0x7F80_0001],
}


def _operation(op):
    if op == "add":
        return np.add
    if op == "sub":
        return np.subtract
    if op == "mul":
        return np.multiply
    raise ValueError(f"Operation must be one of {', '.join(map(repr, OPS))}, not {op!r}")


def expected_results(a, b, op):
    """``a op b`` in NumPy float32, as raw bits."""
    operation = _operation(op)
    a = np.asarray(a, dtype=np.uint32)
    b = np.asarray(b, dtype=np.uint32)
    with np.errstate(all="ignore"):
        result = operation(a.view(np.float32), b.view(np.float32), dtype=np.float32)
    return result.view(np.uint32)


def is_nan(bits):
    """Whether raw binary32 bits encode a NaN (either sign, quiet or signaling)."""
    bits = np.asarray(bits, dtype=np.uint32)
    return ((bits & _EXPONENT_MASK) == _EXPONENT_MASK) & ((bits & _FRACTION_MASK) != 0)


def results_match(got, expected):
    """Elementwise: identical bits, or both NaN (any sign or payload)."""
    got = np.asarray(got, dtype=np.uint32)
    expected = np.asarray(expected, dtype=np.uint32)
    return (got == expected) | (is_nan(got) & is_nan(expected))


def _pack(sign, exponent, fraction):
    return ((np.asarray(sign, dtype=np.uint32) << 31)
            | (np.asarray(exponent, dtype=np.uint32) << 23)
            | np.asarray(fraction, dtype=np.uint32))


def _with_expected(a, b, op):
    a = np.ascontiguousarray(a, dtype=np.uint32)
    b = np.ascontiguousarray(b, dtype=np.uint32)
    return a, b, expected_results(a, b, op)


def _class_pairs():
    values = [value for members in CLASSES.values() for value in members]
    values = values + [value | 0x8000_0000 for value in values]
    a, b = zip(*itertools.product(values, repeat=2), strict=True)
    return np.array(a, dtype=np.uint32), np.array(b, dtype=np.uint32)


def _next_up(bits):
    # The next binary32 away from zero (for finite values below the largest).
    return bits + np.uint32(1)


def _additive_corners(rng):
    """Ties, cancellation, subnormal results and overflow for addition and subtraction."""
    n = 64
    pairs = []
    exponent = rng.integers(25, 254, n)
    fraction = rng.integers(0, 1 << 23, n)
    sign = rng.integers(0, 2, n)
    a = _pack(sign, exponent, fraction)
    # Exactly half an ulp of a: a tie, rounded up or not by the parity of a's fraction.
    half_ulp = _pack(rng.integers(0, 2, n), exponent - 24, 0)
    pairs.append((a, half_ulp))
    # Both fraction parities explicitly.
    pairs.append((a & ~np.uint32(1), half_ulp))
    pairs.append((a | np.uint32(1), half_ulp))
    # Just below and just above a tie.
    pairs.append((a, half_ulp - np.uint32(1)))
    pairs.append((a, half_ulp + np.uint32(1)))
    # Ties whose half-ulp operand is subnormal: for a biased exponent e >= 2 half an ulp is
    # 2**(e - 151), the subnormal (or smallest normal) with bits 1 << (e - 2).
    small_exponent = rng.integers(2, 26, n)
    half_ulp_bits = np.left_shift(1, small_exponent - 2).astype(np.uint32)
    pairs.append((_pack(sign, small_exponent, fraction), half_ulp_bits))
    pairs.append((_pack(sign, small_exponent, fraction), half_ulp_bits | _SIGN))
    # Massive cancellation: a + -(next(a)), a + -(next(next(a))), and across a power of two.
    cancel_exponent = rng.integers(0, 254, n)
    near = _pack(sign, cancel_exponent, fraction)
    pairs.append((near, _next_up(near) ^ _SIGN))
    pairs.append((near, _next_up(_next_up(near)) ^ _SIGN))
    power_of_two = _pack(sign, rng.integers(1, 254, n), 0)
    pairs.append((power_of_two, (power_of_two - np.uint32(1)) ^ _SIGN))
    # Same exponent, random fractions, opposite signs: many leading zeros in the difference.
    pairs.append((near, _pack(sign ^ 1, cancel_exponent, rng.integers(0, 1 << 23, n))))
    # Results that become subnormal: the smallest normals minus a little.
    tiny = _pack(sign, rng.integers(1, 3, n), rng.integers(0, 1 << 23, n))
    pairs.append((tiny, _pack(sign ^ 1, rng.integers(0, 3, n), rng.integers(0, 1 << 23, n))))
    # Subnormal + subnormal crossing into the normal range.
    pairs.append((_pack(sign, 0, rng.integers(1 << 22, 1 << 23, n)),
                  _pack(sign, 0, rng.integers(1 << 22, 1 << 23, n))))
    # Overflow: large + large, and the largest finite value plus a tie (rounds up to inf
    # because its fraction is odd) or a little less (stays finite).
    large = _pack(sign, rng.integers(250, 255, n), rng.integers(0, 1 << 23, n))
    pairs.append((large, _pack(sign, rng.integers(250, 255, n), rng.integers(0, 1 << 23, n))))
    max_normal = _pack(sign, 254, 0x7F_FFFF)
    pairs.append((max_normal, _pack(sign, 254 - 24, 0)))
    pairs.append((max_normal, _pack(sign, 254 - 24, 0) - np.uint32(1)))
    pairs.append((max_normal, max_normal))
    a, b = zip(*pairs, strict=True)
    return np.concatenate(a), np.concatenate(b)


def _multiplicative_corners(rng):
    """Ties, subnormal results, underflow to zero and overflow for multiplication."""
    n = 64
    pairs = []
    sign_a = rng.integers(0, 2, n)
    sign_b = rng.integers(0, 2, n)
    # (1 + x/2**12) * (1 + y/2**12) with x, y odd and below 2**10 lies in [1, 2) and has
    # exactly one bit (2**-24) below the ulp: always a tie.
    x = 2 * rng.integers(0, 1 << 9, n) + 1
    y = 2 * rng.integers(0, 1 << 9, n) + 1
    exponent_a = rng.integers(64, 191, n)
    exponent_b = rng.integers(64, 191, n)
    pairs.append((_pack(sign_a, exponent_a, x << 11), _pack(sign_b, exponent_b, y << 11)))
    # Subnormal times 2**-k: ties and roundings at the bottom of the subnormal range.
    subnormal = _pack(sign_a, 0, rng.integers(1, 1 << 23, n))
    pairs.append((subnormal, _pack(sign_b, 127 - rng.integers(1, 26, n), 0)))
    pairs.append((subnormal, _pack(sign_b, 127 - rng.integers(1, 26, n),
                                   rng.integers(0, 1 << 23, n))))
    # Normal times normal landing in the subnormal range or just around it (biased result
    # exponent ea + eb - 127 from about -26 to 2).
    exponent_a = rng.integers(1, 127, n)
    exponent_b = np.clip(127 - exponent_a + rng.integers(-26, 3, n), 1, 254)
    pairs.append((_pack(sign_a, exponent_a, rng.integers(0, 1 << 23, n)),
                  _pack(sign_b, exponent_b, rng.integers(0, 1 << 23, n))))
    # Subnormal times large normal: back into the normal range.
    pairs.append((subnormal, _pack(sign_b, rng.integers(150, 255, n),
                                   rng.integers(0, 1 << 23, n))))
    # Overflow boundary: result exponent around 254.
    exponent_a = rng.integers(127, 255, n)
    exponent_b = np.clip(254 + 127 - exponent_a + rng.integers(-2, 2, n), 1, 254)
    pairs.append((_pack(sign_a, exponent_a, rng.integers(0, 1 << 23, n)),
                  _pack(sign_b, exponent_b, rng.integers(0, 1 << 23, n))))
    # The largest finite value times numbers just above and below one.
    max_normal = _pack(sign_a, 254, 0x7F_FFFF)
    pairs.append((max_normal, _pack(sign_b, 127, rng.integers(0, 4, n))))
    pairs.append((max_normal, _pack(sign_b, 126, 0x7F_FFFF - rng.integers(0, 4, n))))
    a, b = zip(*pairs, strict=True)
    return np.concatenate(a), np.concatenate(b)


def directed_pairs(op):
    """The directed set for ``op``: every ordered pair of :data:`CLASSES` values in both signs,
    then the rounding-tie, cancellation, underflow and overflow corners of that operation
    (``"sub"`` gets the addition corners with ``b`` negated, so that they exercise the same
    cases through subtraction). Deterministic: the corners use a fixed seed."""
    _operation(op)
    a, b = _class_pairs()
    rng = np.random.default_rng(0xF10A7)
    if op == "mul":
        corner_a, corner_b = _multiplicative_corners(rng)
    else:
        corner_a, corner_b = _additive_corners(rng)
        if op == "sub":
            # a - (-b) is a + b: the same ties and cancellations, through the subtract path.
            corner_b = corner_b ^ _SIGN
    return _with_expected(np.concatenate([a, corner_a]), np.concatenate([b, corner_b]), op)


def _random_bits(rng, n):
    return rng.integers(0, 1 << 32, n, dtype=np.uint32)


def _near_exponents(rng, n):
    # |ea - eb| <= 2 over the whole exponent range, subnormal exponent included.
    exponent_a = rng.integers(0, 255, n)
    exponent_b = np.clip(exponent_a + rng.integers(-2, 3, n), 0, 254)
    a = _pack(rng.integers(0, 2, n), exponent_a, rng.integers(0, 1 << 23, n))
    b = _pack(rng.integers(0, 2, n), exponent_b, rng.integers(0, 1 << 23, n))
    return a, b


def _subnormal_heavy(rng, n, op):
    # Each operand is subnormal, or normal with a small exponent, half the time; for mul the
    # other operand is usually large so that the product is not simply zero.
    def small(count):
        exponent = np.where(rng.random(count) < 0.5, 0, rng.integers(1, 4, count))
        return _pack(rng.integers(0, 2, count), exponent, rng.integers(0, 1 << 23, count))

    a = small(n)
    if op == "mul":
        exponent = rng.integers(100, 255, n)
        b = _pack(rng.integers(0, 2, n), exponent, rng.integers(0, 1 << 23, n))
        swap = rng.random(n) < 0.5
        return np.where(swap, b, a), np.where(swap, a, b)
    return a, small(n)


def _product_range(rng, n):
    # ea + eb around the normal range edges: products that underflow, are subnormal, are
    # normal, and overflow, in roughly equal shares.
    target = rng.choice([127 - 30, 127 - 5, 127 + 127, 127 + 254], n) + rng.integers(-20, 20, n)
    exponent_a = rng.integers(1, 255, n)
    exponent_b = np.clip(target - exponent_a, 0, 254)
    a = _pack(rng.integers(0, 2, n), exponent_a, rng.integers(0, 1 << 23, n))
    b = _pack(rng.integers(0, 2, n), exponent_b, rng.integers(0, 1 << 23, n))
    return a, b


def random_pairs(n, seed, op):
    """``n`` seeded random pairs for ``op``, mixing four distributions in equal shares:
    uniformly random bits; near-equal exponents (``|ea - eb| <= 2``, where addition
    cancels and rounds hardest); subnormal-heavy operands; and, for mul, exponent sums around
    the underflow and overflow thresholds (for add/sub, a second near-exponent share)."""
    _operation(op)
    if not isinstance(n, int | np.integer) or n < 0:
        raise ValueError(f"Pair count must be a non-negative integer, not {n!r}")
    rng = np.random.default_rng([seed, OPS.index(op)])
    which = rng.integers(0, 4, n)
    a = np.empty(n, dtype=np.uint32)
    b = np.empty(n, dtype=np.uint32)
    generators = (
        lambda count: (_random_bits(rng, count), _random_bits(rng, count)),
        lambda count: _near_exponents(rng, count),
        lambda count: _subnormal_heavy(rng, count, op),
        lambda count: _product_range(rng, count) if op == "mul" else _near_exponents(rng, count),
    )
    for index, generate in enumerate(generators):
        selected = which == index
        a[selected], b[selected] = generate(int(selected.sum()))
    return _with_expected(a, b, op)
