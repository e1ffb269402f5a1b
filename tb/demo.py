"""The main job: DLRM training on the device RTL in Verilator, with a power failure, recovery and
resumption, checked bit for bit against the golden model.

    python -m tb.demo [--batches 20] [--seed S] [--gpu-cycles 2000] [--baseline 4]
                      [--profile pmem|dram]
    python -m tb.demo --golden-only [--batches 24] [--seed S] [--preset P]

The RTL run builds the ``tiny`` device with its memory (``tb/device/system.py``, the build the
device tests use; cached under ``build/sim/``), and a host model (``tb/host/trainer.py``)
trains the preset on it: the MLPs run in NumPy on the host, the embedding lookups and sparse
updates on the device, all through CXL.mem and the device's registers. Each batch's pooled
outputs, loss and updated rows, and at the end every table row and the MLP, are compared bit
for bit with the golden model (``sw_model``).

With the checkpoint engine in the device (``hw/ckpt``), the run (``tb/device/cocotb_demo.py``)
first trains ``--baseline`` batches with logging off (the cycles without checkpointing), then
trains from scratch with undo logging and MLP snapshots, fails power once at a point drawn from
``--seed`` (batch, command, delay, GPF warning or not, which unacknowledged writes survive),
resets, RECOVERs, checks the recovered tables and MLP against the state the persistence
contract allows (``sw_model.checkpoint``), resumes, and finishes; it prints the checkpoint
overhead, the recovery cycles and the verdict. Without the engine it trains without power
failure and says so. The exit status is 1 on any difference.

``--golden-only`` runs the power-failure flow on the golden model alone (no RTL).
"""

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

from sim.rtl import BUILD_ROOT
from sw_model import get_preset
from sw_model.checkpoint import (
    CheckpointOracle,
    Failure,
    Phase,
    first_table_difference,
    is_snapshot_batch,
)
from sw_model.train import TrainState, train

#: The Verilator build every RTL run uses (the device tests share it).
RTL_PRESET = "tiny"
#: The last RTL run's report (per-batch cycles, counters, recovery, simulation speed).
REPORT_PATH = BUILD_ROOT / "demo" / "report.json"
DEFAULT_GPU_CYCLES = 2000


def _parse(argv):
    parser = argparse.ArgumentParser(prog="python -m tb.demo", description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default=RTL_PRESET,
                        help=f"preset name (default: {RTL_PRESET}; the RTL run supports "
                             f"{RTL_PRESET} only, to keep the build small)")
    parser.add_argument("--batches", type=int, default=None,
                        help="batches to train (default: 20 on the RTL, 24 golden-only)")
    parser.add_argument("--seed", type=int, default=None,
                        help="seed of the simulation and of the power-failure point "
                             "(default: random, printed)")
    parser.add_argument("--gpu-cycles", type=int, default=DEFAULT_GPU_CYCLES,
                        help=f"clock cycles the GPU computes per batch (default "
                             f"{DEFAULT_GPU_CYCLES}); the next batch is staged meanwhile")
    parser.add_argument("--baseline", type=int, default=4,
                        help="with checkpointing: batches first run without logging, for the "
                             "overhead (default 4)")
    parser.add_argument("--profile", choices=("pmem", "dram"), default="pmem",
                        help="memory timing of the PMEM model (default pmem: the paper's "
                             "3x/7x latency, 0.6x/0.1x bandwidth)")
    parser.add_argument("--golden-only", action="store_true",
                        help="run the power-failure/recovery flow on the golden model only")
    args = parser.parse_args(argv)
    if args.batches is None:
        args.batches = 24 if args.golden_only else 20
    if args.batches < (2 if args.golden_only else 1):
        parser.error(f"--batches must be at least {2 if args.golden_only else 1}, "
                     f"not {args.batches}")
    if args.gpu_cycles < 0:
        parser.error(f"--gpu-cycles must be >= 0, not {args.gpu_cycles}")
    if args.baseline < 0:
        parser.error(f"--baseline must be >= 0, not {args.baseline}")
    if not args.golden_only and args.preset != RTL_PRESET:
        parser.error(f"the RTL run supports --preset {RTL_PRESET} only (use --golden-only for "
                     f"other presets)")
    return args


def golden_only(preset, batches: int, seed: int) -> int:
    """Train, fail power at a seeded point, recover, resume, all on the golden model; check
    the resumed run against an independent golden replay."""
    draw = random.Random(seed)
    print("TrainingCXL demo, GOLDEN MODEL ONLY: the device RTL does not take part in this run.")
    print(f"preset={preset.name} batches={batches} seed={seed} "
          f"snapshot_interval={preset.snapshot_interval}")

    started = time.perf_counter()
    oracle = CheckpointOracle(preset)
    reference = oracle.golden_run(stop=batches)
    for record in reference.records:
        print(f"  batch {record.number:3d}  loss {record.loss:.5f}")

    batch = draw.randrange(1, batches)
    phases = [p for p in Phase  # only snapshot batches have a snapshot phase
              if p is not Phase.SNAPSHOT or is_snapshot_batch(batch, preset.snapshot_interval)]
    failure = Failure(batch, draw.choice(phases))
    allowed = oracle.acceptable(failure)
    committed, snapshot = draw.choice(allowed.committed), draw.choice(allowed.snapshot)
    print(f"power failure during {failure.phase.value} of batch {failure.batch}: "
          f"recovered to last committed batch {committed}, MLP snapshot of batch {snapshot}")
    recovered = oracle.recovered_state(failure, reported_committed=committed,
                                       reported_snapshot=snapshot)

    resumed = oracle.continue_training(recovered, stop=batches)
    for record in resumed.records:
        print(f"  resumed batch {record.number:3d}  loss {record.loss:.5f}")

    # An independent replay of the same path: train from scratch to the committed batch, swap
    # in the snapshot's MLP, train on. It must agree with the oracle's continuation to the bit.
    replay = train(preset, stop=committed + 1) if committed >= 0 else None
    tables = replay.state.tables if replay else oracle.state_after(-1).tables
    mlp = (train(preset, stop=snapshot + 1).state.mlp if snapshot >= 0
           else oracle.state_after(-1).mlp)
    replayed = train(preset, TrainState(tables, mlp, committed + 1), stop=batches)
    difference = first_table_difference(replayed.state.tables, resumed.state.tables)
    digests_equal = all(a.table_digests == b.table_digests
                        for a, b in zip(replayed.records, resumed.records, strict=True))
    elapsed = time.perf_counter() - started
    if difference is None and digests_equal:
        print(f"PASS: resumed run bit-exact with the golden replay ({elapsed:.1f} s)")
        return 0
    print(f"FAIL: resumed run differs from the golden replay: {difference}")
    return 1


def rtl_run(preset, batches: int, seed: int, gpu_cycles: int, *, baseline: int,
            profile: str) -> int:
    """Train on the device RTL in Verilator, checked against the golden model; with the
    checkpoint engine, with a power failure and recovery."""
    from hw.device import device_params
    from sim.runner import SimulationFailed, run
    from tb.device.test_device import SYSTEM

    checkpointing = SYSTEM.params.get("checkpointing")
    if checkpointing is None:   # the preset's device decides (hw.device.device_params)
        checkpointing = device_params(get_preset(SYSTEM.params["preset"]))["checkpointing"]
    print("TrainingCXL demo: DLRM training on the device RTL (Verilator), checked bit for bit "
          "against the golden model.")
    if not checkpointing:
        print("NOTE: no power failure in this run. The checkpoint engine (hw/ckpt) is not "
              "integrated into the device build yet, so failure injection, RECOVER and "
              "resumption are not exercised on the RTL; `--golden-only` shows that flow on "
              "the golden model.")
    print(f"preset={preset.name} batches={batches} seed={seed} gpu_cycles={gpu_cycles}"
          + (f" baseline={baseline} profile={profile}" if checkpointing else ""))
    print("Building the device (Verilog, then Verilator; the build is reused while the design "
          "is unchanged)...", flush=True)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        report_path = Path(scratch) / "report.json"
        try:
            run(SYSTEM, "tb.device.cocotb_demo", seed=seed, run_name="demo", extra_env={
                "DEMO_BATCHES": str(batches), "DEMO_GPU_CYCLES": str(gpu_cycles),
                "DEMO_BASELINE": str(baseline), "DEMO_SEED": str(seed),
                "DEMO_PROFILE": profile, "DEMO_REPORT": str(report_path)})
        except SimulationFailed as failure:
            report = json.loads(report_path.read_text()) if report_path.exists() else {}
            for line in report.get("failures", []):
                print(f"  {line}")
            print(f"FAIL: {failure}")
            return 1
        report = json.loads(report_path.read_text())
    finished = time.perf_counter()
    simulated = report["wall_seconds"]
    report["cycles_per_second"] = report["simulated_cycles"] / max(simulated, 1e-9)
    REPORT_PATH.parent.mkdir(parents=True, exist_ok=True)
    REPORT_PATH.write_text(json.dumps({**report, "seed": seed, "batches": batches}, indent=1))
    rows = report["batches"]
    totals = [b["total"] for b in rows]
    losses = [b["loss"] for b in rows]
    print(f"cycles per batch: mean {sum(totals) / len(totals):.0f}, min {min(totals)}, max "
          f"{max(totals)} (lookup {_mean(rows, 'lookup'):.0f}, read pooled "
          f"{_mean(rows, 'read_pooled'):.0f}, GPU + staging {_mean(rows, 'gpu'):.0f}, write "
          f"gradient {_mean(rows, 'write_gradient'):.0f}, update {_mean(rows, 'update'):.0f}"
          + (f", snapshot {_mean(rows, 'snapshot'):.0f}" if checkpointing else "") + ")")
    counters = report["counters"]
    print(f"device counters: {counters['cycles']} cycles, engine busy "
          f"{counters['engine_busy_cycles']}, rows read {counters['engine_rows_read']}, "
          f"bytes read {counters['engine_bytes_read']}, written "
          f"{counters['engine_bytes_written']}; host CXL.mem reads {counters['host_reads']}, "
          f"writes {counters['host_writes']}")
    window = max(1, min(5, len(losses) // 2))
    print(f"loss: mean of the first {window} batches {sum(losses[:window]) / window:.5f}, of "
          f"the last {window} {sum(losses[-window:]) / window:.5f}")
    verdict = "pooled outputs, losses, updated rows, final tables and MLP bit-exact with the " \
              "golden model"
    if checkpointing:
        _print_checkpoint_summary(report)
        recovery = report["recovery"]
        verdict += (f"; power failure in {recovery['opcode']}({recovery['batch']}) recovered to "
                    f"batch {recovery['last_committed']} (MLP of batch "
                    f"{recovery['snapshot_batch']}) bit-exact, resumed bit-exact"
                    if recovery else "; the armed power failure did not happen")
    else:
        verdict += " (power failure NOT tested: checkpoint engine not integrated)"
    print(f"time: {finished - started:.1f} s in all: {simulated:.1f} s in the simulation "
          f"(training and checks: {report['simulated_cycles']} cycles, "
          f"{report['cycles_per_second']:.0f} cycles/s), {finished - started - simulated:.1f} "
          f"s emitting Verilog, building with Verilator (when needed) and starting the "
          f"simulator; report in {REPORT_PATH}")
    # A batch whose completion the power failure swallowed but which was committed is not
    # run again, so it has no row of its own.
    print(f"PASS: {batches} batches; {verdict}")
    return 0


def _print_checkpoint_summary(report):
    base = {r["batch"]: r["total"] for r in report["baseline"]}
    same = [r for r in report["batches"] if r["batch"] in base]
    same = same[:len(base)]   # the first pass over those batches, before any failure
    if same:
        with_ckpt = sum(r["total"] for r in same) / len(same)
        without = sum(base[r["batch"]] for r in same) / len(same)
        print(f"checkpoint overhead: {with_ckpt:.0f} cycles per batch with logging and "
              f"snapshots against {without:.0f} without, over batches "
              f"{same[0]['batch']}..{same[-1]['batch']}: {100 * (with_ckpt / without - 1):+.2f}%")
    recovery = report["recovery"]
    if recovery:
        print(f"recovery: {recovery['recovery_cycles']} cycles, {recovery['restored_entries']} "
              f"undo-log entries restored; GPF drain {recovery['gpf_drain_cycles']} cycles"
              + ("" if recovery["warning"] else " (no warning: unannounced power cut)"))


def _mean(rows, key):
    return sum(r[key] for r in rows) / len(rows)


def main(argv=None) -> int:
    args = _parse(argv)
    try:
        preset = get_preset(args.preset)
    except ValueError as error:
        print(error, file=sys.stderr)
        return 2
    seed = random.randrange(2**31) if args.seed is None else args.seed
    if args.golden_only:
        return golden_only(preset, args.batches, seed)
    return rtl_run(preset, args.batches, seed, args.gpu_cycles, baseline=args.baseline,
                   profile=args.profile)


if __name__ == "__main__":
    sys.exit(main())
