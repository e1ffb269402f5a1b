"""Checkpointing cost on the PMEM profile, measured in Verilator from the RTL.

    python -m tb.ckpt.bench [--batches 16] [--host-gaps 0 2000] [--profile pmem]

The same tiny-preset batches run with checkpointing off (the checkpoint engine passes LOOKUP
and UPDATE straight through) and on (log-on-lookup, seal, flag, gated in-place writes, commit
record, snapshots every K batches). A batch's cycles run from the LOOKUP doorbell to UPDATE's
status; between the two the host reads the pooled output, writes the gradient and, with
``--host-gaps``, computes for that many more cycles (the GPU's MLP work, which the log drain
overlaps). Fault-tolerance overhead = cycles per batch with / without - 1 (DESIGN.md
section 6). Also: recovery cycles after a power failure in an UPDATE, against copying every
table line back from a full checkpoint (read + write at the profile's bandwidths), and the
simulation speed.

Writes ``build/bench/ckpt.json`` and prints a table.
"""

import argparse
import json
import sys
import time
from fractions import Fraction

from sim.pmem import PROFILES
from sim.rtl import BUILD_ROOT
from sim.runner import run
from tb.ckpt.designs import SYSTEM

__all__ = ["main"]


def _mean(values):
    values = list(values)
    return sum(values) / len(values) if values else 0.0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tb.ckpt.bench",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=16)
    parser.add_argument("--host-gaps", type=int, nargs="+", default=[0, 2000])
    parser.add_argument("--profile", default="pmem", choices=sorted(PROFILES))
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--output", default=str(BUILD_ROOT / "bench" / "ckpt.json"))
    args = parser.parse_args(argv)
    out_dir = BUILD_ROOT / "bench"
    out_dir.mkdir(parents=True, exist_ok=True)
    spec = {"batches": args.batches, "host_gaps": args.host_gaps, "profile": args.profile,
            "preset": args.preset, "seed": args.seed,
            "recovery_batch": min(args.batches - 1, 5)}
    spec_path, raw_path = out_dir / "ckpt_spec.json", out_dir / "ckpt_raw.json"
    spec_path.write_text(json.dumps(spec))
    started = time.monotonic()
    run(SYSTEM, "tb.ckpt.cocotb_bench", seed=args.seed, run_name="bench",
        extra_env={"BENCH_SPEC": str(spec_path), "BENCH_RESULT": str(raw_path)})
    raw = json.loads(raw_path.read_text())
    rows = []
    for gap in args.host_gaps:
        runs = {r["checkpointing"]: r for r in raw["runs"] if r["host_gap"] == gap}
        off, on = runs[False], runs[True]
        per_off = _mean(b["total"] for b in off["batches"])
        per_on = _mean(b["total"] for b in on["batches"])
        rows.append({
            "host_gap": gap,
            "cycles_per_batch_without": per_off, "cycles_per_batch_with": per_on,
            "overhead": per_on / per_off - 1,
            "update_cycles_without": _mean(b["update"] for b in off["batches"]),
            "update_cycles_with": _mean(b["update"] for b in on["batches"]),
            "lookup_cycles_without": _mean(b["lookup"] for b in off["batches"]),
            "lookup_cycles_with": _mean(b["lookup"] for b in on["batches"]),
            "log_entries_per_batch": on["counters"]["log_entries"] / args.batches,
            "duplicates_skipped_per_batch": on["counters"]["log_duplicates"] / args.batches,
            "own_writes_per_batch": on["counters"]["own_writes"] / args.batches,
            "interlock_cycles_per_batch": on["counters"]["interlock_cycles"] / args.batches,
        })
    profile = PROFILES[args.profile]
    recovery = raw["recovery"]
    # Reloading a full checkpoint copies every table line back: read it from the checkpoint
    # and write it in place, each at the profile's bandwidth (plus one latency of each).
    reload_cycles = (recovery["table_lines"] / Fraction(*profile.read_rate)
                     + recovery["table_lines"] / Fraction(*profile.write_rate)
                     + profile.read_latency + profile.write_latency)
    report = {
        "metric": "fault-tolerance overhead = cycles per batch with checkpointing / without - 1",
        "profile": {"name": profile.name, **profile.inputs()},
        "preset": args.preset, "batches": args.batches,
        "results": rows,
        "recovery": {**recovery, "full_reload_cycles": float(reload_cycles),
                     "speedup_vs_full_reload": float(reload_cycles)
                     / max(1, recovery["recovery_cycles"])},
        "simulation": {"cycles": raw["simulated_cycles"],
                       "seconds": round(raw["wall_seconds"], 1),
                       "cycles_per_second": round(raw["simulated_cycles"]
                                                  / raw["wall_seconds"])},
        "wall_seconds": round(time.monotonic() - started, 1),
        "raw": raw,
    }
    with open(args.output, "w") as out:
        json.dump(report, out, indent=1)
    print(f"checkpointing cost, {args.preset} preset, {args.batches} batches, "
          f"{profile.name} profile")
    print("  host gap | cycles/batch without | with   | overhead | log entries | dups skipped")
    for row in rows:
        print(f"  {row['host_gap']:8d} | {row['cycles_per_batch_without']:20.0f} | "
              f"{row['cycles_per_batch_with']:6.0f} | {row['overhead']:8.2%} | "
              f"{row['log_entries_per_batch']:11.1f} | {row['duplicates_skipped_per_batch']:.1f}")
    print(f"  recovery: {recovery['recovery_cycles']} cycles for "
          f"{recovery['restored_entries']} restored lines; copying all "
          f"{recovery['table_lines']} table lines back from a full checkpoint takes "
          f"{float(reload_cycles):.0f} ({report['recovery']['speedup_vs_full_reload']:.1f}x)")
    print(f"  simulation: {report['simulation']['cycles_per_second']} cycles/s")
    print(f"written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
