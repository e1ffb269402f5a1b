"""Bit-exact embedding pooling and sparse SGD update (the near-memory unit's golden model).

Layouts
-------
* Single table (`embedding_bag`): ``torch.nn.functional.embedding_bag`` with
  ``include_last_offset=False``: ``offsets`` has one entry per bag, bag b is
  ``indices[offsets[b]:offsets[b+1]]`` and the last bag runs to the end. ``offsets[0]`` must be 0.
* TBE (`embedding_bag_tbe`, `sparse_sgd_update`): FBGEMM table-batched form. T tables, B bags
  per table; ``indices`` concatenates all tables table-major; ``offsets`` has B*T + 1 entries,
  entry t*B + b is the start of bag b of table t, the last entry equals ``len(indices)``. The
  output is (B, sum of D_t) with table t's block at column sum(D_0..D_{t-1}).

Accumulation order (the bit-exact contract)
-------------------------------------------
Nothing here uses np.sum, np.dot, @ or einsum: NumPy sums pairwise and BLAS reorders and fuses.
Every value is produced one float32 operation at a time (vectorised only across the D lanes
of a row and across independent bags), round-to-nearest-even, no fused multiply-add.

* SUM: ``acc = +0.0; for each index in bag order: acc = acc + row``. An empty bag gives +0.0
  in every lane, and so does a bag whose rows are all -0.0 (+0.0 + -0.0 = +0.0).
* weighted SUM: ``acc = acc + (row * w)``: the product is rounded, then the sum (two roundings).
* MEAN: the SUM above, then ``acc * (float32(1) / float32(L))``: one float32 division for the
  reciprocal, one float32 multiply. Empty bags stay +0.0. Weights are not allowed with MEAN.

Sparse SGD update (FBGEMM "exact", coalesced)
---------------------------------------------
Occurrences are walked in TBE order (table-major, then bag, then position in the bag). The
gradient contribution of an occurrence in bag b of table t is
``g = grad_out[b, block t]`` (SUM), ``g * w`` (weighted, one multiply) or
``g * (float32(1) / float32(L))`` (MEAN, the forward's reciprocal). For each distinct
(table, row) the contributions are summed in occurrence order starting from +0.0, then the row
is updated once: ``w = w - (float32(lr) * g_sum)`` (two roundings, no FMA).

Chunking (limited on-chip capacity; the hardware implements exactly this): with
``max_unique_rows = M`` the walk keeps the set of distinct (table, row) of the current chunk.
When an occurrence would bring in the (M+1)-th distinct row, the chunk is closed first: every
row of the chunk is updated (from the weights as they stand; the rows of one chunk are distinct,
so their order does not matter), then a new chunk starts with that occurrence. A row that
appears in several chunks is therefore updated several times, once per chunk, in chunk order.
``max_unique_rows=None`` means one chunk for the whole batch.
"""

from __future__ import annotations

import itertools
import math
from numbers import Real
from typing import NamedTuple

import numpy as np

from .validation import (
    as_index_array,
    check_index_range,
    check_mode,
    check_modes,
    check_offsets,
    check_per_sample_weights,
    check_table,
    check_tables,
)

__all__ = [
    "SparseUpdate",
    "embedding_bag",
    "embedding_bag_tbe",
    "embedding_bag_tbe_grad",
    "mean_scale",
    "sparse_sgd_update",
]


def mean_scale(lengths: np.ndarray, dtype=np.float32) -> np.ndarray:
    """The MEAN factor ``1 / L`` computed as one division in `dtype` (float32 for the contract)."""
    dtype = np.dtype(dtype)
    return dtype.type(1) / np.asarray(lengths).astype(dtype)


def _accumulate(weight, indices, starts, lengths, per_sample_weights) -> np.ndarray:
    """The SUM (weighted SUM) of every bag, sequential in index order; bags advance together."""
    acc = np.zeros((starts.size, weight.shape[1]), dtype=np.float32)
    longest = int(lengths.max()) if lengths.size else 0
    with np.errstate(all="ignore"):  # IEEE results (inf, NaN) are the contract, not errors
        for position in range(longest):
            bags = np.flatnonzero(lengths > position)
            where = starts[bags] + position
            rows = weight[indices[where]]
            if per_sample_weights is not None:
                rows = rows * per_sample_weights[where][:, None]
            acc[bags] = acc[bags] + rows
    return acc


def _scale_mean(acc, lengths) -> np.ndarray:
    """MEAN: every non-empty bag's sum times float32(1) / float32(L); empty bags stay +0.0."""
    acc = acc.copy()
    nonempty = np.flatnonzero(lengths > 0)
    with np.errstate(all="ignore"):
        acc[nonempty] = acc[nonempty] * mean_scale(lengths[nonempty])[:, None]
    return acc


def _pool(weight, indices, starts, lengths, mode, per_sample_weights) -> np.ndarray:
    """Pool bags sequentially in index order; bags are independent, so they advance together."""
    acc = _accumulate(weight, indices, starts, lengths, per_sample_weights)
    return _scale_mean(acc, lengths) if mode == "mean" else acc


def embedding_bag(weight, indices, offsets, mode="sum", per_sample_weights=None) -> np.ndarray:
    """Pool one table: (B, D) float32, B = len(offsets). See the module docstring for order."""
    check_table(weight, "weight")
    check_mode(mode)
    indices = as_index_array(indices, "indices")
    offsets = as_index_array(offsets, "offsets")
    check_offsets(offsets, indices.size, last_is_total=False)
    check_index_range(indices, offsets, weight.shape[0], table=None)
    per_sample_weights = check_per_sample_weights(per_sample_weights, indices.size, (mode,))
    ends = np.append(offsets[1:], indices.size)[: offsets.size]
    return _pool(weight, indices, offsets, ends - offsets, mode, per_sample_weights)


class _TBE(NamedTuple):
    """Validated TBE inputs."""

    tables: list[np.ndarray]
    indices: np.ndarray
    offsets: np.ndarray
    modes: tuple[str, ...]
    per_sample_weights: np.ndarray | None
    batch_size: int

    def table_span(self, t: int) -> tuple[int, int]:
        """First and one-past-last index position of table t."""
        b = self.batch_size
        return int(self.offsets[t * b]), int(self.offsets[(t + 1) * b])

    def bag_starts(self, t: int) -> np.ndarray:
        b = self.batch_size
        return self.offsets[t * b : (t + 1) * b]

    def bag_lengths(self, t: int) -> np.ndarray:
        b = self.batch_size
        return self.offsets[t * b + 1 : (t + 1) * b + 1] - self.offsets[t * b : (t + 1) * b]

    def column_offsets(self) -> list[int]:
        """Start column of every table's block in the (B, sum D) layout, plus the total width."""
        return [0, *np.cumsum([w.shape[1] for w in self.tables]).tolist()]


def _check_tbe(weights, indices, offsets, modes, per_sample_weights) -> _TBE:
    tables = check_tables(weights)
    num_tables = len(tables)
    modes = check_modes(modes, num_tables)
    indices = as_index_array(indices, "indices")
    offsets = as_index_array(offsets, "offsets")
    if offsets.size == 0 or (offsets.size - 1) % num_tables:
        raise ValueError(
            f"offsets has {offsets.size} entries; with {num_tables} tables it must have "
            f"B*{num_tables} + 1 entries"
        )
    check_offsets(offsets, indices.size, last_is_total=True)
    tbe = _TBE(tables, indices, offsets, modes, None, (offsets.size - 1) // num_tables)
    for t, table in enumerate(tables):
        begin, end = tbe.table_span(t)
        check_index_range(
            indices[begin:end], tbe.bag_starts(t) - begin, table.shape[0], table=t,
            index_base=begin,
        )
    per_sample_weights = check_per_sample_weights(per_sample_weights, indices.size, modes)
    return tbe._replace(per_sample_weights=per_sample_weights)


def embedding_bag_tbe(weights, indices, offsets, modes, per_sample_weights=None) -> np.ndarray:
    """Pool T tables in the TBE form: (B, sum D) float32, table blocks in table order.

    `modes` is 'sum' or 'mean' for all tables, or one per table. `per_sample_weights` (float32,
    one per index) applies to every table, which must then all be 'sum', as in FBGEMM.
    """
    tbe = _check_tbe(weights, indices, offsets, modes, per_sample_weights)
    blocks = []
    for t, table in enumerate(tbe.tables):
        base = tbe.table_span(t)[0]
        psw = None if tbe.per_sample_weights is None else tbe.per_sample_weights[base:]
        blocks.append(
            _pool(table, tbe.indices[base:], tbe.bag_starts(t) - base, tbe.bag_lengths(t),
                  tbe.modes[t], psw)
        )
    return np.concatenate(blocks, axis=1)


def _occurrence_gradients(tbe: _TBE, grad_out: np.ndarray, t: int, begin: int, end: int):
    """Gradient contribution of each occurrence in positions [begin, end) of table t."""
    positions = np.arange(begin, end)
    bag = np.searchsorted(tbe.offsets, positions, side="right") - 1  # the bag holding it
    sample = bag - t * tbe.batch_size
    columns = tbe.column_offsets()
    contribution = grad_out[sample, columns[t] : columns[t + 1]]
    if tbe.per_sample_weights is not None:
        contribution = contribution * tbe.per_sample_weights[positions][:, None]
    elif tbe.modes[t] == "mean":
        lengths = tbe.offsets[bag + 1] - tbe.offsets[bag]
        contribution = contribution * mean_scale(lengths, grad_out.dtype)[:, None]
    return contribution


def _coalesce(rows: np.ndarray, contributions: np.ndarray):
    """Sum the contributions of each distinct row in occurrence order, starting from +0.0.

    Returns the distinct rows in order of first occurrence and their sums. The k-th
    occurrences of all distinct rows are added in one vector step; within a row, k rises with
    occurrence order, so every row's sum is strictly sequential.
    """
    sorted_rows, first, inverse = np.unique(rows, return_index=True, return_inverse=True)
    by_first = np.argsort(first)
    slot_of_sorted = np.empty_like(by_first)
    slot_of_sorted[by_first] = np.arange(by_first.size)
    slot = slot_of_sorted[inverse]
    counts = np.bincount(slot, minlength=by_first.size)
    order = np.argsort(slot, kind="stable")
    nth = np.empty_like(slot)
    nth[order] = np.arange(slot.size) - (np.cumsum(counts) - counts)[slot[order]]
    sums = np.zeros((by_first.size, contributions.shape[1]), dtype=contributions.dtype)
    for k in range(int(counts.max()) if counts.size else 0):
        occ = np.flatnonzero(nth == k)
        sums[slot[occ]] = sums[slot[occ]] + contributions[occ]
    return sorted_rows[by_first], sums


def embedding_bag_tbe_grad(
    weights, grad_out, indices, offsets, modes, per_sample_weights=None
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Coalesced gradient of every looked-up row: per table (distinct rows, summed gradients).

    Rows are in order of first occurrence. This is the unchunked gradient that
    `sparse_sgd_update(..., max_unique_rows=None)` applies. `grad_out` may be float32 (the
    contract) or float64 (for analysis); the arithmetic runs in its dtype. `weights` is only
    used for shapes and range checks.
    """
    tbe = _check_tbe(weights, indices, offsets, modes, per_sample_weights)
    grad_out = _check_grad_out(grad_out, tbe, (np.float32, np.float64))
    result = []
    with np.errstate(all="ignore"):
        for t in range(len(tbe.tables)):
            begin, end = tbe.table_span(t)
            contributions = _occurrence_gradients(tbe, grad_out, t, begin, end)
            result.append(_coalesce(tbe.indices[begin:end], contributions))
    return result


def _check_grad_out(grad_out, tbe: _TBE, dtypes) -> np.ndarray:
    if not isinstance(grad_out, np.ndarray):
        raise TypeError("grad_out must be a numpy array")
    if grad_out.dtype not in [np.dtype(d) for d in dtypes]:
        names = " or ".join(np.dtype(d).name for d in dtypes)
        raise TypeError(f"grad_out must have dtype {names}, got {grad_out.dtype}")
    expected = (tbe.batch_size, tbe.column_offsets()[-1])
    if grad_out.shape != expected:
        raise ValueError(
            f"grad_out must have shape (B, sum D) = {expected}, got {grad_out.shape}"
        )
    return grad_out


def _check_lr(lr) -> np.float32:
    if isinstance(lr, bool) or not isinstance(lr, Real):
        raise TypeError(f"lr must be a real number, got {type(lr).__name__}")
    if not math.isfinite(lr):
        raise ValueError(f"lr must be finite, got {lr}")
    return np.float32(lr)


def _check_max_unique_rows(max_unique_rows) -> int | None:
    if max_unique_rows is None:
        return None
    if isinstance(max_unique_rows, bool) or not isinstance(max_unique_rows, int | np.integer):
        raise TypeError(f"max_unique_rows must be an int or None, got {max_unique_rows!r}")
    if max_unique_rows < 1:
        raise ValueError(f"max_unique_rows must be at least 1, got {max_unique_rows}")
    return int(max_unique_rows)


def _chunk_bounds(tbe: _TBE, max_unique_rows: int | None) -> list[int]:
    """Positions where chunks start, plus the end: see "Chunking" in the module docstring."""
    total = tbe.indices.size
    if max_unique_rows is None or total == 0:
        return [0, total]
    table_of = np.repeat(np.arange(len(tbe.tables)), np.diff(tbe.offsets[:: tbe.batch_size]))
    bounds, chunk_rows = [0], set()
    for position, key in enumerate(zip(table_of.tolist(), tbe.indices.tolist(), strict=True)):
        if key not in chunk_rows and len(chunk_rows) == max_unique_rows:
            bounds.append(position)
            chunk_rows = set()
        chunk_rows.add(key)
    bounds.append(total)
    return bounds


class SparseUpdate(NamedTuple):
    """Result of `sparse_sgd_update`."""

    tables: list[np.ndarray]
    """The updated tables (the input arrays themselves when ``inplace=True``)."""
    chunks: list[list[tuple[int, int]]]
    """Distinct (table, row) of each chunk in order of first occurrence; [] if no indices."""

    def updated_rows(self) -> list[np.ndarray]:
        """Per table, the distinct rows the update wrote (ascending, int64): the union of the
        chunks, as `sw_model.relaxed.relaxed_lookup` takes it."""
        rows = [set() for _ in self.tables]
        for chunk in self.chunks:
            for t, row in chunk:
                rows[t].add(row)
        return [np.array(sorted(r), dtype=np.int64) for r in rows]


def sparse_sgd_update(
    weights,
    grad_out,
    indices,
    offsets,
    modes,
    lr,
    per_sample_weights=None,
    *,
    max_unique_rows: int | None = None,
    inplace: bool = False,
) -> SparseUpdate:
    """Apply SGD to the looked-up rows, coalesced per row and chunked (module docstring).

    `grad_out` is the float32 gradient of the pooled output, shape (B, sum D) in the TBE
    layout. The inputs are not modified unless ``inplace=True``, in which case the tables are
    updated in place and returned.
    """
    update, _ = _sparse_sgd_chunks(weights, grad_out, indices, offsets, modes, lr,
                                   per_sample_weights, max_unique_rows, inplace)
    return update


def _sparse_sgd_chunks(weights, grad_out, indices, offsets, modes, lr, per_sample_weights,
                       max_unique_rows, inplace):
    """`sparse_sgd_update`, and per chunk and table ``(rows, new - old)``: what each chunk
    changed its rows by, one float32 subtraction per lane (`sw_model.relaxed`)."""
    tbe = _check_tbe(weights, indices, offsets, modes, per_sample_weights)
    grad_out = _check_grad_out(grad_out, tbe, (np.float32,))
    lr = _check_lr(lr)
    max_unique_rows = _check_max_unique_rows(max_unique_rows)
    tables = tbe.tables if inplace else [table.copy() for table in tbe.tables]
    bounds = _chunk_bounds(tbe, max_unique_rows)
    chunks, deltas = [], []
    with np.errstate(all="ignore"):
        for chunk_begin, chunk_end in itertools.pairwise(bounds):
            chunk = []
            changed = [(np.zeros(0, np.int64), np.zeros((0, table.shape[1]), np.float32))
                       for table in tables]
            for t, table in enumerate(tables):
                begin, end = tbe.table_span(t)
                begin, end = max(begin, chunk_begin), min(end, chunk_end)
                if begin >= end:
                    continue
                contributions = _occurrence_gradients(tbe, grad_out, t, begin, end)
                rows, sums = _coalesce(tbe.indices[begin:end], contributions)
                old = table[rows]
                table[rows] = old - lr * sums
                changed[t] = (rows, table[rows] - old)
                chunk.extend((t, row) for row in rows.tolist())
            if chunk:
                chunks.append(chunk)
                deltas.append(tuple(changed))
    return SparseUpdate(tables, chunks), deltas
