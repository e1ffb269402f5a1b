"""Where router2 finds congestion: nextpnr's heatmaps summed per tile and per design module.

    python -m boards.synth --board ulx3s-85f --nextpnr-extra "--router2-heatmap heat/"
    python -m boards.congestion build/synth/ulx3s-85f/heat/            # the last iteration
    python -m boards.congestion build/synth/ulx3s-85f/heat/ --iteration 2 --png heat2.png

With ``--router2-heatmap PREFIX`` nextpnr writes, after each routing iteration ``i``,
``PREFIX_congestion_by_coordinate_i.csv`` (a grid: overused wires per tile) and
``PREFIX_congestion_by_net_i.csv`` (per net: the overused wires it holds), among others. This
reads them and prints the total, the share of the die's thirds (global or local congestion?)
and the modules whose nets hold the most overused wires (the net names' first ``--depth``
hierarchy levels, with the suffixes Yosys and nextpnr add to derived nets removed). ``--png``
draws the grid.
"""

import argparse
import collections
import os
import re
import sys
from pathlib import Path

import numpy as np

__all__ = ["congestion_by_module", "heatmap_iterations", "load_grid", "main", "module_of"]

_COORDINATE = "_congestion_by_coordinate_"
_NET = "_congestion_by_net_"
# What synthesis and packing append to a net's own name: cell-derived names, numbered
# duplicates, bit indices.
_DERIVED = re.compile(r"(_(TRELLIS|LUT4|CCU2C|PFUMX|L6MUX21|DP16KD|MULT18X18D)|\$\d|\[).*$")


def heatmap_iterations(prefix):
    """The routing iterations with a congestion grid under ``prefix``, in order."""
    # (As nextpnr does: the prefix is a string; "heat/" means files in heat/.)
    directory, name = os.path.split(str(prefix))
    pattern = re.compile(re.escape(name + _COORDINATE) + r"(\d+)\.csv$")
    directory = Path(directory or ".")
    found = []
    for path in directory.glob("*.csv"):
        match = pattern.match(path.name)
        if match:
            found.append(int(match.group(1)))
    return sorted(found)


def _file(prefix, kind, iteration):
    return Path(f"{prefix}{kind}{iteration}.csv")


def load_grid(prefix, iteration):
    """Overused wires per tile after ``iteration``, as a 2-D integer array."""
    rows = []
    for line in _file(prefix, _COORDINATE, iteration).read_text().splitlines():
        cells = [cell for cell in line.strip().split(",") if cell != ""]
        if cells:
            rows.append([int(cell) for cell in cells])
    return np.array(rows, dtype=np.int64)


def module_of(net, depth):
    """The module a net belongs to: its first ``depth`` hierarchy levels, derived suffixes
    removed (``a.b.c_TRELLIS_FF_Q_DI[3]`` -> ``a.b.c``)."""
    levels = [_DERIVED.sub("", level) for level in net.split(".")[:depth]]
    return ".".join(level for level in levels if level)


def congestion_by_module(prefix, iteration, *, depth):
    """``{module: (overused wires, nets)}`` after ``iteration``, most congested first."""
    wires, nets = collections.Counter(), collections.Counter()
    for line in _file(prefix, _NET, iteration).read_text().splitlines():
        net, _, count = line.strip().rpartition(",")
        if not net:
            continue
        module = module_of(net, depth)
        wires[module] += int(count)
        nets[module] += 1
    return {module: (count, nets[module]) for module, count in wires.most_common()}


def _thirds(grid, axis):
    size = grid.shape[axis]
    return [int(np.take(grid, range(k * size // 3, (k + 1) * size // 3), axis=axis).sum())
            for k in range(3)]


def _draw(grid, iteration, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 8))
    image = axes.imshow(grid, cmap="hot", interpolation="nearest")
    figure.colorbar(image, label="overused wires")
    axes.set_title(f"router2 congestion after iteration {iteration}")
    figure.savefig(path, dpi=90)
    plt.close(figure)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m boards.congestion", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("prefix", help="the --router2-heatmap prefix, with the build "
                                       "directory (e.g. build/synth/ulx3s-85f/heat/)")
    parser.add_argument("--iteration", type=int, help="routing iteration (default: the last)")
    parser.add_argument("--depth", type=int, default=6, help="hierarchy levels per module")
    parser.add_argument("--top", type=int, default=15, help="modules listed")
    parser.add_argument("--png", type=Path, help="draw the per-tile grid here")
    args = parser.parse_args(argv)
    available = heatmap_iterations(args.prefix)
    if not available:
        print(f"error: no router2 heatmap under {args.prefix!r} (nextpnr writes them with "
              f"--router2-heatmap PREFIX)", file=sys.stderr)
        return 2
    iteration = available[-1] if args.iteration is None else args.iteration
    if iteration not in available:
        print(f"error: no iteration {iteration} under {args.prefix!r}; there are "
              f"{available[0]}..{available[-1]}", file=sys.stderr)
        return 2
    grid = load_grid(args.prefix, iteration)
    total = int(grid.sum())
    print(f"iteration {iteration}: {total} overused wires in {grid.shape[0]} x "
          f"{grid.shape[1]} tiles; the hottest tile has {int(grid.max())}")
    print(f"thirds along the first axis: {_thirds(grid, 0)}; along the second: "
          f"{_thirds(grid, 1)}")
    modules = congestion_by_module(args.prefix, iteration, depth=args.depth)
    held = sum(count for count, _ in modules.values()) or 1
    print(f"\n| module (first {args.depth} levels) | overused wires held | share | nets |")
    print("|---|---:|---:|---:|")
    for module, (count, nets) in list(modules.items())[:args.top]:
        print(f"| `{module}` | {count:,} | {100 * count / held:.1f}% | {nets:,} |")
    if args.png:
        _draw(grid, iteration, args.png)
        print(f"\ngrid drawn in {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
