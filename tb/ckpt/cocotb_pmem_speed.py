"""cocotb side of ``python -m tb.ckpt.pmem_speed``: one clock, one wait per profile."""

import json
import os
import time

import cocotb
from cocotb.triggers import ClockCycles

from sim.pmem import PROFILES
from tb.common import reset, start_clock


@cocotb.test()
async def speed(dut):
    start_clock(dut)
    cycles = int(os.environ["SPEED_CYCLES"])
    results = []
    for name, profile in PROFILES.items():
        for port, value in profile.inputs().items():
            getattr(dut, port).value = value
        await reset(dut)
        started = time.monotonic()
        await ClockCycles(dut.clk, cycles)
        seconds = time.monotonic() - started
        results.append({"profile": name, "cycles": cycles, "seconds": seconds,
                        "cycles_per_second": cycles / seconds,
                        "reads": int(dut.reads.value), "writes": int(dut.writes.value)})
    with open(os.environ["SPEED_RESULT"], "w") as out:
        json.dump(results, out, indent=1)
