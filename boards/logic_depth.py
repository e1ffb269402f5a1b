"""Register-to-register paths of a synthesized ECP5 netlist, each traced cell by cell.

    python -m boards.synth --board ulx3s-85f --synth-only          # writes .../top.json
    python -m boards.logic_depth build/synth/ulx3s-85f/top.json [--clock-mhz 100] [--top 25]
    python -m boards.logic_depth top.json --calibrate report.json  # against a routed build

nextpnr's report names one critical path per clock, and only after placing and routing (25
minutes for the ULX3S design). Yosys' netlist (the ``top.json`` nextpnr reads) already holds
every path: this walks it from each clocked output (a flip-flop's Q, a block RAM's data out,
an input pin) through the LUTs, wide-function muxes, carry chains, LUT RAM reads and
multipliers to each clocked input, and estimates each path's delay: each cell's delay plus
:attr:`DelayModel.route_ns` for every net between two slices (carry chains and a slice's own
muxes are wired inside, at no cost). At 100 MHz on an ECP5-6 a path has room for five or six
hops. The estimate knows nothing of placement, so it does not replace a build; it lists, in a
minute, every path a build would show next, with the cells on it, grouped as
:mod:`boards.slow_endpoints` groups them: by the source lines of the net in front of the
register. ``--calibrate`` compares the estimates with a routed build's arrivals (nextpnr's
``--detailed-timing-report``) and prints the route delay that fits them best.
"""

import argparse
import collections
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .congestion import module_of
from .nextpnr_report import load_report
from .slow_endpoints import short_source

__all__ = ["DelayModel", "TimedPath", "analyse", "calibrate", "main"]

_CONSTANT_BITS = {"0", "1", "x", "z"}


@dataclass(frozen=True)
class DelayModel:
    """Delays in ns, near nextpnr's ECP5 speed grade 6 figures (``--calibrate`` fits
    ``route_ns`` to a routed build)."""
    route_ns: float = 1.0         # a net between two slices
    route_fanout_ns: float = 0.2  # more per doubling of its sinks
    clock_to_q_ns: float = 0.52   # a flip-flop's Q, a LUT RAM's stored bits
    ebr_clock_to_out_ns: float = 3.0   # a block RAM's DO (no output register)
    lut_ns: float = 0.24
    mux_ns: float = 0.25          # PFUMX, L6MUX21
    carry_entry_ns: float = 0.45  # CCU2C: A..D into the sum or the carry out
    carry_ns: float = 0.07        # CIN to COUT, per CCU2C (two bits)
    carry_sum_ns: float = 0.4     # CIN to a sum
    lut_ram_read_ns: float = 0.4  # TRELLIS_DPR16X4: RAD to DO
    multiplier_ns: float = 4.0    # MULT18X18D without its registers

    def route(self, fanout):
        return self.route_ns + self.route_fanout_ns * math.log2(max(fanout, 1))


@dataclass
class TimedPath:
    """The latest-arriving path into one clocked input."""
    endpoint: str                 # "cell.port"
    arrival_ns: float
    levels: int                   # LUTs, carry-chain entries, LUT RAM reads, multipliers
    hops: list = field(default_factory=list)   # (net name, cell type it reaches, arrival)
    sources: tuple = ()           # the source lines of the net in front of the register

    @property
    def fmax_mhz(self):
        return 1000.0 / self.arrival_ns if self.arrival_ns else math.inf


def _ports(cell, direction):
    return [port for port, d in cell["port_directions"].items() if d == direction]


def _carry_inputs(out_port):
    """CCU2C: which inputs reach ``out_port`` (S0, S1 or COUT)."""
    if out_port == "S0":
        return ["A0", "B0", "C0", "D0", "CIN"]
    return ["A0", "B0", "C0", "D0", "A1", "B1", "C1", "D1", "CIN"]


class _Netlist:
    def __init__(self, netlist, top):
        if top not in netlist.get("modules", {}):
            raise ValueError(f"Netlist has no module {top!r}")
        module = netlist["modules"][top]
        self.cells = module["cells"]
        self.driver = {}           # bit -> (cell name, port)
        self.fanout = collections.Counter()
        for name, cell in self.cells.items():
            for port, bits in cell["connections"].items():
                direction = cell["port_directions"].get(port)
                for bit in bits:
                    if bit in _CONSTANT_BITS:
                        continue
                    if direction == "output":
                        self.driver[bit] = (name, port)
                    elif direction == "input":
                        self.fanout[bit] += 1
        self.name, self.sources, hidden = {}, {}, {}
        for net, info in module["netnames"].items():
            src = info.get("attributes", {}).get("src", "")
            for bit in info["bits"]:
                if bit in _CONSTANT_BITS:
                    continue
                better = bit not in self.name or (
                    (info.get("hide_name", 0), len(net)) <
                    (hidden[bit], len(self.name[bit])))
                if better:
                    self.name[bit] = net
                    hidden[bit] = info.get("hide_name", 0)
                # (Yosys' own techmap files name no line of the design.)
                lines = {short_source(s) for s in src.split("|") if s and "/share/" not in s}
                if lines:
                    self.sources.setdefault(bit, set()).update(lines)


def _inputs_of(cell, out_port):
    kind = cell["type"]
    if kind == "CCU2C":
        return _carry_inputs(out_port)
    if kind == "TRELLIS_DPR16X4":
        return ["RAD"]
    if kind == "MULT18X18D":
        return [p for p in _ports(cell, "input") if p[0] in "AB" and p[1:].isdigit()]
    return _ports(cell, "input")


_COMBINATIONAL = {"LUT4", "PFUMX", "L6MUX21", "CCU2C", "TRELLIS_DPR16X4", "MULT18X18D"}
_START_DELAYS = {"TRELLIS_FF": "clock_to_q_ns", "DP16KD": "ebr_clock_to_out_ns"}
# The clocked inputs of a cell that also has combinational ones.
_CLOCKED_INPUTS = {"TRELLIS_DPR16X4": {"WAD", "WRE", "DI"}}


def _cell_delay(model, cell, in_port, out_port):
    kind = cell["type"]
    if kind == "LUT4":
        return model.lut_ns
    if kind in ("PFUMX", "L6MUX21"):
        return model.mux_ns
    if kind == "CCU2C":
        if in_port == "CIN":
            return model.carry_ns if out_port == "COUT" else model.carry_sum_ns
        return model.carry_entry_ns
    if kind == "TRELLIS_DPR16X4":
        return model.lut_ram_read_ns
    return model.multiplier_ns


def _dedicated(driver_cell, driver_port, cell, in_port):
    """Wires inside a slice or a carry chain: no general routing between them."""
    if in_port == "CIN" and driver_port == "COUT":
        return True
    if cell["type"] == "PFUMX" and in_port in ("ALUT", "BLUT") and driver_cell["type"] == "LUT4":
        return True
    return (cell["type"] == "L6MUX21" and in_port in ("D0", "D1")
            and driver_cell["type"] == "PFUMX")


def _bits(cell, ports):
    for port in ports:
        for index, bit in enumerate(cell["connections"].get(port, [])):
            if bit not in _CONSTANT_BITS:
                yield port, index, bit


class _Timing:
    """Arrival time and levels at each bit, computed on demand (memoised, no recursion)."""

    def __init__(self, netlist, model):
        self.net, self.model = netlist, model
        self.arrival = {}          # bit -> (ns, levels, (previous bit, cell type) or None)

    def at(self, bit):
        if bit in self.arrival:
            return self.arrival[bit]
        stack = [bit]
        on_stack = set()
        while stack:
            current = stack[-1]
            if current in self.arrival:
                stack.pop()
                continue
            pending = self._pending(current)
            if pending and current not in on_stack:
                on_stack.add(current)
                stack.extend(pending)
                continue
            # Inputs known (or part of a loop, which counts as a start).
            self.arrival[current] = self._compute(current)
            on_stack.discard(current)
            stack.pop()
        return self.arrival[bit]

    def _comb_inputs(self, bit):
        if bit not in self.net.driver:
            return None, None, []
        name, port = self.net.driver[bit]
        cell = self.net.cells[name]
        if cell["type"] not in _COMBINATIONAL:
            return cell, port, []
        return cell, port, list(_bits(cell, _inputs_of(cell, port)))

    def _pending(self, bit):
        _, _, inputs = self._comb_inputs(bit)
        return [b for _, _, b in inputs if b not in self.arrival]

    def _compute(self, bit):
        cell, port, inputs = self._comb_inputs(bit)
        if cell is None:
            return (0.0, 0, None)                    # a pin or an undriven bit
        if cell["type"] not in _COMBINATIONAL:
            start = _START_DELAYS.get(cell["type"])
            return (getattr(self.model, start) if start else 0.0, 0, None)
        best = None
        for in_port, _, in_bit in inputs:
            ns, levels, _ = self.arrival.get(in_bit, (0.0, 0, None))
            driver = self.net.driver.get(in_bit)
            dedicated = driver is not None and _dedicated(
                self.net.cells[driver[0]], driver[1], cell, in_port)
            if not dedicated:
                ns += self.model.route(self.net.fanout[in_bit])
            ns += _cell_delay(self.model, cell, in_port, port)
            if not dedicated and cell["type"] not in ("PFUMX", "L6MUX21"):
                levels += 1
            if best is None or ns > best[0]:
                best = (ns, levels, (in_bit, cell["type"]))
        if best is None:                             # a cell with constant inputs only
            return (0.0, 0, None)
        return best


def _endpoints(netlist):
    for name, cell in netlist.cells.items():
        kind = cell["type"]
        if kind in _COMBINATIONAL and kind not in _CLOCKED_INPUTS:
            continue
        if kind not in _START_DELAYS and kind not in _CLOCKED_INPUTS:
            continue
        ports = _ports(cell, "input")
        if kind in _CLOCKED_INPUTS:
            ports = [p for p in ports if p in _CLOCKED_INPUTS[kind]]
        ports = [p for p in ports if not p.startswith("CLK") and p != "WCK"]
        for port, index, bit in _bits(cell, ports):
            label = port if len(cell["connections"][port]) == 1 else f"{port}{index}"
            yield name, label, bit


def analyse(netlist, *, model=DelayModel(), top="top"):
    """Every clocked input's latest path, latest first (``netlist``: Yosys' JSON, parsed)."""
    net = _Netlist(netlist, top)
    timing = _Timing(net, model)
    paths = []
    for cell, port, bit in _endpoints(net):
        ns, levels, _ = timing.at(bit)
        ns += model.route(net.fanout[bit])
        paths.append((ns, levels, cell, port, bit))
    paths.sort(key=lambda p: (-p[0], p[2], p[3]))
    return [_path(net, timing, *p) for p in paths]


def _path(net, timing, ns, levels, cell, port, bit):
    hops, seen = [], set()
    current = bit
    while current is not None and current not in seen:     # (a loop ends the trace)
        seen.add(current)
        arrival, _, previous = timing.arrival[current]
        hops.append((net.name.get(current, f"<bit {current}>"), arrival))
        current = previous[0] if previous else None
    hops.reverse()
    return TimedPath(f"{cell}.{port}", ns, levels, hops,
                tuple(sorted(net.sources.get(bit, ()))))


def group_paths(paths, *, period_ns):
    """The paths later than ``period_ns``, grouped by the net in front of the register:
    ``[(key, worst path, count)]``, latest first."""
    worst, counts = {}, collections.Counter()
    for path in paths:
        if path.arrival_ns <= period_ns:
            break
        key = path.sources or (f"net {module_of(path.hops[-1][0], 99)}",)
        counts[key] += 1
        worst.setdefault(key, path)
    return [(key, worst[key], counts[key]) for key in worst]


def calibrate(paths, report):
    """``[(estimated ns, routed ns)]`` for each clocked cell that both the paths and a routed
    build's report (``--detailed-timing-report``) name: each cell's latest input."""
    routed = {}
    for net in report.get("detailed_net_timings", []):
        for endpoint in net["endpoints"]:
            routed[endpoint["cell"]] = max(routed.get(endpoint["cell"], 0.0),
                                           float(endpoint["delay"][1]))
    latest = {}
    for path in paths:
        cell = path.endpoint.rsplit(".", 1)[0]
        latest[cell] = max(latest.get(cell, 0.0), path.arrival_ns)
    pairs = [(latest[c], routed[c]) for c in latest.keys() & routed.keys()]
    if not pairs:
        raise ValueError("The report names none of the netlist's clocked cells")
    return pairs


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m boards.logic_depth",
                                     description=__doc__.split("\n\n")[1])
    parser.add_argument("netlist", type=Path, help="Yosys' JSON netlist (top.json)")
    parser.add_argument("--clock-mhz", type=float, default=100.0)
    parser.add_argument("--top", type=int, default=25, help="groups listed")
    parser.add_argument("--route-ns", type=float, default=DelayModel.route_ns)
    parser.add_argument("--calibrate", type=Path, metavar="REPORT",
                        help="a routed build's report.json (--detailed-timing-report)")
    args = parser.parse_args(argv)
    if not args.clock_mhz > 0:
        parser.error(f"--clock-mhz must be above 0, not {args.clock_mhz}")
    import json
    netlist = json.loads(args.netlist.read_text())
    paths = analyse(netlist, model=DelayModel(route_ns=args.route_ns))
    period = 1000.0 / args.clock_mhz
    late = [p for p in paths if p.arrival_ns > period]
    print(f"{len(paths):,} clocked inputs; {len(late):,} estimated later than {period:.2f} ns "
          f"({args.clock_mhz:g} MHz); route {args.route_ns} ns a net")
    levels = collections.Counter(min(p.levels, 12) for p in paths)
    print("levels: " + ", ".join(f"{k}{'+' if k == 12 else ''}: {levels[k]:,}"
                                 for k in sorted(levels)))
    if args.calibrate:
        pairs = calibrate(paths, load_report(args.calibrate))
        estimated, routed = zip(*pairs, strict=True)
        correlation = float(np.corrcoef(estimated, routed)[0, 1])
        print(f"calibration over {len(pairs):,} clocked cells: mean estimate "
              f"{np.mean(estimated):.2f} ns, mean routed {np.mean(routed):.2f} ns, "
              f"correlation {correlation:.2f}")
    print()
    for key, path, count in group_paths(paths, period_ns=period)[:args.top]:
        print(f"{path.arrival_ns:6.2f} ns ({path.fmax_mhz:5.1f} MHz), {path.levels} levels, "
              f"{count} endpoints: {', '.join(key)}")
        print(f"    into {path.endpoint}")
        for name, arrival in path.hops:
            print(f"    {arrival:6.2f}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
