"""boards.logic_depth: paths through a hand-made ECP5 netlist, with known delays."""

import json

import pytest

from boards import logic_depth
from boards.logic_depth import DelayModel, analyse, group_paths

MODEL = DelayModel(route_ns=1.0, route_fanout_ns=0.0)


def _ff(d, q, *, ce=None):
    connections = {"CLK": [2], "DI": [d], "LSR": ["0"], "Q": [q]}
    directions = {"CLK": "input", "DI": "input", "LSR": "input", "Q": "output"}
    if ce is not None:
        connections["CE"], directions["CE"] = [ce], "input"
    return {"type": "TRELLIS_FF", "connections": connections, "port_directions": directions}


def _lut(z, *inputs):
    ports = dict(zip("ABCD", [*inputs, "0", "0", "0", "0"][:4], strict=True))
    return {"type": "LUT4", "connections": {**{p: [b] for p, b in ports.items()}, "Z": [z]},
            "port_directions": {**{p: "input" for p in "ABCD"}, "Z": "output"}}


def _mux(z, alut, blut, select):
    return {"type": "PFUMX", "connections": {"ALUT": [alut], "BLUT": [blut], "C0": [select],
                                              "Z": [z]},
            "port_directions": {"ALUT": "input", "BLUT": "input", "C0": "input",
                                "Z": "output"}}


def _carry(a0, a1, cin, s0, s1, cout):
    connections = {"A0": [a0], "A1": [a1], "B0": ["0"], "B1": ["0"], "C0": ["0"], "C1": ["0"],
                   "D0": ["0"], "D1": ["0"], "CIN": [cin], "S0": [s0], "S1": [s1],
                   "COUT": [cout]}
    return {"type": "CCU2C", "connections": connections,
            "port_directions": {p: "output" if p in ("S0", "S1", "COUT") else "input"
                                for p in connections}}


def _netlist(cells, names):
    return {"modules": {"top": {"cells": cells, "netnames": {
        name: {"hide_name": 0, "bits": [bit], "attributes": {"src": src} if src else {}}
        for name, (bit, src) in names.items()}}}}


def test_two_luts_between_flip_flops():
    """Q (0.52) + three nets (1 ns each) + two LUTs (0.24 each) = 4.0 ns, two levels."""
    cells = {"a": _ff(20, 10), "l1": _lut(11, 10), "l2": _lut(12, 11), "b": _ff(12, 13)}
    names = {"a_q": (10, ""), "first": (11, ""), "second": (12, "hw/x.py:7"), "b_q": (13, "")}
    paths = analyse(_netlist(cells, names), model=MODEL)
    path = next(p for p in paths if p.endpoint == "b.DI")
    assert path.arrival_ns == pytest.approx(4.0)
    assert path.levels == 2
    assert [name for name, _ in path.hops] == ["a_q", "first", "second"]
    assert path.sources == ("hw/x.py:7",)
    assert path.fmax_mhz == pytest.approx(250.0)


def test_carry_chain_and_slice_mux_ride_dedicated_wires():
    """A carry chain is one level however long (CIN to COUT at 0.07 a cell, no routing), and
    a LUT into its slice's PFUMX is no extra hop."""
    cells = {
        "a": _ff(20, 10),
        "c0": _carry(10, "0", "0", 30, 31, 32),
        "c1": _carry("0", "0", 32, 33, 34, 35),
        "c2": _carry("0", "0", 35, 36, 37, 38),
        "b": _ff(37, 39),
        "l1": _lut(40, 10), "l2": _lut(41, 10), "m": _mux(42, 40, 41, 10),
        "d": _ff(42, 43),
    }
    paths = {p.endpoint: p for p in analyse(_netlist(cells, {}), model=MODEL)}
    # Q, a net, the chain's entry (0.45), two carry cells (0.07 each), the sum (0.4), a net.
    assert paths["b.DI"].arrival_ns == pytest.approx(0.52 + 1 + 0.45 + 0.07 + 0.4 + 1)
    assert paths["b.DI"].levels == 1
    # Q, a net, the LUT, the mux (no net between them), a net: the select arrives earlier.
    assert paths["d.DI"].arrival_ns == pytest.approx(0.52 + 1 + 0.24 + 0.25 + 1)
    assert paths["d.DI"].levels == 1


def test_a_combinational_loop_ends_the_walk():
    cells = {"l1": _lut(11, 12), "l2": _lut(12, 11), "b": _ff(12, 13)}
    (path,) = [p for p in analyse(_netlist(cells, {}), model=MODEL) if p.endpoint == "b.DI"]
    assert path.levels >= 1 and path.arrival_ns > 0


def test_groups_the_late_paths_by_source_latest_first():
    cells = {"a": _ff(20, 10), "l1": _lut(11, 10), "l2": _lut(12, 11),
             "b": _ff(12, 13), "c": _ff(12, 14, ce=11), "e": _ff(11, 15)}
    names = {"first": (11, "hw/x.py:3"), "second": (12, "hw/x.py:7")}
    paths = analyse(_netlist(cells, names), model=MODEL)
    groups = group_paths(paths, period_ns=2.5)
    assert [(key, count) for key, _, count in groups] == [(("hw/x.py:7",), 2),
                                                          (("hw/x.py:3",), 2)]
    assert groups[0][1].arrival_ns == pytest.approx(4.0)


def test_a_netlist_without_the_top_module_is_refused():
    with pytest.raises(ValueError, match=r"^Netlist has no module 'top'$"):
        analyse({"modules": {}})


def test_calibration_pairs_each_clocked_cell_with_its_routed_arrival():
    cells = {"a": _ff(20, 10), "l1": _lut(11, 10), "b": _ff(11, 13)}
    paths = analyse(_netlist(cells, {}), model=MODEL)
    report = {"detailed_net_timings": [
        {"net": "n", "driver": "l1", "endpoints": [
            {"cell": "b", "port": "DI", "delay": [1.0, 3.5]}]}]}
    assert logic_depth.calibrate(paths, report) == [(pytest.approx(2.76), 3.5)]
    with pytest.raises(ValueError, match="names none of the netlist's clocked cells"):
        logic_depth.calibrate(paths, {"detailed_net_timings": []})


def test_command_line_lists_levels_and_the_late_groups(tmp_path, capsys):
    cells = {"a": _ff(20, 10), "l1": _lut(11, 10), "l2": _lut(12, 11), "b": _ff(12, 13)}
    netlist = tmp_path / "top.json"
    netlist.write_text(json.dumps(_netlist(cells, {"second": (12, "hw/x.py:7")})))
    assert logic_depth.main([str(netlist), "--clock-mhz", "300"]) == 0
    out = capsys.readouterr().out
    assert "estimated later than 3.33 ns (300 MHz)" in out
    assert "hw/x.py:7" in out and "into b.DI" in out
    with pytest.raises(SystemExit):
        logic_depth.main([str(netlist), "--clock-mhz", "0"])
