"""Every board prepares the self-test without a toolchain (amaranth-boards' smoke test)."""

import importlib.util
import json

import pytest

from boards import synth
from boards.build import prepare_plan, synthesis_utilization
from boards.platforms import BOARDS, get_board
from boards.router_watch import RoutingDiverged
from hw.fanout import KEEP_REPLICAS_SCRIPT

HAVE_FP = importlib.util.find_spec("hw.fp") is not None
pytestmark = pytest.mark.skipif(not HAVE_FP, reason="hw.fp is not available")


def rtlil_modules(board_dir):
    """The module names in a board plan's ``top.il``."""
    return {line.split()[1] for line in (board_dir / "top.il").read_text().splitlines()
            if line.startswith("module ")}


def small_bist():
    return synth.make_bist_top(lanes=1, vectors=4)


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_board_prepares_the_bist(name):
    plan = prepare_plan(get_board(name).make_platform(), small_bist())
    assert plan.files


def test_ulx3s_constraints():
    files = prepare_plan(get_board("ulx3s-85f").make_platform(), small_bist()).files
    assert 'FREQUENCY PORT "clk25_0__io" 25000000.0 HZ;' in files["top.lpf"]
    assert 'SITE "L4"' in files["top.lpf"]  # FTDI UART TX
    assert 'SITE "B2"' in files["top.lpf"]  # LED 0
    assert "--report report.json" in files["build_top.sh"]
    # Every ECP5 build keeps per-lane register copies apart (hw/fanout.py).
    assert KEEP_REPLICAS_SCRIPT in files["top.ys"].splitlines()


def test_ecpix5_uses_rgb_leds():
    files = prepare_plan(get_board("ecpix5-85").make_platform(), small_bist()).files
    for ball in ("R21", "T23", "T22", "W21"):  # rgb_led 0 g, r, b; rgb_led 1 g
        assert f'SITE "{ball}"' in files["top.lpf"]
    assert "--um5g-85k --package CABGA554 --speed 8" in files["build_top.sh"]


def test_alveo_u200_vivado_plan():
    files = prepare_plan(get_board("alveo-u200").make_platform(), small_bist()).files
    assert "-part xcu200-fsgd2104-2-e" in files["top.tcl"]
    xdc = files["top.xdc"]
    for ball in ("AY37", "AY38", "BC21", "BB20"):
        assert f"set_property LOC {ball}" in xdc
    assert "BITSTREAM.CONFIG.OVERTEMPSHUTDOWN ENABLE" in xdc
    assert "create_clock -name clk300_0__p -period 3.3333333333333335" in xdc


def test_agilex7_quartus_pro_plan():
    files = prepare_plan(get_board("agilex7-iseries-dk").make_platform(), small_bist()).files
    qsf = files["top.qsf"]
    assert "set_global_assignment -name DEVICE AGIB027R29A1E2VR3" in qsf
    assert 'set_global_assignment -name FAMILY "Agilex 7"' in qsf
    assert "set_global_assignment -name SDC_FILE top.sdc" in qsf
    assert "set_location_assignment -to \"clk100_0__io\" PIN_N45" in qsf
    script = files["build_top.sh"]
    assert "quartus_syn" in script and "quartus_map" not in script
    assert "altiobuf" not in files["top.v"]


def test_synth_cli_writes_a_vendor_plan(tmp_path, capsys):
    argv = ["--board", "alveo-u200", "--no-build", "--out", str(tmp_path), "--design", "fp",
            "--lanes", "1", "--vectors", "4"]
    assert synth.main(argv) == 0
    board_dir = tmp_path / "alveo-u200"
    summary = json.loads((board_dir / "summary.json").read_text())
    assert summary["built"] is False and summary["toolchain"] == "Vivado"
    assert (board_dir / "top.xdc").exists() and (board_dir / "build_top.sh").exists()
    assert "Build plan for alveo-u200 (Vivado)" in capsys.readouterr().out


def test_synth_only_refuses_vendor_boards_and_no_build(capsys):
    assert synth.main(["--board", "alveo-u200", "--synth-only"]) == 2
    assert "--synth-only runs Yosys for an open-toolchain board" in capsys.readouterr().err
    assert synth.main(["--board", "ulx3s-85f", "--synth-only", "--no-build"]) == 2
    assert "--synth-only and --no-build exclude each other" in capsys.readouterr().err


def test_nextpnr_extra_reaches_the_build_script(tmp_path, capsys):
    argv = ["--board", "ulx3s-85f", "--no-build", "--out", str(tmp_path), "--design", "fp",
            "--lanes", "1", "--vectors", "4",
            "--nextpnr-extra", "--placer-heap-beta 0.7 --router2-heatmap 'heat map/'"]
    assert synth.main(argv) == 0
    script = (tmp_path / "ulx3s-85f" / "build_top.sh").read_text()
    assert "--timing-allow-fail --placer-heap-beta 0.7 --router2-heatmap 'heat map/'" in script
    summary = json.loads((tmp_path / "ulx3s-85f" / "summary.json").read_text())
    assert summary["nextpnr_extra"] == ["--placer-heap-beta", "0.7", "--router2-heatmap",
                                        "heat map/"]
    # One option alone is the option's value too, not an option of the command's own.
    assert synth.main([*argv[:-1], "--tmg-ripup"]) == 0
    script = (tmp_path / "ulx3s-85f" / "build_top.sh").read_text()
    assert "--timing-allow-fail --tmg-ripup --log" in script
    for refused in (["--board", "ulx3s-85f", "--synth-only"], ["--board", "alveo-u200"]):
        assert synth.main([*refused, "--nextpnr-extra", "--seed 2"]) == 2
        assert "--nextpnr-extra is for builds that run nextpnr" in capsys.readouterr().err


@pytest.mark.parametrize("device, luts", [("LFE5U-85F", 83_640), ("LFE5UM5G-85F", 83_640),
                                          ("LFE5U-25F", 24_288)])
def test_synthesis_utilization_counts_luts_as_nextpnr(device, luts):
    cells = {"LUT4": 100, "CCU2C": 10, "TRELLIS_DPR16X4": 2, "TRELLIS_FF": 50, "DP16KD": 3,
             "MULT18X18D": 4, "PFUMX": 9}
    utilization = synthesis_utilization(cells, device)
    assert utilization["LUT4"] == {"used": 132, "available": luts}
    assert utilization["FF"]["used"] == 50 and utilization["EBR"]["used"] == 3
    assert utilization["DSP"]["used"] == 4


def test_synthesis_utilization_rejects_unknown_device():
    with pytest.raises(ValueError, match=r"^Unknown ECP5 device 'XC7A35T'$"):
        synthesis_utilization({}, "XC7A35T")


def test_heatmap_prefix_directory_is_made(tmp_path):
    from boards.build import _make_heatmap_directory

    _make_heatmap_directory(tmp_path, ["--seed", "2", "--router2-heatmap", "heat/map"])
    _make_heatmap_directory(tmp_path, ["--router2-heatmap", "other/"])
    _make_heatmap_directory(tmp_path, ["--router2-heatmap", "flat"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["heat", "other"]


def test_emb_engine_option_names_the_dut_engines(tmp_path, capsys):
    assert synth.EMB_ENGINES == ("embedding", "lookup", "update")
    with pytest.raises(ValueError, match=r"^Engine must be one of 'embedding', 'lookup', "
                                         r"'update', not 'pool'$"):
        synth.make_emb_top(engine="pool")
    argv = ["--board", "ulx3s-85f", "--no-build", "--out", str(tmp_path), "--engine", "lookup"]
    assert synth.main(argv) == 0
    board_dir = tmp_path / "ulx3s-85f"
    summary = json.loads((board_dir / "summary.json").read_text())
    assert summary["design"] == "emb" and summary["engine"] == "lookup"
    # The emb design's nextpnr options (boards.synth._BUILD_OPTIONS) and the ULX3S's seed
    # (the first of EMB_BOARD_NEXTPNR_SEEDS): it routes with them.
    assert ("--placer static --router router2 --seed 1 --log"
            in (board_dir / "build_top.sh").read_text())
    assert summary["nextpnr_extra"] == ["--seed", "1"]
    # The lookup engine is the device's engine itself, and its check the only one.
    modules = rtlil_modules(board_dir)
    assert "\\top.bist.self_test.dut_0.engine.pooler" in modules
    assert not any(".check_1" in name or "engine.update" in name for name in modules)
    with pytest.raises(SystemExit):
        synth.main(["--board", "ulx3s-85f", "--engine", "pool"])
    assert "invalid choice: 'pool'" in capsys.readouterr().err


def test_emb_design_takes_the_boards_nextpnr_seeds_unless_told_one():
    assert synth.EMB_BOARD_NEXTPNR_SEEDS == {"ulx3s-85f": (1, 2, 3)}
    assert synth.nextpnr_attempts("ulx3s-85f", "emb", []) == [
        ["--seed", "1"], ["--seed", "2"], ["--seed", "3"]]
    assert (synth.nextpnr_attempts("ulx3s-85f", "emb", ["--tmg-ripup"])[0]
            == ["--seed", "1", "--tmg-ripup"])
    for chosen in (["--seed", "2"], ["--seed=2"], ["-r"], ["--randomize-seed"],
                   ["--tmg-ripup", "--seed", "0"]):
        assert synth.nextpnr_attempts("ulx3s-85f", "emb", chosen) == [chosen]
    # Other designs and boards keep nextpnr's own seed.
    assert synth.nextpnr_attempts("ulx3s-85f", "fp", []) == [[]]
    assert synth.nextpnr_attempts("ecpix5-85", "emb", ["--tmg-ripup"]) == [["--tmg-ripup"]]


def _fake_builds(monkeypatch, routes):
    """boards.synth's builds replaced: a build with nextpnr arguments ``a`` routes if
    ``routes(a)``, else router2 diverges. Returns the arguments of each build, in order."""
    builds = []

    def fake_run_ecp5_build(platform, top, *, build_dir, extra_summary, nextpnr_extra,
                            stop_diverging, **options):
        builds.append((list(nextpnr_extra), stop_diverging))
        if not routes(nextpnr_extra):
            raise RoutingDiverged(f"router2 is not converging: 2,000 overused wires at "
                                  f"iteration 40, against 600 at iteration {len(builds)}")
        return {**extra_summary, "fmax_mhz": {"clk": 45.0}, "target_mhz": {"clk": 25.0},
                "utilization": {kind: {"used": 1, "available": 2}
                                for kind in ("LUT4", "FF", "EBR", "DSP")},
                "build_seconds": 1.0, "bitstream": "top.bit", "timing_met": True}

    monkeypatch.setattr(synth, "run_ecp5_build", fake_run_ecp5_build)
    monkeypatch.setattr(synth, "open_toolchain_available", lambda: True)
    return builds


def test_emb_build_tries_the_next_seed_when_router2_diverges(tmp_path, monkeypatch, capsys):
    builds = _fake_builds(monkeypatch, lambda extra: extra[:2] == ["--seed", "3"])
    argv = ["--board", "ulx3s-85f", "--engine", "update", "--out", str(tmp_path)]
    assert synth.main(argv) == 0
    assert builds == [(["--seed", "1"], True), (["--seed", "2"], True), (["--seed", "3"], True)]
    out, err = capsys.readouterr()
    assert "against 600 at iteration 1; building again with nextpnr --seed 2" in err
    assert "Fmax clk: 45.00 MHz" in out
    # (The fake writes no summary.json; the facts it was given are the summary's.)

    # Every seed diverges: the error names the seed to try next.
    builds = _fake_builds(monkeypatch, lambda extra: False)
    assert synth.main(argv) == 1
    assert [extra for extra, _ in builds] == [["--seed", "1"], ["--seed", "2"], ["--seed", "3"]]
    assert 'the build was stopped' in (err := capsys.readouterr().err) and '"--seed 4"' in err

    # A seed of the user's, or --keep-routing, is one build.
    builds = _fake_builds(monkeypatch, lambda extra: False)
    assert synth.main([*argv, "--nextpnr-extra", "--seed 7"]) == 1
    assert builds == [(["--seed", "7"], True)] and '"--seed 8"' in capsys.readouterr().err
    builds = _fake_builds(monkeypatch, lambda extra: True)
    assert synth.main([*argv, "--keep-routing"]) == 0
    assert builds == [(["--seed", "1"], False)]


def test_the_stopped_seeds_are_in_the_summary_facts(tmp_path, monkeypatch):
    facts = []
    builds = _fake_builds(monkeypatch, lambda extra: extra[:2] == ["--seed", "2"])
    original = synth.run_ecp5_build

    def recording(*args, extra_summary, **kwargs):
        facts.append(dict(extra_summary))
        return original(*args, extra_summary=extra_summary, **kwargs)

    monkeypatch.setattr(synth, "run_ecp5_build", recording)
    assert synth.main(["--board", "ulx3s-85f", "--out", str(tmp_path)]) == 0
    assert len(builds) == 2
    assert "diverged" not in facts[0] and facts[0]["nextpnr_extra"] == ["--seed", "1"]
    (stopped,) = facts[1]["diverged"]
    assert stopped["nextpnr_extra"] == ["--seed", "1"]
    assert stopped["stopped"].startswith("router2 is not converging: 2,000 overused wires")
    assert facts[1]["nextpnr_extra"] == ["--seed", "2"]


def test_emb_engine_parameters_follow_the_board(tmp_path):
    """The boards build the engines as boards.synth.EMB_BOARD_ENGINE_PARAMS says: the ECPIX-5
    with two-stage FP units and no FPGA registers, the ULX3S as ENGINE_DEFAULTS (the pooler's
    registered accumulator operand is one of those registers) with its lanes folded by 2."""
    for board in ("ulx3s-85f", "ecpix5-85"):
        assert synth.main(["--board", board, "--no-build", "--out", str(tmp_path)]) == 0
    ulx3s, ecpix5 = (tmp_path / "ulx3s-85f", tmp_path / "ecpix5-85")
    assert json.loads((ulx3s / "summary.json").read_text())["engine_params"] == {
        "lane_fold": 2}
    assert (json.loads((ecpix5 / "summary.json").read_text())["engine_params"]
            == {"add_stages": 2, "mul_stages": 2, "fpga_pipelining": False})
    assert "\\accumulated" in (ulx3s / "top.il").read_text()
    assert "\\accumulated" not in (ecpix5 / "top.il").read_text()


@pytest.mark.parametrize(("board", "fold", "units"), [
    ("ulx3s-85f", None, 8), ("ulx3s-85f", 1, 16), ("ulx3s-85f", 4, 4), ("ecpix5-85", 2, 8)])
def test_lane_fold_option_folds_the_engines_lanes(tmp_path, board, fold, units):
    argv = ["--board", board, "--no-build", "--out", str(tmp_path)]
    assert synth.main(argv + ([] if fold is None else ["--lane-fold", str(fold)])) == 0
    board_dir = tmp_path / board
    params = json.loads((board_dir / "summary.json").read_text())["engine_params"]
    assert params == {**synth.EMB_BOARD_ENGINE_PARAMS[board],
                      **({} if fold is None else {"lane_fold": fold})}
    # 16 / fold multiplier units and as many adder units, shared by both engines.
    modules = rtlil_modules(board_dir)
    for op in ("mul", "add"):
        found = {name.split(f"shared_{op}.")[1].split(".")[0] for name in modules
                 if f"engine.shared_{op}.lane_" in name}
        assert found == {f"lane_{k}" for k in range(units)}


def test_lane_fold_option_belongs_to_the_emb_design(tmp_path, capsys):
    assert synth.main(["--board", "ulx3s-85f", "--design", "fp", "--no-build", "--out",
                       str(tmp_path), "--lane-fold", "2"]) == 2
    assert "--lane-fold is an option of the emb design" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        synth.main(["--board", "ulx3s-85f", "--lane-fold", "3"])
    assert "invalid choice: 3" in capsys.readouterr().err


def test_control_only_builds_the_lanes_as_register_chains(tmp_path, capsys):
    """--control-only: no FP unit is elaborated, the summary says so, and FPLanes is itself
    again afterwards (even after a failed build)."""
    from hw.fp import FPLanes

    original = FPLanes.elaborate
    argv = ["--board", "ulx3s-85f", "--no-build", "--out", str(tmp_path), "--control-only"]
    assert synth.main(argv) == 0
    assert FPLanes.elaborate is original
    board_dir = tmp_path / "ulx3s-85f"
    assert json.loads((board_dir / "summary.json").read_text())["control_only"] is True
    assert "the bitstream is for timing" in capsys.readouterr().err
    modules = rtlil_modules(board_dir)
    assert "\\top.bist.self_test.dut_0.engine.shared_mul" in modules
    assert not any(".shared_mul.lane_" in name or ".shared_add.lane_" in name
                   for name in modules)
    # Without the option, the same design has its 8 + 8 units (the ULX3S folds by 2).
    assert synth.main(argv[:-1]) == 0
    modules = rtlil_modules(board_dir)
    assert "\\top.bist.self_test.dut_0.engine.shared_mul.lane_7" in modules
    assert "\\top.bist.self_test.dut_0.engine.shared_mul.lane_8" not in modules
    assert synth.main(["--board", "ulx3s-85f", "--design", "fp", "--no-build", "--out",
                       str(tmp_path), "--control-only"]) == 2
    assert "--control-only is an option of the emb design" in capsys.readouterr().err


def test_control_only_restores_the_lanes_after_an_error():
    from boards.control_only import control_only
    from hw.fp import FPLanes

    original = FPLanes.elaborate
    with pytest.raises(RuntimeError), control_only():
        assert FPLanes.elaborate is not original
        raise RuntimeError("build failed")
    assert FPLanes.elaborate is original
