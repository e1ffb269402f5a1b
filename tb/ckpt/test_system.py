"""The checkpointed system in Verilator (one build shared by every test, the crash campaign and
the benchmark): training with one power failure per phase, recovery, resumption."""

import pytest

from sim.runner import run
from tb.ckpt.designs import SYSTEM, SYSTEM_4CH

pytestmark = pytest.mark.sim

MODULE = "tb.ckpt.cocotb_system"


@pytest.mark.parametrize("testcase", [
    "train_without_failure", "crash_in_lookup", "crash_in_update", "crash_in_commit",
    "crash_in_snapshot", "crash_during_recovery", "gpf_drains_and_recovery_follows",
    "train_log_modes_match_log_on_lookup", "crash_in_at_update_replay",
    "crash_in_at_update_update", "crash_in_after_lookup_replay", "train_relaxed",
    "crash_in_relaxed_update", "crash_in_relaxed_lookup_ahead",
])
def test_system(testcase):
    result = run(SYSTEM, MODULE, testcase=testcase, run_name=testcase)
    assert result.tests == 1


@pytest.mark.parametrize("testcase", [
    "train_without_failure", "crash_in_update", "crash_in_after_lookup_replay", "train_relaxed",
    "crash_in_relaxed_update",
])
def test_system_on_four_channels(testcase):
    """The same system with its PMEM split over four interleaved channels (the benchmark's
    memory): bit-exact training, logging and recovery when the channels answer out of order
    and a power failure tears each channel's writes independently."""
    result = run(SYSTEM_4CH, MODULE, testcase=testcase, run_name=f"{testcase}_4ch")
    assert result.tests == 1
