"""The device with its checkpoint engine in Verilator (tb/device/cocotb_checkpoint.py): logged
training, refused commands, power failures and recovery, on the PMEM model. Same build as the
other device tests (tb/device/test_device.py): the `tiny` device includes the checkpoint engine
whenever hw/ckpt/engine.py exists."""

import pytest

from hw.device import device_params
from sim.runner import run
from sw_model.presets import get_preset
from tb.device.test_device import SYSTEM

pytestmark = [pytest.mark.sim, pytest.mark.skipif(
    not device_params(get_preset("tiny"))["checkpointing"],
    reason="the device is built without the checkpoint engine (hw/ckpt/engine.py missing)")]

MODULE = "tb.device.cocotb_checkpoint"
TESTS = 8


def test_checkpointing_device():
    result = run(SYSTEM, MODULE, run_name="checkpoint")
    assert result.tests == TESTS
