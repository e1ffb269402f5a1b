"""A short crash campaign (the CI size is `python -m tb.ckpt.crash --trials 50`)."""

import json

import pytest

from tb.ckpt.crash import main

pytestmark = pytest.mark.sim


def test_short_campaign_recovers_every_trial(tmp_path):
    """Short runs (8 batches); the trials rotate through the four log modes."""
    output = tmp_path / "results.json"
    assert main(["--trials", "8", "--seed", "3", "--batches", "8",
                 "--output", str(output)]) == 0
    report = json.loads(output.read_text())
    assert report["trials"] == 8 and report["failures"] == 0
    assert report["lost_committed_batches"] == 0
    assert report["log_modes"] == {"lookup": 2, "sync": 2, "after": 2, "lookup_replay": 2}, \
        report["log_modes"]
