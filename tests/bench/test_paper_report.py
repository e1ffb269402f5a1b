"""The paper-style benchmark's report writer (bench/paper.py), from a small hand-made raw
result: every file is written, the ratios follow from the cycles, and a mode that did not run
carries no number."""

import json

import pytest

pytest.importorskip("matplotlib")

from bench.paper import MODES, preset_shape, summarise, write_report


def _nmp_batches(total, lookup):
    return [{"batch": n, "lookup": lookup, "host": 100, "update": total - lookup - 100,
             "total": total, "link_lines_read": 8, "link_lines_written": 20,
             "occurrences": 64} for n in range(2)]


def _raw():
    host = [{"batch": n, "gather": 500, "host_pool": 64, "gpu": 100, "host_update": 80,
             "log_copy": 900, "write_back": 950, "total": 2594, "occurrences": 64,
             "unique_rows": 20, "link_lines_read": 40, "link_lines_written": 82}
            for n in range(2)]
    return {
        "preset": "rm1_sim", "profile": "pmem", "snapshot_interval": 5,
        "modes": {
            "nmp": {"batches": _nmp_batches(1000, 300), "counters": {"log_entries": 0},
                    "snapshot_lines_per_k": 0, "pmem_lines_read_per_batch": 120.0,
                    "pmem_lines_written_per_batch": 40.0},
            "nmp_relaxed": {"batches": _nmp_batches(940, 0), "counters": {"log_entries": 0},
                            "snapshot_lines_per_k": 0},
            "nmp_log_on_lookup": {"batches": _nmp_batches(1010, 310),
                                  "counters": {"log_entries": 40},
                                  "snapshot_lines_per_k": 10},
            "nmp_sync_log": {"batches": _nmp_batches(1200, 300),
                             "counters": {"log_entries": 40}, "snapshot_lines_per_k": 10},
            "nmp_log_after_lookup": {"batches": _nmp_batches(1005, 300),
                                     "counters": {"log_entries": 40},
                                     "snapshot_lines_per_k": 10},
            "nmp_log_lookup_replay": {"batches": _nmp_batches(1002, 300),
                                      "counters": {"log_entries": 40},
                                      "snapshot_lines_per_k": 10},
            "trainingcxl": {"batches": _nmp_batches(950, 0),
                            "counters": {"log_entries": 40}, "snapshot_lines_per_k": 10},
            "trainingcxl_replay": {"batches": _nmp_batches(960, 0),
                                   "counters": {"log_entries": 40}, "snapshot_lines_per_k": 10},
            "host_gather": {"batches": host},
        },
        "recovery": {"batch": 1, "recovery_cycles": 200, "restored_entries": 8,
                     "table_lines": 8192, "full_reload_cycles": 100_000},
        "simulated_cycles": 50_000, "wall_seconds": 2.0,
    }


def _params():
    return {"profile": {"name": "pmem", "timing": {"read_latency": 60},
                        "read_lines_per_cycle": 0.6, "write_lines_per_cycle": 0.1},
            "link": {"lines_per_cycle_per_direction": 1, "line_bytes": 64},
            "host_floats_per_cycle": 16, "gpu_cycles": 100, "batches": 2,
            "presets": {"rm1_sim": preset_shape("rm1_sim")}}


def test_report_files_and_ratios(tmp_path):
    lookup = {"results": [{"dim": 16, "read_latency": 30, "efficiency": 0.9, "cycles": 10},
                          {"dim": 32, "read_latency": 30, "efficiency": 0.95, "cycles": 20}]}
    results = summarise({"rm1_sim": _raw()}, _params(), lookup=lookup)
    paths = write_report(results, tmp_path)
    names = {p.name for p in paths}
    assert {"results.json", "results.md", "cycles_per_batch.png",
            "speedup_vs_host_gather.png", "link_bytes_per_batch.png",
            "ft_overhead_recovery.png", "lookup_efficiency.png"} <= names
    for path in paths:
        assert path.stat().st_size > 0
    stored = json.loads((tmp_path / "results.json").read_text())
    entry = stored["presets"]["rm1_sim"]
    assert entry["modes"]["nmp"]["cycles_per_batch"] == 1000
    assert entry["modes"]["host_gather"]["link_bytes_per_batch"] == 64 * 122
    assert entry["ratios"]["ft_overhead_nmp_log_on_lookup"] == pytest.approx(0.01)
    assert entry["modes"]["nmp"]["speedup_vs_host_gather"] == pytest.approx(2.594)
    assert entry["ratios"]["recovery_speedup"] == pytest.approx(500)
    assert entry["ratios"]["ft_overhead_trainingcxl"] == pytest.approx(-0.05)
    assert entry["modes"]["trainingcxl"]["speedup_vs_host_gather"] == pytest.approx(2594 / 950)
    assert entry["ratios"]["ft_overhead_nmp_sync_log"] == pytest.approx(0.2)
    # Two batches: no steady figures.
    assert entry["modes"]["nmp"]["steady_cycles_per_batch"] is None
    assert "ft_overhead_steady_trainingcxl" not in entry["ratios"]

    assert entry["ratios"]["ft_overhead_nmp_log_after_lookup"] == pytest.approx(0.005)
    assert entry["ratios"]["speedup_nmp_log_after_lookup_vs_host_gather"] == \
        pytest.approx(2594 / 1005)
    markdown = (tmp_path / "results.md").read_text()
    assert "nmp_log_after_lookup 0.50%" in markdown and "nmp_sync_log 20.00%" in markdown
    assert "trainingcxl -5.00%" in markdown
    # The relaxed logging modes against the relaxed baseline; the strict ones have none.
    assert entry["ratios"]["ft_overhead_same_lookup_trainingcxl"] == pytest.approx(950 / 940 - 1)
    assert entry["ratios"]["ft_overhead_same_lookup_trainingcxl_replay"] == \
        pytest.approx(960 / 940 - 1)
    assert not any(key.startswith("ft_overhead_same_lookup_nmp") for key in entry["ratios"])
    assert "ft_overhead_nmp_relaxed" not in entry["ratios"]
    assert "trainingcxl 1.06% (steady --)" in markdown


def test_a_mode_that_did_not_run_carries_no_number(tmp_path):
    raw = _raw()
    del raw["modes"]["trainingcxl"]
    results = summarise({"rm1_sim": raw}, _params())
    write_report(results, tmp_path)
    stored = json.loads((tmp_path / "results.json").read_text())
    modes = stored["presets"]["rm1_sim"]["modes"]
    assert set(modes) == set(MODES)
    assert modes["trainingcxl"]["status"] == "not run"
    numbers = [k for k, v in modes["trainingcxl"].items()
               if isinstance(v, int | float) and not isinstance(v, bool)]
    assert numbers == []
    assert stored["presets"]["rm1_sim"]["ratios"].get("ft_overhead_trainingcxl") is None
    for mode in set(MODES) - {"trainingcxl"}:
        assert modes[mode]["status"] == "measured"


def test_pmem_write_bound(tmp_path):
    """The write bound is the batch's PMEM writes at the profile's write rate; modes whose raw
    result has no PMEM counters (older runs) get no traffic fields rather than zeros."""
    results = summarise({"rm1_sim": _raw()}, _params())
    write_report(results, tmp_path)
    nmp = results["presets"]["rm1_sim"]["modes"]["nmp"]
    assert nmp["pmem_write_bound_cycles"] == pytest.approx(400)      # 40 lines / 0.1
    assert nmp["pmem_read_bound_cycles"] == pytest.approx(200)       # 120 lines / 0.6
    assert nmp["pmem_write_port_busy"] == pytest.approx(0.4)         # 400 / 1000 cycles
    assert "pmem_write_bound_cycles" not in results["presets"]["rm1_sim"]["modes"][
        "host_gather"]
    assert "| 120 / 40 | 400 | 40% |" in (tmp_path / "results.md").read_text()


def test_sim_speed_of_the_demo(tmp_path):
    demo = {"preset": "tiny", "batches": 4, "seed": 1, "memory": "pmem", "checkpointing": True,
            "simulated_cycles": 120_000, "wall_seconds": 12.0, "cycles_per_second": 10_000.0}
    results = summarise({"rm1_sim": _raw()}, _params(), demo=demo)
    write_report(results, tmp_path)
    assert results["sim_speed"]["cycles_per_second"] == 10_000
    assert "10000 simulated cycles per second" in (tmp_path / "results.md").read_text()
    assert summarise({"rm1_sim": _raw()}, _params())["sim_speed"] is None


def test_steady_figures_leave_out_the_first_and_the_last_batch(tmp_path):
    raw = _raw()
    totals = {"nmp": [1000, 1000, 1000, 1000], "trainingcxl": [1500, 980, 990, 900]}
    for mode, series in totals.items():
        raw["modes"][mode]["batches"] = [
            {"batch": n, "lookup": 300, "host": 100, "update": total - 400, "total": total,
             "link_lines_read": 8, "link_lines_written": 20, "occurrences": 64}
            for n, total in enumerate(series)]
    results = summarise({"rm1_sim": raw}, _params())
    entry = results["presets"]["rm1_sim"]
    assert entry["modes"]["trainingcxl"]["cycles_per_batch"] == pytest.approx(4370 / 4)
    assert entry["modes"]["trainingcxl"]["steady_cycles_per_batch"] == pytest.approx(985)
    assert entry["ratios"]["ft_overhead_trainingcxl"] == pytest.approx(4370 / 4000 - 1)
    assert entry["ratios"]["ft_overhead_steady_trainingcxl"] == pytest.approx(-0.015)
    markdown = (write_report(results, tmp_path), (tmp_path / "results.md").read_text())[1]
    assert "steady ft_overhead" in markdown and "trainingcxl -1.50%" in markdown


def test_paper_system_per_channel_count():
    """Each channel count is its own design (and build); four is the benchmark's default."""
    from tb.ckpt.designs import PAPER_SYSTEM, paper_system

    assert paper_system() is PAPER_SYSTEM and PAPER_SYSTEM.params["channels"] == 4
    one = paper_system(1)
    assert one.params == {**PAPER_SYSTEM.params, "channels": 1}
    assert one.name != PAPER_SYSTEM.name and one.key != PAPER_SYSTEM.key
    with pytest.raises(ValueError, match=r"^Channel count must be one of 1, 2, 4, not 3$"):
        paper_system(3)


def test_host_rate_sweep(tmp_path):
    """Each host rate's host_gather run gives every measured mode a speedup against it; the
    first rate stays the baseline of the mode table, and the sweep has a table and a plot."""
    raw = _raw()
    slow = [{**batch, "host_pool": 4 * batch["host_pool"], "total": 5000}
            for batch in raw["modes"]["host_gather"]["batches"]]
    raw["host_rate_sweep"] = [{**raw["modes"]["host_gather"], "host_floats_per_cycle": 16},
                              {"host_floats_per_cycle": 4, "batches": slow}]
    params = {**_params(), "host_floats_per_cycle": [16, 4]}
    results = summarise({"rm1_sim": raw}, params)
    paths = {p.name for p in write_report(results, tmp_path)}
    entry = results["presets"]["rm1_sim"]
    first, second = entry["host_rate_sweep"]
    assert (first["host_floats_per_cycle"], second["host_floats_per_cycle"]) == (16, 4)
    assert first["speedup_vs_host_gather"]["nmp"] == pytest.approx(2.594)
    assert second["host_gather_cycles_per_batch"] == 5000
    assert second["speedup_vs_host_gather"]["nmp"] == pytest.approx(5.0)
    assert second["speedup_vs_host_gather"]["trainingcxl"] == pytest.approx(5000 / 950)
    assert "host_gather" not in second["speedup_vs_host_gather"]
    assert entry["modes"]["nmp"]["speedup_vs_host_gather"] == pytest.approx(2.594)
    assert "speedup_vs_host_rate.png" in paths
    markdown = (tmp_path / "results.md").read_text()
    assert "host pooling/update 16 floats/cycle" in markdown
    assert "| 4 | 5000 | 5.00x |" in markdown


def test_no_sweep_without_several_rates(tmp_path):
    results = summarise({"rm1_sim": _raw()}, _params())
    assert results["presets"]["rm1_sim"]["host_rate_sweep"] is None
    assert "speedup_vs_host_rate.png" not in {p.name for p in write_report(results, tmp_path)}


@pytest.mark.parametrize(("argv", "message"), [
    (["--host-floats-per-cycle", "0"],
     "argument --host-floats-per-cycle: a positive integer, not '0'"),
    (["--host-floats-per-cycle", "x"],
     "argument --host-floats-per-cycle: a positive integer, not 'x'"),
    (["--host-floats-per-cycle", "16", "16"], "--host-floats-per-cycle: each rate once, "
                                              "not [16, 16]"),
    (["--host-floats-per-cycle", "16", "4", "--modes", "nmp"],
     "--host-floats-per-cycle: several rates need the host_gather mode"),
])
def test_host_rate_arguments(argv, message, capsys):
    from bench.paper import main

    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
