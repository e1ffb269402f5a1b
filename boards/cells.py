"""Where a synthesized ECP5 design's cells go, per module of the design.

    python -m boards.synth --board ulx3s-85f --synth-only      # writes .../top.json
    python -m boards.cells build/synth/ulx3s-85f/top.json --depth 6

Yosys flattens the design, but every cell drives a net named after the hierarchy it belongs
to (``bist.self_test.dut_0.engine.update.datapath.held_tag`` or a name derived from one,
``..._TRELLIS_FF_Q_DI_LUT4_Z``). This counts each cell for the module of its first output net
(the first ``--depth`` levels, derived suffixes removed as :mod:`boards.congestion` does), in
the units of ``summary.json``: LUT4 as nextpnr counts them before packing, FF, EBR, DSP.
"""

import argparse
import collections
import json
import sys
from pathlib import Path

from .build import resource_counts
from .congestion import module_of

__all__ = ["cells_by_module", "main"]

_UNNAMED = "(no named output)"


def cells_by_module(netlist, *, depth, top="top"):
    """``{module: {"LUT4", "FF", "EBR", "DSP": count}}`` of Yosys' JSON ``netlist`` (a dict),
    most LUT4 first."""
    module = netlist["modules"][top]
    names = {}
    for name, net in module["netnames"].items():
        if net.get("hide_name"):
            continue
        for bit in net["bits"]:
            if isinstance(bit, int):
                names.setdefault(bit, name)
    counts = collections.defaultdict(collections.Counter)
    for cell in module["cells"].values():
        if cell["type"].startswith("$"):
            continue
        outputs = [bit for port, direction in cell.get("port_directions", {}).items()
                   if direction == "output" for bit in cell["connections"].get(port, [])
                   if isinstance(bit, int) and bit in names]
        owner = module_of(names[outputs[0]], depth) if outputs else _UNNAMED
        counts[owner][cell["type"]] += 1
    resources = {owner: resource_counts(cells) for owner, cells in counts.items()}
    return dict(sorted(resources.items(), key=lambda item: -item[1]["LUT4"]))


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m boards.cells", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("netlist", type=Path, help="Yosys' JSON netlist (top.json)")
    parser.add_argument("--depth", type=int, default=6, help="hierarchy levels per module")
    parser.add_argument("--top", type=int, default=20, help="modules listed")
    args = parser.parse_args(argv)
    if not args.netlist.is_file():
        print(f"error: no netlist at {args.netlist} (`python -m boards.synth ... "
              f"--synth-only` writes top.json)", file=sys.stderr)
        return 2
    netlist = json.loads(args.netlist.read_text())
    modules = cells_by_module(netlist, depth=args.depth)
    total = {kind: sum(counts[kind] for counts in modules.values())
             for kind in ("LUT4", "FF", "EBR", "DSP")}
    print(f"| module (first {args.depth} levels) | LUT4 | share | FF | EBR | DSP |")
    print("|---|---:|---:|---:|---:|---:|")
    for owner, counts in list(modules.items())[:args.top]:
        share = 100 * counts["LUT4"] / (total["LUT4"] or 1)
        print(f"| `{owner}` | {counts['LUT4']:,} | {share:.1f}% | {counts['FF']:,} | "
              f"{counts['EBR']} | {counts['DSP']} |")
    print(f"| all {len(modules)} | {total['LUT4']:,} | 100% | {total['FF']:,} | "
          f"{total['EBR']} | {total['DSP']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
