"""The device with its checkpoint engine in Verilator, on the PMEM model, through CXL.mem and the
registers only: RECOVER formats, training with undo logging and snapshots stays bit-exact, the
metadata and the log are closed to the host, commands out of order are refused, and power
failures (with and without a GPF warning) recover to a state the persistence contract allows,
bit-exact with the golden model, from which training resumes.

Run through tb/device/test_checkpoint.py.
"""

import cocotb
from cocotb.triggers import ClockCycles

from hw.ckpt.layouts import CheckpointError, CheckpointPhase, LogMode
from hw.cxl.messages import DRSOpcode
from hw.emb.layouts import ErrorCode, Opcode
from sw_model.checkpoint import CheckpointOracle
from tb.device.harness import DeviceBench
from tb.device.power import ArmedFailure, PowerFailed
from tb.device.training import CheckedTraining, recover_and_check


async def _attached(bench, *, snapshots=True):
    """Configure with logging, load the initial state, RECOVER (formats: the metadata an
    earlier test left in this persistent memory is erased first), seal snapshot -1."""
    capacity = bench.device.register_config.max_unique_rows
    trainer = bench.trainer(gpu_cycles=100)
    checked = CheckedTraining(bench, trainer, capacity=capacity)
    await trainer.configure(logging=True)
    await trainer.erase_checkpoint_state()
    await trainer.load(checked.golden.tables, checked.golden.mlp)
    formatted = await trainer.attach()
    assert (formatted.last_committed, formatted.snapshot_batch) == (-1, -1), formatted
    if snapshots:
        await trainer.snapshot(-1)
        trainer.snapshots = True
    return trainer, checked


@cocotb.test()
async def logged_training_stays_bit_exact(dut):
    """RECOVER formats; K + 1 batches with logging and a snapshot: bit-exact, batch numbers
    and snapshot records advance, the log was written, and its region and the metadata are
    closed to the host while the snapshot slots are not."""
    bench = DeviceBench(dut, stream=50)
    await bench.start()
    trainer, checked = await _attached(bench)
    status = await bench.driver.checkpoint_status()
    assert status["attached"] == 1 and status["snapshot_valid"] == 1, status
    k = bench.preset.snapshot_interval
    for number in range(k + 1):
        await checked.batch(number, last=number == k)
    await checked.check_final()
    assert not checked.failures, checked.failures
    status = await bench.driver.checkpoint_status()
    assert status["last_committed"] == k, status
    assert status["snapshot_batch"] == k - 1, status
    assert status["phase"] == CheckpointPhase.IDLE.value, status
    snapshot = await trainer.read_snapshot(status["snapshot_slot"], checked.golden.mlp)
    counters = await bench.driver.counters()
    assert counters["ckpt_log_entries"] > 0 and counters["ckpt_own_writes"] > 0, counters
    for region in (bench.plan.meta_region, bench.plan.log_region):
        response = await bench.host.read_response(bench.hpa(region[0]))
        assert response.opcode == DRSOpcode.MEM_DATA_NXM, response
    assert (await bench.driver.errors())["protection"] == 1
    assert snapshot is not None   # the slot itself was readable


@cocotb.test()
async def commands_out_of_order_are_refused(dut):
    """Before RECOVER nothing but RECOVER runs (with logging); afterwards LOOKUP must be the
    next batch and UPDATE must follow its LOOKUP; SNAPSHOT only for snapshot batches."""
    bench = DeviceBench(dut, stream=51)
    await bench.start()
    trainer = bench.trainer()
    await trainer.configure(logging=True)
    await trainer.erase_checkpoint_state()
    batch = await trainer.stage(0)
    command = trainer._command(0, batch, trainer.slot(0).output)
    done = await bench.driver.run(Opcode.LOOKUP, check=False, **command)
    assert done.error == ErrorCode.BAD_OPCODE.value, done
    status = await bench.driver.read("CKPT_STATUS")
    assert status["error"] == CheckpointError.NOT_RECOVERED.value, status
    await trainer.attach()
    for opcode, batch_number, reason in ((Opcode.LOOKUP, 1, CheckpointError.OUT_OF_ORDER),
                                         (Opcode.UPDATE, 0, CheckpointError.OUT_OF_ORDER),
                                         (Opcode.SNAPSHOT, 0,
                                          CheckpointError.NOT_SNAPSHOT_BATCH)):
        done = await bench.driver.run(opcode, check=False, **{**command, "batch": batch_number})
        assert done.error == ErrorCode.BAD_OPCODE.value, (opcode, done)
        status = await bench.driver.read("CKPT_STATUS")
        assert status["error"] == reason.value, (opcode, status)
    await bench.driver.clear_errors()


async def _fail_and_recover(dut, *, stream, armed_for):
    bench = DeviceBench(dut, stream=stream)
    await bench.start()
    trainer, checked = await _attached(bench)
    oracle = CheckpointOracle(bench.preset,
                              max_unique_rows=bench.device.register_config.max_unique_rows)
    armed = armed_for(bench)
    bench.power.arm(armed)
    failure = None
    for number in range(armed.batch + 1):
        try:
            await checked.batch(number, last=False)
        except PowerFailed as error:
            failure = error.failure
    assert failure is not None, "the armed power failure did not happen"
    check = await recover_and_check(bench, trainer, oracle, failure)
    assert check.allowed, check
    assert check.tables_difference is None, check.tables_difference
    assert check.mlp_bit_exact, "MLP snapshot differs"
    # Resume from the recovered state for two batches.
    checked.golden = check.state.train_state()
    trainer.mlp = check.mlp
    trainer.forget_staged()
    start = check.last_committed + 1
    for number in range(start, start + 2):
        await checked.batch(number, last=number == start + 1)
    await checked.check_final()
    assert not checked.failures, checked.failures
    return failure, check


@cocotb.test()
async def power_failure_during_update_rolls_back(dut):
    """An unannounced cut while UPDATE(2) writes rows in place: RECOVER restores the rows
    from the undo log (batch 2 rolled back) and training resumes bit-exact."""
    failure, check = await _fail_and_recover(dut, stream=52, armed_for=lambda bench: ArmedFailure(
        Opcode.UPDATE, 2, delay=120, warning=False, seed=12345, keep=128))
    if not failure.completed:
        assert check.last_committed in (1, 2), check
    assert check.snapshot_batch == -1, check


@cocotb.test()
async def power_failure_with_warning_drains(dut):
    """A GPF warning while LOOKUP(3) gathers and logs: the device drains its log and writes
    (and reports how long), power goes, RECOVER reports batch 2 committed and the newest
    snapshot, bit-exact."""
    failure, check = await _fail_and_recover(dut, stream=53, armed_for=lambda bench: ArmedFailure(
        Opcode.LOOKUP, 3, delay=300, warning=True, seed=777, keep=0))
    assert failure.gpf_drain_cycles > 0, failure
    assert check.last_committed == 2, check


@cocotb.test()
async def power_failure_during_snapshot(dut):
    """A cut right after SNAPSHOT(K - 1) is rung: the snapshot of K - 1 or the initial one, as
    the record did or did not persist."""
    failure, check = await _fail_and_recover(dut, stream=54, armed_for=lambda bench: ArmedFailure(
        Opcode.SNAPSHOT, bench.preset.snapshot_interval - 1, delay=3, warning=False, seed=99,
        keep=255))
    k = failure.armed.batch
    assert check.last_committed == k, check
    assert check.snapshot_batch in (-1, k), check
    await ClockCycles(dut.clk, 1)


@cocotb.test()
async def logging_after_pass_through(dut):
    """Batches with logging off (the no-checkpoint baseline), then the same device formatted
    and training with logging from a fresh state: both bit-exact."""
    bench = DeviceBench(dut, stream=55)
    await bench.start()
    capacity = bench.device.register_config.max_unique_rows
    trainer = bench.trainer(gpu_cycles=100)
    base = CheckedTraining(bench, trainer, capacity=capacity, stage="baseline")
    await trainer.configure(logging=False)
    await trainer.load(base.golden.tables, base.golden.mlp)
    for number in range(2):
        await base.batch(number, last=number == 1)
    assert not base.failures, base.failures
    trainer, checked = await _attached(bench)
    for number in range(2):
        await checked.batch(number, last=number == 1)
    await checked.check_final()
    assert not checked.failures, checked.failures


async def _train_two_batches(dut, log_mode):
    """Two batches with ``CKPT_CONTROL.log_mode``, bit-exact and committed; per LOOKUP and
    UPDATE the opcode, the open batch's log entries and the engine's phase right after."""
    bench = DeviceBench(dut, stream=50)
    await bench.start()
    capacity = bench.device.register_config.max_unique_rows
    trainer = bench.trainer(gpu_cycles=100)
    checked = CheckedTraining(bench, trainer, capacity=capacity)
    await trainer.configure(logging=True, log_mode=log_mode)
    assert (await bench.driver.read("CKPT_CONTROL")) == \
        {"logging_enable": 1, "log_mode": log_mode.value}
    await trainer.erase_checkpoint_state()
    await trainer.load(checked.golden.tables, checked.golden.mlp)
    formatted = await trainer.attach()
    assert (formatted.last_committed, formatted.snapshot_batch) == (-1, -1), formatted
    driver = bench.driver
    run = driver.run
    entries = []   # (opcode, entries in the open batch's log, phase) after LOOKUP and UPDATE

    async def run_and_look(opcode, **fields):
        completion = await run(opcode, **fields)
        if opcode in (Opcode.LOOKUP, Opcode.UPDATE):
            status = await driver.checkpoint_status()
            entries.append((opcode, status["log_batch_entries"],
                            CheckpointPhase(status["phase"])))
        return completion

    driver.run = run_and_look
    try:
        for number in range(2):
            await checked.batch(number, last=number == 1)
    finally:
        driver.run = run
    assert not checked.failures, checked.failures
    status = await driver.checkpoint_status()
    assert status["last_committed"] == 1 and status["phase"] == CheckpointPhase.IDLE.value
    assert [opcode for opcode, _, _ in entries] == [Opcode.LOOKUP, Opcode.UPDATE] * 2, entries
    assert all(n > 0 for opcode, n, _ in entries if opcode == Opcode.UPDATE), entries
    counters = await driver.counters()
    assert counters["ckpt_log_entries"] == sum(n for op, n, _ in entries
                                               if op == Opcode.UPDATE), (counters, entries)
    return entries


@cocotb.test()
async def at_update_training_stays_bit_exact(dut):
    """CKPT_CONTROL.log_mode AT_UPDATE: LOOKUP logs nothing, UPDATE replays it and takes the
    undo log before updating: two batches bit-exact and committed, the log written by the
    UPDATEs."""
    entries = await _train_two_batches(dut, LogMode.AT_UPDATE)
    assert all(n == 0 for opcode, n, _ in entries if opcode == Opcode.LOOKUP), entries


@cocotb.test()
async def after_lookup_training_stays_bit_exact(dut):
    """CKPT_CONTROL.log_mode AFTER_LOOKUP: LOOKUP's status comes back before anything is
    logged and the replay that takes the log is running when the host looks: two batches
    bit-exact and committed."""
    entries = await _train_two_batches(dut, LogMode.AFTER_LOOKUP)
    lookups = [(n, phase) for opcode, n, phase in entries if opcode == Opcode.LOOKUP]
    assert all(phase == CheckpointPhase.REPLAY for _, phase in lookups), entries
