"""Training on the device with every batch checked against the golden model, and the
recovery after a power failure checked against the persistence contract (shared by the demo,
``tb/device/cocotb_demo.py``, and the checkpoint tests, ``tb/device/cocotb_checkpoint.py``)."""

from dataclasses import dataclass

import numpy as np

from hw.emb.layouts import Opcode
from sw_model.checkpoint import (
    CheckpointOracle,
    Failure,
    Phase,
    acceptable_recovery,
    first_table_difference,
)
from sw_model.train import initial_state, train_step

__all__ = ["CheckedTraining", "RecoveryCheck", "acceptable", "recover_and_check", "same_bits"]


def same_bits(a, b) -> bool:
    return a.shape == b.shape and bool(np.all(
        (a.view(np.uint32) == b.view(np.uint32)) | (np.isnan(a) & np.isnan(b))))


def _updated_rows(record) -> dict[int, list[int]]:
    rows: dict[int, set[int]] = {}
    for chunk in record.update_chunks:
        for table, row in chunk:
            rows.setdefault(table, set()).add(row)
    return {t: sorted(r) for t, r in rows.items()}


class CheckedTraining:
    """The host trainer and the golden model in lockstep; every batch checked."""

    def __init__(self, bench, trainer, *, capacity, stage="run"):
        self.bench, self.trainer, self.capacity = bench, trainer, capacity
        self.preset = bench.preset
        self.golden = initial_state(self.preset)
        self.rows: list[dict] = []
        self.failures: list[str] = []
        self.stage = stage

    async def batch(self, number: int, *, last: bool) -> dict:
        golden = self.golden.copy()
        record = train_step(self.preset, golden, max_unique_rows=self.capacity)
        result = await self.trainer.train_batch(number, stage_next=not last)
        self.golden = golden   # only once the device finished the batch too
        pooled_ok = same_bits(result.pooled, record.pooled)
        loss_ok = result.loss == record.loss
        rows_ok = True
        for table, rows in _updated_rows(record).items():
            got = await self.trainer.read_rows(table, rows)
            rows_ok &= same_bits(got, golden.tables[table][rows])
        ok = pooled_ok and loss_ok and rows_ok
        if not ok:
            self.failures.append(
                f"{self.stage} batch {number}: pooled {'ok' if pooled_ok else 'DIFFER'}, loss "
                f"{'ok' if loss_ok else 'DIFFERS'}, updated rows {'ok' if rows_ok else 'DIFFER'}")
        timing = result.timing
        row = {"stage": self.stage, "batch": number, "loss": result.loss, "bit_exact": ok,
               **{k: getattr(timing, k) for k in ("lookup", "read_pooled", "gpu",
                                                  "write_gradient", "update", "snapshot",
                                                  "total")}}
        self.rows.append(row)
        extra = f", snapshot {timing.snapshot}" if timing.snapshot else ""
        print(f"  {self.stage:8s} batch {number:3d}  loss {result.loss:.5f}  cycles "
              f"{timing.total:6d} (lookup {timing.lookup}, update {timing.update}, gpu "
              f"{timing.gpu}{extra})  {'bit-exact' if ok else 'MISMATCH'}", flush=True)
        return row

    async def check_final(self) -> None:
        tables = [await self.trainer.read_table(t) for t in range(self.preset.num_tables)]
        difference = first_table_difference(self.golden.tables, tables)
        if difference is not None:
            self.failures.append(f"{self.stage} final tables: {difference}")
        if not self.trainer.mlp.bit_equal(self.golden.mlp):
            self.failures.append(f"{self.stage}: final MLP parameters differ from the golden "
                                 f"model's")


def acceptable(failure, interval) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(last committed, snapshot) batches the recovery may report (sw_model.checkpoint), made
    exact where the host saw the command complete before the cut."""
    armed = failure.armed
    n = armed.batch
    phase = {Opcode.LOOKUP: Phase.LOOKUP, Opcode.UPDATE: Phase.COMMIT,
             Opcode.SNAPSHOT: Phase.SNAPSHOT}[armed.opcode]
    allowed = acceptable_recovery(Failure(n, phase), interval)
    committed, snapshot = allowed.committed, allowed.snapshot
    if failure.completed and armed.opcode is Opcode.UPDATE:
        committed = (n,)            # UPDATE's status comes back once N is committed
    if failure.completed and armed.opcode is Opcode.SNAPSHOT:
        snapshot = (n,)             # ... and SNAPSHOT's once the slot's record persists
    return committed, snapshot



@dataclass
class RecoveryCheck:
    """What a recovery reported and whether it was right."""

    last_committed: int
    snapshot_batch: int
    allowed_committed: tuple[int, ...]
    allowed_snapshot: tuple[int, ...]
    recovery_cycles: int
    restored_entries: int
    rolled_back: bool
    tables_difference: str | None
    mlp_bit_exact: bool
    state: object = None      # sw_model RecoveredState (None if the report was not allowed)
    mlp: object = None        # the MLP read from the snapshot slot

    @property
    def allowed(self) -> bool:
        return (self.last_committed in self.allowed_committed
                and self.snapshot_batch in self.allowed_snapshot)

    @property
    def ok(self) -> bool:
        return self.allowed and self.tables_difference is None and self.mlp_bit_exact


async def recover_and_check(bench, trainer, oracle: CheckpointOracle, failure) -> RecoveryCheck:
    """After the reset that followed ``failure``: identify and map the device, configure it,
    RECOVER, and compare the tables (every row, over CXL.mem) and the MLP in the snapshot slot
    with the golden state the device reports, if the contract allows that report."""
    await bench.attach_host()
    await trainer.configure(logging=True)
    recovered = await trainer.attach()
    committed, snapshot = recovered.last_committed, recovered.snapshot_batch
    allowed_c, allowed_s = acceptable(failure, bench.preset.snapshot_interval)
    check = RecoveryCheck(committed, snapshot, allowed_c, allowed_s, recovered.recovery_cycles,
                          recovered.restored_entries, recovered.rolled_back, None, False)
    if not check.allowed:
        return check
    check.state = oracle.state_for(committed, snapshot)
    tables = [await trainer.read_table(t) for t in range(bench.preset.num_tables)]
    check.tables_difference = first_table_difference(check.state.tables, tables)
    check.mlp = await trainer.read_snapshot(recovered.snapshot_slot, check.state.mlp)
    check.mlp_bit_exact = check.mlp.bit_equal(check.state.mlp)
    return check
