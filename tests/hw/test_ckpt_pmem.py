# amaranth: UnusedElaboratable=no
"""The PMEM model (sim/pmem.py) in Amaranth's simulator: latency and bandwidth of both
profiles, persistence at the B response, and power failure (seeded verdicts per beat, a lost
beat never undoing a newer kept write to its line)."""

from fractions import Fraction
from functools import partial

import pytest

from sim.pmem import DRAM, PMEM, PROFILES, MemoryProfile, PmemModel, power_fail_verdicts
from tb import pysim

run = partial(pysim.simulate, deadline=20_000)


def apply(ctx, dut, profile):
    for name, value in profile.inputs().items():
        ctx.set(getattr(dut, name), value)


def test_profiles_follow_the_paper_ratios():
    assert PROFILES == {"dram": DRAM, "pmem": PMEM}
    assert PMEM.read_latency == 3 * DRAM.read_latency
    assert PMEM.write_latency == 7 * DRAM.write_latency
    assert Fraction(*PMEM.read_rate) == Fraction(3, 5) * Fraction(*DRAM.read_rate)
    assert Fraction(*PMEM.write_rate) == Fraction(1, 10) * Fraction(*DRAM.write_rate)


def test_parameters_are_validated():
    with pytest.raises(ValueError, match=r"^Depth must be a power of two, at least 2, not 3$"):
        PmemModel(depth=3)
    with pytest.raises(ValueError, match=r"^Pending beats must be a power of two in "
                                         r"4\.\.1024, not 6$"):
        PmemModel(depth=64, pending_beats=6)
    with pytest.raises(ValueError, match=r"^Read rate must be num/den with 1 <= num <= den "
                                         r"< 256, not 3/2$"):
        MemoryProfile("x", 10, 10, (3, 2), (1, 1))


@pytest.mark.parametrize("profile", [DRAM, PMEM], ids=["dram", "pmem"])
def test_read_latency_and_bandwidth(profile):
    dut = PmemModel(depth=256, addr_width=16, id_width=4)
    beats = 40
    seen = []

    async def testbench(ctx):
        apply(ctx, dut, profile)
        await ctx.tick().repeat(20)  # the rate bucket fills
        axi = dut.axi
        ctx.set(axi.rready, 1)
        ctx.set(axi.arvalid, 1)
        ctx.set(axi.araddr, 0)
        ctx.set(axi.arlen, beats - 1)
        await ctx.tick().until(axi.arready)
        ctx.set(axi.arvalid, 0)
        cycle = 0
        while len(seen) < beats:
            _, _, valid = await ctx.tick().sample(axi.rvalid)
            cycle += 1
            if valid:
                seen.append(cycle)

    run(dut, testbench)
    assert seen[0] == profile.read_latency
    num, den = profile.read_rate
    span = seen[-1] - seen[0]
    assert abs(span - (beats - 1) * den / num) <= 2 + den / num, (span, profile)


def _write(ctx, axi, line, value, ident=1):
    ctx.set(axi.awvalid, 1)
    ctx.set(axi.awid, ident)
    ctx.set(axi.awaddr, line * 64)
    ctx.set(axi.awlen, 0)
    ctx.set(axi.wvalid, 1)
    ctx.set(axi.wdata, value)
    ctx.set(axi.wstrb, (1 << 64) - 1)
    ctx.set(axi.wlast, 1)


async def _offer_writes(ctx, dut, writes):
    """Offer single-beat writes back to back; returns the cycles of their B responses."""
    axi = dut.axi
    ctx.set(axi.bready, 1)
    aw_done = w_done = False
    queue = list(writes)
    b_cycles = []
    cycle = 0
    while queue:
        line, value = queue[0]
        _write(ctx, axi, line, value)
        ctx.set(axi.awvalid, int(not aw_done))
        ctx.set(axi.wvalid, int(not w_done))
        _, _, awr, wr, bv = await ctx.tick().sample(axi.awready, axi.wready, axi.bvalid)
        cycle += 1
        aw_done |= bool(awr and not aw_done)
        w_done |= bool(wr and not w_done)
        if bv:
            b_cycles.append(cycle)
        if aw_done and w_done:
            queue.pop(0)
            aw_done = w_done = False
    ctx.set(axi.awvalid, 0)
    ctx.set(axi.wvalid, 0)
    return b_cycles


def test_write_latency_rate_and_persistence_at_b():
    dut = PmemModel(depth=256, addr_width=16, id_width=4)
    result = {}

    async def testbench(ctx):
        apply(ctx, dut, PMEM)
        await ctx.tick().repeat(30)
        b_cycles = await _offer_writes(ctx, dut, [(k, k + 1) for k in range(8)])
        ctx.set(dut.axi.bready, 1)
        cycle = 0
        while len(b_cycles) < 8:
            _, _, bv = await ctx.tick().sample(dut.axi.bvalid)
            cycle += 1
            if bv:
                b_cycles.append(cycle)
        result["pending"] = ctx.get(dut.pending)
        result["writes"] = ctx.get(dut.write_beats)

    run(dut, testbench)
    assert result["pending"] == 0 and result["writes"] == 8


@pytest.mark.parametrize("keep", [0, 255, 128])
def test_power_failure_keeps_a_seeded_subset_of_unacknowledged_beats(keep):
    dut = PmemModel(depth=64, addr_width=16, id_width=4, pending_beats=16)
    seed = 12345
    old = {line: 1000 + line for line in range(8)}
    # Line 3 is written twice while both writes are unacknowledged.
    writes = [(0, 1), (1, 2), (3, 30), (2, 3), (3, 31), (4, 5)]
    image = {}

    async def testbench(ctx):
        ctx.set(dut.backdoor_we, 1)
        for line, value in old.items():
            ctx.set(dut.backdoor_addr, line)
            ctx.set(dut.backdoor_wdata, value)
            await ctx.tick()
        ctx.set(dut.backdoor_we, 0)
        ctx.set(dut.write_latency, 1000)  # nothing is acknowledged before the failure
        await ctx.tick().repeat(4)
        assert await _offer_writes(ctx, dut, writes) == []
        ctx.set(dut.axi.bready, 0)
        await ctx.tick().repeat(3)
        ctx.set(dut.fail_seed, seed)
        ctx.set(dut.fail_keep, keep)
        ctx.set(dut.power_fail, 1)
        await ctx.tick().until(dut.powered_down)
        image["lost"] = ctx.get(dut.lost_beats)
        image["kept"] = ctx.get(dut.kept_beats)
        for line in old:
            ctx.set(dut.backdoor_addr, line)
            await ctx.tick()
            image[line] = ctx.get(dut.backdoor_rdata)

    run(dut, testbench)
    verdicts = power_fail_verdicts(seed, keep, len(writes))  # newest first
    # Each line holds its newest kept write, or its old contents if none was kept.
    expected = dict(old)
    for line in {line for line, _ in writes}:
        history = [(value, kept) for (other, value), kept
                   in zip(reversed(writes), verdicts, strict=True) if other == line]
        expected[line] = next((value for value, kept in history if kept), old[line])
    assert {line: image[line] for line in old} == expected
    assert image["kept"] == sum(verdicts) and image["lost"] == len(writes) - sum(verdicts)
    if keep == 0:
        assert expected == old
    if keep == 255:
        assert all(expected[line] == value for line, value in writes if line != 3)
        assert expected[3] == 31
