"""Sparse SGD update: coalesced per row, occurrence order, chunking, MEAN/weighted gradients."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sw_model_reference import reference_sparse_sgd, same_bits, tbe_occurrences

from sw_model import embedding_bag_tbe_grad, sparse_sgd_update, to_tbe

F32 = np.float32
TINY_STEP = F32(2.0**-24)


def one_table_bags(rows_per_bag):
    """TBE inputs for one table, one bag per entry of `rows_per_bag`."""
    lengths = [len(bag) for bag in rows_per_bag]
    offsets = np.cumsum([0, *lengths]).astype(np.int64)
    indices = np.array([r for bag in rows_per_bag for r in bag], dtype=np.int64)
    return indices, offsets


def test_coalesced_differs_from_per_occurrence_axpy():
    # Row 0 = 2.0 gets two contributions of 2^-24. Applied one at a time, 2 - 2^-24 is a tie
    # that rounds back to 2 each time; summed first, 2 - 2^-23 is exact.
    table = np.full((2, 1), 2.0, dtype=F32)
    indices, offsets = one_table_bags([[0], [0]])
    grad = np.full((2, 1), TINY_STEP, dtype=F32)
    new, chunks = sparse_sgd_update([table], grad, indices, offsets, "sum", 1.0)
    assert new[0][0, 0] == F32(2.0) - F32(2.0**-23)
    axpy = table[0, 0]
    for g in grad[:, 0]:
        axpy = F32(axpy - F32(1.0) * g)
    assert axpy == F32(2.0) and new[0][0, 0] != axpy
    assert chunks == [[(0, 0)]]
    assert new[0][1, 0] == 2.0  # rows not looked up are untouched


def test_chunk_limit_changes_the_result():
    # Occurrences A, B, A. With one row per chunk A is updated twice (each a rounding tie back
    # to 2); unlimited, A's contributions are summed first.
    table = np.full((2, 1), 2.0, dtype=F32)
    indices, offsets = one_table_bags([[0, 1, 0]])
    grad = np.full((1, 1), TINY_STEP, dtype=F32)
    whole, whole_chunks = sparse_sgd_update([table], grad, indices, offsets, "sum", 1.0)
    split, split_chunks = sparse_sgd_update(
        [table], grad, indices, offsets, "sum", 1.0, max_unique_rows=1
    )
    assert whole[0][0, 0] == F32(2.0) - F32(2.0**-23)
    assert split[0][0, 0] == F32(2.0)
    assert whole_chunks == [[(0, 0), (0, 1)]]
    assert split_chunks == [[(0, 0)], [(0, 1)], [(0, 0)]]


def test_chunks_close_before_the_row_that_would_overflow_them():
    # Two tables, B = 2. TBE order: t0 bag0 [5, 5, 7], t0 bag1 [9, 7], t1 bag0 [5], t1 bag1 [].
    indices, offsets, _ = to_tbe([[5, 5, 7, 9, 7], [5]], [[0, 3], [0, 1]])
    tables = [np.zeros((10, 16), dtype=F32), np.zeros((6, 16), dtype=F32)]
    grad = np.ones((2, 32), dtype=F32)
    _, chunks = sparse_sgd_update(tables, grad, indices, offsets, "sum", 0.5, max_unique_rows=2)
    assert chunks == [[(0, 5), (0, 7)], [(0, 9), (0, 7)], [(1, 5)]]
    _, chunks = sparse_sgd_update(tables, grad, indices, offsets, "sum", 0.5, max_unique_rows=3)
    assert chunks == [[(0, 5), (0, 7), (0, 9)], [(1, 5)]]
    # the same row number in two tables is two distinct rows
    _, chunks = sparse_sgd_update(tables, grad, indices, offsets, "sum", 0.5, max_unique_rows=4)
    assert chunks == [[(0, 5), (0, 7), (0, 9), (1, 5)]]


def test_contributions_sum_in_occurrence_order():
    # Row 0 collects 1e8, 1, -1e8 (bag order); summed in that order that is 0, not 1.
    table = np.zeros((1, 1), dtype=F32)
    indices, offsets = one_table_bags([[0], [0], [0]])
    grad = np.array([[1e8], [1.0], [-1e8]], dtype=F32)
    new, _ = sparse_sgd_update([table], grad, indices, offsets, "sum", 1.0)
    assert new[0][0, 0] == F32(0.0)
    grad_reordered = grad[[0, 2, 1]]
    new, _ = sparse_sgd_update([table], grad_reordered, indices, offsets, "sum", 1.0)
    assert new[0][0, 0] == F32(-1.0)


def test_update_is_two_roundings():
    # w - fl(lr * g): lr * g = (1 + 2^-12)^2 rounds away 2^-24, which FMA would keep.
    r = F32(1 + 2.0**-12)
    table = np.array([[1.0]], dtype=F32)
    indices, offsets = one_table_bags([[0]])
    new, _ = sparse_sgd_update([table], np.array([[r]]), indices, offsets, "sum", float(r))
    assert new[0][0, 0] == F32(1.0) - F32(r * r)
    assert new[0][0, 0] == F32(-(2.0**-11))


def test_mean_gradient_uses_the_forward_reciprocal():
    # find g, L where g * fl(1/L) != fl(g / L)
    rng = np.random.default_rng(2)
    for g in rng.uniform(1, 2, 2000).astype(F32):
        lengths = [n for n in range(3, 12) if F32(g * (F32(1) / F32(n))) != F32(g / F32(n))]
        if lengths:
            length = lengths[0]
            break
    table = np.zeros((length, 1), dtype=F32)
    indices, offsets = one_table_bags([list(range(length))])
    new, _ = sparse_sgd_update([table], np.array([[g]]), indices, offsets, "mean", 1.0)
    assert (new[0][:, 0] == -F32(g * (F32(1) / F32(length)))).all()
    assert (new[0][:, 0] != -F32(g / F32(length))).all()


def test_weighted_gradient_multiplies_by_the_weight():
    table = np.zeros((2, 16), dtype=F32)
    indices, offsets = one_table_bags([[0, 1, 0]])
    psw = np.array([0.5, 3.0, 0.25], dtype=F32)
    grad = np.full((1, 16), 2.0, dtype=F32)
    new, _ = sparse_sgd_update([table], grad, indices, offsets, "sum", 1.0, psw)
    assert (new[0][0] == -1.5).all() and (new[0][1] == -6.0).all()


def test_signed_zero_rows_keep_their_sign_under_zero_gradient():
    table = np.array([[-0.0, 0.0]], dtype=F32)
    indices, offsets = one_table_bags([[0]])
    new, _ = sparse_sgd_update([table], np.zeros((1, 2), dtype=F32), indices, offsets, "sum", 0.1)
    assert list(np.signbit(new[0][0])) == [True, False]  # -0 - +0 = -0 ; +0 - +0 = +0


def test_inputs_are_not_modified_unless_inplace():
    table = np.ones((3, 16), dtype=F32)
    indices, offsets = one_table_bags([[1]])
    grad = np.ones((1, 16), dtype=F32)
    new, _ = sparse_sgd_update([table], grad, indices, offsets, "sum", 0.5)
    assert (table == 1).all() and (new[0][1] == 0.5).all() and new[0] is not table
    result = sparse_sgd_update([table], grad, indices, offsets, "sum", 0.5, inplace=True)
    assert result.tables[0] is table and (table[1] == 0.5).all()


def test_no_indices_no_chunks():
    table = np.ones((3, 16), dtype=F32)
    result = sparse_sgd_update(
        [table], np.zeros((2, 16), dtype=F32), np.array([], dtype=np.int64), np.array([0, 0, 0]),
        "sum", 0.1, max_unique_rows=1,
    )
    assert result.chunks == [] and same_bits(result.tables[0], table)


def test_unchunked_update_equals_applying_the_coalesced_gradient():
    rng = np.random.default_rng(7)
    tables = [rng.standard_normal((6, 16)).astype(F32) for _ in range(2)]
    indices, offsets, _ = to_tbe([rng.integers(0, 6, 9), rng.integers(0, 6, 5)],
                                 [[0, 4, 4], [0, 1, 3]])
    grad = rng.standard_normal((3, 32)).astype(F32)
    new, _ = sparse_sgd_update(tables, grad, indices, offsets, ("sum", "mean"), 0.25)
    grads = embedding_bag_tbe_grad(tables, grad, indices, offsets, ("sum", "mean"))
    for t, (rows, sums) in enumerate(grads):
        want = tables[t].copy()
        want[rows] = want[rows] - F32(0.25) * sums
        assert same_bits(new[t], want)


floats32 = st.floats(width=32, allow_nan=False, allow_infinity=False)


@st.composite
def update_cases(draw):
    num_tables = draw(st.integers(1, 3))
    batch = draw(st.integers(1, 3))
    dims = [draw(st.sampled_from([1, 2, 4])) for _ in range(num_tables)]
    rows = [draw(st.integers(1, 5)) for _ in range(num_tables)]
    tables = [
        np.array(draw(st.lists(floats32, min_size=r * d, max_size=r * d)), dtype=F32).reshape(r, d)
        for r, d in zip(rows, dims, strict=True)
    ]
    per_indices, per_offsets = [], []
    for r in rows:
        lengths = draw(st.lists(st.integers(0, 4), min_size=batch, max_size=batch))
        per_indices.append(draw(st.lists(st.integers(0, r - 1), min_size=sum(lengths),
                                         max_size=sum(lengths))))
        per_offsets.append(np.cumsum([0, *lengths[:-1]]))
    indices, offsets, _ = to_tbe(per_indices, per_offsets)
    weighted = draw(st.booleans())
    if weighted:
        modes = ("sum",) * num_tables
        psw = np.array(draw(st.lists(floats32, min_size=indices.size, max_size=indices.size)),
                       dtype=F32)
    else:
        modes = tuple(draw(st.sampled_from(["sum", "mean"])) for _ in range(num_tables))
        psw = None
    width = sum(dims)
    grad = np.array(draw(st.lists(floats32, min_size=batch * width, max_size=batch * width)),
                    dtype=F32).reshape(batch, width)
    lr = draw(st.sampled_from([0.0, 0.01, 0.1, 1.0, -0.5, 3.0]))
    max_unique_rows = draw(st.one_of(st.none(), st.integers(1, 4)))
    return tables, grad, indices, offsets, modes, lr, psw, max_unique_rows


@settings(max_examples=150, deadline=None)
@given(update_cases())
def test_property_update_equals_reference_loop(case):
    tables, grad, indices, offsets, modes, lr, psw, max_unique_rows = case
    got, got_chunks = sparse_sgd_update(
        tables, grad, indices, offsets, modes, lr, psw, max_unique_rows=max_unique_rows
    )
    want, want_chunks = reference_sparse_sgd(
        tables, grad, indices, offsets, modes, lr, psw, max_unique_rows
    )
    assert got_chunks == want_chunks
    for g, w in zip(got, want, strict=True):
        assert same_bits(g, w)


@settings(max_examples=80, deadline=None)
@given(update_cases())
def test_property_chunks_partition_the_occurrences(case):
    tables, grad, indices, offsets, modes, lr, psw, max_unique_rows = case
    _, chunks = sparse_sgd_update(
        tables, grad, indices, offsets, modes, lr, psw, max_unique_rows=max_unique_rows
    )
    occurrences = [(t, row) for t, _, _, row in tbe_occurrences(indices, offsets, len(tables))]
    for chunk in chunks[:-1]:  # a chunk closes only when full
        assert max_unique_rows is not None and len(chunk) == max_unique_rows
    for chunk in chunks:
        assert len(set(chunk)) == len(chunk)
        assert max_unique_rows is None or len(chunk) <= max_unique_rows
    # walking the occurrences, each chunk is exactly the distinct rows of a maximal run
    position = 0
    for chunk in chunks:
        seen = []
        while position < len(occurrences) and (
            occurrences[position] in seen or len(seen) < len(chunk)
        ):
            if occurrences[position] not in seen:
                seen.append(occurrences[position])
            position += 1
        assert seen == chunk
    assert position == len(occurrences)


@pytest.mark.parametrize("max_unique_rows", [None, 1, 3, 64])
def test_update_on_a_real_batch_matches_reference(max_unique_rows):
    from sw_model import get_preset, make_batch

    preset = get_preset("tiny")
    batch = make_batch(preset, 3)
    rng = np.random.default_rng(8)
    tables = [rng.standard_normal((n, preset.dim)).astype(F32) for n in preset.table_rows]
    grad = rng.standard_normal((preset.batch_size, preset.num_tables * preset.dim)).astype(F32)
    got = sparse_sgd_update(tables, grad, batch.indices, batch.offsets, preset.table_modes, 0.3,
                            max_unique_rows=max_unique_rows)
    want = reference_sparse_sgd(tables, grad, batch.indices, batch.offsets, preset.table_modes,
                                0.3, None, max_unique_rows)
    assert got.chunks == want[1]
    assert all(same_bits(g, w) for g, w in zip(got.tables, want[0], strict=True))
