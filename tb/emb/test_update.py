"""The UPDATE engine in Verilator: bit-exact against sw_model, every bad input, bus errors.

One configuration, built once and shared by all tests (a Verilator build of the engine takes
minutes): capacity 8, so most commands are chunked many times over, and the default FP
pipelines. Other parameter corners (capacity 1, combinational and short FP pipelines) run
in Amaranth's simulator: ``tests/hw/test_emb_update_engine.py``.
"""

import pytest

from sim.rtl import Design
from sim.runner import run

pytestmark = pytest.mark.sim

MODULE = "tb.emb.cocotb_update"

DESIGN = Design("emb_update", "hw.emb.update:UpdateEngine", {
    "max_tables": 4, "max_dim": 128, "num_regions": 4, "addr_width": 32, "id_width": 4,
    "max_unique_rows": 8, "outstanding_reads": 8,
})


@pytest.mark.parametrize("testcase", ["random_batches", "chunking", "repeated_rows"])
def test_updates_match_the_golden_model(testcase):
    result = run(DESIGN, MODULE, testcase=testcase, run_name=testcase)
    assert result.tests == 1


def test_bad_inputs_change_nothing():
    run(DESIGN, MODULE, testcase="bad_inputs", run_name="bad_inputs")


def test_bus_errors_are_reported():
    run(DESIGN, MODULE, testcase="bus_errors", run_name="bus_errors")


def test_throughput_is_measured_and_bounded():
    run(DESIGN, MODULE, testcase="throughput", run_name="throughput")
