"""FP32 lane units (16 lanes = one 64-byte line) in Verilator, bit-exact with NumPy float32:
the directed set, then 1,048,576 seeded random pairs per operation (about 6 s each)."""

import pytest

from hw.tops import TOPS
from sim.runner import run
from sw_model.presets import get_preset

pytestmark = pytest.mark.sim

UNIT_OF = {"add": "fp_lanes_add", "sub": "fp_lanes_add", "mul": "fp_lanes_mul"}
PAIRS = 1 << 20


@pytest.mark.parametrize("op", ["add", "sub", "mul"])
def test_fp_lanes_million_pairs(op):
    design = TOPS[UNIT_OF[op]](get_preset("tiny"))
    result = run(design, "tb.fp.cocotb_fp", run_name=op,
                 extra_env={"FP_OP": op, "FP_PAIRS": str(PAIRS)})
    assert result.tests == 1
