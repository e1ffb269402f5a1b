"""One real place-and-route with the open toolchain: the ULX3S-85F FP self-test with one lane.

Skipped when the YoWASP wheels are not installed; takes about half a minute.
"""

import importlib.util
import json

import pytest

from boards import synth
from boards.logic_depth import DelayModel, analyse
from boards.toolchain import open_toolchain_available

HAVE_FP = importlib.util.find_spec("hw.fp") is not None


@pytest.mark.skipif(not open_toolchain_available(), reason="YoWASP toolchain not installed")
@pytest.mark.skipif(not HAVE_FP, reason="hw.fp is not available")
def test_ulx3s_bist_places_routes_and_meets_25_mhz(tmp_path):
    argv = ["--board", "ulx3s-85f", "--design", "fp", "--lanes", "1", "--vectors", "8",
            "--out", str(tmp_path)]
    assert synth.main(argv) == 0
    board_dir = tmp_path / "ulx3s-85f"
    summary = json.loads((board_dir / "summary.json").read_text())
    assert summary["timing_met"] is True
    assert (summary["placer"], summary["router"]) == ("heap", "router1")  # nextpnr's defaults
    (clock, fmax), = summary["fmax_mhz"].items()
    assert summary["target_mhz"][clock] == 25.0 and fmax >= 25.0
    utilization = summary["utilization"]
    assert utilization["LUT4"]["available"] == 83640
    assert 0 < utilization["LUT4"]["used"] < utilization["LUT4"]["available"]
    assert utilization["DSP"]["used"] > 0  # the FP32 multiplier's significand product
    assert (board_dir / "top.bit").stat().st_size > 0
    assert (board_dir / "report.json").exists()


@pytest.mark.skipif(not open_toolchain_available(), reason="YoWASP toolchain not installed")
@pytest.mark.skipif(not HAVE_FP, reason="hw.fp is not available")
def test_synth_only_counts_yosys_cells(tmp_path, capsys):
    argv = ["--board", "ulx3s-85f", "--design", "fp", "--lanes", "1", "--vectors", "4",
            "--synth-only", "--out", str(tmp_path)]
    assert synth.main(argv) == 0
    board_dir = tmp_path / "ulx3s-85f"
    summary = json.loads((board_dir / "summary.json").read_text())
    assert summary["placed"] is False and "fmax_mhz" not in summary
    cells, utilization = summary["cells"], summary["utilization"]
    assert utilization["LUT4"]["used"] == cells["LUT4"] + 2 * cells.get("CCU2C", 0) + 6 * cells.get(
        "TRELLIS_DPR16X4", 0)
    assert utilization["DSP"] == {"used": cells["MULT18X18D"], "available": 156}
    assert not (board_dir / "top.bit").exists()
    assert "not placed, no Fmax" in capsys.readouterr().out
    # The netlist's paths (boards.logic_depth): one into each flip-flop's data input that is
    # not a constant, and the latest runs through the significand multiplier.
    netlist = json.loads((board_dir / "top.json").read_text())
    paths = analyse(netlist)
    driven = {f"{name}.DI" for name, cell in netlist["modules"]["top"]["cells"].items()
              if cell["type"] == "TRELLIS_FF" and cell["connections"]["DI"][0] not in ("0", "1")}
    assert driven and driven <= {p.endpoint for p in paths}
    assert paths[0].arrival_ns > DelayModel().multiplier_ns and paths[0].levels >= 2
