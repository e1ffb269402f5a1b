"""The demo's training run on the RTL (started by ``python -m tb.demo``; settings arrive in
``DEMO_*`` environment variables, the results leave as JSON in ``DEMO_REPORT``).

The host trainer (tb/host/trainer.py) trains the preset on the device while the golden model
(sw_model.train.train_step, with the device's update capacity) steps in lockstep. After every
batch the pooled outputs and the loss must equal the golden ones bit for bit, and every row the
batch updated is read back over CXL.mem and compared; at the end every row of every table and
the MLP parameters are compared.

With the checkpoint engine in the device:

1. a baseline: the first ``DEMO_BASELINE`` batches with logging disabled (LOOKUP/UPDATE pass
   straight through), for the cycles per batch without checkpointing;
2. the tables and MLP are loaded afresh, RECOVER formats the persistent state, the initial MLP
   is sealed as snapshot -1, and training runs with logging and MLP snapshots every K batches;
3. power fails once at a point drawn from ``DEMO_SEED`` (a batch, the LOOKUP, UPDATE or
   SNAPSHOT command of it, a delay, with or without a GPF warning, which unacknowledged
   writes survive), the system is reset, the host reconfigures the device and rings RECOVER;
   the reported last committed batch c and snapshot batch s must be ones the persistence
   contract allows (sw_model.checkpoint), the tables must equal the golden tables after c and
   the MLP read from the snapshot slot the golden MLP after s, bit for bit;
4. training resumes at c + 1 from that state and runs to the end, checked as before against
   the golden continuation.

Any difference fails the test (and the demo exits non-zero).
"""

import json
import os
import random
import time
from pathlib import Path

import cocotb
from cocotb.simtime import get_sim_time

from hw.emb.layouts import Opcode
from sw_model.checkpoint import CheckpointOracle, is_snapshot_batch
from tb.common import CLOCK_PERIOD_NS
from tb.device.harness import DeviceBench
from tb.device.power import ArmedFailure, PowerFailed
from tb.device.training import CheckedTraining, recover_and_check


async def _plain_run(bench, trainer, checked, batches):
    await trainer.configure()
    await trainer.load(checked.golden.tables, checked.golden.mlp)
    for number in range(batches):
        await checked.batch(number, last=number + 1 == batches)
    await checked.check_final()


async def _checkpointed_run(bench, trainer, report, batches, baseline, seed):
    preset = bench.preset
    capacity = bench.device.register_config.max_unique_rows
    oracle = CheckpointOracle(preset, max_unique_rows=capacity)

    # 1. baseline, logging off
    base = CheckedTraining(bench, trainer, capacity=capacity, stage="baseline")
    await trainer.configure(logging=False)
    await trainer.load(base.golden.tables, base.golden.mlp)
    for number in range(baseline):
        await base.batch(number, last=number + 1 == baseline)

    # 2. fresh state, logging on, format, seal the initial MLP
    run = CheckedTraining(bench, trainer, capacity=capacity, stage="ckpt")
    await trainer.configure(logging=True)
    await trainer.erase_checkpoint_state()
    await trainer.load(run.golden.tables, run.golden.mlp)
    formatted = await trainer.attach()
    assert (formatted.last_committed, formatted.snapshot_batch) == (-1, -1), formatted
    await trainer.snapshot(-1)
    trainer.snapshots = True

    draw = random.Random(seed)
    typical = {Opcode.LOOKUP: 400, Opcode.UPDATE: 2000, Opcode.SNAPSHOT: 200}
    if base.rows:
        typical = {Opcode.LOOKUP: max(r["lookup"] for r in base.rows),
                   Opcode.UPDATE: max(r["update"] for r in base.rows), Opcode.SNAPSHOT: 200}
    armed = draw_failure(draw, preset, batches, typical)
    bench.power.arm(armed)
    print(f"  power failure armed: {armed.opcode.name}({armed.batch}) + {armed.delay} cycles, "
          f"{'after a GPF warning' if armed.warning else 'without warning'}, fail_keep "
          f"{armed.keep}", flush=True)

    number, recovery = 0, None
    while number < batches:
        try:
            await run.batch(number, last=number + 1 == batches)
            number += 1
            continue
        except PowerFailed as error:
            failure = error.failure
        # 3. power is back: reconfigure, RECOVER, check the recovered state
        check = await recover_and_check(bench, trainer, oracle, failure)
        print(f"  POWER FAILURE during {failure.armed.opcode.name}({failure.armed.batch}) "
              f"{'(its completion was queued) ' if failure.completed else ''}at cycle "
              f"{failure.cycle}: GPF drain {failure.gpf_drain_cycles} cycles; RECOVER took "
              f"{check.recovery_cycles} cycles, restored {check.restored_entries} log "
              f"entries, reports last committed batch {check.last_committed}, MLP snapshot "
              f"of batch {check.snapshot_batch}: "
              f"{'bit-exact' if check.ok else 'WRONG'}", flush=True)
        recovery = {"opcode": failure.armed.opcode.name, "batch": failure.armed.batch,
                    "delay": failure.armed.delay, "warning": failure.armed.warning,
                    "completed": failure.completed, "cycle": failure.cycle,
                    "gpf_drain_cycles": failure.gpf_drain_cycles,
                    "recovery_cycles": check.recovery_cycles,
                    "restored_entries": check.restored_entries,
                    "rolled_back": check.rolled_back, "last_committed": check.last_committed,
                    "snapshot_batch": check.snapshot_batch,
                    "tables_bit_exact": check.tables_difference is None,
                    "mlp_bit_exact": check.mlp_bit_exact}
        if not check.allowed:
            run.failures.append(
                f"recovery reported c={check.last_committed}, s={check.snapshot_batch}; the "
                f"contract allows c in {check.allowed_committed}, s in "
                f"{check.allowed_snapshot}")
            break
        if check.tables_difference is not None:
            run.failures.append(f"recovered tables: {check.tables_difference}")
        if not check.mlp_bit_exact:
            run.failures.append(f"recovered MLP snapshot differs from the golden MLP after "
                                f"batch {check.snapshot_batch}")
        # 4. resume at c + 1 from the recovered state
        run.golden = check.state.train_state()
        trainer.mlp = check.mlp
        trainer.forget_staged()
        number = check.last_committed + 1
    await run.check_final()
    report["baseline"] = base.rows
    report["batches"] = run.rows
    report["recovery"] = recovery
    report["failures"] = base.failures + run.failures


def draw_failure(draw, preset, batches, typical) -> ArmedFailure:
    """A seeded power-failure point: a batch (not the first), one of its commands, a delay up
    to a little more than that command usually takes, GPF warning or not, survival odds."""
    batch = draw.randrange(1, batches)
    opcodes = [Opcode.LOOKUP, Opcode.UPDATE]
    if is_snapshot_batch(batch, preset.snapshot_interval):
        opcodes.append(Opcode.SNAPSHOT)
    opcode = draw.choice(opcodes)
    return ArmedFailure(opcode=opcode, batch=batch,
                        delay=draw.randrange(0, max(2, int(typical[opcode] * 1.2))),
                        warning=draw.random() < 0.5, seed=draw.randrange(1, 2**32),
                        keep=draw.randrange(0, 256))


@cocotb.test()
async def train_on_the_device(dut):
    batches = int(os.environ.get("DEMO_BATCHES", "20"))
    gpu_cycles = int(os.environ.get("DEMO_GPU_CYCLES", "0"))
    baseline = int(os.environ.get("DEMO_BASELINE", "4"))
    seed = int(os.environ.get("DEMO_SEED", "1"))
    profile = os.environ.get("DEMO_PROFILE", "pmem")
    report_path = os.environ.get("DEMO_REPORT")
    started = time.perf_counter()
    started_ns = get_sim_time("ns")

    bench = DeviceBench(dut, stream=40, profile=profile)
    await bench.start()
    capacity = bench.device.register_config.max_unique_rows
    trainer = bench.trainer(gpu_cycles=gpu_cycles)
    report = {"preset": bench.preset.name, "gpu_cycles": gpu_cycles, "max_unique_rows": capacity,
              "channels": bench.device.channel_count,
              "checkpointing": bench.device.checkpointing,
              "memory": bench.system.memory_model,
              "profile": profile if bench.system.memory_model == "pmem" else None}
    if bench.device.checkpointing:
        await _checkpointed_run(bench, trainer, report, batches, min(baseline, batches), seed)
    else:
        checked = CheckedTraining(bench, trainer, capacity=capacity)
        await _plain_run(bench, trainer, checked, batches)
        report["batches"] = checked.rows
        report["failures"] = checked.failures
    report["counters"] = await bench.driver.counters()
    report["wall_seconds"] = time.perf_counter() - started
    report["simulated_cycles"] = int((get_sim_time("ns") - started_ns) // CLOCK_PERIOD_NS)
    report["errors"] = await bench.driver.errors()
    if report_path:
        Path(report_path).write_text(json.dumps(report, indent=1))
    assert not report["failures"], "; ".join(report["failures"])
    assert not any(report["errors"].values()), report["errors"]
