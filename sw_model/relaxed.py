"""Relaxed lookup: batch N+1 pools the tables as they were before UPDATE(N), then is corrected.

TrainingCXL (DESIGN.md section 1, research/papers.md 1.4) lets LOOKUP(N+1) gather while the
GPU still works on batch N, from the tables *before* batch N's update, and adds batch N's
update to the already-reduced result afterwards. DESIGN.md: "Addition commutes, so the result
is the same up to floating-point rounding, which the golden model reproduces exactly". So the
relaxed result is its own exact formula, below; it is *not* bit-identical to a strict lookup
after UPDATE(N) (float32 addition is not associative). This module is that formula.

Definition (the bit-exact contract)
-----------------------------------
Inputs, per table t:

* ``OLD_t``: the table as it stood before UPDATE(N) (what the stale gather reads; for the rows
  batch N updates, also exactly batch N's undo-log entries);
* ``U_t``: the set of distinct rows UPDATE(N) wrote: every row batch N looked up in table t,
  the union of `SparseUpdate.chunks` (known from N's indices before its gradients);
* ``NEW_t``: the table after UPDATE(N), read only at the rows of ``U_t`` (with a chunked
  update, after the last chunk);
* batch N+1's indices, offsets, per-table mode and per-sample weights (TBE form).

1. Delta. For every row r of ``U_t`` that batch N+1 also looks up (an *overlap row*):
   ``delta[r] = NEW_t[r] - OLD_t[r]``, one float32 subtraction per lane (round to nearest
   even): what the row changed by (rounded to float32), whatever the optimizer.
   A *chunked* update (more distinct rows than the device's ``max_unique_rows``, see
   `sw_model.embedding`) is corrected chunk by chunk, as the device corrects after each
   chunk it writes: chunk c's delta is the row after chunk c minus the row before it, and
   steps 1 and 3 run once per chunk, in chunk order, over that chunk's rows (a row two chunks
   wrote is corrected twice). With one chunk the two readings are the same.
2. Stale gather. Each bag of N+1 is accumulated from ``OLD_t`` exactly as a strict lookup
   accumulates (`sw_model.embedding`): ``acc = +0.0``, then for each index i in bag order
   ``acc = acc + OLD_t[idx_i]`` (weighted: ``acc + (OLD_t[idx_i] * w_i)``, two roundings).
   MEAN is *not* applied yet.
3. Correction. Then, walking the same bag again in index order, for each occurrence i whose
   row is in ``U_t``: ``acc = acc + delta[idx_i]`` (weighted: ``acc + (delta[idx_i] * w_i)``,
   two roundings). A row that occurs k times in the bag is corrected k times. Occurrences of
   rows not in ``U_t`` add nothing (not even +0.0).
4. MEAN tables: ``acc = acc * (float32(1) / float32(L))`` for a non-empty bag, as strict.
   Empty bags stay +0.0.

The result of step 4 is the pooled output of LOOKUP(N+1). Consequences:

* a bag none of whose indices is in ``U_t`` is bit-identical to the strict lookup (the rows it
  reads did not change); so is every bag when nothing is pending (the first batch of a run, the
  first batch after RECOVER);
* other bags agree with strict to within rounding (one extra rounding per correction, and the
  additions are in a different order); they may differ in the last bits, and they do. Example:
  OLD[0] = 1, NEW[0] = 1 + 2^-23, OLD[1] = NEW[1] = 2^-24 (not updated), bag [0, 1]: strict
  (+0 + (1 + 2^-23)) + 2^-24 = 1 + 2^-22 (a tie, to even); relaxed ((+0 + 1) + 2^-24) + 2^-23
  = 1 + 2^-23;
* a one-row unweighted SUM bag gets strict's bits when its row was written once (one chunk)
  with a step no larger than the row in magnitude (Fast2Sum: NEW - OLD is then exact and
  OLD + (NEW - OLD) = NEW); the `kaggle` preset (one row per bag) trains bit-identically in
  both modes over its 100 batches;
* non-finite rows: ``delta`` is NaN when OLD and NEW are the same infinity, so such a bag is
  NaN where strict would give the infinity (DESIGN.md section 3: NaNs need only agree in being
  NaN).

Counts (what the benchmark and the RTL's counters measure): *rows corrected* = the number of
overlap (table, row) pairs (one delta each), *corrections* = the number of step-3 additions
(occurrences of overlap rows in N+1), *bags corrected* = the number of bags with at least one
correction: exactly the bags that read a row UPDATE(N) wrote (the read-after-write hazards
the relaxation takes off the critical path).

Notes for the RTL
-----------------
* Relaxed mode must give these bits whatever the timing: if UPDATE(N) has already finished
  when LOOKUP(N+1) gathers, ``OLD`` for the rows of ``U`` is still in batch N's undo log.
* The accumulator of a MEAN bag must stay unscaled until its corrections are in (step 4 last).
* Batch N+1's own undo-log entry for an overlap row must be ``NEW[r]`` (the row before
  UPDATE(N+1)), not the stale value its gather read.

Alternatives considered
-----------------------
* Re-pool every affected bag after UPDATE(N) (bit-identical to strict training): it re-reads
  every row of every affected bag after the update, which is the read-after-write stall the
  relaxation exists to remove; with Zipf indices and ~80% batch-to-batch reuse nearly every bag
  is affected. DESIGN.md asks for the update to be added to the pooled result. Such a device
  would be checked against ``lookup="strict"``.
* ``acc - w*OLD + w*NEW`` per occurrence: two more roundings per correction, and the pooling
  unit needs both rows instead of one delta.
* ``delta = -(float32(lr) * g_sum)`` (the optimizer step): not what was applied when the
  subtraction rounds, ambiguous when a chunked update writes a row several times, SGD-only.
* Correcting the MEAN-scaled output (``out + delta * (1/L)``): one more rounding per bag.

`relaxed_lookup` computes one batch; ``train(..., lookup="relaxed")`` (`sw_model.train`)
trains with it, batch N+1 corrected by batch N, keeping batch N's `UndoLog` in the state.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from .embedding import _accumulate, _check_tbe, _scale_mean, _sparse_sgd_chunks
from .validation import as_index_array, check_tables

__all__ = ["RelaxedLookup", "UndoLog", "relaxed_lookup", "update_deltas"]


class RelaxedLookup(NamedTuple):
    """Result of `relaxed_lookup`."""

    pooled: np.ndarray
    """(B, sum D) float32: the relaxed pooled output (step 4 of the definition)."""
    stale: np.ndarray
    """(B, sum D) float32: the output without the correction (steps 2 and 4 only)."""
    overlap_rows: list[np.ndarray]
    """Per table, the rows both in U and in batch N+1's indices (ascending, int64)."""
    bag_corrections: np.ndarray
    """(T, B) int64: the number of corrections added to each bag (TBE bag order)."""

    @property
    def rows_corrected(self) -> int:
        """Overlap (table, row) pairs: one delta each."""
        return sum(int(rows.size) for rows in self.overlap_rows)

    @property
    def corrections(self) -> int:
        """Correction additions (occurrences of overlap rows in batch N+1)."""
        return int(self.bag_corrections.sum())

    @property
    def bags_corrected(self) -> int:
        """Bags with at least one correction."""
        return int(np.count_nonzero(self.bag_corrections))


def _check_updated(updated_tables, updated_rows, stale: list[np.ndarray]) -> list[np.ndarray]:
    """Validate NEW and U against OLD; return U as one sorted, distinct int64 array per table."""
    new = check_tables(updated_tables, "updated_tables")
    if len(new) != len(stale):
        raise ValueError(
            f"updated_tables has {len(new)} tables but stale_tables has {len(stale)}"
        )
    for t, (a, b) in enumerate(zip(new, stale, strict=True)):
        if a.shape != b.shape:
            raise ValueError(
                f"updated_tables[{t}] has shape {a.shape} but stale_tables[{t}] has {b.shape}"
            )
    if isinstance(updated_rows, np.ndarray | str) or not isinstance(updated_rows, Sequence):
        raise TypeError("updated_rows must be a sequence with one 1-D int array per table")
    if len(updated_rows) != len(stale):
        raise ValueError(
            f"updated_rows has {len(updated_rows)} entries but there are {len(stale)} tables"
        )
    result = []
    for t, rows in enumerate(updated_rows):
        rows = as_index_array(rows, f"updated_rows[{t}]")
        bad = np.flatnonzero(rows >= stale[t].shape[0])
        if bad.size:
            pos = int(bad[0])
            raise ValueError(
                f"updated_rows[{t}][{pos}] = {rows[pos]} is out of range for table {t} of "
                f"{stale[t].shape[0]} rows"
            )
        result.append(np.unique(rows))
    return result


def _check_chunk_deltas(chunk_deltas, stale):
    """None, or per chunk one ``(rows, delta)`` per table with ascending distinct rows."""
    if chunk_deltas is None:
        return None
    checked = []
    for c, chunk in enumerate(chunk_deltas):
        if len(chunk) != len(stale):
            raise ValueError(f"chunk_deltas[{c}] has {len(chunk)} tables, not {len(stale)}")
        tables = []
        for t, (rows, delta) in enumerate(chunk):
            rows = as_index_array(rows, f"chunk_deltas[{c}][{t}] rows")
            delta = np.asarray(delta)
            if delta.dtype != np.float32 or delta.shape != (rows.size, stale[t].shape[1]):
                raise ValueError(f"chunk_deltas[{c}][{t}]: delta must be float32 of shape "
                                 f"{(rows.size, stale[t].shape[1])}")
            order = np.argsort(rows, kind="stable")
            if np.any(np.diff(rows[order]) == 0):
                raise ValueError(f"chunk_deltas[{c}][{t}]: a row appears twice")
            tables.append((rows[order], delta[order]))
        checked.append(tables)
    return checked


def update_deltas(stale_tables, grad_out, indices, offsets, modes, lr, per_sample_weights=None,
                  *, max_unique_rows=None):
    """UPDATE(N) of `sparse_sgd_update` from `stale_tables` (not modified): the updated tables
    and, per chunk and table, ``(rows, delta)`` for `relaxed_lookup`'s ``chunk_deltas``."""
    update, deltas = _sparse_sgd_chunks(stale_tables, grad_out, indices, offsets, modes, lr,
                                        per_sample_weights, max_unique_rows, False)
    return update, deltas


def relaxed_lookup(
    stale_tables,
    updated_tables,
    updated_rows,
    indices,
    offsets,
    modes,
    per_sample_weights=None,
    *,
    chunk_deltas=None,
) -> RelaxedLookup:
    """Batch N+1's pooled output the relaxed way (module docstring).

    `stale_tables`: OLD, the tables before UPDATE(N); `updated_tables`: NEW, the tables after it
    (only the rows of U are read); `updated_rows`: U, one int array per table of the rows batch
    N updated (any order, repeats allowed: a set), e.g. ``SparseUpdate.updated_rows()``;
    `indices`, `offsets`, `modes`, `per_sample_weights`: batch N+1 in the TBE form of
    `embedding_bag_tbe`. `chunk_deltas`: for a chunked UPDATE(N), per chunk and table
    ``(rows, delta)`` (`update_deltas`); the corrections then use them, chunk by chunk,
    instead of ``NEW - OLD``. Nothing is modified.
    """
    check_tables(stale_tables, "stale_tables")
    tbe = _check_tbe(stale_tables, indices, offsets, modes, per_sample_weights)
    updated = _check_updated(updated_tables, updated_rows, tbe.tables)
    new_tables = list(updated_tables)
    chunk_deltas = _check_chunk_deltas(chunk_deltas, tbe.tables)
    batch = tbe.batch_size
    pooled_blocks, stale_blocks, overlap_rows = [], [], []
    bag_corrections = np.zeros((len(tbe.tables), batch), dtype=np.int64)
    with np.errstate(all="ignore"):  # IEEE results (inf, NaN) are the contract, not errors
        for t, (old, new) in enumerate(zip(tbe.tables, new_tables, strict=True)):
            begin, end = tbe.table_span(t)
            rows = tbe.indices[begin:end]
            starts, lengths = tbe.bag_starts(t) - begin, tbe.bag_lengths(t)
            psw = None if tbe.per_sample_weights is None else tbe.per_sample_weights[begin:end]
            acc = _accumulate(old, rows, starts, lengths, psw)  # step 2
            stale = acc.copy()
            if chunk_deltas is None:
                written = updated[t]
                chunks = [(written, new[written] - old[written])]  # step 1
            else:
                chunks = [chunk[t] for chunk in chunk_deltas]
            overlap = np.unique(rows[np.isin(rows, updated[t])])
            for written, delta in chunks:
                hit = np.flatnonzero(np.isin(rows, written))
                contribution = delta[np.searchsorted(written, rows[hit])]
                if psw is not None:
                    contribution = contribution * psw[hit][:, None]
                bag = np.repeat(np.arange(batch), lengths)[hit]
                position = hit - starts[bag]
                for k in np.unique(position):  # step 3: in index order; a bag once per step
                    at = np.flatnonzero(position == k)
                    acc[bag[at]] = acc[bag[at]] + contribution[at]
                np.add.at(bag_corrections[t], bag, 1)
            if tbe.modes[t] == "mean":  # step 4
                acc, stale = _scale_mean(acc, lengths), _scale_mean(stale, lengths)
            pooled_blocks.append(acc)
            stale_blocks.append(stale)
            overlap_rows.append(overlap)
    return RelaxedLookup(
        np.concatenate(pooled_blocks, axis=1),
        np.concatenate(stale_blocks, axis=1),
        overlap_rows,
        bag_corrections,
    )


class UndoLog(NamedTuple):
    """The rows one batch's UPDATE wrote and their values before it (that batch's undo log).

    The training loop keeps the last batch's log in `TrainState.undo`; with it, the tables as
    they were before that update (OLD) can be rebuilt from the tables after it (NEW).
    """

    rows: tuple[np.ndarray, ...]
    """Per table, the distinct rows updated (ascending, int64): U of the definition."""
    old: tuple[np.ndarray, ...]
    """Per table, (len(rows), D) float32: those rows before the update."""
    chunk_deltas: tuple | None = None
    """A chunked update's per-chunk ``(rows, delta)`` per table (`relaxed_lookup`); None for
    one chunk (the delta is then NEW - OLD)."""

    @classmethod
    def capture(cls, tables, indices, offsets) -> UndoLog:
        """The log of an update of `tables` by a batch with these TBE `indices`, `offsets`.

        Call it before the update: every row the batch looks up is updated (once per chunk).
        """
        tbe = _check_tbe(tables, indices, offsets, "sum", None)
        rows = []
        for t in range(len(tbe.tables)):
            begin, end = tbe.table_span(t)
            rows.append(np.unique(tbe.indices[begin:end]))
        return cls(tuple(rows), tuple(table[r] for table, r in zip(tbe.tables, rows, strict=True)))

    def restore(self, tables) -> list[np.ndarray]:
        """Copies of `tables` (NEW) with the logged rows set back to their old values (OLD)."""
        stale = [table.copy() for table in tables]
        for table, rows, old in zip(stale, self.rows, self.old, strict=True):
            table[rows] = old
        return stale

    def copy(self) -> UndoLog:
        deltas = None if self.chunk_deltas is None else tuple(
            tuple((r.copy(), d.copy()) for r, d in chunk) for chunk in self.chunk_deltas)
        return UndoLog(tuple(r.copy() for r in self.rows), tuple(o.copy() for o in self.old),
                       deltas)
