"""cocotb side of the crash campaign (``python -m tb.ckpt.crash``): many power failures in one
simulator process.

Training runs go through the preset's batches; each trial's batches run with one
``CKPT_CONTROL.log_mode`` (``$CRASH_SPEC``'s ``log_mode``: ``lookup``, ``sync``, ``after``,
``lookup_replay`` or ``mixed``: trials rotate through the four, the first one's mode drawn from
the seed, so a run changes mode between batches as a host may); before each trial a few
batches train normally, then power fails at a seeded point (a step of a batch, a delay into it
or into a device phase, tearing odds, sometimes a second failure during RECOVER), the device
recovers, and the recovered memory is checked bit for bit against the golden state of the path
the run has taken (``tb.ckpt.host.PathGolden``, the oracle's rules applied per failure).
With ``$CRASH_SPEC``'s ``lookup`` set to ``relaxed`` the host runs LOOKUP(N + 1) ahead of
UPDATE(N) (the device defers it and UPDATE(N) corrects it), a "lookup" failure lands in that
LOOKUP, and after a recovery the host looks the next batch up strictly again.
Training then resumes from the recovered state. At the end of a run the final tables are
checked, and the next run starts from a fresh image. A trial that fails is recorded, and a
fresh run starts.

The specification comes from ``$CRASH_SPEC`` (JSON) and the results go to ``$CRASH_RESULT``.
"""

import json
import os
import random
import time
import traceback

import cocotb
from cocotb.triggers import RisingEdge
from cocotb.utils import get_sim_time

from hw.ckpt.layouts import CheckpointPhase, LogMode
from hw.emb.layouts import LINE_BYTES
from sim.rtl import design_from_env
from sw_model.checkpoint import CheckpointOracle, first_table_difference
from sw_model.presets import get_preset
from tb.common import CLOCK_PERIOD_NS, reset, start_clock

from .host import Device, MemoryMap, Trainer, random_plan

LOG_MODES = {"lookup": LogMode.ON_LOOKUP, "sync": LogMode.AT_UPDATE,
             "after": LogMode.AFTER_LOOKUP, "lookup_replay": LogMode.LOOKUP_THEN_REPLAY}


def _log_mode_draw(spec):
    """Each run's LogMode; drawn apart from the trials' failure points so that those do not
    depend on the mode setting."""
    mode = spec.get("log_mode", "mixed")
    if mode not in (*LOG_MODES, "mixed"):
        raise ValueError(f"log_mode must be lookup, sync, after or mixed, not {mode!r}")
    if mode != "mixed":
        while True:
            yield LOG_MODES[mode]
    order = list(LOG_MODES.values())
    index = random.Random(f"{spec['seed']}-log-mode").randrange(len(order))
    while True:
        yield order[index]
        index = (index + 1) % len(order)


def _mode_name(log_mode):
    return next(name for name, mode in LOG_MODES.items() if mode == log_mode)


async def _fresh_run(device, preset, layout, params, log, log_mode, relaxed):
    device.configure(preset, layout, params["memory_lines"] * LINE_BYTES, log_mode=log_mode,
                     relaxed=relaxed)
    await device.write(layout.meta, bytes(8 * LINE_BYTES))
    trainer = Trainer(device, preset, layout, max_unique_rows=params["max_unique_rows"],
                      log=log, relaxed=relaxed)
    await trainer.load_initial()
    return trainer


@cocotb.test()
async def campaign(dut):
    spec = json.loads(open(os.environ["CRASH_SPEC"]).read())
    lookup = spec.get("lookup", "strict")
    if lookup not in ("strict", "relaxed"):
        raise ValueError(f"lookup must be strict or relaxed, not {lookup!r}")
    relaxed = lookup == "relaxed"
    params = design_from_env().params
    preset = get_preset(spec["preset"]).replace(num_batches=spec["batches"])
    draw = random.Random(spec["seed"])
    device = Device(dut, addr_width=params["addr_width"], max_tables=params["max_tables"],
                    num_regions=params["num_regions"])
    layout = MemoryMap.for_preset(preset, Trainer.mlp_floats(preset))
    device.configure(preset, layout, params["memory_lines"] * LINE_BYTES, relaxed=relaxed)
    device.set_profile(spec["profile"])
    start_clock(dut)
    await reset(dut)
    # (The PMEM model's cycle counter restarts at every power cycle: count simulated time.)
    started, first_ns = time.monotonic(), get_sim_time("ns")
    log = dut._log.info
    modes = _log_mode_draw(spec)
    log_mode = LogMode.ON_LOOKUP
    trainer = await _fresh_run(device, preset, layout, params, log, log_mode, relaxed)
    oracle = CheckpointOracle(preset, max_unique_rows=params["max_unique_rows"],
                              lookup=lookup)
    first_failure_of_run = True
    trials, runs, final_checks = [], 1, 0
    for index in range(spec["trials"]):
        entry = {"trial": index}
        log_mode = next(modes)
        device.set_log_mode(log_mode)
        try:
            # Train 0..2 batches normally (or up to the next snapshot batch, a third of the
            # time), then fail in the next one.
            interval = preset.snapshot_interval
            normal = draw.randrange(0, 3)
            if draw.random() < 0.33:
                normal = (interval - 1 - trainer.next_batch) % interval
            for _ in range(normal):
                if trainer.next_batch >= preset.num_batches:
                    break
                assert await trainer.run_batch() is None
            if trainer.next_batch >= preset.num_batches:
                final = await trainer.table_state()
                difference = first_table_difference(
                    trainer.golden.tables[preset.num_batches - 1], final)
                assert difference is None, f"final tables of run {runs}: {difference}"
                final_checks += 1
                runs += 1
                first_failure_of_run = True
                trainer = await _fresh_run(device, preset, layout, params, log, log_mode, relaxed)
            batch = trainer.next_batch
            plan = random_plan(draw, batch, preset.snapshot_interval)
            if relaxed and plan.step == "lookup" and batch == preset.num_batches - 1:
                plan.step = "update"   # (the last batch's LOOKUP may have run ahead)
            if plan.step == "update" and draw.random() < 0.5:
                # Aim at the device's phases directly (the commit is a short window).
                plan.on_phase = draw.choice([CheckpointPhase.SEAL, CheckpointPhase.UPDATE,
                                             CheckpointPhase.COMMIT])
                if relaxed and plan.on_phase == CheckpointPhase.SEAL:
                    # (Where the relaxed replay's phases fall is not aimed at yet.)
                    plan.on_phase = CheckpointPhase.UPDATE
                elif (log_mode in (LogMode.AT_UPDATE, LogMode.AFTER_LOOKUP)
                        and plan.on_phase == CheckpointPhase.SEAL):
                    # The replay's phase instead: in UPDATE (at_update) or right after
                    # LOOKUP's status (after_lookup). (lookup_replay replays only when its
                    # tap dropped entries: the phase may never come.)
                    plan.on_phase = CheckpointPhase.REPLAY
                    if log_mode == LogMode.AFTER_LOOKUP:
                        plan.step = "lookup"
                plan.delay = draw.randrange(0, {CheckpointPhase.SEAL: 4,
                                                CheckpointPhase.REPLAY: 400,
                                                CheckpointPhase.UPDATE: 500,
                                                CheckpointPhase.COMMIT: 4}[plan.on_phase])
            entry.update(log_mode=_mode_name(log_mode), lookup=lookup, batch=batch,
                         step=plan.step, delay=plan.delay, keep=plan.keep,
                         on_phase=plan.on_phase.name if plan.on_phase else None,
                         recovery_delay=plan.recovery_delay)
            injector = await trainer.run_batch(plan)
            assert injector is not None, "the planned failure did not happen"
            result = await trainer.fail_and_recover(plan, injector)
            entry.update(
                phase=result.failure.phase.value, failure_batch=result.failure.batch,
                device_phase=result.device_phase,
                recovery_failed_again=result.recovery_failed_again,
                committed=result.reported_committed, snapshot=result.reported_snapshot,
                lost_beats=result.lost_beats, kept_beats=result.kept_beats,
                recovery_cycles=result.recovery_cycles,
                restored_entries=result.restored_entries, errors=result.errors,
                # Batches whose UPDATE status reached the host must all survive.
                lost_committed=max(0, trainer.acknowledged - result.reported_committed))
            if first_failure_of_run and not result.errors:
                # The first failure of a run is exactly the oracle's single-failure case.
                recovered = oracle.recovered_state(
                    result.failure, reported_committed=result.reported_committed,
                    reported_snapshot=result.reported_snapshot)
                difference = first_table_difference(
                    recovered.tables, trainer.golden.tables[result.reported_committed])
                if difference is not None:
                    result.errors.append(f"path golden disagrees with the oracle: "
                                         f"{difference}")
            first_failure_of_run = False
            if result.errors:
                raise AssertionError("; ".join(result.errors))
            trainer.acknowledged = result.reported_committed
        except Exception as error:  # a failed trial: record it and start a fresh run
            entry["errors"] = [*entry.get("errors", []), f"{type(error).__name__}: {error}"]
            entry["traceback"] = traceback.format_exc(limit=6)
            dut._log.error("trial %d failed: %s", index, error)
            await device.power_cycle(seed=1, keep=0)
            runs += 1
            first_failure_of_run = True
            trainer = await _fresh_run(device, preset, layout, params, log, log_mode, relaxed)
        trials.append(entry)
        if (index + 1) % 10 == 0:
            dut._log.info("%d trials, %d failed, %.1f s", index + 1,
                          sum(1 for t in trials if t.get("errors")),
                          time.monotonic() - started)
    await RisingEdge(dut.clk)
    seconds = time.monotonic() - started
    cycles = int((get_sim_time("ns") - first_ns) // CLOCK_PERIOD_NS)
    result = {"trials": trials, "runs": runs, "final_checks": final_checks,
              "wall_seconds": seconds, "cycles": cycles,
              "cycles_per_second": cycles / seconds if seconds else 0.0}
    with open(os.environ["CRASH_RESULT"], "w") as out:
        json.dump(result, out, indent=1)
