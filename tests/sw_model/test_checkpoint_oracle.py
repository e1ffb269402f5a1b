"""Checkpoint oracle: acceptable recovered states per phase and the golden continuation."""

import numpy as np
import pytest

from sw_model import (
    CheckpointOracle,
    Failure,
    Phase,
    UnacceptableRecovery,
    acceptable_recovery,
    first_table_difference,
    get_preset,
    is_snapshot_batch,
    newest_snapshot,
    snapshot_slot,
    table_digest,
)


def tiny(interval, batches=12):
    return get_preset("tiny").replace(snapshot_interval=interval, num_batches=batches)


def test_snapshot_schedule_and_slots():
    assert [n for n in range(-1, 12) if is_snapshot_batch(n, 4)] == [-1, 3, 7, 11]
    assert [snapshot_slot(n, 4) for n in (-1, 3, 7, 11)] == [1, 0, 1, 0]  # alternate
    assert [newest_snapshot(n, 4) for n in (-1, 0, 2, 3, 6, 7, 8)] == [-1, -1, -1, 3, 3, 7, 7]
    assert [snapshot_slot(n, 1) for n in (-1, 0, 1, 2)] == [1, 0, 1, 0]


@pytest.mark.parametrize("during_recovery", [False, True])
@pytest.mark.parametrize(
    ("batch", "phase", "committed", "snapshot"),
    [
        (0, "lookup", (-1,), (-1,)),
        (5, "lookup", (4,), (3,)),
        (5, "update", (4,), (3,)),
        (4, "lookup", (3,), (3,)),  # batch 3's snapshot completed before batch 4 started
        (5, "commit", (4, 5), (3,)),
        (7, "snapshot", (7,), (3, 7)),
        (3, "snapshot", (3,), (-1, 3)),
    ],
)
def test_acceptable_states_per_phase(batch, phase, committed, snapshot, during_recovery):
    allowed = acceptable_recovery(Failure(batch, phase, during_recovery), 4)
    assert allowed.committed == committed and allowed.snapshot == snapshot


def test_failure_arguments_are_checked():
    with pytest.raises(ValueError, match=r"batch 5 takes no MLP snapshot \(snapshot interval 4\)"):
        acceptable_recovery(Failure(5, Phase.SNAPSHOT), 4)
    with pytest.raises(ValueError, match=r"unknown phase 'flush'; phases: lookup, update, commit"):
        Failure(1, "flush")
    with pytest.raises(ValueError, match=r"failure batch must be an int >= 0, got -1"):
        Failure(-1, "lookup")


def test_recovered_state_is_the_golden_state_of_the_reported_batches():
    oracle = CheckpointOracle(tiny(4), cache_interval=4)
    golden = oracle.golden_run()
    recovered = oracle.recovered_state(Failure(6, "update"))
    assert (recovered.last_committed, recovered.snapshot_batch, recovered.next_batch) == (5, 3, 6)
    assert recovered.table_digests() == golden.records[5].table_digests
    assert recovered.mlp.digest() == golden.records[3].mlp_digest
    committed = oracle.recovered_state(Failure(6, "commit"), reported_committed=6)
    assert committed.table_digests() == golden.records[6].table_digests
    assert committed.snapshot_batch == 3
    initial = oracle.recovered_state(Failure(0, "lookup"))
    assert initial.last_committed == -1 and initial.snapshot_batch == -1
    start = oracle.state_after(-1)
    assert first_table_difference(start.tables, initial.tables) is None
    assert initial.mlp.bit_equal(start.mlp)


def test_ambiguous_phases_need_the_device_report_and_check_it():
    oracle = CheckpointOracle(tiny(4))
    with pytest.raises(ValueError, match=r"may be any of \[4, 5\]: pass the one the device"):
        oracle.recovered_state(Failure(5, "commit"))
    with pytest.raises(UnacceptableRecovery,
                       match=r"device reported last committed batch 3 after a failure in the "
                             r"commit phase of batch 5; acceptable: \[4, 5\]"):
        oracle.recovered_state(Failure(5, "commit"), reported_committed=3)
    with pytest.raises(UnacceptableRecovery, match=r"snapshot batch 7 .* acceptable: \[3\]"):
        oracle.recovered_state(Failure(5, "lookup"), reported_snapshot=7)
    with pytest.raises(ValueError, match=r"snapshot batch may be any of \[3, 7\]"):
        oracle.recovered_state(Failure(7, "snapshot"))
    late = oracle.recovered_state(Failure(7, "snapshot"), reported_snapshot=7)
    assert (late.last_committed, late.snapshot_batch) == (7, 7)


def test_state_for_rejects_impossible_combinations():
    oracle = CheckpointOracle(tiny(4))
    with pytest.raises(ValueError, match=r"need -1 <= snapshot batch \(5\) <= last committed"):
        oracle.state_for(4, 5)
    with pytest.raises(ValueError, match=r"batch 2 takes no MLP snapshot"):
        oracle.state_for(4, 2)


def assert_same_run(golden, continued, first_batch):
    """`continued` reproduces `golden` bit for bit from batch `first_batch` to the end."""
    expected = [r for r in golden.records if r.number >= first_batch]
    assert [r.number for r in continued.records] == [r.number for r in expected]
    for a, b in zip(expected, continued.records, strict=True):
        assert a.table_digests == b.table_digests and a.mlp_digest == b.mlp_digest
        assert a.pooled.tobytes() == b.pooled.tobytes() and a.loss == b.loss
    assert first_table_difference(golden.state.tables, continued.state.tables) is None


@pytest.mark.parametrize(
    ("failure", "report"),
    [
        (Failure(0, "lookup"), {}),
        (Failure(5, "lookup"), {}),
        (Failure(5, "update", during_recovery=True), {}),
        (Failure(5, "commit"), {"reported_committed": 4}),
        (Failure(5, "snapshot"), {"reported_snapshot": 5}),
    ],
)
def test_continuation_equals_uninterrupted_run_when_snapshot_is_current(failure, report):
    oracle = CheckpointOracle(tiny(1), cache_interval=3)
    golden = oracle.golden_run()
    recovered = oracle.recovered_state(failure, **report)
    assert recovered.snapshot_batch == recovered.last_committed
    assert_same_run(golden, oracle.continue_training(recovered), recovered.next_batch)


def test_stale_snapshot_gives_a_different_but_deterministic_continuation():
    oracle = CheckpointOracle(tiny(4))
    golden = oracle.golden_run()
    recovered = oracle.recovered_state(Failure(6, "lookup"))
    assert (recovered.last_committed, recovered.snapshot_batch) == (5, 3)
    first = oracle.continue_training(recovered)
    second = CheckpointOracle(tiny(4)).continue_training(recovered)
    assert_same_run(first, second, 6)  # deterministic
    assert first.records[0].number == 6
    # the lookup of the first resumed batch reads the committed tables, so it matches ...
    assert first.records[0].pooled.tobytes() == golden.records[6].pooled.tobytes()
    # ... but the stale MLP makes the rest of training differ
    assert first.records[-1].table_digests != golden.records[-1].table_digests


def test_commit_reported_as_done_resumes_after_that_batch():
    oracle = CheckpointOracle(tiny(1))
    golden = oracle.golden_run()
    recovered = oracle.recovered_state(Failure(5, "commit"), reported_committed=5)
    assert (recovered.last_committed, recovered.snapshot_batch) == (5, 4)  # snapshot 5 not taken
    continued = oracle.continue_training(recovered)
    assert continued.records[0].number == 6
    assert continued.records[0].pooled.tobytes() == golden.records[6].pooled.tobytes()
    assert continued.records[-1].table_digests != golden.records[-1].table_digests


def test_state_after_uses_the_cache_consistently():
    oracle = CheckpointOracle(tiny(4), cache_interval=3)
    golden = oracle.golden_run(record_pooled=False)
    for n in (7, 2, 9, 3, 11, 0):
        state = oracle.state_after(n)
        assert tuple(table_digest(t) for t in state.tables) == golden.records[n].table_digests
        assert state.next_batch == n + 1
    state = oracle.state_after(4)
    state.tables[0][:] = 0  # callers get copies
    assert tuple(table_digest(t) for t in oracle.state_after(4).tables) == (
        golden.records[4].table_digests
    )


def test_chunked_oracle_uses_the_same_capacity():
    oracle = CheckpointOracle(tiny(1), max_unique_rows=2)
    golden = oracle.golden_run(stop=6)
    assert all(len(c) <= 2 for r in golden.records for c in r.update_chunks)
    recovered = oracle.recovered_state(Failure(3, "lookup"))
    assert_same_run(golden, oracle.continue_training(recovered, stop=6), 3)


def test_first_table_difference_names_the_lane_and_ignores_nan_payloads():
    a = [np.zeros((3, 4), dtype=np.float32)]
    b = [a[0].copy()]
    b[0][2, 1] = -0.0
    assert first_table_difference(a, b) == (
        "table 0 row 2 lane 1: got np.float32(-0.0) (0x80000000), expected np.float32(0.0) "
        "(0x00000000)"
    )
    a[0][0, 0] = np.float32("nan")
    b[0][2, 1] = 0.0
    b[0][0, 0] = np.uint32(0x7FC00001).view(np.float32)
    assert first_table_difference(a, b) is None
    assert first_table_difference(a, a + a) == "2 tables, expected 1"
