# amaranth: UnusedElaboratable=no
"""The benchmark memory model (sim/axi_memory.py): exact read latency, one beat per cycle."""

import pytest
from amaranth.sim import Simulator

from sim.axi_memory import AxiMemory


def test_reads_come_back_after_exactly_the_latency_one_beat_per_cycle():
    dut = AxiMemory(depth=64, addr_width=16, id_width=4, max_outstanding=16)
    latency = 7
    seen = []

    async def testbench(ctx):
        axi = dut.axi
        ctx.set(dut.read_latency, latency)
        ctx.set(dut.backdoor_we, 1)
        for line in range(64):
            ctx.set(dut.backdoor_addr, line)
            ctx.set(dut.backdoor_wdata, line * 1000 + 1)
            await ctx.tick()
        ctx.set(dut.backdoor_we, 0)
        ctx.set(axi.rready, 1)
        # Three single-beat reads on consecutive cycles, then a 4-beat burst.
        for cycle in range(40):
            request = {0: (3, 0, 0), 1: (4, 1, 0), 2: (5, 2, 0), 3: (8, 3, 3)}.get(cycle)
            ctx.set(axi.arvalid, request is not None)
            if request is not None:
                line, ident, length = request
                ctx.set(axi.araddr, line * 64)
                ctx.set(axi.arid, ident)
                ctx.set(axi.arlen, length)
            _, _, rvalid, rid, rdata, rlast = await ctx.tick().sample(
                axi.rvalid, axi.rid, axi.rdata, axi.rlast)
            if rvalid:
                seen.append((cycle, rid, rdata, rlast))

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(testbench)
    sim.run()
    assert seen == [
        (latency, 0, 3001, 1), (latency + 1, 1, 4001, 1), (latency + 2, 2, 5001, 1),
        (latency + 3, 3, 8001, 0), (latency + 4, 3, 9001, 0), (latency + 5, 3, 10001, 0),
        (latency + 6, 3, 11001, 1),
    ]


def test_writes_land_and_are_acknowledged():
    dut = AxiMemory(depth=64, addr_width=16, id_width=4)
    result = {}

    async def testbench(ctx):
        axi = dut.axi
        ctx.set(axi.bready, 1)
        ctx.set(axi.awvalid, 1)
        ctx.set(axi.awaddr, 5 * 64)
        ctx.set(axi.awid, 9)
        ctx.set(axi.awlen, 1)
        await ctx.tick()
        ctx.set(axi.awvalid, 0)
        for beat, value in enumerate((11, 22)):
            ctx.set(axi.wvalid, 1)
            ctx.set(axi.wdata, value)
            ctx.set(axi.wstrb, (1 << 64) - 1)
            ctx.set(axi.wlast, beat == 1)
            await ctx.tick().until(axi.wready)
        ctx.set(axi.wvalid, 0)
        await ctx.tick().until(axi.bvalid)
        result["bid"] = ctx.get(axi.bid)
        for line in (5, 6):
            ctx.set(dut.backdoor_addr, line)
            await ctx.tick()
            result[line] = ctx.get(dut.backdoor_rdata)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(testbench)
    sim.run()
    assert result == {"bid": 9, 5: 11, 6: 22}


def test_depth_is_checked():
    with pytest.raises(ValueError, match=r"^Depth must be a power of two, at least 2, not 3$"):
        AxiMemory(depth=3)
