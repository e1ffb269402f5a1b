"""cocotb tests for the runner self-test; one of them fails on purpose when asked to."""

import os
import random

import cocotb
from cocotb.triggers import RisingEdge

from sim.rtl import sidecar_from_env
from tb.common import reset, start_clock


@cocotb.test()
async def accumulates(dut):
    start_clock(dut)
    await reset(dut)
    width = sidecar_from_env()["design"]["params"]["width"]
    total = 0
    for _ in range(200):
        value = random.randrange(2**width)
        dut.i__payload.value = value
        dut.i__valid.value = 1
        await RisingEdge(dut.clk)
        total = (total + value) % 2**width
    dut.i__valid.value = 0
    await RisingEdge(dut.clk)
    assert dut.total.value.to_unsigned() == total


@cocotb.test()
async def fails_when_asked(dut):
    start_clock(dut)
    await reset(dut)
    assert os.environ.get("SELFTEST_MUST_FAIL") != "1", "this failure was requested"
