"""A short run of the demo (`python -m tb.demo`): four batches on the device RTL, bit-exact with
the golden model, on the same build as the device tests."""

import pytest

from hw.device import device_params
from sw_model.presets import get_preset
from tb import demo


@pytest.mark.sim
def test_demo_trains_four_batches_bit_exact(capsys):
    """Four batches (two of baseline first, with a checkpoint engine), a power failure and
    recovery if the device has the engine."""
    assert demo.main(["--batches", "4", "--baseline", "2", "--gpu-cycles", "500",
                      "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert "PASS: 4 batches" in out
    if device_params(get_preset("tiny"))["checkpointing"]:
        assert "recovered to batch" in out and "checkpoint overhead" in out
    else:
        assert "no power failure" in out


def test_demo_golden_only_still_runs(capsys):
    assert demo.main(["--golden-only", "--batches", "6", "--seed", "3"]) == 0
    assert "GOLDEN MODEL ONLY" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "message"), [
    (["--batches", "0"], "--batches must be at least 1, not 0"),
    (["--golden-only", "--batches", "1"], "--batches must be at least 2, not 1"),
    (["--gpu-cycles", "-1"], "--gpu-cycles must be >= 0, not -1"),
    (["--baseline", "-1"], "--baseline must be >= 0, not -1"),
    (["--preset", "rm1"], "the RTL run supports --preset tiny only"),
])
def test_demo_arguments(argv, message, capsys):
    with pytest.raises(SystemExit):
        demo.main(argv)
    assert message in capsys.readouterr().err
