"""cocotb side of the checkpoint benchmark (``python -m tb.ckpt.bench``): the same batches with
checkpointing off (``logging_enable`` clear: LOOKUP/UPDATE pass straight through) and on, for
each modelled host gap; then a power failure in an UPDATE and the recovery time.

Specification from ``$BENCH_SPEC``, results to ``$BENCH_RESULT`` (JSON).
"""

import json
import os
import random
import time

import cocotb
from cocotb.utils import get_sim_time

from hw.ckpt.layouts import CheckpointPhase
from hw.emb.layouts import LINE_BYTES
from sim.pmem import PROFILES
from sim.rtl import design_from_env
from sw_model.presets import get_preset
from tb.common import CLOCK_PERIOD_NS, reset, start_clock

from .host import Device, FailurePlan, MemoryMap, Trainer


@cocotb.test()
async def measure(dut):
    spec = json.loads(open(os.environ["BENCH_SPEC"]).read())
    params = design_from_env().params
    preset = get_preset(spec["preset"]).replace(num_batches=spec["batches"])
    device = Device(dut, addr_width=params["addr_width"], max_tables=params["max_tables"],
                    num_regions=params["num_regions"])
    layout = MemoryMap.for_preset(preset, Trainer.mlp_floats(preset))
    start_clock(dut)
    await reset(dut)
    results = {"runs": [], "profile": spec["profile"]}
    wall = time.monotonic()
    first_ns = get_sim_time("ns")  # (the model's cycle counter restarts at a power cycle)
    for gap in spec["host_gaps"]:
        for checkpointing in (False, True):
            device.configure(preset, layout, params["memory_lines"] * LINE_BYTES,
                             logging=checkpointing)
            device.set_profile(spec["profile"])
            await device.write(layout.meta, bytes(8 * LINE_BYTES))
            trainer = Trainer(device, preset, layout,
                              max_unique_rows=params["max_unique_rows"],
                              checkpointing=checkpointing, host_gap=gap)
            await trainer.load_initial()
            before = device.counters()
            started_wall, started = time.monotonic(), device.now()
            while trainer.next_batch < preset.num_batches:
                assert await trainer.run_batch() is None
            seconds, cycles = time.monotonic() - started_wall, device.now() - started
            after = device.counters()
            results["runs"].append({
                "host_gap": gap, "checkpointing": checkpointing,
                "batches": trainer.batch_cycles,
                "counters": {k: after[k] - before[k] for k in after},
                "cycles": cycles, "seconds": seconds,
            })
            dut._log.info("gap %d checkpointing %s: %d cycles for %d batches (%.0f cycles/s)",
                          gap, checkpointing, cycles, preset.num_batches, cycles / seconds)
    # Recovery: a failure while rows are written in place, in a batch of the last run.
    trainer = Trainer(device, preset, layout, max_unique_rows=params["max_unique_rows"])
    await device.write(layout.meta, bytes(8 * LINE_BYTES))
    device.configure(preset, layout, params["memory_lines"] * LINE_BYTES)
    device.set_profile(spec["profile"])
    await trainer.load_initial()
    for _ in range(spec["recovery_batch"]):
        assert await trainer.run_batch() is None
    draw = random.Random(spec["seed"])
    # (Late enough for the flag to be persistent: the rows being written are rolled back.)
    plan = FailurePlan(batch=spec["recovery_batch"], step="update",
                       delay=draw.randrange(150, 400),
                       seed=draw.randrange(1, 2**31), on_phase=CheckpointPhase.UPDATE)
    injector = await trainer.run_batch(plan)
    result = await trainer.fail_and_recover(plan, injector)
    assert not result.errors, result.errors
    table_lines = sum(preset.table_rows) * preset.dim // 16
    results["recovery"] = {
        "batch": plan.batch, "recovery_cycles": result.recovery_cycles,
        "restored_entries": result.restored_entries,
        "table_lines": table_lines,
    }
    results["simulated_cycles"] = int((get_sim_time("ns") - first_ns) // CLOCK_PERIOD_NS)
    results["wall_seconds"] = time.monotonic() - wall
    results["profile_timing"] = PROFILES[spec["profile"]].inputs()
    with open(os.environ["BENCH_RESULT"], "w") as out:
        json.dump(results, out, indent=1)
