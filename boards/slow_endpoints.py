"""The near-critical paths of a routed design, ranked by the source lines that end them.

    python -m boards.synth --board ulx3s-85f --nextpnr-extra "--detailed-timing-report"
    python -m boards.slow_endpoints build/synth/ulx3s-85f/report.json [--within 0.85] [--top 25]

nextpnr's report names one critical path per clock: fix it, build again (25 minutes for the
ULX3S design), and learn the next one. With ``--detailed-timing-report`` the report also holds,
for every net that ends at a clocked input (a flip-flop's D, CE or LSR, a block RAM's or a
multiplier's port), the latest arrival time there. This ranks those endpoints: the ones whose
arrival is at least ``--within`` of the worst, grouped by the Amaranth source lines of the net
that feeds them (the logic just in front of the register), so one build lists every path
that would come next, each with its worst arrival, the Fmax it alone would allow (arrival
only: the flip-flop's setup time is not in it) and how many endpoints share it.
"""

import argparse
import collections
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from .congestion import module_of
from .nextpnr_report import load_report

__all__ = ["EndpointGroup", "main", "short_source", "slow_endpoint_groups"]

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


def slow_endpoint_groups(report, *, within=0.85):
    """The groups of endpoints whose arrival is at least ``within`` of the worst, latest first.

    ``report`` is a parsed nextpnr report written with ``--detailed-timing-report``.
    """
    if not 0 < within <= 1:
        raise ValueError(f"Within must be a fraction in (0, 1], not {within!r}")
    if "detailed_net_timings" not in report:
        raise ValueError("Report has no 'detailed_net_timings'; nextpnr writes them with "
                         "--detailed-timing-report")
    arrivals = []
    for net in report["detailed_net_timings"]:
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
    parser.add_argument("--top", type=int, default=25, help="groups listed")
    args = parser.parse_args(argv)
    try:
        groups = slow_endpoint_groups(load_report(args.report), within=args.within)
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


if __name__ == "__main__":
    sys.exit(main())
