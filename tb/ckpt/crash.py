"""Crash campaign: many seeded power failures against the checkpointed system in Verilator.

    python -m tb.ckpt.crash --trials 50 --seed 1        (CI size: a few minutes)
    python -m tb.ckpt.crash --trials 1000 --seed 7      (the long campaign)

Every trial fails power at a seeded point of the tiny preset's training (LOOKUP with logging,
UPDATE, the commit record, snapshot writes, and, in about a third of the trials, RECOVER
itself) with torn writes from the PMEM model, recovers, checks the recovered tables and MLP
snapshot bit for bit, and resumes training (see ``tb.ckpt.cocotb_crash``). ``--log-mode``
chooses when the undo log is taken (``CKPT_CONTROL.log_mode``): during LOOKUP (``lookup``), at
UPDATE (``sync``), in the background right after LOOKUP (``after``), during LOOKUP with what
the tap could not take replayed after it (``lookup_replay``), or all four, trials rotating
(``mixed``, the default); failures are aimed at the REPLAY phase of ``sync`` and ``after``
too. ``--lookup relaxed`` runs every batch's LOOKUP(N + 1) ahead of UPDATE(N), relaxed (the
device defers and corrects it), and fails power in those LOOKUPs and in the correcting
UPDATEs. ``--channels 4`` runs them on ``SYSTEM_4CH`` (four interleaved PMEM channels that
answer out of order and tear their writes independently, and the benchmark's delta and
correction lanes) instead of ``SYSTEM``'s one channel. All trials run in one simulator process
on the one Verilator build the checkpoint tests share.

Writes ``build/crash/results.json``: ``trials``, ``failures`` (trials with any error),
``lost_committed_batches`` (batches acknowledged to the host but not recovered: must be 0),
``phases_covered`` (trials per contract phase, device phase and recovery failure), timings,
and every trial. Exit status 1 if any trial failed or lost a committed batch.
"""

import argparse
import collections
import json
import sys
import time

from sim.rtl import BUILD_ROOT
from sim.runner import run
from tb.ckpt.designs import SYSTEM, SYSTEM_4CH

__all__ = ["main", "summarize"]


def summarize(raw: dict, *, seed: int, preset: str, batches: int, profile: str,
              wall: float, lookup: str = "strict") -> dict:
    trials = raw["trials"]
    phases = collections.Counter()
    log_modes = collections.Counter(t["log_mode"] for t in trials if "log_mode" in t)
    for trial in trials:
        if "phase" in trial:
            phases[trial["phase"]] += 1
            phases[f"device:{trial['device_phase'].lower()}"] += 1
            if trial.get("recovery_failed_again"):
                phases["recovery"] += 1
            if trial.get("lost_beats", 0) and trial.get("kept_beats", 0):
                phases["torn"] += 1
    failures = [t for t in trials if t.get("errors")]
    recovery = [t["recovery_cycles"] for t in trials if "recovery_cycles" in t]
    return {
        "trials": len(trials),
        "failures": len(failures),
        "lost_committed_batches": sum(t.get("lost_committed", 0) for t in trials),
        "phases_covered": dict(sorted(phases.items())),
        "log_modes": dict(sorted(log_modes.items())),
        "seed": seed, "preset": preset, "batches_per_run": batches, "profile": profile,
        "lookup": lookup,
        "runs": raw["runs"], "final_tables_checked": raw["final_checks"],
        "recovery_cycles": {"min": min(recovery, default=0), "max": max(recovery, default=0),
                            "mean": sum(recovery) / len(recovery) if recovery else 0},
        "simulated_cycles": raw["cycles"],
        "simulation_seconds": round(raw["wall_seconds"], 1),
        "cycles_per_second": round(raw["cycles_per_second"]),
        "wall_seconds": round(wall, 1),
        "failed_trials": failures,
        "trial_log": trials,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tb.ckpt.crash",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--batches", type=int, default=64,
                        help="batches per training run (the tiny preset has 64)")
    parser.add_argument("--profile", default="pmem", choices=("pmem", "dram"))
    parser.add_argument("--log-mode", default="mixed",
                        choices=("lookup", "sync", "after", "lookup_replay", "mixed"),
                        help="undo log during LOOKUP, at UPDATE, right after LOOKUP, during "
                             "LOOKUP with the rest right after, or trials rotating through "
                             "the four (default)")
    parser.add_argument("--lookup", default="strict", choices=("strict", "relaxed"),
                        help="strict lookups, or LOOKUP(N + 1) relaxed, ahead of UPDATE(N)")
    parser.add_argument("--channels", type=int, default=1, choices=(1, 4),
                        help="PMEM channels: SYSTEM (1, the default) or SYSTEM_4CH (4)")
    parser.add_argument("--output", default=str(BUILD_ROOT / "crash" / "results.json"))
    args = parser.parse_args(argv)
    if args.trials < 1:
        parser.error(f"--trials must be at least 1, not {args.trials}")
    out_dir = BUILD_ROOT / "crash"
    out_dir.mkdir(parents=True, exist_ok=True)
    spec_path, raw_path = out_dir / "spec.json", out_dir / "raw.json"
    spec_path.write_text(json.dumps({"trials": args.trials, "seed": args.seed,
                                     "preset": args.preset, "batches": args.batches,
                                     "profile": args.profile, "log_mode": args.log_mode,
                                     "lookup": args.lookup}))
    raw_path.unlink(missing_ok=True)
    started = time.monotonic()
    system, run_name = (SYSTEM, "crash") if args.channels == 1 else (SYSTEM_4CH, "crash_4ch")
    run(system, "tb.ckpt.cocotb_crash", seed=args.seed, run_name=run_name,
        extra_env={"CRASH_SPEC": str(spec_path), "CRASH_RESULT": str(raw_path)})
    report = summarize(json.loads(raw_path.read_text()), seed=args.seed, preset=args.preset,
                       batches=args.batches, profile=args.profile, lookup=args.lookup,
                       wall=time.monotonic() - started)
    report = {"channels": args.channels, **report}
    with open(args.output, "w") as out:
        json.dump(report, out, indent=1)
    print(f"crash campaign: {report['trials']} trials, {report['failures']} failed, "
          f"{report['lost_committed_batches']} committed batches lost; "
          f"{report['simulation_seconds']} s simulated "
          f"({report['cycles_per_second']} cycles/s), {report['wall_seconds']} s in all")
    print("phases covered: " + ", ".join(f"{k} {v}" for k, v in
                                         report["phases_covered"].items()))
    print("log modes: " + ", ".join(f"{k} {v} trials" for k, v in report["log_modes"].items()))
    for trial in report["failed_trials"][:5]:
        print(f"  trial {trial['trial']}: {trial['errors']}")
    print(f"written to {args.output}")
    return 1 if report["failures"] or report["lost_committed_batches"] else 0


if __name__ == "__main__":
    sys.exit(main())
