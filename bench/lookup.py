"""Lookup bandwidth efficiency, measured in Verilator from the RTL.

    python -m bench lookup            (or: python -m bench.lookup)

efficiency = (useful row bytes / cycles) / 64, where the useful bytes are the table rows the
batch pools (``num_indices * dim * 4``) and the cycles are the engine's own ``busy_cycles``
counter for the command (from the cycle after the command is accepted to its status). The
memory is :class:`sim.axi_memory.AxiMemory`: one 64-byte beat per cycle at most, each read
answered a fixed number of cycles after its address. The same batch shape is run for every
dim and latency, and every pooled output is checked bit for bit against ``sw_model``.

Writes the table to ``build/bench/lookup.json`` and prints it.
"""

import argparse
import json
import sys
import time

from sim.rtl import BUILD_ROOT, Design
from sim.runner import run

__all__ = ["ENGINE", "main"]

#: The engine as benchmarked: the LookupEngine defaults (128 read IDs, 16 bag slots, 8192
#: indices and 2048 offsets on chip) with a 32-bit address space for the memory model.
ENGINE = {
    "max_tables": 8, "max_dim": 128, "num_regions": 1, "addr_width": 32, "id_width": 8,
    "outstanding_reads": 128, "index_buffer_depth": 8192, "offset_buffer_depth": 2048,
    "output_buffer_depth": 128, "bag_slots": 16,
}
GOAL = 0.90


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench lookup", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dims", type=int, nargs="+", default=[16, 32, 64, 128])
    parser.add_argument("--latencies", type=int, nargs="+", default=[30, 100])
    parser.add_argument("--tables", type=int, default=8)
    parser.add_argument("--bags", type=int, default=64, help="bags per table (batch size)")
    parser.add_argument("--bag-length", type=int, default=16, help="lookups per bag")
    parser.add_argument("--rows", type=int, default=512, help="rows per table")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--output", default=str(BUILD_ROOT / "bench" / "lookup.json"))
    args = parser.parse_args(argv)

    spec = {"dims": args.dims, "latencies": args.latencies, "tables": args.tables,
            "bags": args.bags, "bag_length": args.bag_length, "rows": args.rows,
            "seed": args.seed}
    table_lines = args.tables * args.rows * max(args.dims) // 16
    memory_lines = 1 << (table_lines + 4096).bit_length()
    design = Design("bench_lookup", "bench.harness:LookupBenchTop",
                    {**ENGINE, "memory_lines": memory_lines})
    out_dir = BUILD_ROOT / "bench"
    out_dir.mkdir(parents=True, exist_ok=True)
    spec_path, raw_path = out_dir / "lookup_spec.json", out_dir / "lookup_raw.json"
    spec_path.write_text(json.dumps(spec, indent=2))
    started = time.monotonic()
    run(design, "bench.cocotb_lookup", seed=args.seed,
        extra_env={"BENCH_SPEC": str(spec_path), "BENCH_RESULT": str(raw_path)})
    rows = json.loads(raw_path.read_text())
    report = {
        "metric": "lookup bandwidth efficiency = useful row bytes / cycles / 64",
        "batch": {**spec, "num_indices": args.tables * args.bags * args.bag_length,
                  "pooling": "sum", "index_distribution": "uniform"},
        "engine": ENGINE,
        "goal": GOAL,
        "results": rows,
        "wall_seconds": round(time.monotonic() - started, 1),
    }
    with open(args.output, "w") as out:
        json.dump(report, out, indent=2)

    latencies = args.latencies
    print(f"lookup bandwidth efficiency ({args.tables} tables x {args.bags} bags x "
          f"{args.bag_length} lookups, uniform rows, SUM)")
    print("  dim | " + " | ".join(f"latency {lat:>3}" for lat in latencies))
    failed = False
    for dim in args.dims:
        cells = []
        for lat in latencies:
            row = next(r for r in rows if r["dim"] == dim and r["read_latency"] == lat)
            failed |= row["efficiency"] < GOAL
            cells.append(f"{row['efficiency']:.3f} ({row['cycles']:>6} cyc)")
        print(f"  {dim:3d} | " + " | ".join(cells))
    print(f"written to {args.output}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
