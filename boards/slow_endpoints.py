"""The near-critical paths of a routed design, ranked by the source lines that end them.

    python -m boards.synth --board ulx3s-85f --nextpnr-extra "--detailed-timing-report"
    python -m boards.slow_endpoints build/synth/ulx3s-85f/report.json [--within 0.85] [--top 25]
    python -m boards.slow_endpoints build/synth/ulx3s-85f/report.json --clocks 50 75 100

nextpnr's report names one critical path per clock: fix it, build again (25 minutes for the
ULX3S design), and learn the next one. With ``--detailed-timing-report`` the report also holds,
for every net that ends at a clocked input (a flip-flop's D, CE or LSR, a block RAM's or a
multiplier's port), the latest arrival time there. This ranks those endpoints: the ones whose
arrival is at least ``--within`` of the worst, grouped by the Amaranth source lines of the net
that feeds them (the logic just in front of the register), so one build lists every path
that would come next, each with its worst arrival, the Fmax it alone would allow (arrival
only: the flip-flop's setup time is not in it) and how many endpoints share it.

How far a clock is (``--clocks 50 75 100``): for each clock, how many clocked inputs have a
latest arrival past its period, and the blocks that hold the most of them at the fastest clock
(an endpoint's block is its cell's first ``--depth`` hierarchy levels). One path per clock
says what to fix first; these counts say how much there is to fix.
"""

import argparse
import collections
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from .congestion import module_of
from .nextpnr_report import load_report

__all__ = ["ClockMisses", "EndpointGroup", "clock_misses", "main", "short_source",
           "slow_endpoint_groups"]

# A source attribute is "path:line" or "path:line.column-line.column"; the path is wherever
# the package was when the design was elaborated. Keep it from the project's top directory.
_PROJECT_PATH = re.compile(r"^.*?/((?:hw|boards|tb|sim|sw_model|amaranth[^/]*)/.*)$")

# nextpnr names the write-side nets of an ECP5 LUT-RAM slice "<memory>.<N>.<slice>"
# followed by "$RAMW_SLICE$conn$WADO0" (or WDO1, ...): cut from the slice index on, so the
# slices of one memory make one group instead of one each.
_LUT_RAM_SLICE = re.compile(r"\.\d+\$RAMW_SLICE.*$")


def short_source(source):
    """``/tmp/x/hw/emb/update.py:123`` -> ``hw/emb/update.py:123`` (other paths unchanged)."""
    match = _PROJECT_PATH.match(source)
    return match.group(1) if match else source


@dataclass(frozen=True)
class EndpointGroup:
    """Endpoints fed by nets from the same source lines."""
    sources: tuple        # the feeding nets' source lines, or ("net <name>",) without any
                          # (the net's name without the suffixes synthesis adds)
    worst_ns: float       # latest arrival at any of the endpoints
    endpoints: int        # clocked inputs reached
    example: str          # the endpoint with the latest arrival, as "cell.port"
    driver: str           # the cell driving that endpoint's net

    @property
    def fmax_mhz(self):
        return 1000.0 / self.worst_ns


def _detailed_timings(report):
    if "detailed_net_timings" not in report:
        raise ValueError("Report has no 'detailed_net_timings'; nextpnr writes them with "
                         "--detailed-timing-report")
    return report["detailed_net_timings"]


@dataclass(frozen=True)
class ClockMisses:
    """The clocked inputs whose latest arrival is later than one clock's period."""
    mhz: float
    endpoints: int        # clocked inputs that would miss the clock (setup time not counted)
    total: int            # clocked inputs in the report
    blocks: tuple         # ((block, endpoints), ...), most first, then by name

    @property
    def period_ns(self):
        return 1000.0 / self.mhz


def clock_misses(report, clocks_mhz, *, depth=5):
    """A :class:`ClockMisses` for each clock in ``clocks_mhz`` (MHz), in that order; a block is
    the first ``depth`` hierarchy levels of an endpoint's cell (:func:`module_of`)."""
    clocks = list(clocks_mhz)
    for mhz in clocks:
        if isinstance(mhz, bool) or not isinstance(mhz, (int, float)) or not mhz > 0:
            raise ValueError(f"Clock must be a frequency in MHz above 0, not {mhz!r}")
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ValueError(f"Depth must be a positive integer, not {depth!r}")
    arrivals = [(float(endpoint["delay"][1]), module_of(endpoint["cell"], depth))
                for net in _detailed_timings(report) for endpoint in net["endpoints"]]
    result = []
    for mhz in clocks:
        period = 1000.0 / mhz
        blocks = collections.Counter(block for arrival, block in arrivals if arrival > period)
        result.append(ClockMisses(mhz, sum(blocks.values()), len(arrivals), tuple(
            sorted(blocks.items(), key=lambda item: (-item[1], item[0])))))
    return result


def slow_endpoint_groups(report, *, within=0.85):
    """The groups of endpoints whose arrival is at least ``within`` of the worst, latest first.

    ``report`` is a parsed nextpnr report written with ``--detailed-timing-report``.
    """
    if not 0 < within <= 1:
        raise ValueError(f"Within must be a fraction in (0, 1], not {within!r}")
    arrivals = []
    for net in _detailed_timings(report):
        sources = tuple(sorted({short_source(s) for s in net.get("sources", []) if s}))
        name = _LUT_RAM_SLICE.sub("", net["net"])
        key = sources or (f"net {module_of(name, depth=len(name))}",)
        for endpoint in net["endpoints"]:
            arrivals.append((float(endpoint["delay"][1]), key,
                             f"{endpoint['cell']}.{endpoint['port']}", net["driver"]))
    if not arrivals:
        return []
    threshold = within * max(arrival for arrival, *_ in arrivals)
    worst, counts = {}, collections.Counter()
    for arrival, key, endpoint, driver in arrivals:
        if arrival < threshold:
            continue
        counts[key] += 1
        if key not in worst or arrival > worst[key][0]:
            worst[key] = (arrival, endpoint, driver)
    groups = [EndpointGroup(key, arrival, counts[key], endpoint, driver)
              for key, (arrival, endpoint, driver) in worst.items()]
    return sorted(groups, key=lambda group: (-group.worst_ns, group.sources))


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m boards.slow_endpoints", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("report", type=Path,
                        help="nextpnr's report.json, written with --detailed-timing-report")
    parser.add_argument("--within", type=float, default=0.85,
                        help="list endpoints whose arrival is at least this fraction of the "
                             "worst (default: %(default)s)")
    parser.add_argument("--top", type=int, default=25, help="groups (and blocks) listed")
    parser.add_argument("--clocks", type=float, nargs="+", metavar="MHZ",
                        help="instead of the groups: how many clocked inputs miss each clock, "
                             "and the blocks that hold them at the fastest")
    parser.add_argument("--depth", type=int, default=5,
                        help="hierarchy levels that name a block with --clocks (default: "
                             "%(default)s, the engine's blocks in the emb board design: "
                             "bist.self_test.dut_0.engine.<block>)")
    args = parser.parse_args(argv)
    try:
        report = load_report(args.report)
        if args.clocks:
            _print_clock_misses(clock_misses(report, args.clocks, depth=args.depth), args.top)
            return 0
        groups = slow_endpoint_groups(report, within=args.within)
    except (OSError, ValueError) as error:
        print(f"error: {args.report}: {error}", file=sys.stderr)
        return 2
    print(f"{len(groups)} source groups with an arrival within {args.within:g} of the worst")
    print("\n| arrival ns | MHz | endpoints | source lines of the feeding net | worst endpoint |")
    print("|---:|---:|---:|---|---|")
    for group in groups[:args.top]:
        print(f"| {group.worst_ns:.2f} | {group.fmax_mhz:.1f} | {group.endpoints} | "
              f"{'<br>'.join(group.sources)} | `{group.example}` |")
    return 0


def _print_clock_misses(misses, top):
    total = misses[0].total
    print(f"{total:,} clocked inputs; arrival only (no setup time)")
    print("\n| clock MHz | period ns | clocked inputs that miss it | share | blocks |")
    print("|---:|---:|---:|---:|---:|")
    for miss in misses:
        share = miss.endpoints / total if total else 0.0
        print(f"| {miss.mhz:g} | {miss.period_ns:.2f} | {miss.endpoints:,} | {share:.1%} | "
              f"{len(miss.blocks)} |")
    fastest = max(misses, key=lambda miss: miss.mhz)
    if fastest.blocks:
        print(f"\nBlocks with the most clocked inputs that miss {fastest.mhz:g} MHz:\n")
        print("| block | clocked inputs |")
        print("|---|---:|")
        for block, endpoints in fastest.blocks[:top]:
            print(f"| `{block}` | {endpoints:,} |")


if __name__ == "__main__":
    sys.exit(main())
