"""The simulation flow fails loudly: a failing cocotb test or a run with no test is an error."""

import pytest

from sim.rtl import Design
from sim.runner import PUBLIC_FLAT_RW, SimulationFailed, build, run

pytestmark = pytest.mark.sim

DESIGN = Design("selftest_accumulator", "tb.selftest.counter:Accumulator", {"width": 12})
MODULE = "tb.selftest.cocotb_counter"


def test_passing_tests_are_reported():
    result = run(DESIGN, MODULE, run_name="pass")
    assert result.tests == 2
    assert result.failures == 0


def test_a_failing_cocotb_test_fails_the_run():
    with pytest.raises(SimulationFailed, match=r"1 of 2 cocotb tests failed: .*fails_when_asked"):
        run(DESIGN, MODULE, run_name="fail", extra_env={"SELFTEST_MUST_FAIL": "1"})


def test_a_run_that_executes_no_test_fails():
    with pytest.raises(SimulationFailed, match="ran no test"):
        run(DESIGN, MODULE, run_name="none", testcase="no_such_test")


def test_waves_and_gtkw_are_written():
    result = run(DESIGN, MODULE, run_name="waves", testcase="accumulates", waves=True)
    assert result.waves is not None and result.waves.stat().st_size > 0
    text = result.gtkw.read_text()
    assert "TOP.selftest_accumulator.i__payload[11:0]" in text
    assert "-i" in text.splitlines()


def test_a_build_keeps_its_model_and_drops_the_precompiled_headers():
    first = build(DESIGN)
    obj_dir = first.directory / "obj"
    assert (obj_dir / DESIGN.name).is_file()
    assert not list(obj_dir.glob("*.gch"))
    model = (obj_dir / DESIGN.name).stat().st_mtime_ns
    # Reused as it is (no rebuild for the missing headers), and it still runs.
    assert build(DESIGN).directory == first.directory
    assert (obj_dir / DESIGN.name).stat().st_mtime_ns == model
    assert run(DESIGN, MODULE, run_name="after_cleanup").tests == 2


def _verilator_command(built):
    """The arguments Verilator was called with, as it records them beside the model."""
    return (built.directory / "obj" / "Vtop__verFiles.dat").read_text().splitlines()[1].split()


def test_only_the_top_module_is_public():
    """Built without cocotb's --public-flat-rw, with the top module public in a control file."""
    built = build(DESIGN)
    command = _verilator_command(built)
    assert PUBLIC_FLAT_RW not in command
    assert str(built.directory / "top_public.vlt") in command
    assert (built.directory / "top_public.vlt").read_text().endswith(
        f'public_flat_rw -module "{DESIGN.name}" -var "*"\n')


def test_internal_signals_keep_every_signal_public_in_a_build_of_their_own():
    built = build(DESIGN, internal_signals=True)
    assert PUBLIC_FLAT_RW in _verilator_command(built)
    assert built.internal_signals and built.directory.name.endswith("-internal")
    assert built.directory != build(DESIGN).directory
    assert run(DESIGN, MODULE, run_name="internal", testcase="accumulates",
               internal_signals=True).tests == 1
