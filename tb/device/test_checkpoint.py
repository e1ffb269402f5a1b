"""The device with its checkpoint engine in Verilator (tb/device/cocotb_checkpoint.py): logged
training, refused commands, power failures and recovery; one build of the `tiny` device with
checkpointing, on the PMEM model."""

import pytest

from hw.device import checkpoint_engine_available
from sim.rtl import Design
from sim.runner import run

pytestmark = [pytest.mark.sim, pytest.mark.skipif(
    not checkpoint_engine_available(), reason="hw/ckpt/engine.py is not in the tree")]

SYSTEM = Design("device_system", "tb.device.system:DeviceSystem",
                {"preset": "tiny", "checkpointing": True})
MODULE = "tb.device.cocotb_checkpoint"
TESTS = 5


def test_checkpointing_device():
    result = run(SYSTEM, MODULE, run_name="checkpoint")
    assert result.tests == TESTS
