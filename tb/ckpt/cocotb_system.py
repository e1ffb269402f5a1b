"""cocotb tests of the checkpointed system in Verilator: EmbeddingEngine + CheckpointEngine +
PMEM model (``pmem`` profile), training the tiny preset with the host MLPs in NumPy.

One power failure per test, at a seeded cycle inside one phase (lookup with logging, update,
commit, snapshot, recovery itself), with torn writes from the PMEM model; after it: reset,
RECOVER, check memory against ``CheckpointOracle.recovered_state`` (tables after the last
committed batch, MLP snapshot as reported), resume to the end of the run, and check the final
tables bit for bit against ``CheckpointOracle.continue_training``.
"""

import random

import cocotb

from hw.ckpt.layouts import CheckpointPhase, LogMode
from hw.emb.layouts import LINE_BYTES, ErrorCode, Opcode
from sim.rtl import design_from_env
from sw_model.checkpoint import CheckpointOracle, Phase, first_table_difference
from sw_model.presets import get_preset
from sw_model.train import train
from tb.common import reset, start_clock

from .host import Device, FailurePlan, MemoryMap, Trainer

BATCHES = 12


class Bench:
    """Fresh memory image, configured device, initial state loaded."""

    def __init__(self, dut, preset, *, log_mode=LogMode.ON_LOOKUP, relaxed=False):
        self.params = design_from_env().params
        self.preset = preset
        self.device = Device(dut, addr_width=self.params["addr_width"],
                             max_tables=self.params["max_tables"],
                             num_regions=self.params["num_regions"])
        mlp_floats = Trainer.mlp_floats(preset)
        self.layout = MemoryMap.for_preset(preset, mlp_floats)
        memory_bytes = self.params["memory_lines"] * LINE_BYTES
        assert self.layout.end <= memory_bytes, (self.layout.end, memory_bytes)
        self.device.configure(preset, self.layout, memory_bytes, log_mode=log_mode,
                              relaxed=relaxed)
        self.device.set_profile("pmem")
        self.trainer = Trainer(self.device, preset, self.layout,
                               max_unique_rows=self.params["max_unique_rows"],
                               log=dut._log.info, relaxed=relaxed)
        self.oracle = CheckpointOracle(preset, max_unique_rows=self.params["max_unique_rows"],
                                       lookup="relaxed" if relaxed else "strict")

    @classmethod
    async def create(cls, dut, preset=None, *, log_mode=LogMode.ON_LOOKUP, started=False,
                     relaxed=False):
        """``log_mode``: when the undo log is taken (``CKPT_CONTROL.log_mode``);
        ``started``: the clock runs already (a second bench in one test: fresh tables and
        metadata, no reset)."""
        preset = preset or get_preset("tiny").replace(num_batches=BATCHES)
        bench = cls(dut, preset, log_mode=log_mode, relaxed=relaxed)
        if not started:
            start_clock(dut)
            await reset(dut)
        # Every test starts from blank metadata: the previous test's memory is still there.
        await bench.device.write(bench.layout.meta, bytes(8 * LINE_BYTES))
        await bench.trainer.load_initial()
        return bench

    async def run_with_failure(self, plan: FailurePlan):
        trainer = self.trainer
        while trainer.next_batch < plan.batch:
            assert await trainer.run_batch() is None
        injector = await trainer.run_batch(plan)
        assert injector is not None, "the failure did not happen"
        result = await trainer.fail_and_recover(plan, injector)
        assert not result.errors, result
        self.trainer.device.dut._log.info("failure %s (device %s), recovered to c=%d s=%d in %d "
                                          "cycles, %d entries restored, %d beats lost, %d kept",
                                          result.failure, result.device_phase,
                                          result.reported_committed, result.reported_snapshot,
                                          result.recovery_cycles, result.restored_entries,
                                          result.lost_beats, result.kept_beats)
        # The path golden agrees with the oracle's recovered state ...
        recovered = self.oracle.recovered_state(
            result.failure, reported_committed=result.reported_committed,
            reported_snapshot=result.reported_snapshot)
        tables = await trainer.table_state()
        difference = first_table_difference(recovered.tables, tables)
        assert difference is None, f"recovered tables: {difference}"
        # ... and training resumes to the end, bit-exact with the oracle's continuation.
        while trainer.next_batch < self.preset.num_batches:
            assert await trainer.run_batch() is None
        final = await trainer.table_state()
        expected = self.oracle.continue_training(recovered, record_pooled=False).state.tables
        difference = first_table_difference(expected, final)
        assert difference is None, f"final tables: {difference}"
        return result


@cocotb.test()
async def train_without_failure(dut):
    """Every batch logged, flagged, updated, committed; the final tables are the golden run's,
    and the snapshots are sealed in the slots sw_model.checkpoint.snapshot_slot names."""
    bench = await Bench.create(dut)
    trainer = bench.trainer
    while trainer.next_batch < bench.preset.num_batches:
        assert await trainer.run_batch() is None
        n = trainer.next_batch - 1
        if (n + 1) % bench.preset.snapshot_interval == 0:
            assert bench.device.value("snapshot_batch") == n
            assert bench.device.value("snapshot_slot") == (n // bench.preset.snapshot_interval) % 2
    golden = bench.oracle.golden_run(record_pooled=False).state.tables
    assert first_table_difference(golden, await trainer.table_state()) is None
    counters = bench.device.counters()
    dut._log.info("checkpoint counters %s; cycles per batch: %s", counters,
                  [c["total"] for c in trainer.batch_cycles])
    assert counters["log_entries"] > 0 and counters["log_duplicates"] > 0


@cocotb.test()
async def crash_in_lookup(dut):
    draw = random.Random(cocotb.RANDOM_SEED)
    bench = await Bench.create(dut)
    result = await bench.run_with_failure(FailurePlan(
        batch=5, step="lookup", delay=draw.randrange(50, 500), seed=draw.randrange(1, 2**31)))
    assert result.failure.phase == Phase.LOOKUP


@cocotb.test()
async def crash_in_update(dut):
    """Power fails while rows are being written in place: rolled back from the log. (The
    flag persists about 80 cycles into the UPDATE phase at the pmem profile's write latency,
    and the in-place writes take several hundred more.)"""
    await _crash_while_rows_are_written(dut, batch=6, seed_offset=1, relaxed=False)


async def _crash_while_rows_are_written(dut, *, batch, seed_offset, relaxed):
    """Power fails 120-400 cycles into UPDATE(batch)'s UPDATE phase: rolled back from the
    log to ``batch - 1``, and the run resumes bit-exact."""
    draw = random.Random(cocotb.RANDOM_SEED + seed_offset)
    bench = await Bench.create(dut, relaxed=relaxed)
    result = await bench.run_with_failure(FailurePlan(
        batch=batch, step="update", delay=draw.randrange(120, 400),
        seed=draw.randrange(1, 2**31), on_phase=CheckpointPhase.UPDATE))
    assert result.failure.phase == Phase.UPDATE
    assert result.reported_committed == batch - 1 and result.restored_entries > 0


@cocotb.test()
async def crash_in_commit(dut):
    draw = random.Random(cocotb.RANDOM_SEED + 2)
    bench = await Bench.create(dut)
    result = await bench.run_with_failure(FailurePlan(
        batch=4, step="update", delay=draw.randrange(0, 3), seed=draw.randrange(1, 2**31),
        keep=draw.choice([0, 255]), on_phase=CheckpointPhase.COMMIT))
    assert result.failure.phase == Phase.COMMIT


@cocotb.test()
async def crash_in_snapshot(dut):
    """Power fails while the host writes snapshot slot data or while its record is sealed."""
    draw = random.Random(cocotb.RANDOM_SEED + 3)
    bench = await Bench.create(dut)
    result = await bench.run_with_failure(FailurePlan(
        batch=7, step="snapshot", delay=draw.randrange(0, 150), seed=draw.randrange(1, 2**31)))
    assert result.failure.phase == Phase.SNAPSHOT


@cocotb.test()
async def crash_during_recovery(dut):
    """Power fails in an update, then again while RECOVER restores rows: recovery is
    idempotent."""
    draw = random.Random(cocotb.RANDOM_SEED + 4)
    bench = await Bench.create(dut)
    result = await bench.run_with_failure(FailurePlan(
        batch=6, step="update", delay=draw.randrange(120, 400), seed=draw.randrange(1, 2**31),
        on_phase=CheckpointPhase.UPDATE, recovery_delay=draw.randrange(150, 500)))
    assert result.recovery_failed_again and result.restored_entries > 0


@cocotb.test()
async def gpf_drains_and_recovery_follows(dut):
    """GPF during a LOOKUP: new work stops, buffered log writes drain, drain time reported;
    after the power loss, recovery rolls back nothing (c = N - 1)."""
    bench = await Bench.create(dut)
    trainer, device = bench.trainer, bench.device
    for _ in range(3):
        assert await trainer.run_batch() is None
    from sw_model.data import make_batch

    batch = make_batch(bench.preset, 3)
    await device.write(bench.layout.indices, batch.indices.astype("<u4").tobytes())
    await device.write(bench.layout.offsets, batch.offsets.astype("<u4").tobytes())
    await device.issue(Opcode.LOOKUP, 3, **trainer._fields(batch))
    for _ in range(150):
        await cocotb.triggers.RisingEdge(dut.clk)
    dut.gpf.value = 1
    while not device.value("gpf_done"):
        await cocotb.triggers.RisingEdge(dut.clk)
    cycles = device.value("gpf_drain_cycles")
    dut._log.info("GPF drain took %d cycles", cycles)
    assert device.value("log_pending") == 0 and device.value("pending") == 0
    await device.power_cycle(seed=3, keep=128)
    dut.gpf.value = 0
    status = await device.command(Opcode.RECOVER, 0)
    assert status["error"] == ErrorCode.NONE
    assert device.value("last_committed") == 2 and device.value("rolled_back") == 0


# --- log modes: the undo log taken at UPDATE time (AT_UPDATE, nmp_sync_log) or in the ---------
# --- background right after LOOKUP (AFTER_LOOKUP) ---------------------------------------------

@cocotb.test()
async def train_relaxed(dut):
    """Relaxed lookup with checkpointing: LOOKUP(N + 1) runs before UPDATE(N), deferred and
    unlogged, and UPDATE(N) corrects it (its chunks one by one); every pooled output is the
    golden relaxed lookup's (the trainer checks each), the final tables are relaxed golden
    training's, and every batch is committed with its undo log taken by the replay."""
    bench = await Bench.create(dut, relaxed=True)
    trainer, preset = bench.trainer, bench.preset
    before = bench.device.counters()
    while trainer.next_batch < preset.num_batches:
        assert await trainer.run_batch() is None
    assert bench.device.value("last_committed") == preset.num_batches - 1
    golden = train(preset, max_unique_rows=bench.params["max_unique_rows"], lookup="relaxed",
                   record_pooled=False)
    assert sum(r.corrections for r in golden.records) > 0
    assert first_table_difference(golden.state.tables, await trainer.table_state()) is None
    strict = train(preset, max_unique_rows=bench.params["max_unique_rows"],
                   record_pooled=False).state.tables
    assert first_table_difference(strict, golden.state.tables) is not None
    # (The bench's oracle is the relaxed one.)
    assert first_table_difference(bench.oracle.golden_run(record_pooled=False).state.tables,
                                  golden.state.tables) is None
    after = bench.device.counters()
    assert after["log_entries"] - before["log_entries"] > 0
    dut._log.info("relaxed: cycles per batch %s", [c["total"] for c in trainer.batch_cycles])


@cocotb.test()
async def crash_in_relaxed_update(dut):
    """Relaxed lookup: power fails while UPDATE(5) writes its rows in place and corrects the
    deferred LOOKUP(6): rolled back from the log (c = 4), which was logged ahead (LOOKUP(5)'s
    reads during batch 4, then UPDATE(4)'s new values of the rows both batches touch, the
    later entry winning); the host looks batch 5 up again, strict, and training resumes
    relaxed, bit-exact with the oracle's relaxed continuation."""
    await _crash_while_rows_are_written(dut, batch=5, seed_offset=8, relaxed=True)


@cocotb.test()
async def crash_in_relaxed_lookup_ahead(dut):
    """Relaxed lookup: power fails while LOOKUP(6) runs ahead during batch 5 (deferred, logged
    ahead into batch 6's area) or in the host's time after it, before UPDATE(5): nothing to
    restore (c = 4), and the run resumes at batch 5 bit-exact with the oracle's relaxed
    continuation."""
    draw = random.Random(cocotb.RANDOM_SEED + 9)
    bench = await Bench.create(dut, relaxed=True)
    result = await bench.run_with_failure(FailurePlan(
        batch=5, step="lookup", delay=draw.randrange(20, 600), seed=draw.randrange(1, 2**31)))
    assert result.failure.phase == Phase.LOOKUP
    assert result.reported_committed == 4 and result.restored_entries == 0


SYNC_BATCHES = 4


async def _train_counting(bench):
    """Train every batch; per batch the checkpoint counters' increments."""
    trainer, device = bench.trainer, bench.device
    per_batch = []
    while trainer.next_batch < bench.preset.num_batches:
        before = device.counters()
        assert await trainer.run_batch() is None
        after = device.counters()
        per_batch.append({name: (after[name] - before[name]) % 2**32
                          for name in ("log_entries", "log_duplicates")})
    golden = bench.oracle.golden_run(record_pooled=False).state.tables
    assert first_table_difference(golden, await trainer.table_state()) is None
    return per_batch


@cocotb.test()
async def train_log_modes_match_log_on_lookup(dut):
    """The same batches logged on lookup, at UPDATE (LOOKUP logs nothing, UPDATE replays it
    with the tap on) and right after LOOKUP (the same replay, in the background): pooled
    outputs and final tables bit-exact with the golden model in all three, the same log
    entries and duplicates per batch, and the synchronous UPDATE is the longer one (the log
    is on its critical path)."""
    preset = get_preset("tiny").replace(num_batches=SYNC_BATCHES)
    benches, counts = {}, {}
    for mode in LogMode:
        benches[mode] = await Bench.create(dut, preset, log_mode=mode,
                                           started=mode != LogMode.ON_LOOKUP)
        counts[mode] = await _train_counting(benches[mode])
    dut._log.info("log entries per batch: %s", {m.name: c for m, c in counts.items()})
    assert all(c["log_entries"] > 0 for c in counts[LogMode.AT_UPDATE])
    assert counts[LogMode.AT_UPDATE] == counts[LogMode.ON_LOOKUP]
    assert counts[LogMode.AFTER_LOOKUP] == counts[LogMode.ON_LOOKUP]
    # (Lines the lossy tap dropped and its filter then forgot may be logged twice.)
    assert all(lossy["log_entries"] >= strict["log_entries"] for lossy, strict in zip(
        counts[LogMode.LOOKUP_THEN_REPLAY], counts[LogMode.ON_LOOKUP], strict=True))
    cycles = {mode.name: [(c["lookup"], c["update"]) for c in bench.trainer.batch_cycles]
              for mode, bench in benches.items()}
    dut._log.info("(lookup, update) cycles per batch: %s", cycles)
    assert (sum(u for _, u in cycles["AT_UPDATE"]) > sum(u for _, u in cycles["ON_LOOKUP"]))
    # The lossy tap does not hold LOOKUP up: it is as fast as unlogged (AT_UPDATE's LOOKUP).
    lookups = {name: sum(lookup for lookup, _ in c) for name, c in cycles.items()}
    assert lookups["LOOKUP_THEN_REPLAY"] < lookups["ON_LOOKUP"], lookups
    assert lookups["LOOKUP_THEN_REPLAY"] <= lookups["AT_UPDATE"] * 1.05, lookups


async def _crash_in_batch_3(dut, log_mode, *, seed_offset, step, on_phase, delays):
    """A 6-batch run with ``log_mode`` in which power fails ``delays`` cycles after the device
    reaches ``on_phase`` in ``step`` of batch 3; the recovery's result."""
    draw = random.Random(cocotb.RANDOM_SEED + seed_offset)
    bench = await Bench.create(dut, get_preset("tiny").replace(num_batches=6),
                               log_mode=log_mode)
    return await bench.run_with_failure(FailurePlan(
        batch=3, step=step, delay=draw.randrange(*delays), seed=draw.randrange(1, 2**31),
        on_phase=on_phase))


@cocotb.test()
async def crash_in_at_update_replay(dut):
    """AT_UPDATE: power fails while UPDATE(3) replays LOOKUP(3) (no flag yet): recovery
    reports c = 2, restores nothing, and training resumes bit-exact."""
    result = await _crash_in_batch_3(dut, LogMode.AT_UPDATE, seed_offset=5, step="update",
                                     on_phase=CheckpointPhase.REPLAY, delays=(0, 150))
    assert result.device_phase == CheckpointPhase.REPLAY.name
    assert result.failure.phase == Phase.UPDATE
    assert result.reported_committed == 2 and result.restored_entries == 0


@cocotb.test()
async def crash_in_at_update_update(dut):
    """AT_UPDATE: power fails after UPDATE(3)'s flag, while rows are written in place: rolled
    back from the synchronously taken log, and training resumes bit-exact."""
    result = await _crash_in_batch_3(dut, LogMode.AT_UPDATE, seed_offset=6, step="update",
                                     on_phase=CheckpointPhase.UPDATE, delays=(120, 400))
    assert result.failure.phase == Phase.UPDATE
    assert result.reported_committed == 2 and result.restored_entries > 0


@cocotb.test()
async def crash_in_after_lookup_replay(dut):
    """AFTER_LOOKUP: power fails while the background replay of LOOKUP(3) logs it, after
    LOOKUP(3)'s status went to the host (no flag yet): recovery reports c = 2, restores
    nothing, and training resumes bit-exact."""
    result = await _crash_in_batch_3(dut, LogMode.AFTER_LOOKUP, seed_offset=7, step="lookup",
                                     on_phase=CheckpointPhase.REPLAY, delays=(0, 150))
    assert result.device_phase == CheckpointPhase.REPLAY.name
    assert result.reported_committed == 2 and result.restored_entries == 0
