"""sim/verilog/line_ram.v (what LineRam becomes in emitted Verilog) against the reference, one
random cycle after another."""

import cocotb
from cocotb.triggers import FallingEdge

from tb.common import reset, start_clock
from tb.line_ram.model import LineRamModel, random_cycles


@cocotb.test()
async def matches_the_reference(dut):
    start_clock(dut)
    await reset(dut)
    model = LineRamModel()
    want = None
    for number, cycle in enumerate(random_cycles(cocotb.RANDOM_SEED, 3000)):
        await FallingEdge(dut.clk)
        if want is not None:   # the previous cycle's edge has happened
            got = [int(getattr(dut, f"r{k}_data").value) for k in range(len(want))]
            assert got == want, f"cycle {number - 1}: read data differs from the reference"
        for name, value in cycle.items():
            getattr(dut, name).value = value
        want = model.step(cycle)
    await FallingEdge(dut.clk)
    got = [int(getattr(dut, f"r{k}_data").value) for k in range(len(want))]
    assert got == want, "last cycle: read data differs from the reference"
