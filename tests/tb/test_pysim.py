"""tb.pysim.simulate: a run ends when its testbenches return, and a hang fails at the deadline."""

import pytest
from amaranth.hdl import Elaboratable, Module, Signal

from tb.pysim import simulate


class Counter(Elaboratable):
    """A free-running cycle counter, so a testbench can see how far the simulation went."""

    def __init__(self):
        self.count = Signal(32)

    def elaborate(self, platform):
        m = Module()
        m.d.sync += self.count.eq(self.count + 1)
        return m


def test_the_run_ends_when_every_testbench_has_returned():
    dut = Counter()
    cycles_seen_by_process = []

    async def short(ctx):
        await ctx.tick().repeat(10)

    async def longer(ctx):
        await ctx.tick().repeat(30)

    async def watch(ctx):  # a process: runs alongside, never returns
        async for _, _, count in ctx.tick().sample(dut.count):
            cycles_seen_by_process.append(count)

    assert simulate(dut, short, longer, processes=[watch], deadline=50_000)
    # The process was stopped with the longer testbench, not at the deadline.
    assert 30 <= len(cycles_seen_by_process) <= 32


def test_a_testbench_still_waiting_at_the_deadline_is_a_hang():
    dut = Counter()
    reached = []

    async def returns(ctx):
        await ctx.tick().repeat(5)

    async def waits_forever(ctx):
        while True:
            await ctx.tick()

    async def record(ctx):
        async for _ in ctx.tick():
            reached.append(ctx.get(dut.count))

    with pytest.raises(AssertionError, match=(
            r"^1 of 2 testbenches still waiting after 200 cycles: the design hangs$")):
        simulate(dut, returns, waits_forever, background=[record], deadline=200)
    assert 199 <= len(reached) <= 200
    assert not simulate(Counter(), waits_forever, deadline=20, check=False)


def test_an_exception_in_a_testbench_propagates():
    async def fails(ctx):
        await ctx.tick()
        raise ValueError("the testbench's own failure")

    with pytest.raises(ValueError, match="the testbench's own failure"):
        simulate(Counter(), fails, deadline=100)


def test_the_deadline_is_at_least_one_cycle():
    async def nothing(ctx):
        pass

    with pytest.raises(ValueError, match=r"^deadline must be at least one cycle, not 0$"):
        simulate(Counter(), nothing, deadline=0)
