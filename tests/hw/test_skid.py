"""The skid buffer (hw/skid.py): every payload once and in order under random valid and ready,
a payload per cycle when the consumer keeps up, and handshakes that come from registers."""

import random

import pytest
from amaranth.lib import data
from amaranth.sim import Simulator

from hw.skid import SkidBuffer

_LAYOUT = data.StructLayout({"table": 3, "row": 32})


def _run(dut, testbench):
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(testbench)
    sim.run()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_handshakes_pass_every_payload_once_in_order(seed):
    rng = random.Random(seed)
    dut = SkidBuffer(shape=_LAYOUT)
    sent = [{"table": rng.randrange(8), "row": rng.getrandbits(32)} for _ in range(300)]
    received = []

    async def testbench(ctx):
        pending = list(sent)
        for _ in range(3000):
            offer = bool(pending) and rng.random() < 0.7
            ctx.set(dut.i.valid, offer)
            if offer:
                ctx.set(dut.i.payload, pending[0])
            ctx.set(dut.o.ready, rng.random() < 0.6)
            # Sampled before the edge: what moves in this cycle.
            took = offer and ctx.get(dut.i.ready)
            gave = ctx.get(dut.o.valid) and ctx.get(dut.o.ready)
            if gave:
                payload = ctx.get(dut.o.payload)
                received.append({"table": payload.table, "row": payload.row})
            await ctx.tick()
            if took:
                pending.pop(0)
            if not pending and ctx.get(dut.empty):
                break
        assert not pending, f"seed {seed}: {len(pending)} payloads never taken"

    _run(dut, testbench)
    assert received == sent, f"seed {seed}"


def test_a_payload_per_cycle_when_the_consumer_keeps_up():
    dut = SkidBuffer(shape=16)
    assert dut.latency == 1

    async def testbench(ctx):
        ctx.set(dut.o.ready, 1)
        ctx.set(dut.i.valid, 1)
        out = []
        for value in range(10):
            ctx.set(dut.i.payload, value)
            assert ctx.get(dut.i.ready)
            if ctx.get(dut.o.valid):
                out.append(ctx.get(dut.o.payload))
            await ctx.tick()
        ctx.set(dut.i.valid, 0)
        out.append(ctx.get(dut.o.payload))
        assert out == list(range(10))   # one latency cycle, then one a cycle
        await ctx.tick()
        assert not ctx.get(dut.o.valid) and ctx.get(dut.empty)

    _run(dut, testbench)


def test_handshakes_do_not_pass_through_in_the_same_cycle():
    dut = SkidBuffer(shape=8)

    async def testbench(ctx):
        # Fill the output register and the skid register: the consumer stalls.
        ctx.set(dut.o.ready, 0)
        ctx.set(dut.i.valid, 1)
        for value in (5, 6):
            ctx.set(dut.i.payload, value)
            await ctx.tick()
        ctx.set(dut.i.valid, 0)
        assert not ctx.get(dut.i.ready) and ctx.get(dut.o.valid)
        assert not ctx.get(dut.empty)
        # The consumer's ready does not reach i.ready before the edge ...
        ctx.set(dut.o.ready, 1)
        assert not ctx.get(dut.i.ready)
        assert ctx.get(dut.o.payload) == 5
        await ctx.tick()
        # ... and the producer's valid does not reach o.valid before the edge.
        assert ctx.get(dut.i.ready) and ctx.get(dut.o.payload) == 6
        await ctx.tick()
        assert not ctx.get(dut.o.valid) and ctx.get(dut.empty)
        ctx.set(dut.i.valid, 1)
        ctx.set(dut.i.payload, 7)
        assert not ctx.get(dut.o.valid)
        await ctx.tick()
        assert ctx.get(dut.o.valid) and ctx.get(dut.o.payload) == 7

    _run(dut, testbench)
