"""The golden training loop.

One step for batch N (data from `sw_model.data.make_batch(preset, N)`):

1. pooled = embedding_bag_tbe(tables, ...) (the device's lookup);
2. MLP forward, BCE loss, backward -> MLP gradients and d(loss)/d(pooled) (B, F*D) float32;
3. tables = sparse_sgd_update(tables, d_pooled, ..., lr, max_unique_rows) (the device's update);
4. MLP = MLP - lr * gradients (the host's step).

Both optimizers use `preset.lr`. Training is deterministic: the same preset (seed) and start
state give the same bits. A run can start from any `TrainState` (tables, MLP, next batch
number) and stop after any batch, which is how `sw_model.checkpoint` resumes after a crash.

Lookup modes (``lookup=``):

* ``"strict"`` (default): step 1 pools the tables after batch N-1's update, as above;
* ``"relaxed"``: step 1 is `sw_model.relaxed.relaxed_lookup`: batch N pools the tables as they
  were *before* batch N-1's update and is then corrected with N-1's deltas (exact definition in
  the `sw_model.relaxed` docstring). Batch N-1's rows and their old values travel in
  `TrainState.undo` (its undo log, kept in both modes), so a resumed run equals the straight
  run. A state without an undo log (the initial state, a state recovered after a crash) has no
  update pending: its first batch is looked up strictly, as the device does after RECOVER.
  Everything after the lookup is the same; the records count the corrections.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from .data import make_batch
from .dlrm import MLPParams, bce_loss, dense_backward, dense_forward, init_params, sgd_step
from .dlrm import pool_embeddings as _pool_embeddings
from .embedding import _sparse_sgd_chunks
from .presets import Preset
from .relaxed import UndoLog, relaxed_lookup

__all__ = [
    "LOOKUP_MODES",
    "BatchRecord",
    "TrainResult",
    "TrainState",
    "initial_state",
    "table_digest",
    "train",
    "train_step",
]


LOOKUP_MODES = ("strict", "relaxed")


def table_digest(table: np.ndarray) -> str:
    """sha256 hex digest of a table's row-major little-endian float32 bytes."""
    return hashlib.sha256(np.ascontiguousarray(table, dtype="<f4").tobytes()).hexdigest()


@dataclass(eq=False)
class TrainState:
    """Model state before batch `next_batch`: the tables are after batch next_batch - 1."""

    tables: list[np.ndarray]
    mlp: MLPParams
    next_batch: int = 0
    undo: UndoLog | None = None
    """Batch next_batch - 1's undo log (the rows it updated, their values before); None when
    no update is pending for a relaxed lookup (initial or recovered state)."""

    def copy(self) -> TrainState:
        undo = None if self.undo is None else self.undo.copy()
        return TrainState([t.copy() for t in self.tables], self.mlp.copy(), self.next_batch, undo)


def initial_state(preset: Preset) -> TrainState:
    tables, mlp = init_params(preset)
    return TrainState(tables, mlp, 0)


@dataclass(frozen=True, eq=False)
class BatchRecord:
    """What one batch produced."""

    number: int
    pooled: np.ndarray | None  # (B, F*D) float32 lookup output (None if not recorded)
    loss: float  # BCE of this batch's forward pass (before its update)
    table_digests: tuple[str, ...]  # every table after the update
    mlp_digest: str  # MLP parameters after the step
    update_chunks: list[list[tuple[int, int]]]  # distinct (table, row) per update chunk
    lookup: str = "strict"  # how `pooled` was produced: 'strict' or 'relaxed'
    rows_corrected: int = 0  # relaxed: (table, row) pairs shared with the previous batch's update
    corrections: int = 0  # relaxed: correction additions (occurrences of those rows)
    bags_corrected: int = 0  # relaxed: bags with at least one correction


@dataclass(frozen=True, eq=False)
class TrainResult:
    records: list[BatchRecord] = field(default_factory=list)
    state: TrainState | None = None  # after the last trained batch

    @property
    def losses(self) -> np.ndarray:
        return np.array([r.loss for r in self.records])


def _check_state(preset: Preset, state: TrainState) -> None:
    if len(state.tables) != preset.num_tables:
        raise ValueError(
            f"state has {len(state.tables)} tables, preset {preset.name!r} has {preset.num_tables}"
        )
    for t, (table, rows) in enumerate(zip(state.tables, preset.table_rows, strict=True)):
        if table.shape != (rows, preset.dim) or table.dtype != np.float32:
            raise ValueError(
                f"table {t} is {table.dtype} {table.shape}; preset {preset.name!r} needs "
                f"float32 {(rows, preset.dim)}"
            )
    if state.next_batch < 0:
        raise ValueError(f"next_batch must be >= 0, got {state.next_batch}")
    undo = state.undo
    if undo is not None:
        if not isinstance(undo, UndoLog):
            raise TypeError(f"state.undo must be an UndoLog or None, got {type(undo).__name__}")
        if len(undo.rows) != preset.num_tables or len(undo.old) != preset.num_tables:
            raise ValueError(
                f"state.undo covers {len(undo.rows)} tables, preset {preset.name!r} has "
                f"{preset.num_tables}"
            )
        for t, (rows, old) in enumerate(zip(undo.rows, undo.old, strict=True)):
            if rows.ndim != 1 or old.shape != (rows.size, preset.dim) or old.dtype != np.float32:
                raise ValueError(
                    f"state.undo table {t}: {rows.size} rows need float32 old values of shape "
                    f"{(rows.size, preset.dim)}, got {old.dtype} {old.shape}"
                )
            if rows.size and (rows.min() < 0 or rows.max() >= preset.table_rows[t]):
                raise ValueError(
                    f"state.undo table {t}: rows must be in 0..{preset.table_rows[t] - 1}"
                )


def _check_lookup(lookup) -> str:
    if lookup not in LOOKUP_MODES:
        raise ValueError(f"lookup must be 'strict' or 'relaxed', got {lookup!r}")
    return lookup


def train_step(
    preset: Preset,
    state: TrainState,
    *,
    max_unique_rows: int | None = None,
    record_pooled: bool = True,
    lookup: str = "strict",
) -> BatchRecord:
    """Train batch `state.next_batch`, updating `state` in place; returns its record.

    `lookup` is 'strict' or 'relaxed' (module docstring). The state is not checked against the
    preset here (`train` does that).
    """
    _check_lookup(lookup)
    batch = make_batch(preset, state.next_batch)
    counts = {}
    if lookup == "relaxed" and state.undo is not None:
        relaxed = relaxed_lookup(
            state.undo.restore(state.tables), state.tables, state.undo.rows, batch.indices,
            batch.offsets, preset.table_modes, batch.per_sample_weights,
            chunk_deltas=state.undo.chunk_deltas,
        )
        pooled = relaxed.pooled
        counts = dict(
            rows_corrected=relaxed.rows_corrected, corrections=relaxed.corrections,
            bags_corrected=relaxed.bags_corrected,
        )
    else:
        pooled = _pool_embeddings(state.tables, batch, preset)
    fwd = dense_forward(state.mlp, batch.dense, pooled, preset.interaction)
    loss = float(bce_loss(fwd.probs, batch.labels))
    grads, d_pooled = dense_backward(state.mlp, fwd, batch.labels)
    undo = UndoLog.capture(state.tables, batch.indices, batch.offsets)
    update, deltas = _sparse_sgd_chunks(
        state.tables, d_pooled, batch.indices, batch.offsets, preset.table_modes, preset.lr,
        batch.per_sample_weights, max_unique_rows, True,
    )
    if len(deltas) > 1:  # a chunked update is corrected chunk by chunk (sw_model.relaxed)
        undo = undo._replace(chunk_deltas=tuple(deltas))
    state.mlp = sgd_step(state.mlp, grads, preset.lr)
    state.next_batch += 1
    state.undo = undo
    return BatchRecord(
        number=batch.number,
        pooled=pooled if record_pooled else None,
        loss=loss,
        table_digests=tuple(table_digest(t) for t in state.tables),
        mlp_digest=state.mlp.digest(),
        update_chunks=update.chunks,
        lookup=lookup,
        **counts,
    )


def train(
    preset: Preset,
    state: TrainState | None = None,
    *,
    stop: int | None = None,
    max_unique_rows: int | None = None,
    record_pooled: bool = True,
    lookup: str = "strict",
) -> TrainResult:
    """Train batches state.next_batch .. stop-1 (default: from the initial state to the end).

    `state` is copied, never modified. `stop` defaults to `preset.num_batches`. `lookup` is
    'strict' or 'relaxed' (module docstring).
    """
    _check_lookup(lookup)
    if state is None:
        state = initial_state(preset)
    else:
        _check_state(preset, state)
        state = state.copy()
    stop = preset.num_batches if stop is None else stop
    if stop < state.next_batch:
        raise ValueError(f"stop ({stop}) is before the next batch ({state.next_batch})")
    records = [
        train_step(
            preset, state, max_unique_rows=max_unique_rows, record_pooled=record_pooled,
            lookup=lookup,
        )
        for _ in range(state.next_batch, stop)
    ]
    return TrainResult(records, state)
