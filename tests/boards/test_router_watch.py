"""Stopping a build whose router2 diverges (boards.router_watch), and the build commands' use
of it. The process tests run small shell scripts that write router2-like log lines."""

import json
import os
import subprocess
import sys
import time

import pytest

from boards import blocks, synth
from boards.router_watch import RouterDivergence, RoutingDiverged, run_watched


def _line(iteration, overused):
    # As nextpnr's router2 logs each iteration.
    return (f"Info:     iter={iteration} wires=759041 overused={overused} "
            f"overuse={overused + 7} archfail=NA")


def _feed(check, counts):
    """Feed iterations 1, 2, ... with ``counts``; return (iteration, reason) of the stop."""
    for iteration, overused in enumerate(counts, start=1):
        reason = check.feed(_line(iteration, overused))
        if reason is not None:
            return iteration, reason
    return None


def test_a_converging_run_is_never_stopped():
    # The seed-1 ULX3S build's last iterations: the count wavers by a few wires near 0.
    counts = [69930, 40972, 23740, 13095, 7678, 5163, 3254, 2137, 1452, 1035, 774, 608,
              447, 356, 278, 236, 203, 159, 133, 109, 86, 79, 73, 65, 65, 54, 44, 39, 29, 30,
              22, 22, 20, 20, 17, 17, 23, 21, 21, 15, 16, 15, 11, 6, 5, 4, 2, 2, 2, 2, 2, 3,
              2, 2, 1, 3, 5, 2, 1, 0]
    check = RouterDivergence()
    assert _feed(check, counts) is None
    assert check.best == (len(counts), 0) and check.last == (len(counts), 0)


def test_a_rising_count_is_stopped_once_twice_its_lowest_and_500_above():
    # Lowest 610 at iteration 5; 1,219 is not yet twice that, 1,220 is.
    counts = [9000, 4000, 2000, 900, 610, 700, 900, 1100, 1219, 1220, 5101]
    stop = _feed(RouterDivergence(), counts)
    assert stop == (10, "router2 is not converging: 1,220 overused wires at iteration 10, "
                        "against 610 at iteration 5")
    # Near zero, twice the lowest is not enough: it must also be `margin` wires above it.
    assert _feed(RouterDivergence(), [40, 3, 1, 400, 500]) is None
    assert _feed(RouterDivergence(), [40, 3, 1, 400, 501])[0] == 5
    assert _feed(RouterDivergence(factor=3, margin=10), [100, 50, 149, 150])[0] == 4


def test_a_stalled_count_is_stopped_after_stall_iterations_without_a_new_lowest():
    # Lowest 340 at iteration 3, then 340-380 (never twice the lowest): stopped at 3 + 150.
    counts = [5000, 900, 340] + [340 + (k % 5) * 10 for k in range(200)]
    stop = _feed(RouterDivergence(), counts)
    assert stop == (153, "router2 is not converging: 380 overused wires at iteration 153, "
                         "and none below 340 (iteration 3) in 150 iterations")
    # A new lowest restarts the count; so does the end of a run that routes (0).
    assert _feed(RouterDivergence(stall=4), [50, 40, 41, 42, 39, 41, 42, 43, 0]) is None
    assert _feed(RouterDivergence(stall=4), [50, 40, 41, 42, 39, 41, 42, 43, 40])[0] == 9


def test_other_log_lines_are_ignored():
    check = RouterDivergence()
    for line in ["Info: Routing globals...", "Info: Max frequency for clock 'clk': 45.96 MHz",
                 "Info:     at iteration #5: temp = 0.000000, timing cost = 3867"]:
        assert check.feed(line) is None
    assert check.best is None and check.last is None


@pytest.mark.parametrize("factor", [1, 0.5, True, "2"])
def test_factor_must_be_above_one(factor):
    with pytest.raises(ValueError, match=r"^Factor must be a number above 1, not "):
        RouterDivergence(factor=factor)


@pytest.mark.parametrize("stall", [0, -3, 2.5, True])
def test_stall_must_be_a_positive_integer(stall):
    with pytest.raises(ValueError, match=r"^Stall must be a positive integer, not "):
        RouterDivergence(stall=stall)


@pytest.mark.parametrize("margin", [-1, 2.5, True])
def test_margin_must_be_a_non_negative_integer(margin):
    with pytest.raises(ValueError, match=r"^Margin must be a non-negative integer, not "):
        RouterDivergence(margin=margin)


def _script(tmp_path, counts, *, then="exit 0"):
    """A build script that logs ``counts`` to top.tim a line at a time, then runs ``then``;
    it also starts a child that would outlive it, writing its PID to child.pid."""
    lines = "\n".join(f"echo '{_line(i, n)}' >> top.tim; sleep 0.02"
                      for i, n in enumerate(counts, start=1))
    script = tmp_path / "build.sh"
    script.write_text(f"sleep 600 & echo $! > child.pid\n{lines}\n{then}\n")
    return ["sh", str(script)]


def _gone(pid):
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        # A killed child not yet reaped by init still answers; check its state.
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().split()[2] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.skipif(sys.platform.startswith("win"), reason="POSIX process groups")
def test_a_diverging_build_is_stopped_with_its_children(tmp_path):
    command = _script(tmp_path, [5000, 1000, 600, 900, 1500, 2000], then="sleep 600")
    started = time.monotonic()
    with pytest.raises(RoutingDiverged, match="1,500 overused wires at iteration 5, against "
                                              "600 at iteration 3"):
        run_watched(command, cwd=tmp_path, env=dict(os.environ), log="top.tim",
                    check=RouterDivergence(), poll_seconds=0.05)
    assert time.monotonic() - started < 30
    assert _gone(int((tmp_path / "child.pid").read_text()))


@pytest.mark.skipif(sys.platform.startswith("win"), reason="POSIX process groups")
def test_a_converging_build_runs_to_its_end(tmp_path):
    command = _script(tmp_path, [5000, 1000, 600, 10, 0], then="echo done > done")
    (tmp_path / "top.tim").write_text("\n".join(_line(i, n) for i, n in
                                                  enumerate([10, 5000, 9000], start=1)))
    # (The diverging log of an earlier build in the same directory is not read.)
    run_watched(command, cwd=tmp_path, env=dict(os.environ), log="top.tim",
                check=RouterDivergence(), poll_seconds=0.05)
    assert (tmp_path / "done").exists()
    assert "iter=5" in (tmp_path / "top.tim").read_text()
    os.kill(int((tmp_path / "child.pid").read_text()), 9)


@pytest.mark.skipif(sys.platform.startswith("win"), reason="POSIX process groups")
def test_without_a_check_nothing_is_stopped_and_failures_are_raised(tmp_path):
    command = _script(tmp_path, [500, 5000], then="exit 3")
    with pytest.raises(subprocess.CalledProcessError) as failed:
        run_watched(command, cwd=tmp_path, env=dict(os.environ), log="top.tim", check=None,
                    poll_seconds=0.05)
    assert failed.value.returncode == 3
    os.kill(int((tmp_path / "child.pid").read_text()), 9)


def _diverge(calls):
    def fake_run_watched(command, *, cwd, env, log, check, **kwargs):
        calls.append((command, log, check))
        raise RoutingDiverged("router2 is not converging: 1,266 overused wires at iteration "
                              "45, against 610 at iteration 25")
    return fake_run_watched


def test_synth_reports_a_stopped_build(tmp_path, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr("boards.build.run_watched", _diverge(calls))
    monkeypatch.setattr("boards.synth.open_toolchain_available", lambda: True)
    argv = ["--board", "ulx3s-85f", "--design", "fp", "--lanes", "1", "--vectors", "4",
            "--out", str(tmp_path)]
    assert synth.main(argv) == 1
    err = capsys.readouterr().err
    assert "1,266 overused wires at iteration 45" in err
    assert "--seed 2" in err and "--keep-routing" in err
    (command, log, check), = calls
    assert command == ["sh", "build_top.sh"] and log == "top.tim"
    assert isinstance(check, RouterDivergence)
    summary = json.loads((tmp_path / "ulx3s-85f" / "summary.json").read_text())
    assert summary["built"] is False and "iteration 45" in summary["stopped"]
    assert summary["board"] == "ulx3s-85f" and summary["router"] == "router1"

    calls.clear()
    assert synth.main([*argv, "--keep-routing"]) == 1
    assert calls[0][2] is None


def test_blocks_measure_the_others_after_a_stopped_block(tmp_path, monkeypatch, capsys):
    measured = []

    def fake_measure(block, *, stop_diverging, **kwargs):
        measured.append((block.name, stop_diverging))
        raise RoutingDiverged("router2 is not converging: 900 overused wires at iteration 9, "
                              "against 300 at iteration 4")

    monkeypatch.setattr(blocks, "measure_block", fake_measure)
    monkeypatch.setattr(blocks, "open_toolchain_available", lambda: True)
    argv = ["--block", "fp_add", "--block", "fp_mul", "--out", str(tmp_path)]
    assert blocks.main(argv) == 1
    assert measured == [("fp_add", True), ("fp_mul", True)]
    err = capsys.readouterr().err
    assert "fp_add: error: router2 is not converging" in err
    assert "error: not routed: fp_add, fp_mul" in err
    measured.clear()
    assert blocks.main([*argv, "--keep-routing"]) == 1
    assert measured == [("fp_add", False), ("fp_mul", False)]
