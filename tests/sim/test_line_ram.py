"""sim.line_ram.LineRam as an Amaranth memory (Amaranth's simulator) against the reference that
the Verilog version is checked against in Verilator (tb/line_ram)."""

import pytest
from amaranth.sim import Simulator

from sim.line_ram import LineRam
from tb.line_ram.model import DEPTH, TRANSPARENT, LineRamModel, random_cycles


def test_amaranth_line_ram_matches_the_reference():
    dut = LineRam(depth=DEPTH, transparent=TRANSPARENT)
    model = LineRamModel()
    cycles = random_cycles(7, 400)

    async def testbench(ctx):
        for number, cycle in enumerate(cycles):
            for name, value in cycle.items():
                ctx.set(getattr(dut, name), value)
            want = model.step(cycle)
            await ctx.tick()
            got = [ctx.get(getattr(dut, f"r{k}_data")) for k in range(len(want))]
            assert got == want, f"cycle {number}"

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(testbench)
    sim.run()


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"depth": 1, "transparent": (True,)}, "Depth must be an integer of at least 2, not 1"),
    ({"depth": 8, "transparent": ()}, "Transparency must be 1 to 3 booleans"),
    ({"depth": 8, "transparent": (1, 0)}, "Transparency must be 1 to 3 booleans"),
])
def test_bad_parameters(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LineRam(**kwargs)
