"""Raw simulation speed of the checkpointed system (no Python per cycle)."""

import os
import time

import cocotb
from cocotb.triggers import ClockCycles

from tb.common import reset, start_clock


@cocotb.test()
async def idle_speed(dut):
    start_clock(dut)
    await reset(dut)
    cycles = int(os.environ.get("SPEED_CYCLES", "200000"))
    started = time.monotonic()
    await ClockCycles(dut.clk, cycles)
    seconds = time.monotonic() - started
    dut._log.info("SPEED %d cycles in %.2f s: %.0f cycles/s", cycles, seconds, cycles / seconds)
