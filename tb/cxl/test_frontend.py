"""The CXL.mem front end in Verilator (tb/cxl/cocotb_frontend.py): one build, every test."""

import pytest

from sim.rtl import Design
from sim.runner import run

pytestmark = pytest.mark.sim

DESIGN = Design("cxl_frontend", "hw.cxl.frontend:CxlMemFrontEnd", {
    "addr_width": 48, "id_width": 4, "max_outstanding": 8, "num_decoders": 2,
    "num_protected": 2})
MODULE = "tb.cxl.cocotb_frontend"
TESTS = 9


def test_cxl_frontend_flows():
    result = run(DESIGN, MODULE)
    assert result.tests == TESTS
