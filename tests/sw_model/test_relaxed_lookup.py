"""Relaxed lookup: stale gather + batch N's deltas, bit for bit as `sw_model.relaxed` defines it."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sw_model_reference import reference_relaxed, reference_sparse_sgd, same_bits

from sw_model import (
    RelaxedLookup,
    UndoLog,
    embedding_bag_tbe,
    get_preset,
    make_batch,
    relaxed_lookup,
    sparse_sgd_update,
    to_tbe,
    update_deltas,
)

F32 = np.float32
ULP1 = F32(2.0**-23)  # float32 spacing at 1.0


def one_table(rows_per_bag):
    lengths = [len(bag) for bag in rows_per_bag]
    indices = np.array([r for bag in rows_per_bag for r in bag], dtype=np.int64)
    return indices, np.cumsum([0, *lengths]).astype(np.int64)


def relaxed_and_reference(old, new, rows, indices, offsets, modes, psw=None):
    got = relaxed_lookup(old, new, rows, indices, offsets, modes, psw)
    want, corrections = reference_relaxed(old, new, rows, indices, offsets, modes, psw)
    assert same_bits(got.pooled, want)
    assert (got.bag_corrections == corrections).all()
    return got


# ---- the definition on hand-made cases -------------------------------------------------------


def crafted():
    """Row 0 goes 1.0 -> 1 + 2^-23 in UPDATE(N); row 1 = 2^-24 is not updated; N+1 pools [0, 1].

    strict:  (+0 + (1 + 2^-23)) + 2^-24 -> tie, to even: 1 + 2^-22
    relaxed: ((+0 + 1) + 2^-24) -> tie, to even: 1; then + 2^-23 (delta, exact): 1 + 2^-23
    """
    old = np.array([[1.0], [2.0**-24]], dtype=F32)
    new = old.copy()
    new[0, 0] = F32(1.0) + ULP1
    indices, offsets = one_table([[0, 1]])
    return old, new, indices, offsets


def test_relaxed_is_its_own_formula_not_strict():
    old, new, indices, offsets = crafted()
    got = relaxed_and_reference([old], [new], [[0]], indices, offsets, "sum")
    strict = embedding_bag_tbe([new], indices, offsets, "sum")
    assert got.pooled[0, 0] == F32(1.0) + ULP1
    assert strict[0, 0] == F32(1.0) + 2 * ULP1  # one ulp apart: rounding, as DESIGN.md says
    assert got.stale[0, 0] == F32(1.0)
    assert (got.rows_corrected, got.corrections, got.bags_corrected) == (1, 1, 1)


def test_skipping_the_correction_gives_a_different_result():
    old, new, indices, offsets = crafted()
    got = relaxed_lookup([old], [new], [[0]], indices, offsets, "sum")
    want, _ = reference_relaxed([old], [new], [[0]], indices, offsets, "sum")
    assert same_bits(got.pooled, want)
    assert not same_bits(got.stale, want)  # an implementation that forgets step 3 fails
    assert same_bits(got.stale, embedding_bag_tbe([old], indices, offsets, "sum"))


def test_each_occurrence_is_corrected_and_mean_scales_last():
    # N+1 pools [0, 0, 1] with MEAN: acc = ((0 + 1) + 1) + 4 = 6, + d + d = 6 + 2d, * 1/3.
    old = np.array([[1.0], [4.0]], dtype=F32)
    new = np.array([[1.75], [4.0]], dtype=F32)
    indices, offsets = one_table([[0, 0, 1]])
    got = relaxed_and_reference([old], [new], [[0, 1]], indices, offsets, "mean")
    assert got.pooled[0, 0] == F32(7.5) * (F32(1) / F32(3))
    assert (got.rows_corrected, got.corrections, got.bags_corrected) == (2, 3, 1)
    assert got.overlap_rows[0].tolist() == [0, 1]


def test_weighted_correction_multiplies_the_delta_by_the_weight():
    old = np.array([[2.0], [3.0]], dtype=F32)
    new = np.array([[2.5], [3.0]], dtype=F32)
    indices, offsets = one_table([[1, 0]])
    psw = np.array([0.5, 3.0], dtype=F32)
    got = relaxed_and_reference([old], [new], [[0]], indices, offsets, "sum", psw)
    assert got.pooled[0, 0] == F32(1.5) + F32(6.0) + F32(1.5)


def test_no_pending_update_and_untouched_bags_equal_strict():
    rng = np.random.default_rng(3)
    old = [rng.standard_normal((20, 8)).astype(F32), rng.standard_normal((9, 8)).astype(F32)]
    new = [t.copy() for t in old]
    new[0][[2, 5]] += F32(0.01)
    # table 0: [2], [3, 4], [5, 5, 7]; table 1 (MEAN): [], [], [1, 8]
    indices, offsets, _ = to_tbe([[2, 3, 4, 5, 5, 7], [1, 8]], [[0, 1, 3], [0, 0, 0]])
    nothing = relaxed_and_reference(old, new, [[], []], indices, offsets, ("sum", "mean"))
    assert same_bits(nothing.pooled, embedding_bag_tbe(old, indices, offsets, ("sum", "mean")))
    assert nothing.corrections == 0 and nothing.bags_corrected == 0
    got = relaxed_and_reference(old, new, [[2, 5, 11], [0]], indices, offsets, ("sum", "mean"))
    strict = embedding_bag_tbe(new, indices, offsets, ("sum", "mean"))
    assert got.bag_corrections.tolist() == [[1, 0, 2], [0, 0, 0]]
    assert same_bits(got.pooled[1:2, :8], strict[1:2, :8])  # bag 1 reads no updated row
    assert same_bits(got.pooled[:, 8:], strict[:, 8:])  # table 1's update touched nothing
    assert same_bits(got.pooled[:2, 8:], np.zeros((2, 8), dtype=F32))  # empty bags: +0.0
    np.testing.assert_allclose(got.pooled, strict, rtol=1e-6, atol=1e-6)


def test_chunked_update_corrects_by_the_total_change():
    # Batch N = [0, 1, 0] with one row per chunk: row 0 is written twice; the delta is
    # the final row minus the original, whatever happened in between.
    table = np.full((3, 4), 2.0, dtype=F32)
    indices, offsets = one_table([[0, 1, 0]])
    grad = np.full((1, 4), 2.0**-23, dtype=F32)
    update = sparse_sgd_update([table], grad, indices, offsets, "sum", 1.0, max_unique_rows=1)
    assert update.chunks == [[(0, 0)], [(0, 1)], [(0, 0)]]
    rows = update.updated_rows()
    assert [r.tolist() for r in rows] == [[0, 1]]
    assert [r.tolist() for r in UndoLog.capture([table], indices, offsets).rows] == [[0, 1]]
    next_indices, next_offsets = one_table([[0, 2], [1]])
    got = relaxed_and_reference([table], update.tables, rows, next_indices, next_offsets, "sum")
    assert got.overlap_rows[0].tolist() == [0, 1]


@pytest.mark.parametrize("pooling", ["sum", "mean", "weighted"])
def test_chunked_update_with_chunk_deltas_corrects_chunk_by_chunk(pooling):
    # The device corrects after each chunk it writes: each chunk's delta, in chunk order.
    preset = get_preset("tiny").replace(pooling=pooling)
    rng = np.random.default_rng(5)
    old = [rng.uniform(-1, 1, (rows, preset.dim)).astype(F32) for rows in preset.table_rows]
    first, second = make_batch(preset, 2), make_batch(preset, 3)
    grad = rng.standard_normal((preset.batch_size, preset.num_tables * preset.dim)).astype(F32)
    update_args = (grad, first.indices, first.offsets, preset.table_modes, 0.5,
                   first.per_sample_weights)
    update, deltas = update_deltas(old, *update_args, max_unique_rows=5)
    states = []
    tables, chunks = reference_sparse_sgd(old, *update_args, max_unique_rows=5, states=states)
    assert update.chunks == chunks and len(chunks) > 3
    assert all(same_bits(a, b) for a, b in zip(update.tables, tables, strict=True))
    passes = [(before, after, set(keys)) for before, after, keys
              in zip([old, *states[:-1]], states, chunks, strict=True)]
    args = (second.indices, second.offsets, preset.table_modes, second.per_sample_weights)
    got = relaxed_lookup(old, update.tables, update.updated_rows(), *args, chunk_deltas=deltas)
    want, corrections = reference_relaxed(old, update.tables, update.updated_rows(), *args,
                                          chunks=passes)
    assert same_bits(got.pooled, want)
    assert (got.bag_corrections == corrections).all() and corrections.sum() > 0
    # One chunk: the same as without chunk deltas.
    single, one = update_deltas(old, *update_args)
    assert len(one) == 1
    assert same_bits(relaxed_lookup(old, single.tables, single.updated_rows(), *args,
                                    chunk_deltas=one).pooled,
                     relaxed_lookup(old, single.tables, single.updated_rows(), *args).pooled)


def test_chunk_deltas_are_checked():
    table = np.zeros((3, 4), dtype=F32)
    indices, offsets = one_table([[0, 1]])
    with pytest.raises(ValueError, match=r"^chunk_deltas\[0\] has 2 tables, not 1$"):
        relaxed_lookup([table], [table], [[0]], indices, offsets, "sum",
                       chunk_deltas=[[(np.array([0]), table[:1]), (np.array([0]), table[:1])]])
    with pytest.raises(ValueError, match=r"^chunk_deltas\[0\]\[0\]: delta must be float32 "
                                         r"of shape \(1, 4\)$"):
        relaxed_lookup([table], [table], [[0]], indices, offsets, "sum",
                       chunk_deltas=[[(np.array([0]), table[:2])]])
    with pytest.raises(ValueError, match=r"^chunk_deltas\[0\]\[0\]: a row appears twice$"):
        relaxed_lookup([table], [table], [[0]], indices, offsets, "sum",
                       chunk_deltas=[[(np.array([0, 0]), table[:2])]])


def test_same_infinity_before_and_after_gives_nan():
    old = np.array([[np.inf, 1.0]], dtype=F32)
    got = relaxed_and_reference([old], [old.copy()], [[0]], *one_table([[0]]), "sum")
    assert np.isnan(got.pooled[0, 0]) and got.pooled[0, 1] == 1.0


def test_inputs_are_not_modified():
    old, new, indices, offsets = crafted()
    before = old.copy(), new.copy()
    relaxed_lookup([old], [new], [np.array([0])], indices, offsets, "sum")
    assert same_bits(old, before[0]) and same_bits(new, before[1])


# ---- random batches: the model equals the reference loop -------------------------------------

floats32 = st.floats(width=32, allow_nan=False, allow_infinity=False)


@st.composite
def relaxed_cases(draw):
    num_tables = draw(st.integers(1, 3))
    batch = draw(st.integers(1, 3))
    dims = [draw(st.sampled_from([1, 2, 4])) for _ in range(num_tables)]
    rows = [draw(st.integers(1, 5)) for _ in range(num_tables)]
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    old = [rng.standard_normal((r, d)).astype(F32) for r, d in zip(rows, dims, strict=True)]
    if draw(st.booleans()):  # any float32, including huge and subnormal ones
        old = [np.array(draw(st.lists(floats32, min_size=t.size, max_size=t.size)),
                        dtype=F32).reshape(t.shape) for t in old]

    def bags():
        per_indices, per_offsets = [], []
        for r in rows:
            lengths = draw(st.lists(st.integers(0, 4), min_size=batch, max_size=batch))
            per_indices.append(draw(st.lists(st.integers(0, r - 1), min_size=sum(lengths),
                                             max_size=sum(lengths))))
            per_offsets.append(np.cumsum([0, *lengths[:-1]]))
        return to_tbe(per_indices, per_offsets)[:2]

    weighted = draw(st.booleans())
    if weighted:
        modes = ("sum",) * num_tables
    else:
        modes = tuple(draw(st.sampled_from(["sum", "mean"])) for _ in range(num_tables))
    n_indices, n_offsets = bags()
    n_psw = rng.uniform(0.5, 1.5, n_indices.size).astype(F32) if weighted else None
    grad = rng.standard_normal((batch, sum(dims))).astype(F32)
    lr = draw(st.sampled_from([0.01, 0.1, 1.0, 3.0]))
    max_unique_rows = draw(st.one_of(st.none(), st.integers(1, 4)))
    update = sparse_sgd_update(old, grad, n_indices, n_offsets, modes, lr, n_psw,
                               max_unique_rows=max_unique_rows)
    indices, offsets = bags()
    psw = np.array(draw(st.lists(floats32, min_size=indices.size, max_size=indices.size)),
                   dtype=F32) if weighted else None
    return old, update, indices, offsets, modes, psw


@settings(max_examples=120, deadline=None)
@given(relaxed_cases())
def test_property_relaxed_equals_reference_loop(case):
    old, update, indices, offsets, modes, psw = case
    got = relaxed_and_reference(old, update.tables, update.updated_rows(), indices, offsets,
                                modes, psw)
    assert same_bits(got.stale, embedding_bag_tbe(old, indices, offsets, modes, psw))
    strict = embedding_bag_tbe(update.tables, indices, offsets, modes, psw)
    batch = got.bag_corrections.shape[1]
    for t, width in enumerate(table.shape[1] for table in old):
        start = sum(table.shape[1] for table in old[:t])
        for b in np.flatnonzero(got.bag_corrections[t] == 0):  # untouched bags: strict bits
            assert same_bits(got.pooled[b, start : start + width],
                             strict[b, start : start + width])
    assert got.bag_corrections.shape == (len(old), batch)


@pytest.mark.parametrize(("name", "pooling"), [("tiny", "sum"), ("tiny", "mean"),
                                               ("tiny", "weighted"), ("rm1", "sum")])
@pytest.mark.parametrize("max_unique_rows", [None, 5])
def test_zipf_batches_overlap_heavily_and_match_the_reference(name, pooling, max_unique_rows):
    preset = get_preset(name).replace(pooling=pooling)
    rng = np.random.default_rng(11)
    old = [rng.uniform(-1, 1, (rows, preset.dim)).astype(F32) for rows in preset.table_rows]
    first, second = make_batch(preset, 4), make_batch(preset, 5)
    grad = rng.standard_normal((preset.batch_size, preset.num_tables * preset.dim)).astype(F32)
    update = sparse_sgd_update(old, grad, first.indices, first.offsets, preset.table_modes, 0.5,
                               first.per_sample_weights, max_unique_rows=max_unique_rows)
    args = (second.indices, second.offsets, preset.table_modes, second.per_sample_weights)
    got = relaxed_and_reference(old, update.tables, update.updated_rows(), *args)
    assert got.rows_corrected >= 8 and got.bags_corrected >= 8  # hot rows recur
    touched = got.bag_corrections.T.reshape(preset.batch_size, -1) > 0  # (B, T), TBE order
    columns = np.repeat(touched, preset.dim, axis=1)
    assert (got.pooled != got.stale)[columns].any()  # skipping the correction is visible
    strict = embedding_bag_tbe(update.tables, *args)
    assert same_bits(got.pooled[~columns], strict[~columns])
    assert not same_bits(got.pooled, strict)  # rounding differs somewhere...
    np.testing.assert_allclose(got.pooled, strict, rtol=1e-5, atol=1e-5)  # ...but only that


def test_rejected_alternatives_give_other_bits():
    """The definition is specific enough to tell the alternatives it rejects apart."""
    preset = get_preset("tiny").replace(pooling="mean")
    rng = np.random.default_rng(5)
    old = [rng.uniform(-1, 1, (rows, preset.dim)).astype(F32) for rows in preset.table_rows]
    first, second = make_batch(preset, 0), make_batch(preset, 1)
    grad = rng.standard_normal((preset.batch_size, preset.num_tables * preset.dim)).astype(F32)
    update = sparse_sgd_update(old, grad, first.indices, first.offsets, "mean", 0.5)
    rows = update.updated_rows()
    got = relaxed_lookup(old, update.tables, rows, second.indices, second.offsets, "mean")
    # correcting after the MEAN scaling: stale * (1/L) + (+0 + delta + delta ...) * (1/L)
    deltas = [n - o for n, o in zip(update.tables, old, strict=True)]
    zeros = [np.zeros_like(t) for t in old]
    correction = relaxed_lookup(zeros, deltas, rows, second.indices, second.offsets, "mean")
    after_scaling = got.stale + correction.pooled
    # re-pooling the affected bags after the update: the strict lookup
    strict = embedding_bag_tbe(update.tables, second.indices, second.offsets, "mean")
    assert got.bags_corrected > 0
    assert not same_bits(got.pooled, after_scaling)
    assert not same_bits(got.pooled, strict)


# ---- bad input -------------------------------------------------------------------------------

T2 = [np.zeros((10, 4), dtype=F32), np.zeros((6, 4), dtype=F32)]
IDX, OFF = np.array([1, 2]), np.array([0, 1, 2])


@pytest.mark.parametrize(
    ("new", "rows", "error", "message"),
    [
        (T2[:1], [[], []], ValueError, r"^updated_tables has 1 tables but stale_tables has 2$"),
        ([T2[0], np.zeros((6, 8), dtype=F32)], [[], []], ValueError,
         r"^updated_tables\[1\] has shape \(6, 8\) but stale_tables\[1\] has \(6, 4\)$"),
        ([T2[0], np.zeros((6, 4))], [[], []], TypeError,
         r"^updated_tables\[1\] must have dtype float32, got float64$"),
        (T2[0], [[], []], TypeError,
         r"^updated_tables must be a list of 2-D float32 tables, one per table$"),
        (T2, [[1]], ValueError, r"^updated_rows has 1 entries but there are 2 tables$"),
        (T2, np.zeros((2, 1), dtype=np.int64), TypeError,
         r"^updated_rows must be a sequence with one 1-D int array per table$"),
        (T2, [[1], [2, 6]], ValueError,
         r"^updated_rows\[1\]\[1\] = 6 is out of range for table 1 of 6 rows$"),
        (T2, [[1, -3], []], ValueError, r"^updated_rows\[0\]\[1\] = -3 is negative$"),
        (T2, [[1.0], []], TypeError,
         r"^updated_rows\[0\] must be an integer array of dtype int32, int64 or uint32, "
         r"got dtype float64$"),
    ],
)
def test_bad_update_description(new, rows, error, message):
    with pytest.raises(error, match=message):
        relaxed_lookup(T2, new, rows, IDX, OFF, "sum")


def test_batch_inputs_are_checked_as_for_a_strict_lookup():
    with pytest.raises(TypeError, match=r"^stale_tables\[0\] must be a numpy array, got list$"):
        relaxed_lookup([[[0.0]]], T2, [[], []], IDX, OFF, "sum")
    with pytest.raises(ValueError, match=r"^index 6 at indices\[1\] \(table 1, bag 0, position 0\)"
                                         r" is out of range for a table of 6 rows$"):
        relaxed_lookup(T2, T2, [[], []], np.array([1, 6]), OFF, "sum")
    with pytest.raises(ValueError, match=r"^modes has 1 entries but there are 2 tables$"):
        relaxed_lookup(T2, T2, [[], []], IDX, OFF, ("sum",))


def test_result_type():
    got = relaxed_lookup(T2, T2, [[1], [2]], IDX, OFF, "sum")
    assert isinstance(got, RelaxedLookup)
    assert got.pooled.dtype == F32 and got.pooled.shape == (1, 8)
    assert (got.rows_corrected, got.corrections, got.bags_corrected) == (2, 2, 2)
