"""The whole device in Verilator (tb/device/cocotb_device.py): one build of the `tiny` preset's
device (the `device` top of hw/tops.py: four memory channels, and the checkpoint engine when
hw/ckpt/engine.py exists, here with logging off) with its memory, every test through CXL.mem
and the registers. The checkpoint tests and the demo run on the same build."""

import pytest

from sim.rtl import Design
from sim.runner import run

pytestmark = pytest.mark.sim

#: The system every device testbench runs; the demo uses the same build.
SYSTEM = Design("device_system", "tb.device.system:DeviceSystem", {"preset": "tiny"})
MODULE = "tb.device.cocotb_device"
TESTS = 8


def test_device_through_cxl_mem_and_registers():
    result = run(SYSTEM, MODULE)
    assert result.tests == TESTS
