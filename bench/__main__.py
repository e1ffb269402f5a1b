"""``python -m bench <name> [options]``: run one benchmark (``python -m bench`` lists them)."""

import sys

BENCHMARKS = {
    "lookup": ("bench.lookup", "embedding lookup bandwidth efficiency vs dim and read latency"),
    "ckpt": ("tb.ckpt.bench", "cycles per batch with/without checkpointing on the PMEM "
                              "profile, recovery vs full reload"),
    "paper": ("bench.paper", "paper-style comparison on RM1/RM2 shapes: cycles per batch per "
                             "mode, speedups, ft overhead, recovery, link bytes (results.json, "
                             "results.md, plots)"),
}


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in BENCHMARKS:
        print("usage: python -m bench <name> [options]\n\nbenchmarks:")
        for name, (_, summary) in BENCHMARKS.items():
            print(f"  {name:10s} {summary}")
        return 0 if not argv else 2
    import importlib

    return importlib.import_module(BENCHMARKS[argv[0]][0]).main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
