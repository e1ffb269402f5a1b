"""Pooling: values, accumulation order, MEAN reciprocal, two roundings, zeros, TBE layout."""

from fractions import Fraction

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from sw_model_reference import reference_pool, reference_pool64, same_bits

from sw_model import embedding_bag, embedding_bag_tbe, to_tbe

F32 = np.float32


def sequential_sum(values) -> np.float32:
    acc = F32(0.0)
    for v in values:
        acc = F32(acc + F32(v))
    return acc


def test_pooling_matches_float64_within_rounding():
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((50, 16)).astype(F32)
    indices = rng.integers(0, 50, size=40)
    offsets = np.array([0, 3, 3, 10, 25, 39])
    weights = rng.uniform(0.5, 1.5, size=40).astype(F32)
    for mode, psw in (("sum", None), ("mean", None), ("sum", weights)):
        got = embedding_bag(weight, indices, offsets, mode, psw)
        want = reference_pool64(weight, indices, offsets, mode, psw)
        assert got.dtype == F32 and got.shape == (6, 16)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_sum_is_sequential_not_pairwise():
    # 1e8 swallows each following 1 (float32 spacing there is 8); pairwise summation keeps them.
    values = np.array([1e8, *[1.0] * 7, -1e8, *[1.0] * 7], dtype=F32)
    assert np.sum(values) == F32(14.0)  # what NumPy's pairwise sum gives
    weight = values[:, None].copy()
    out = embedding_bag(weight, np.arange(16), np.array([0]))
    assert out[0, 0] == F32(7.0) == sequential_sum(values)


def test_sum_order_on_random_values_in_every_lane():
    rng = np.random.default_rng(1)
    length, lanes = 64, 16
    weight = (rng.standard_normal((length, lanes)) * 10.0 ** rng.integers(-4, 6, (length, 1)))
    weight = weight.astype(F32)
    out = embedding_bag(weight, np.arange(length), np.array([0]))[0]
    sequential = np.array([sequential_sum(weight[:, d]) for d in range(lanes)])
    pairwise = np.array([np.sum(np.ascontiguousarray(weight[:, d])) for d in range(lanes)])
    assert same_bits(out, sequential)
    assert not same_bits(out, pairwise)  # the data does tell the two orders apart


def test_bag_order_is_index_order():
    weight = np.array([[1e8], [1.0], [-1e8]], dtype=F32)
    forward = embedding_bag(weight, np.array([0, 1, 2]), np.array([0]))
    backward = embedding_bag(weight, np.array([2, 1, 0]), np.array([0]))
    assert forward[0, 0] == F32(0.0)  # (1e8 + 1) - 1e8
    assert backward[0, 0] == F32(0.0)  # (-1e8 + 1) + 1e8
    reordered = embedding_bag(weight, np.array([0, 2, 1]), np.array([0]))
    assert reordered[0, 0] == F32(1.0)


def find_mean_case():
    """A sum s and length L with s * fl(1/L) != fl(s / L) in float32."""
    rng = np.random.default_rng(2)
    for s in rng.uniform(1, 2, 2000).astype(F32):
        for length in range(3, 12):
            if F32(s * (F32(1) / F32(length))) != F32(s / F32(length)):
                return s, length
    raise AssertionError("no distinguishing case found")


def test_mean_multiplies_by_float32_reciprocal():
    s, length = find_mean_case()
    weight = np.array([[s], [0.0]], dtype=F32)
    indices = np.array([0] + [1] * (length - 1))
    out = embedding_bag(weight, indices, np.array([0]), mode="mean")[0, 0]
    assert out == F32(s * (F32(1) / F32(length)))
    assert out != F32(s / F32(length))


def test_weighted_rounds_product_then_sum():
    # acc = -1, then row * w = (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24: its product rounds away 2^-24,
    # which a fused multiply-add would keep after the cancellation.
    r = 1 + 2.0**-12
    weight = np.array([[-1.0], [r]], dtype=F32)
    psw = np.array([1.0, r], dtype=F32)
    out = embedding_bag(weight, np.array([0, 1]), np.array([0]), per_sample_weights=psw)[0, 0]
    two_roundings = F32(2.0**-11)
    fused = Fraction(-1) + Fraction(r) * Fraction(r)
    assert fused == Fraction(2.0**-11 + 2.0**-24)  # exactly representable: what FMA would give
    assert out == two_roundings and out != F32(float(fused))


def test_empty_bags_are_positive_zero():
    weight = np.full((4, 16), -3.0, dtype=F32)
    offsets = np.array([0, 0, 2, 2])
    for mode in ("sum", "mean"):
        out = embedding_bag(weight, np.array([1, 2]), offsets, mode)
        for b in (0, 2, 3):
            assert not np.signbit(out[b]).any() and (out[b] == 0).all()
    no_indices = embedding_bag(weight, np.array([], dtype=np.int64), np.array([0, 0]))
    assert no_indices.shape == (2, 16) and not np.signbit(no_indices).any()


def test_signed_zero_rows_pool_to_positive_zero():
    weight = np.full((2, 16), -0.0, dtype=F32)
    for mode in ("sum", "mean"):
        out = embedding_bag(weight, np.array([0, 1]), np.array([0]), mode)
        assert not np.signbit(out).any()
    cancel = np.array([[1.0], [-1.0]], dtype=F32)
    assert not np.signbit(embedding_bag(cancel, np.array([0, 1]), np.array([0]))).any()
    negative_weight = np.array([-0.0], dtype=F32)
    ones = np.ones((1, 16), dtype=F32)
    out = embedding_bag(ones, np.array([0]), np.array([0]), per_sample_weights=negative_weight)
    assert not np.signbit(out).any()  # +0.0 + (1 * -0.0) = +0.0


def test_subnormals_are_kept_and_overflow_is_silent_inf():
    tiny = F32(1e-45)  # the smallest subnormal
    weight = np.array([[tiny], [F32(3e38)]], dtype=F32)
    out = embedding_bag(weight, np.array([0, 0, 0, 1, 1]), np.array([0, 3]))
    assert out[0, 0] == F32(3) * tiny and out[0, 0] != 0
    assert np.isposinf(out[1, 0])


def test_accepted_index_dtypes_give_the_same_bits():
    rng = np.random.default_rng(3)
    weight = rng.standard_normal((20, 16)).astype(F32)
    indices = rng.integers(0, 20, 30)
    offsets = np.array([0, 5, 5, 17])
    want = embedding_bag(weight, indices, offsets)
    for dtype in (np.int32, np.uint32, np.int64):
        got = embedding_bag(weight, indices.astype(dtype), offsets.astype(dtype))
        assert same_bits(got, want)
    assert same_bits(embedding_bag(weight, indices.tolist(), offsets.tolist()), want)


def test_tbe_layout_is_table_blocks_in_order():
    rng = np.random.default_rng(4)
    tables = [rng.standard_normal((n, d)).astype(F32) for n, d in ((10, 16), (7, 32), (12, 16))]
    batch = 3
    per_table = [
        (rng.integers(0, t.shape[0], 6), np.array([0, 2, 2])) for t in tables
    ]
    indices, offsets, _ = to_tbe([i for i, _ in per_table], [o for _, o in per_table])
    assert offsets.size == batch * 3 + 1 and offsets[-1] == indices.size
    assert offsets[batch] == 6  # entry t*B + b starts bag b of table t
    modes = ("sum", "mean", "sum")
    out = embedding_bag_tbe(tables, indices, offsets, modes)
    assert out.shape == (batch, 64)
    want = np.concatenate(
        [embedding_bag(t, i, o, m) for t, (i, o), m in zip(tables, per_table, modes, strict=True)],
        axis=1,
    )
    assert same_bits(out, want)


def test_tbe_per_sample_weights_cover_all_tables():
    rng = np.random.default_rng(5)
    tables = [rng.standard_normal((8, 16)).astype(F32) for _ in range(2)]
    indices = rng.integers(0, 8, 10)
    offsets = np.array([0, 3, 10])  # 2 tables x 1 bag
    psw = rng.uniform(0, 2, 10).astype(F32)
    out = embedding_bag_tbe(tables, indices, offsets, "sum", psw)
    want0 = reference_pool(tables[0], indices[:3], [0], "sum", psw[:3])
    want1 = reference_pool(tables[1], indices[3:], [0], "sum", psw[3:])
    assert same_bits(out, np.concatenate([want0, want1], axis=1))


def test_zero_bags():
    table = np.ones((4, 16), dtype=F32)
    no_indices = np.array([], dtype=np.int64)
    assert embedding_bag_tbe([table, table], no_indices, np.array([0]), "sum").shape == (0, 32)
    assert embedding_bag(table, no_indices, no_indices).shape == (0, 16)


floats32 = st.floats(width=32, allow_nan=False, allow_infinity=False)


@st.composite
def pooling_cases(draw):
    rows = draw(st.integers(1, 6))
    dim = draw(st.sampled_from([1, 2, 16]))
    values = draw(st.lists(floats32, min_size=rows * dim, max_size=rows * dim))
    weight = np.array(values, dtype=F32).reshape(rows, dim)
    lengths = draw(st.lists(st.integers(0, 6), min_size=1, max_size=5))
    indices = np.array(
        draw(st.lists(st.integers(0, rows - 1), min_size=sum(lengths), max_size=sum(lengths))),
        dtype=np.int64,
    )
    offsets = np.cumsum([0, *lengths[:-1]]).astype(np.int64)
    mode = draw(st.sampled_from(["sum", "mean", "weighted"]))
    psw = None
    if mode == "weighted":
        psw = np.array(draw(st.lists(floats32, min_size=indices.size, max_size=indices.size)),
                       dtype=F32)
        mode = "sum"
    return weight, indices, offsets, mode, psw


@settings(max_examples=150, deadline=None)
@given(pooling_cases())
def test_property_pooling_equals_reference_loop(case):
    weight, indices, offsets, mode, psw = case
    got = embedding_bag(weight, indices, offsets, mode, psw)
    assert same_bits(got, reference_pool(weight, indices, offsets, mode, psw))


@settings(max_examples=60, deadline=None)
@given(st.lists(pooling_cases(), min_size=1, max_size=3), st.integers(0, 2))
def test_property_tbe_equals_per_table_pooling(cases, batch):
    # Re-cut every case to `batch` bags so all tables share B.
    tables, per_indices, per_offsets, modes = [], [], [], []
    for weight, indices, _, mode, _ in cases:
        cut = np.linspace(0, indices.size, batch + 1).astype(np.int64)[:-1] if batch else []
        tables.append(weight)
        per_indices.append(indices if batch else indices[:0])
        per_offsets.append(np.asarray(cut, dtype=np.int64))
        modes.append(mode)
    indices, offsets, _ = to_tbe(per_indices, per_offsets)
    got = embedding_bag_tbe(tables, indices, offsets, modes)
    parts = [
        embedding_bag(t, i, o, m)
        for t, i, o, m in zip(tables, per_indices, per_offsets, modes, strict=True)
    ]
    assert same_bits(got, np.concatenate(parts, axis=1))
