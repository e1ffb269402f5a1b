"""Training loop: it learns, it is deterministic, and it resumes bit-exactly."""

import numpy as np
import pytest

from sw_model import (
    TrainState,
    get_preset,
    initial_state,
    make_batch,
    pool_embeddings,
    table_digest,
    train,
)


def test_training_learns_the_teacher():
    preset = get_preset("tiny")
    result = train(preset, stop=600, record_pooled=False)
    losses = result.losses
    fifth = losses.size // 5
    assert losses[-fifth:].mean() < 0.8 * losses[:fifth].mean()


@pytest.mark.parametrize("pooling", ["mean", "weighted"])
def test_training_learns_with_other_poolings(pooling):
    result = train(get_preset("tiny").replace(pooling=pooling), stop=600, record_pooled=False)
    fifth = result.losses.size // 5
    assert result.losses[-fifth:].mean() < 0.85 * result.losses[:fifth].mean()


def test_records_hold_pooled_output_loss_and_digests():
    preset = get_preset("tiny")
    result = train(preset, stop=3)
    assert [r.number for r in result.records] == [0, 1, 2]
    first = result.records[0]
    want = pool_embeddings(initial_state(preset).tables, make_batch(preset, 0), preset)
    assert first.pooled.tobytes() == want.tobytes()  # batch 0 pools the initial tables
    assert np.isfinite(first.loss) and first.loss > 0
    assert result.records[-1].table_digests == tuple(table_digest(t) for t in result.state.tables)
    assert result.records[-1].mlp_digest == result.state.mlp.digest()
    assert result.state.next_batch == 3


def test_training_is_deterministic_and_seeded():
    preset = get_preset("tiny")
    a, b = train(preset, stop=8), train(preset, stop=8)
    for ra, rb in zip(a.records, b.records, strict=True):
        assert ra.pooled.tobytes() == rb.pooled.tobytes()
        assert ra.loss == rb.loss and ra.table_digests == rb.table_digests
        assert ra.mlp_digest == rb.mlp_digest
    c = train(preset.replace(seed=7), stop=8)
    assert c.records[-1].table_digests != a.records[-1].table_digests


def test_resuming_from_a_state_equals_the_straight_run():
    preset = get_preset("tiny")
    straight = train(preset, stop=12)
    first = train(preset, stop=5)
    rest = train(preset, first.state, stop=12)
    assert [r.number for r in rest.records] == list(range(5, 12))
    for a, b in zip(straight.records[5:], rest.records, strict=True):
        assert a.table_digests == b.table_digests and a.pooled.tobytes() == b.pooled.tobytes()
        assert a.mlp_digest == b.mlp_digest
    assert first.state.next_batch == 5  # the given state was not modified


def test_stop_defaults_to_the_preset_length_and_can_be_any_batch():
    preset = get_preset("tiny").replace(num_batches=4)
    assert len(train(preset).records) == 4
    assert len(train(preset, stop=0).records) == 0
    start = initial_state(preset)
    with pytest.raises(ValueError, match=r"stop \(2\) is before the next batch \(3\)"):
        train(preset, TrainState(start.tables, start.mlp, next_batch=3), stop=2)


def test_chunked_training_differs_but_keeps_chunks_within_capacity():
    preset = get_preset("tiny")
    whole = train(preset, stop=6)
    chunked = train(preset, stop=6, max_unique_rows=3)
    for record in chunked.records:
        assert all(len(chunk) <= 3 for chunk in record.update_chunks)
    assert chunked.records[-1].table_digests != whole.records[-1].table_digests


def test_state_must_match_the_preset():
    preset = get_preset("tiny")
    state = initial_state(preset)
    state.tables[1] = state.tables[1][:, :8].copy()
    with pytest.raises(ValueError, match=r"table 1 is float32 \(128, 8\); preset 'tiny' needs "
                                         r"float32 \(128, 16\)"):
        train(preset, state, stop=1)
    state.tables = state.tables[:2]
    with pytest.raises(ValueError, match=r"state has 2 tables, preset 'tiny' has 4"):
        train(preset, state, stop=1)


@pytest.mark.parametrize("name", ["kaggle", "rm1", "rm2"])
def test_published_presets_train(name):
    preset = get_preset(name)
    result = train(preset, stop=2)
    assert all(np.isfinite(r.loss) for r in result.records)
    assert result.records[0].pooled.shape == (preset.batch_size, preset.num_tables * preset.dim)
