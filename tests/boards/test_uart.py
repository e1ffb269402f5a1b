"""The minimal UART transmitter."""

import pytest
from amaranth.sim import Simulator

from boards.bist.uart import UARTTransmitter


def test_sends_8n1_frames_lsb_first():
    divisor = 3
    dut = UARTTransmitter(divisor=divisor)
    sent = [0x55, 0xA3]
    line = []

    async def testbench(ctx):
        for byte in sent:
            ctx.set(dut.i.payload, byte)
            ctx.set(dut.i.valid, 1)
            await ctx.tick().until(dut.i.ready)
            ctx.set(dut.i.valid, 0)
            for _ in range(10 * divisor):
                line.append(ctx.get(dut.tx))
                await ctx.tick()
        for _ in range(2 * divisor):
            line.append(ctx.get(dut.tx))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(testbench)
    sim.run()

    def frame(byte):
        bits = [0, *((byte >> n) & 1 for n in range(8)), 1]
        return [bit for bit in bits for _ in range(divisor)]

    text = "".join(map(str, line))
    expected = "".join(map(str, frame(0x55) + frame(0xA3)))
    assert expected in text
    assert text.endswith("1" * (2 * divisor))


def test_divisor_is_validated():
    with pytest.raises(ValueError, match=r"^Divisor must be an integer of at least 2, not 1$"):
        UARTTransmitter(divisor=1)
