"""FPLanes(op="mul", dsp="ecp5") in Verilator, bit-exact with NumPy float32.

With ``dsp="ecp5"`` every lane instantiates four ECP5 ``MULT18X18D`` cells with their own input
and output registers (see :class:`hw.fp.FPMul`), which the Amaranth simulator cannot run. Here
they are simulated with the behavioural cell model ``tb/fp/ecp5_mult18x18d.v`` (Yosys ships the
cell only as a blackbox), through the same cocotb testbench as the generic lanes: the directed
set, then seeded random pairs, streamed back to back and checked at ``latency``.

The default depth (input and output registers in the DSP blocks) runs 16 lanes with 131,072
random pairs; the depths at which only the input registers, only the output register or no
register of the DSP blocks are used run 2 lanes with fewer pairs.
"""

import re
from pathlib import Path

import pytest

from hw.fp import FPMul
from sim.rtl import PROJECT_ROOT, Design
from sim.runner import build, run

pytestmark = pytest.mark.sim

#: The cell model and its lint waivers, handed to Verilator before the design.
ECP5_CELLS = [PROJECT_ROOT / "sim" / "verilator" / "ecp5_cells.vlt",
              Path(__file__).resolve().with_name("ecp5_mult18x18d.v")]

DEFAULT_PAIRS = 1 << 17
DEPTH_PAIRS = 20_000


def _design(lanes, stages=None):
    params = {"op": "mul", "lanes": lanes, "dsp": "ecp5"}
    name = "fp_lanes_mul_ecp5"
    if stages is not None:
        params["stages"] = stages
        name += f"_s{stages}"
    return Design(name, "hw.fp:FPLanes", params)


def _dsp_registers(verilog_text):
    """(instances, input-registered, output-registered) MULT18X18D cells in the Verilog."""
    return (len(re.findall(r"^\s*MULT18X18D\b", verilog_text, re.MULTILINE)),
            verilog_text.count('.REG_INPUTA_CLK("CLK0")'),
            verilog_text.count('.REG_OUTPUT_CLK("CLK0")'))


def _run(design, pairs, run_name):
    result = run(design, "tb.fp.cocotb_fp", run_name=run_name, extra_sources=ECP5_CELLS,
                 extra_env={"FP_OP": "mul", "FP_PAIRS": str(pairs)})
    assert result.tests == 1


@pytest.mark.slow  # a 16-lane C++ build of about 2.5 minutes: `nox -s sim -- -m slow -k ecp5`
def test_fp_lanes_mul_ecp5_dsp_default_depth():
    design = _design(16)
    # The simulated netlist really uses the DSP cells, with both register sets, in every lane.
    verilog_text = build(design, extra_sources=ECP5_CELLS).verilog.read_text()
    assert _dsp_registers(verilog_text) == (64, 64, 64)
    _run(design, DEFAULT_PAIRS, "mul")


@pytest.mark.parametrize(("stages", "registers"), [
    (3, (8, 8, 0)),   # prenormalize is a cut, multiply is not: input registers only
    (2, (8, 0, 8)),   # multiply is a cut, prenormalize is not: output register only
    (1, (8, 0, 0)),   # neither: a combinational multiplier
])
def test_fp_lanes_mul_ecp5_dsp_other_depths(stages, registers):
    assert ("prenormalize" in FPMul.CUTS[stages], "multiply" in FPMul.CUTS[stages]) == (
        registers[1] > 0, registers[2] > 0)
    design = _design(2, stages)
    verilog_text = build(design, extra_sources=ECP5_CELLS).verilog.read_text()
    assert _dsp_registers(verilog_text) == registers
    _run(design, DEPTH_PAIRS, "mul")
