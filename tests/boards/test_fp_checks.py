"""Build-time operand vectors and NumPy results of the FP lane self-test."""

import importlib.util

import numpy as np
import pytest
from amaranth.lib import data

from boards.bist.fp_checks import SPECIAL_OPERANDS, fp_lanes_vectors, pack_payload

HAVE_FP = importlib.util.find_spec("hw.fp") is not None


def test_special_pairs_come_first_and_results_are_numpy_float32():
    a, b, sub, result = fp_lanes_vectors("add", lanes=16, count=20, seed=3)
    pairs = len(SPECIAL_OPERANDS) ** 2
    first = set(zip(a.reshape(-1)[:pairs].tolist(), b.reshape(-1)[:pairs].tolist(),
                    strict=True))
    assert first == {(x, y) for x in SPECIAL_OPERANDS.tolist() for y in SPECIAL_OPERANDS.tolist()}
    fa, fb = a.view(np.float32), b.view(np.float32)
    with np.errstate(all="ignore"):
        for row in range(20):
            want = (fa[row] - fb[row]) if sub[row] else (fa[row] + fb[row])
            got = result[row].view(np.float32)
            assert np.array_equal(got, want, equal_nan=True)


def test_short_runs_see_varied_operands():
    a, b, _, _ = fp_lanes_vectors("add", lanes=1, count=8, seed=0)
    assert len(set(a.reshape(-1).tolist())) > 1 and len(set(b.reshape(-1).tolist())) > 1


def test_rounding_tie_and_subnormals_are_exercised():
    a, b, _, result = fp_lanes_vectors("mul", lanes=16, count=16, seed=0)
    a, b, result = a.reshape(-1), b.reshape(-1), result.reshape(-1)
    # The smallest subnormal times 1 stays subnormal (no flush to zero).
    index = np.flatnonzero((a == 0x00000001) & (b == 0x3F800000))[0]
    assert result[index] == 0x00000001
    a, b, _, result = fp_lanes_vectors("add", lanes=16, count=16, seed=0)
    a, b, result = a.reshape(-1), b.reshape(-1), result.reshape(-1)
    # 1 + 2^-24 lies halfway between 1 and 1 + ulp, and round-to-even gives 1; when the vector
    # subtracts, 1 - 2^-24 is exact (the ulp below 1 is 2^-24).
    index = np.flatnonzero((a == 0x3F800000) & (b == 0x33800000))[0]
    assert result[index] in (0x3F800000, 0x3F7FFFFF)


def test_mul_has_no_subtraction_and_vectors_are_reproducible():
    first = fp_lanes_vectors("mul", lanes=4, count=8, seed=11)
    second = fp_lanes_vectors("mul", lanes=4, count=8, seed=11)
    assert not first[2].any()
    for x, y in zip(first, second, strict=True):
        assert np.array_equal(x, y)


def test_vector_parameters_are_validated():
    with pytest.raises(ValueError, match=r"^Operation must be 'add' or 'mul', not 'div'$"):
        fp_lanes_vectors("div", lanes=1, count=1)
    with pytest.raises(ValueError, match=r"^Lane count must be a positive integer, not 0$"):
        fp_lanes_vectors("add", lanes=0, count=1)
    with pytest.raises(ValueError, match=r"^Vector count must be a positive integer, not -1$"):
        fp_lanes_vectors("add", lanes=1, count=-1)


def test_pack_payload_follows_the_layout():
    layout = data.StructLayout({"a": data.ArrayLayout(32, 2), "b": data.ArrayLayout(32, 2),
                                "sub": 1})
    word = pack_payload(layout, {"a": [1, 2], "b": [3, 4], "sub": 1})
    assert word == 1 | 2 << 32 | 3 << 64 | 4 << 96 | 1 << 128
    assert pack_payload(32, 0xDEADBEEF) == 0xDEADBEEF


@pytest.mark.skipif(not HAVE_FP, reason="hw.fp is not available")
def test_fp_lanes_check_matches_the_unit_signature():
    from boards.bist.fp_checks import fp_lane_checks

    add, mul = fp_lane_checks(lanes=2, vectors=4)
    assert add.stimulus_width == 2 * 64 + 1 and mul.stimulus_width == 2 * 64
    assert add.expected_width == mul.expected_width == 64
    assert len(add.stimulus) == len(add.expected) == 4
