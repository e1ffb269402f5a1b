"""Reading nextpnr's --report JSON.

``data/nextpnr_report_sample.json`` is the report of a real nextpnr-ecp5 0.11.1 run (a
registered 16-bit adder on the LFE5U-85F), with its critical path cut to four steps and, so
that every mapping is exercised, 3 DP16KD and 4 MULT18X18D marked as used.
"""

import copy
import json
from pathlib import Path

import pytest

from boards.nextpnr_report import ECP5_RESOURCES, load_report, summarise_report
from boards.tables import block_table

SAMPLE = Path(__file__).parent / "data" / "nextpnr_report_sample.json"


def test_sample_summary():
    summary = summarise_report(load_report(SAMPLE))
    assert summary == {
        "fmax_mhz": {"block.clk": 315.56},
        "target_mhz": {"block.clk": 150.01},
        "timing_met": True,
        "utilization": {
            "LUT4": {"used": 24, "available": 83640},
            "FF": {"used": 68, "available": 83640},
            "EBR": {"used": 3, "available": 208},
            "DSP": {"used": 4, "available": 156},
        },
    }


def test_missed_constraint_and_absent_resource():
    report = copy.deepcopy(load_report(SAMPLE))
    report["fmax"]["$glbnet$uart_clk"] = {"achieved": 90.0, "constraint": 100.0}
    del report["utilization"]["MULT18X18D"]
    summary = summarise_report(report)
    assert summary["fmax_mhz"] == {"block.clk": 315.56, "uart_clk": 90.0}
    assert summary["timing_met"] is False
    assert summary["utilization"]["DSP"] == {"used": 0, "available": None}


def test_resource_names_follow_nextpnr_bel_types():
    assert ECP5_RESOURCES == {"LUT4": "TRELLIS_COMB", "FF": "TRELLIS_FF", "EBR": "DP16KD",
                              "DSP": "MULT18X18D"}


def test_rejects_what_is_not_a_report(tmp_path):
    with pytest.raises(TypeError, match=r"^Report must be a dict parsed from nextpnr's JSON, "
                                        r"not \[\]$"):
        summarise_report([])
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"fmax": {}}))
    with pytest.raises(ValueError, match=r"^Report has no 'utilization' section; was it written "
                                         r"by nextpnr --report\?$"):
        summarise_report(load_report(path))


def test_block_table_row():
    summary = summarise_report(load_report(SAMPLE))
    summary.update(technique="pins", harness_ff=49, build_seconds=12.3)
    table = block_table({"adder": summary}).splitlines()
    assert table[0] == ("| Block | Fmax MHz (target) | LUT4 | FF | EBR | DSP | Technique "
                        "| Build s |")
    assert table[2] == ("| adder | 315.6 (150) | 24/83640 | 68/83640 | 3/208 | 4/156 "
                        "| pins (harness 49 FF) | 12 |")
