"""Presets and synthetic data: validation, shapes, TBE form, distributions, determinism."""

import dataclasses

import numpy as np
import pytest

from sw_model import PRESETS, BatchGenerator, get_preset, make_batch, to_tbe


def test_presets_have_the_published_shapes():
    assert set(PRESETS) == {"tiny", "kaggle", "rm1", "rm2"}
    tiny, kaggle, rm1, rm2 = (get_preset(n) for n in ("tiny", "kaggle", "rm1", "rm2"))
    assert 3 <= tiny.num_tables <= 4 and tiny.dim == 16 and 4 <= tiny.batch_size <= 8
    assert all(64 <= r <= 256 for r in tiny.table_rows) and tiny.max_bag == 4
    assert kaggle.num_tables == 26 and kaggle.dim == 16 and max(kaggle.table_rows) <= 2048
    assert kaggle.bottom_widths == (13, 512, 256, 64, 16)
    assert kaggle.top_widths == (367, 512, 256, 1)
    assert (rm1.num_tables, rm1.dim, rm1.max_bag, rm1.fixed_bag) == (8, 32, 80, True)
    assert (rm2.num_tables, rm2.dim, rm2.max_bag, rm2.fixed_bag) == (32, 64, 120, True)
    for preset in PRESETS.values():
        assert preset.dim % 16 == 0 and preset.bottom_mlp[-1] == preset.dim
        assert preset.top_mlp[-1] == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        tiny.dim = 32


def test_get_preset_lists_valid_names():
    valid = r"unknown preset 'huge'; valid presets: kaggle, rm1, rm2, tiny"
    with pytest.raises(ValueError, match=valid):
        get_preset("huge")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (dict(dim=24), r"preset 'tiny': dim must be a multiple of 16, got 24"),
        (dict(dim=0), r"dim must be a positive int, got 0"),
        (dict(table_rows=()), r"table_rows must list at least one table"),
        (dict(table_rows=(64, 0)), r"table_rows\[1\] must be a positive int, got 0"),
        (dict(bottom_mlp=(32, 8)), r"bottom_mlp must end with dim = 16, got 8"),
        (dict(top_mlp=(32, 2)), r"top_mlp must end with 1 \(the click probability\) = 1, got 2"),
        (dict(top_mlp=()), r"top_mlp must have at least one layer"),
        (dict(pooling="max"), r"pooling must be one of sum, mean, weighted, got 'max'"),
        (dict(index_dist="normal"), r"index_dist must be one of uniform, zipf, got 'normal'"),
        (dict(interaction="dcn"), r"interaction must be one of dot, cat, got 'dcn'"),
        (dict(lr=-0.1), r"lr must be a finite number > 0, got -0.1"),
        (dict(zipf_exponent=0.0), r"zipf_exponent must be a finite number > 0"),
        (dict(max_bag=-1), r"max_bag must be an int >= 0, got -1"),
        (dict(max_bag=0, fixed_bag=True), r"fixed_bag needs max_bag >= 1"),
        (dict(snapshot_interval=0), r"snapshot_interval must be a positive int, got 0"),
        (dict(batch_size=True), r"batch_size must be a positive int, got True"),
        (dict(seed=-1), r"seed must be an int >= 0, got -1"),
        (dict(name=""), r"preset name must be a non-empty string"),
    ],
)
def test_preset_validation(changes, message):
    with pytest.raises(ValueError, match=message):
        get_preset("tiny").replace(**changes)


def test_preset_lists_become_tuples():
    preset = get_preset("tiny").replace(table_rows=[64, 64, 64], bottom_mlp=[16])
    assert preset.table_rows == (64, 64, 64) and preset.bottom_mlp == (16,)
    assert preset.interaction_width == 16 + 6


@pytest.mark.parametrize("name", ["tiny", "kaggle", "rm1", "rm2"])
def test_batch_shapes_and_tbe_form(name):
    preset = get_preset(name)
    batch = make_batch(preset, 0)
    b, t = preset.batch_size, preset.num_tables
    assert batch.dense.shape == (b, preset.dense_features) and batch.dense.dtype == np.float32
    assert batch.labels.shape == (b,) and set(np.unique(batch.labels)) <= {0.0, 1.0}
    assert batch.offsets.shape == (b * t + 1,) and batch.offsets[-1] == batch.indices.size
    assert batch.offsets[0] == 0 and (np.diff(batch.offsets) >= 0).all()
    for k in range(t):
        start = batch.offsets[k * b]
        table_bags = batch.indices[start : batch.offsets[(k + 1) * b]]
        assert (table_bags == batch.table_indices[k]).all()
        assert (batch.offsets[k * b : (k + 1) * b] - start == batch.table_offsets[k]).all()
        assert batch.table_indices[k].max(initial=0) < preset.table_rows[k]
    lengths = np.diff(batch.offsets)
    assert lengths.max() <= preset.max_bag
    if preset.fixed_bag and preset.index_dist == "zipf":
        assert (lengths == preset.max_bag).all()


def test_uniform_bags_are_sorted_and_deduplicated():
    preset = get_preset("tiny").replace(index_dist="uniform", table_rows=(5, 5, 5), max_bag=4,
                                        fixed_bag=True)
    batch = make_batch(preset, 0)
    lengths = np.diff(batch.offsets)
    assert lengths.min() < 4  # duplicates among 4 draws from 5 rows were dropped
    for start, end in zip(batch.offsets[:-1], batch.offsets[1:], strict=True):
        bag = batch.indices[start:end]
        assert (np.diff(bag) > 0).all()


def test_non_fixed_bags_include_empty_ones():
    preset = get_preset("tiny")
    lengths = np.concatenate([np.diff(make_batch(preset, n).offsets) for n in range(5)])
    assert lengths.min() == 0 and lengths.max() == preset.max_bag


def test_zipf_has_hot_rows_reused_across_batches():
    preset = get_preset("kaggle")
    flat = get_preset("kaggle").replace(index_dist="uniform")
    t = 2  # a 2048-row table

    def reuse(p):
        """Fraction of batch 1's lookups that hit a row batch 0 looked up."""
        seen = set(make_batch(p, 0).table_indices[t].tolist())
        return np.mean([row in seen for row in make_batch(p, 1).table_indices[t].tolist()])

    counts = np.bincount(np.concatenate([make_batch(preset, n).table_indices[t]
                                         for n in range(20)]), minlength=2048)
    assert counts.max() > 0.05 * counts.sum()  # one row takes > 5% of the lookups
    assert reuse(preset) > 0.2 and reuse(preset) > 5 * reuse(flat)
    assert counts.argmax() != 0  # hot rows are scattered by the permutation


def test_zipf_bags_may_repeat_a_row():
    preset = get_preset("rm1")
    bag = make_batch(preset, 0).table_indices[0][:80]
    assert np.unique(bag).size < bag.size


def test_weighted_pooling_gets_weights():
    preset = get_preset("tiny").replace(pooling="weighted")
    batch = make_batch(preset, 0)
    assert batch.per_sample_weights.dtype == np.float32
    assert batch.per_sample_weights.shape == batch.indices.shape
    assert ((batch.per_sample_weights >= 0.5) & (batch.per_sample_weights < 1.5)).all()
    assert make_batch(get_preset("tiny"), 0).per_sample_weights is None
    assert preset.table_modes == ("sum",) * 4


def test_batches_are_deterministic_and_seeded():
    preset = get_preset("tiny")
    a, b = make_batch(preset, 5), BatchGenerator(preset).batch(5)
    for field in ("dense", "labels", "indices", "offsets"):
        assert getattr(a, field).tobytes() == getattr(b, field).tobytes()
    other_batch = make_batch(preset, 6)
    other_seed = make_batch(preset.replace(seed=2), 5)
    assert a.dense.tobytes() != other_batch.dense.tobytes()
    assert a.dense.tobytes() != other_seed.dense.tobytes()
    assert a.indices.tobytes() != other_seed.indices.tobytes()


def test_labels_are_balanced_enough_to_learn():
    preset = get_preset("tiny")
    labels = np.concatenate([make_batch(preset, n).labels for n in range(50)])
    assert 0.3 < labels.mean() < 0.7


def test_to_tbe():
    indices, offsets, weights = to_tbe([[1, 2, 3], [4]], [[0, 1], [0, 0]],
                                       [np.ones(3, np.float32), np.ones(1, np.float32)])
    assert indices.tolist() == [1, 2, 3, 4] and offsets.tolist() == [0, 1, 3, 3, 4]
    assert weights.dtype == np.float32 and weights.size == 4
    with pytest.raises(ValueError, match="same number of bags"):
        to_tbe([[1], [2]], [[0], [0, 1]])
    with pytest.raises(ValueError, match="batch numbers start at 0"):
        make_batch(get_preset("tiny"), -1)
