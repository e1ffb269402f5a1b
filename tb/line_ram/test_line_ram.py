"""The Verilog line memory of the simulation models in Verilator."""

import pytest

from sim.rtl import Design
from sim.runner import run
from tb.line_ram.model import DEPTH, TRANSPARENT

pytestmark = pytest.mark.sim

DESIGN = Design("line_ram", "sim.line_ram:LineRam",
                {"depth": DEPTH, "transparent": list(TRANSPARENT)})


def test_verilog_line_ram_matches_the_reference():
    result = run(DESIGN, "tb.line_ram.cocotb_line_ram", run_name="line_ram")
    assert result.tests == 1
