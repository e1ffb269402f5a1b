"""Ranking nextpnr's detailed net timings by source line (boards.slow_endpoints).

``data/nextpnr_detailed_sample.json`` is cut from the report of a real nextpnr-ecp5 run with
``--detailed-timing-report`` (a registered 16-bit adder and an 8-bit counter on the LFE5U-85F):
the eight nets with the latest arrivals, three without source lines and the reset's net, with
the design file's path renamed to a project path.
"""

import json
from pathlib import Path

import pytest

from boards.slow_endpoints import clock_misses, main, short_source, slow_endpoint_groups

SAMPLE = Path(__file__).parent / "data" / "nextpnr_detailed_sample.json"


def _sample():
    return json.loads(SAMPLE.read_text())


def test_short_source_keeps_the_path_from_the_project_directory():
    assert short_source("/tmp/src26/hw/emb/update.py:123") == "hw/emb/update.py:123"
    assert (short_source("/venv/lib/python3.11/site-packages/amaranth/hdl/_ir.py:283")
            == "amaranth/hdl/_ir.py:283")
    assert short_source("top.v:12") == "top.v:12"


def test_groups_by_source_latest_first():
    groups = slow_endpoint_groups(_sample(), within=0.5)
    assert [group.sources for group in groups] == [
        ("hw/sample.py:8",), ("hw/sample.py:5",), ("amaranth/hdl/_ir.py:283",)]
    adder, operand, reset = groups
    # Seven of the sample's nets come from line 8, every one of them at least half the worst.
    assert (adder.worst_ns, adder.endpoints, adder.example) == (
        pytest.approx(7.044, abs=1e-3), 7, "o[10]$tr_io.I")
    assert adder.fmax_mhz == pytest.approx(1000 / 7.044, abs=0.01)
    assert (operand.endpoints, operand.driver) == (1, "b[3]$tr_io")
    # The reset net reaches 56 endpoints, and only those at or above 3.522 ns are counted.
    worst = max(endpoint["delay"][1] for net in _sample()["detailed_net_timings"]
                for endpoint in net["endpoints"])
    expected = sum(endpoint["delay"][1] >= 0.5 * worst
                   for net in _sample()["detailed_net_timings"] if "rst" in net["net"]
                   for endpoint in net["endpoints"])
    assert 0 < reset.endpoints == expected < 56


def test_nets_without_sources_are_named_by_their_register():
    groups = slow_endpoint_groups(_sample(), within=0.4)
    nameless = [group for group in groups if group.sources[0].startswith("net ")]
    assert [group.sources for group in nameless] == [("net o",)]
    assert nameless[0].endpoints == 3


def test_within_one_keeps_only_the_worst():
    groups = slow_endpoint_groups(_sample(), within=1.0)
    assert [(group.sources, group.endpoints) for group in groups] == [(("hw/sample.py:8",), 1)]


@pytest.mark.parametrize("within", [0, 1.5, -0.2])
def test_within_must_be_a_fraction(within):
    with pytest.raises(ValueError, match=r"^Within must be a fraction in \(0, 1\], not "):
        slow_endpoint_groups(_sample(), within=within)


def test_report_without_detailed_timings_is_refused(tmp_path, capsys):
    report = _sample()
    del report["detailed_net_timings"]
    with pytest.raises(ValueError, match="--detailed-timing-report"):
        slow_endpoint_groups(report)
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    assert main([str(path)]) == 2
    assert "--detailed-timing-report" in capsys.readouterr().err


def test_command_line_prints_a_table(capsys):
    assert main([str(SAMPLE), "--within", "0.5", "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert "3 source groups with an arrival within 0.5 of the worst" in out
    rows = [line for line in out.splitlines() if line.startswith("| 7.04")
            or line.startswith("| 6.31") or line.startswith("| 4.")]
    assert rows == ["| 7.04 | 142.0 | 7 | hw/sample.py:8 | `o[10]$tr_io.I` |",
                    "| 6.31 | 158.5 | 1 | hw/sample.py:5 | `rb_TRELLIS_FF_Q_13.M` |"]


def _lut_ram_net(memory, slice_, port, delay):
    # Named as nextpnr-ecp5 names a LUT-RAM slice's write address net (no source lines).
    return {"net": f"{memory}.0.{slice_}$RAMW_SLICE$conn${port}",
            "driver": f"{memory}.0.{slice_}$RAMW_SLICE", "sources": [],
            "endpoints": [{"cell": f"{memory}.0.{slice_}$DPRAM_COMB3", "port": "WAD0",
                           "delay": [0.0, delay]}]}


def test_lut_ram_slices_of_one_memory_make_one_group():
    report = {"detailed_net_timings": [
        _lut_ram_net("top.router.shared_lines", 76, "WADO0", 21.0),
        _lut_ram_net("top.router.shared_lines", 44, "WADO0", 20.9),
        _lut_ram_net("top.router.shared_lines", 8, "WDO1", 20.5),
        _lut_ram_net("top.router.rows_lines", 3, "WADO0", 20.7),
    ]}
    groups = slow_endpoint_groups(report, within=0.9)
    assert [(group.sources, group.endpoints, group.example) for group in groups] == [
        (("net top.router.shared_lines.0",), 3, "top.router.shared_lines.0.76$DPRAM_COMB3.WAD0"),
        (("net top.router.rows_lines.0",), 1, "top.router.rows_lines.0.3$DPRAM_COMB3.WAD0"),
    ]


def _endpoint(cell, arrival):
    return {"cell": cell, "port": "DI", "delay": [0.0, arrival]}


def _misses_report():
    # Five clocked inputs in two blocks of "top.engine": 25, 14, 12 and 9 ns in the walker,
    # 11 ns in the router.
    return {"detailed_net_timings": [
        {"net": "a", "driver": "x", "sources": [], "endpoints": [
            _endpoint("top.engine.walker.status_TRELLIS_FF_Q_3", 25.0),
            _endpoint("top.engine.walker.mode_TRELLIS_FF_Q", 14.0),
            _endpoint("top.engine.router.level_TRELLIS_FF_Q_1", 11.0)]},
        {"net": "b", "driver": "y", "sources": [], "endpoints": [
            _endpoint("top.engine.walker.fsm_state_TRELLIS_FF_Q", 12.0),
            _endpoint("top.engine.walker.position$12", 9.0)]},
    ]}


def test_clock_misses_count_the_inputs_past_each_period_by_block():
    misses = clock_misses(_misses_report(), [40, 75, 100], depth=3)
    assert [(miss.mhz, miss.endpoints, miss.total) for miss in misses] == [
        (40, 0, 5), (75, 2, 5), (100, 4, 5)]
    assert misses[0].blocks == ()
    assert misses[1].blocks == (("top.engine.walker", 2),)
    assert misses[2].blocks == (("top.engine.walker", 3), ("top.engine.router", 1))
    assert misses[2].period_ns == pytest.approx(10.0)
    # A shallower block name puts them all in one block; an arrival equal to the period
    # (25 ns at 40 MHz) does not miss it.
    assert clock_misses(_misses_report(), [100], depth=2)[0].blocks == (("top.engine", 4),)


def test_clock_misses_of_the_sample_agree_with_its_arrivals():
    arrivals = [endpoint["delay"][1] for net in _sample()["detailed_net_timings"]
                for endpoint in net["endpoints"]]
    (miss,) = clock_misses(_sample(), [1000 / 6.0], depth=1)
    assert miss.endpoints == sum(arrival > 6.0 for arrival in arrivals) == 4
    # o[10], o[11], o[13] (the adder's outputs) and rb[13] (the registered operand).
    assert miss.blocks == (("o", 3), ("rb", 1))


@pytest.mark.parametrize("clock", [0, -50, "fast", True])
def test_clocks_must_be_positive_frequencies(clock):
    with pytest.raises(ValueError, match=r"^Clock must be a frequency in MHz above 0, not "):
        clock_misses(_misses_report(), [100, clock])


@pytest.mark.parametrize("depth", [0, 2.5, True])
def test_block_depth_must_be_a_positive_integer(depth):
    with pytest.raises(ValueError, match=r"^Depth must be a positive integer, not "):
        clock_misses(_misses_report(), [100], depth=depth)


def test_command_line_prints_the_misses_per_clock(tmp_path, capsys):
    path = tmp_path / "report.json"
    path.write_text(json.dumps(_misses_report()))
    assert main([str(path), "--clocks", "75", "100", "--depth", "3"]) == 0
    out = capsys.readouterr().out
    assert "| 75 | 13.33 | 2 | 40.0% | 1 |" in out
    assert "| 100 | 10.00 | 4 | 80.0% | 2 |" in out
    assert "Blocks with the most clocked inputs that miss 100 MHz" in out
    assert out.index("| `top.engine.walker` | 3 |") < out.index("| `top.engine.router` | 1 |")
    # A report without detailed timings is refused here too.
    path.write_text(json.dumps({"critical_paths": []}))
    assert main([str(path), "--clocks", "100"]) == 2
    assert "--detailed-timing-report" in capsys.readouterr().err
