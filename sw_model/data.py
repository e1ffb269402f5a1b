"""Seeded synthetic batches: dense features, bags of indices, per-sample weights, labels.

Batch N of a preset is a pure function of (preset, N): its generator is PCG64 seeded with
``[preset.seed, DATA_STREAM, N]``, so any batch can be regenerated on its own (a resumed run
after a crash sees the same data). Per batch the draws are, in order: the dense features
(U[0,1), float32, B x dense_features); then for each table: the B bag lengths, the indices of
all its bags in bag order, and, for weighted pooling, one weight per index (U[0.5,1.5)).

Index distributions
-------------------
* ``uniform``: rows uniform in [0, rows); each bag is de-duplicated and sorted (dlrm's
  ``np.unique`` of the draws), so a bag can be shorter than its drawn length.
* ``zipf``: bounded power law, rank k in 1..rows has probability proportional to k**-s
  (s = `zipf_exponent`, any s > 0). Ranks map to rows through a fixed seeded permutation per
  table, so hot rows are scattered over the table and recur from batch to batch. Bags keep
  their draw order and their duplicates.

Labels come from a hidden teacher (seeded separately): a score per table row and a weight per
dense feature; label = 1 when (sum over tables of the bag's mean row score + sum_j v_j
(x_j - 0.5)) > 0, else 0. The DLRM can learn this, so the loss falls.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from .presets import Preset

__all__ = ["Batch", "BatchGenerator", "ZipfRows", "make_batch", "rng_for", "to_tbe"]

DATA_STREAM = 1
TEACHER_STREAM = 2
ZIPF_STREAM = 3


def rng_for(seed: int, stream: int, *key: int) -> np.random.Generator:
    """An independent PCG64 generator for one use (stream) and key, e.g. a batch number."""
    return np.random.Generator(np.random.PCG64([seed, stream, *key]))


class ZipfRows:
    """Bounded Zipf sampler over the rows of one table (see the module docstring)."""

    def __init__(self, rows: int, exponent: float, rng: np.random.Generator):
        weights = np.arange(1, rows + 1, dtype=np.float64) ** -exponent
        cumulative = np.cumsum(weights)  # sequential: the same bits on every machine
        self.cdf = cumulative / cumulative[-1]
        self.row_of_rank = rng.permutation(rows)

    def row_probabilities(self) -> np.ndarray:
        probabilities = np.empty_like(self.cdf)
        probabilities[self.row_of_rank] = np.diff(self.cdf, prepend=0.0)
        return probabilities

    def draw(self, rng: np.random.Generator, count: int) -> np.ndarray:
        ranks = np.searchsorted(self.cdf, rng.random(count), side="right")
        return self.row_of_rank[np.minimum(ranks, self.cdf.size - 1)]


def to_tbe(table_indices, table_offsets, table_weights=None):
    """Concatenate per-table bags (torch form, offsets of length B) into the FBGEMM TBE form.

    Returns (indices, offsets, per_sample_weights); offsets has B*T + 1 entries, entry t*B + b
    is the start of bag b of table t, the last one is the total number of indices.
    """
    if len({len(o) for o in table_offsets}) > 1:
        raise ValueError("every table must have the same number of bags (B)")
    bases = np.cumsum([0, *(len(i) for i in table_indices)])
    shifted = [
        np.asarray(o, dtype=np.int64) + base
        for o, base in zip(table_offsets, bases[:-1], strict=True)
    ]
    indices = np.concatenate([np.asarray(i, dtype=np.int64) for i in table_indices])
    offsets = np.concatenate([*shifted, [bases[-1]]]).astype(np.int64)
    weights = None if table_weights is None else np.concatenate(table_weights).astype(np.float32)
    return indices, offsets, weights


@dataclass(frozen=True, eq=False)
class Batch:
    """One training batch, in both the per-table (torch) and the TBE (FBGEMM) form."""

    number: int
    dense: np.ndarray  # (B, dense_features) float32
    labels: np.ndarray  # (B,) float32, 0.0 or 1.0
    table_indices: tuple[np.ndarray, ...]  # per table, int64
    table_offsets: tuple[np.ndarray, ...]  # per table, length B, int64, starts at 0
    table_weights: tuple[np.ndarray, ...] | None  # per table, float32, weighted pooling only
    indices: np.ndarray  # TBE: all tables, table-major, int64
    offsets: np.ndarray  # TBE: B*T + 1 entries, int64
    per_sample_weights: np.ndarray | None  # TBE: one float32 per index, or None

    @property
    def batch_size(self) -> int:
        return self.dense.shape[0]


class Teacher:
    """The hidden labelling rule (module docstring).

    Row scores are centred on their expected value under the index distribution, so the
    labels are roughly balanced.
    """

    def __init__(self, preset: Preset, row_probabilities: list[np.ndarray]):
        rng = rng_for(preset.seed, TEACHER_STREAM)
        self.row_scores = []
        for probabilities in row_probabilities:
            scores = rng.standard_normal(probabilities.size)
            self.row_scores.append(scores - np.dot(probabilities, scores))
        self.dense_weights = rng.standard_normal(preset.dense_features)

    def labels(self, dense, table_indices, table_offsets) -> np.ndarray:
        batch = dense.shape[0]
        logit = np.zeros(batch)
        for j, weight in enumerate(self.dense_weights):  # a fixed order: same bits everywhere
            logit += weight * (dense[:, j].astype(np.float64) - 0.5)
        for scores, indices, offsets in zip(
            self.row_scores, table_indices, table_offsets, strict=True
        ):
            lengths = np.diff(np.append(offsets, indices.size))
            bag = np.repeat(np.arange(batch), lengths)
            sums = np.bincount(bag, weights=scores[indices], minlength=batch)
            logit += np.divide(sums, lengths, out=np.zeros(batch), where=lengths > 0)
        return (logit > 0).astype(np.float32)


class BatchGenerator:
    """Generates the batches of one preset; holds the per-table samplers and the teacher."""

    def __init__(self, preset: Preset):
        self.preset = preset
        zipf_rng = rng_for(preset.seed, ZIPF_STREAM)
        self.zipf = [ZipfRows(rows, preset.zipf_exponent, zipf_rng) for rows in preset.table_rows]
        if preset.index_dist == "zipf":
            probabilities = [z.row_probabilities() for z in self.zipf]
        else:
            probabilities = [np.full(rows, 1.0 / rows) for rows in preset.table_rows]
        self.teacher = Teacher(preset, probabilities)

    def _bag_lengths(self, rng) -> np.ndarray:
        p = self.preset
        if p.fixed_bag:
            return np.full(p.batch_size, p.max_bag, dtype=np.int64)
        return rng.integers(0, p.max_bag + 1, size=p.batch_size, dtype=np.int64)

    def _table_bags(self, rng, t: int) -> tuple[np.ndarray, np.ndarray]:
        """Indices and torch-form offsets of table t's B bags."""
        p = self.preset
        lengths = self._bag_lengths(rng)
        total = int(lengths.sum())
        if p.index_dist == "zipf":
            indices = self.zipf[t].draw(rng, total)
        else:
            draws = rng.integers(0, p.table_rows[t], size=total, dtype=np.int64)
            bags = np.split(draws, np.cumsum(lengths)[:-1])
            bags = [np.unique(bag) for bag in bags]  # dlrm: sorted, de-duplicated
            lengths = np.array([bag.size for bag in bags], dtype=np.int64)
            indices = np.concatenate(bags) if bags else draws
        offsets = np.cumsum(lengths) - lengths
        return indices.astype(np.int64), offsets.astype(np.int64)

    def batch(self, number: int) -> Batch:
        if number < 0:
            raise ValueError(f"batch numbers start at 0, got {number}")
        p = self.preset
        rng = rng_for(p.seed, DATA_STREAM, number)
        dense = rng.random((p.batch_size, p.dense_features)).astype(np.float32)
        table_indices, table_offsets, table_weights = [], [], []
        for t in range(p.num_tables):
            indices, offsets = self._table_bags(rng, t)
            table_indices.append(indices)
            table_offsets.append(offsets)
            if p.weighted:
                table_weights.append(rng.uniform(0.5, 1.5, indices.size).astype(np.float32))
        weights = tuple(table_weights) if p.weighted else None
        indices, offsets, per_sample_weights = to_tbe(table_indices, table_offsets, weights)
        return Batch(
            number=number,
            dense=dense,
            labels=self.teacher.labels(dense, table_indices, table_offsets),
            table_indices=tuple(table_indices),
            table_offsets=tuple(table_offsets),
            table_weights=weights,
            indices=indices,
            offsets=offsets,
            per_sample_weights=per_sample_weights,
        )


@functools.lru_cache(maxsize=8)
def _generator(preset: Preset) -> BatchGenerator:
    return BatchGenerator(preset)


def make_batch(preset: Preset, number: int) -> Batch:
    """Batch `number` of `preset` (cached generator; the batch itself is regenerated)."""
    return _generator(preset).batch(number)
