"""A short crash campaign: the campaign tool end to end, four trials a lookup mode (CI also
runs `python -m tb.ckpt.crash --trials 50` and a 30-trial relaxed campaign)."""

import json

import pytest

from tb.ckpt.crash import main

pytestmark = pytest.mark.sim


def test_short_campaign_recovers_every_trial(tmp_path):
    """Short runs (8 batches); the trials rotate through the four log modes, one each."""
    output = tmp_path / "results.json"
    assert main(["--trials", "4", "--seed", "3", "--batches", "8",
                 "--output", str(output)]) == 0
    report = json.loads(output.read_text())
    assert report["trials"] == 4 and report["failures"] == 0
    assert report["lost_committed_batches"] == 0
    assert report["log_modes"] == {"lookup": 1, "sync": 1, "after": 1, "lookup_replay": 1}, \
        report["log_modes"]


def test_short_relaxed_campaign_recovers_every_trial(tmp_path):
    """The same with relaxed lookup: failures in the LOOKUPs run ahead and in the UPDATEs
    that correct them; after each recovery the host looks up strictly once, then relaxed."""
    output = tmp_path / "results.json"
    assert main(["--trials", "4", "--seed", "4", "--batches", "8", "--lookup", "relaxed",
                 "--output", str(output)]) == 0
    report = json.loads(output.read_text())
    assert report["lookup"] == "relaxed"
    assert report["trials"] == 4 and report["failures"] == 0
    assert report["lost_committed_batches"] == 0
    assert {trial["lookup"] for trial in report["trial_log"]} == {"relaxed"}
    assert {trial["step"] for trial in report["trial_log"]} >= {"lookup", "update"}
