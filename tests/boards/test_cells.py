"""boards.cells on a small netlist in Yosys' JSON format."""

import json

from boards import cells


def cell(kind, output_port, bits, directions=None):
    directions = directions or {output_port: "output", "A": "input"}
    return {"type": kind, "port_directions": directions,
            "connections": {output_port: bits, "A": [2]}}


NETLIST = {"modules": {"top": {
    "netnames": {
        "top.engine.pool.acc": {"hide_name": 0, "bits": [10, 11]},
        "top.engine.pool.acc_TRELLIS_FF_Q_DI_LUT4_Z": {"hide_name": 0, "bits": [12]},
        "top.engine.walk.count": {"hide_name": 0, "bits": [13, 14]},
        "$auto$hidden": {"hide_name": 1, "bits": [15]},
    },
    "cells": {
        "ff0": cell("TRELLIS_FF", "Q", [10]),
        "ff1": cell("TRELLIS_FF", "Q", [11]),
        "lut": cell("LUT4", "Z", [12]),
        "carry": cell("CCU2C", "S0", [13], {"S0": "output", "S1": "output", "A0": "input"}),
        "ram": cell("DP16KD", "DOA0", [14]),
        "hidden": cell("LUT4", "Z", [15]),
        "scope": {"type": "$scopeinfo", "port_directions": {}, "connections": {}},
    },
}}}


def test_cells_are_counted_for_the_module_of_their_output():
    assert cells.cells_by_module(NETLIST, depth=3) == {
        "top.engine.walk": {"LUT4": 2, "FF": 0, "EBR": 1, "DSP": 0},
        "top.engine.pool": {"LUT4": 1, "FF": 2, "EBR": 0, "DSP": 0},
        "(no named output)": {"LUT4": 1, "FF": 0, "EBR": 0, "DSP": 0},
    }


def test_cli_prints_the_table(tmp_path, capsys):
    path = tmp_path / "top.json"
    path.write_text(json.dumps(NETLIST))
    assert cells.main([str(path), "--depth", "2"]) == 0
    out = capsys.readouterr().out
    assert "| `top.engine` | 3 | 75.0% | 2 | 1 | 0 |" in out
    assert "| all 2 | 4 | 100% | 2 | 1 | 0 |" in out
    assert cells.main([str(tmp_path / "missing.json")]) == 2
    assert "no netlist at" in capsys.readouterr().err
