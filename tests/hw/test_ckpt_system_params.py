"""The checkpoint testbenches' system top (tb/ckpt/harness.py): its memory channels and their
parameter checks (the simulations themselves are in tb/ckpt/test_system.py)."""

import pytest
from amaranth.hdl import Shape

from tb.ckpt.designs import SYSTEM, SYSTEM_4CH
from tb.ckpt.harness import CheckpointSystem


def test_four_channels_share_the_memory_and_sum_their_counters():
    system = SYSTEM_4CH.elaboratable()
    assert system.channels == 4 and system.memory_lines == SYSTEM.params["memory_lines"]
    members = system.signature.members
    pending_beats = SYSTEM.params["pending_beats"]
    # Sums over the channels: up to four rings of unacknowledged beats.
    assert Shape.cast(members["pending"].shape) == Shape.cast(range(4 * pending_beats + 1))
    assert Shape.cast(members["lost_beats"].shape).width == 18
    assert Shape.cast(SYSTEM.elaboratable().signature.members["lost_beats"].shape).width == 16


@pytest.mark.parametrize(("changes", "message"), [
    ({"channels": 3}, r"Channel count must be one of 1, 2, 4, not 3"),
    ({"memory_lines": 1000}, r"Memory lines must be a power of two, at least 2 for 1 "
                             r"channel\(s\), not 1000"),
    ({"memory_lines": 4, "channels": 4}, r"Memory lines must be a power of two, at least 8 "
                                         r"for 4 channel\(s\), not 4"),
])
def test_bad_memory_parameters_are_refused(changes, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        CheckpointSystem(**{**SYSTEM.params, **changes})
