"""Checkpoint oracle: which states a power failure may recover to, and the golden run after it.

Batches are numbered from 0; batch -1 means "before batch 0" (the initial state).

Device phases of batch N, in this order
---------------------------------------
``lookup``    from the LOOKUP(N) doorbell to the UPDATE(N) doorbell: gather and pool N's rows,
              copy each row's old value to the undo log on its first read, the host's MLP work;
``update``    N's batch flag (once its log is persistent), then the in-place row writes;
``commit``    writing N's commit record (once every in-place write is persistent);
``snapshot``  only for snapshot batches, (N + 1) % K == 0 with K = `preset.snapshot_interval`:
              the MLP parameters *after batch N's step* go to slot (N // K) % 2, the slot's
              completion record is written last.
The initial MLP parameters count as a complete snapshot of batch -1, in slot (-1 // K) % 2 = 1,
so the first real snapshot (batch K-1, slot 0) never overwrites the only complete one.

Acceptable recovered states
---------------------------
S(n) = the newest snapshot batch <= n = ((n + 1) // K) * K - 1 (so S(n) = -1 before batch K-1).

=========  =====================================  ===========================================
phase      last committed batch c (tables after)  MLP snapshot batch s
=========  =====================================  ===========================================
lookup     N - 1                                  S(N - 1)
update     N - 1 (rolled back from the undo log)  S(N - 1)
commit     N - 1 or N: the record may or may not  S(N - 1)
           have persisted; the device reports
           which, the oracle checks it is one of
           the two
snapshot   N                                      S(N - 1) or N (completion record persisted
                                                  or not), as reported
=========  =====================================  ===========================================

A power failure *during recovery* from any of these (``Failure(..., during_recovery=True)``)
has the same acceptable states: recovery is idempotent. After recovery the device reports c
and s; training resumes at batch c + 1 with the tables as after batch c and the MLP as after
batch s (bounded staleness: c - s <= K), on the same data batches as the uninterrupted run.

With relaxed lookup (``CheckpointOracle(..., lookup="relaxed")``) the uninterrupted run looks up
every batch but the first relaxed (`sw_model.relaxed`). After recovery no update is pending, so
the first batch of the continuation (c + 1) is looked up strictly and the following ones
relaxed again: the recovered state carries no undo log.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from .dlrm import MLPParams
from .presets import Preset
from .train import TrainResult, TrainState, _check_lookup, initial_state, table_digest, train

__all__ = [
    "Acceptable",
    "CheckpointOracle",
    "Failure",
    "Phase",
    "RecoveredState",
    "UnacceptableRecovery",
    "acceptable_recovery",
    "first_table_difference",
    "is_snapshot_batch",
    "newest_snapshot",
    "snapshot_slot",
]


class Phase(enum.StrEnum):
    LOOKUP = "lookup"
    UPDATE = "update"
    COMMIT = "commit"
    SNAPSHOT = "snapshot"


def is_snapshot_batch(batch: int, interval: int) -> bool:
    """True if the MLP is snapshotted after `batch` (every `interval`-th batch)."""
    return (batch + 1) % interval == 0


def snapshot_slot(batch: int, interval: int) -> int:
    """Slot (0 or 1) of the snapshot of `batch`; the initial snapshot (-1) is in slot 1."""
    return (batch // interval) % 2


def newest_snapshot(batch: int, interval: int) -> int:
    """The newest snapshot batch <= `batch` (-1, the initial parameters, if none)."""
    return ((batch + 1) // interval) * interval - 1


@dataclass(frozen=True)
class Failure:
    """Power failed in `phase` of `batch` (and, if `during_recovery`, again while recovering)."""

    batch: int
    phase: Phase
    during_recovery: bool = False

    def __post_init__(self):
        if isinstance(self.batch, bool) or not isinstance(self.batch, int) or self.batch < 0:
            raise ValueError(f"failure batch must be an int >= 0, got {self.batch!r}")
        try:
            object.__setattr__(self, "phase", Phase(self.phase))
        except ValueError:
            valid = ", ".join(p.value for p in Phase)
            raise ValueError(f"unknown phase {self.phase!r}; phases: {valid}") from None


@dataclass(frozen=True)
class Acceptable:
    """The last committed batches and snapshot batches a recovery may report."""

    committed: tuple[int, ...]
    snapshot: tuple[int, ...]


class UnacceptableRecovery(ValueError):
    """The device reported a recovery state that the persistence contract does not allow."""


@dataclass(frozen=True, eq=False)
class RecoveredState:
    tables: list[np.ndarray]  # as after batch `last_committed`
    mlp: MLPParams  # as after batch `snapshot_batch`
    last_committed: int
    snapshot_batch: int

    @property
    def next_batch(self) -> int:
        return self.last_committed + 1

    def table_digests(self) -> tuple[str, ...]:
        return tuple(table_digest(t) for t in self.tables)

    def train_state(self) -> TrainState:
        """A copy to resume training from."""
        return TrainState([t.copy() for t in self.tables], self.mlp.copy(), self.next_batch)


def first_table_difference(expected, actual) -> str | None:
    """Describe the first (table, row, lane) whose bits differ; None if all match.

    Two NaNs count as equal whatever their payload (DESIGN.md section 3).
    """
    if len(expected) != len(actual):
        return f"{len(actual)} tables, expected {len(expected)}"
    for t, (want, got) in enumerate(zip(expected, actual, strict=True)):
        if want.shape != got.shape or got.dtype != np.float32:
            return f"table {t} is {got.dtype} {got.shape}, expected float32 {want.shape}"
        differ = (want.view(np.uint32) != got.view(np.uint32)) & ~(np.isnan(want) & np.isnan(got))
        if differ.any():
            row, lane = (int(i) for i in np.argwhere(differ)[0])
            return (
                f"table {t} row {row} lane {lane}: got {got[row, lane]!r} "
                f"(0x{got.view(np.uint32)[row, lane]:08x}), expected {want[row, lane]!r} "
                f"(0x{want.view(np.uint32)[row, lane]:08x})"
            )
    return None


def acceptable_recovery(failure: Failure, interval: int) -> Acceptable:
    """The states a recovery after `failure` may report (table in the module docstring)."""
    n = failure.batch
    before = newest_snapshot(n - 1, interval)
    if failure.phase in (Phase.LOOKUP, Phase.UPDATE):
        return Acceptable((n - 1,), (before,))
    if failure.phase is Phase.COMMIT:
        return Acceptable((n - 1, n), (before,))
    if not is_snapshot_batch(n, interval):
        raise ValueError(f"batch {n} takes no MLP snapshot (snapshot interval {interval})")
    return Acceptable((n,), (before, n))


def _pick(what: str, reported: int | None, allowed: tuple[int, ...], failure: Failure) -> int:
    where = f"a failure in the {failure.phase} phase of batch {failure.batch}"
    if reported is None:
        if len(allowed) > 1:
            raise ValueError(
                f"after {where} the {what} may be any of {list(allowed)}: pass the one the "
                "device reported"
            )
        return allowed[0]
    if reported not in allowed:
        raise UnacceptableRecovery(
            f"device reported {what} {reported} after {where}; acceptable: {list(allowed)}"
        )
    return reported


class CheckpointOracle:
    """Golden states of one preset's uninterrupted run, and recovered states after failures.

    States after batch n are obtained by replaying training from the nearest cached state;
    a state is cached every `cache_interval` batches. `max_unique_rows` and `lookup` are passed
    to `train`.
    """

    def __init__(
        self,
        preset: Preset,
        *,
        max_unique_rows: int | None = None,
        cache_interval: int = 16,
        lookup: str = "strict",
    ):
        self.preset = preset
        self.max_unique_rows = max_unique_rows
        self.lookup = _check_lookup(lookup)
        self.cache_interval = cache_interval
        self._states = {-1: initial_state(preset)}  # keyed by the last trained batch

    @property
    def interval(self) -> int:
        return self.preset.snapshot_interval

    def state_after(self, batch: int) -> TrainState:
        """A copy of the uninterrupted run's state after `batch` (-1: the initial state)."""
        if batch < -1:
            raise ValueError(f"batch must be >= -1, got {batch}")
        start = max(n for n in self._states if n <= batch)
        state = self._states[start]
        while start < batch:
            step = min(batch, (start // self.cache_interval + 1) * self.cache_interval)
            state = self._train(state, stop=step + 1).state
            if step % self.cache_interval == 0:
                self._states[step] = state
            start = step
        return state.copy()

    def _train(self, state: TrainState, *, stop: int, record_pooled: bool = False) -> TrainResult:
        return train(
            self.preset, state, stop=stop, max_unique_rows=self.max_unique_rows,
            record_pooled=record_pooled, lookup=self.lookup,
        )

    def golden_run(self, *, stop: int | None = None, record_pooled: bool = True) -> TrainResult:
        """The uninterrupted run from batch 0 up to `stop` (default: the preset's end)."""
        return self._train(self._states[-1], stop=self._stop(stop), record_pooled=record_pooled)

    def _stop(self, stop: int | None) -> int:
        return self.preset.num_batches if stop is None else stop

    def acceptable(self, failure: Failure) -> Acceptable:
        return acceptable_recovery(failure, self.interval)

    def recovered_state(
        self,
        failure: Failure,
        *,
        reported_committed: int | None = None,
        reported_snapshot: int | None = None,
    ) -> RecoveredState:
        """The state recovery must restore after `failure`.

        Where the contract allows two answers (commit and snapshot phases) pass what the device
        reported; any reported value is checked (`UnacceptableRecovery` if not allowed).
        """
        allowed = self.acceptable(failure)
        committed = _pick("last committed batch", reported_committed, allowed.committed, failure)
        snapshot = _pick("snapshot batch", reported_snapshot, allowed.snapshot, failure)
        return self.state_for(committed, snapshot)

    def state_for(self, last_committed: int, snapshot_batch: int) -> RecoveredState:
        """Tables after `last_committed` with the MLP after `snapshot_batch` (no phase check)."""
        if not -1 <= snapshot_batch <= last_committed:
            raise ValueError(
                f"need -1 <= snapshot batch ({snapshot_batch}) <= last committed batch "
                f"({last_committed})"
            )
        if snapshot_batch != -1 and not is_snapshot_batch(snapshot_batch, self.interval):
            raise ValueError(
                f"batch {snapshot_batch} takes no MLP snapshot (snapshot interval {self.interval})"
            )
        tables = self.state_after(last_committed).tables
        mlp = self.state_after(snapshot_batch).mlp
        return RecoveredState(tables, mlp, last_committed, snapshot_batch)

    def continue_training(
        self, recovered: RecoveredState, *, stop: int | None = None, record_pooled: bool = True
    ) -> TrainResult:
        """The golden continuation: resume at batch c + 1 from `recovered` up to `stop`."""
        return self._train(
            recovered.train_state(), stop=self._stop(stop), record_pooled=record_pooled
        )
