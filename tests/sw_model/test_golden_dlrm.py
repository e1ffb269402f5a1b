"""DLRM forward against an independent float64 model; backward against finite differences."""

import math

import numpy as np
import pytest
from sw_model_reference import reference_pool64

from sw_model import (
    bce_loss,
    dense_backward,
    dense_forward,
    embedding_bag_tbe_grad,
    get_preset,
    init_params,
    interaction_pairs,
    make_batch,
    ordered_matmul,
    pool_embeddings,
    sgd_step,
)

F64 = np.float64


def small(interaction="dot", pooling="sum"):
    return get_preset("tiny").replace(
        batch_size=4, interaction=interaction, pooling=pooling,
        bottom_mlp=(8, 16), top_mlp=(8, 1),
    )


def forward64(mlp, dense, pooled, interaction, dim):
    """Independent float64 DLRM forward: explicit pair loop for the interaction."""
    a = dense.astype(F64)
    for layer in mlp.bottom:
        a = np.maximum(a @ layer.weight.astype(F64).T + layer.bias.astype(F64), 0.0)
    x = a
    vectors = [x] + [pooled[:, k : k + dim] for k in range(0, pooled.shape[1], dim)]
    if interaction == "dot":
        pairs = [
            (vectors[i] * vectors[j]).sum(axis=1, keepdims=True)
            for i in range(len(vectors))
            for j in range(i)
        ]
        r = np.concatenate([x, *pairs], axis=1)
    else:
        r = np.concatenate(vectors, axis=1)
    for i, layer in enumerate(mlp.top):
        r = r @ layer.weight.astype(F64).T + layer.bias.astype(F64)
        if i < len(mlp.top) - 1:
            r = np.maximum(r, 0.0)
    return r[:, 0]


def pooled64(tables, batch, preset):
    blocks = []
    for t, table in enumerate(tables):
        psw = None if batch.table_weights is None else batch.table_weights[t]
        blocks.append(reference_pool64(table, batch.table_indices[t], batch.table_offsets[t],
                                       preset.table_modes[t], psw))
    return np.concatenate(blocks, axis=1)


def loss64(mlp, dense, pooled, labels, interaction, dim):
    logits = forward64(mlp, dense, pooled, interaction, dim)
    p = 1.0 / (1.0 + np.exp(-logits))
    return -np.mean(labels * np.log(p) + (1 - labels) * np.log(1 - p))


def test_interaction_pairs_are_dlrm_strict_lower_triangle_row_major():
    li, lj = interaction_pairs(4)
    assert list(zip(li.tolist(), lj.tolist(), strict=True)) == [
        (1, 0), (2, 0), (2, 1), (3, 0), (3, 1), (3, 2)
    ]


@pytest.mark.parametrize("interaction", ["dot", "cat"])
@pytest.mark.parametrize("name", ["tiny", "kaggle"])
def test_forward_matches_independent_float64_model(name, interaction):
    preset = get_preset(name).replace(interaction=interaction)
    tables, mlp = init_params(preset)
    batch = make_batch(preset, 0)
    pooled = pool_embeddings(tables, batch, preset)
    fwd = dense_forward(mlp, batch.dense, pooled, interaction)
    assert fwd.logits.dtype == np.float32
    want = forward64(mlp, batch.dense, pooled.astype(F64), interaction, preset.dim)
    np.testing.assert_allclose(fwd.logits, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(fwd.probs, 1 / (1 + np.exp(-want)), rtol=1e-5, atol=1e-6)
    assert fwd.top_inputs[0].shape == (preset.batch_size, preset.interaction_width)


def test_interaction_values_are_the_named_dot_products():
    preset = small()
    tables, mlp = init_params(preset)
    batch = make_batch(preset, 1)
    pooled = pool_embeddings(tables, batch, preset)
    fwd = dense_forward(mlp, batch.dense, pooled, "dot")
    r = fwd.top_inputs[0].astype(F64)
    features = [fwd.x.astype(F64)] + [pooled[:, k : k + 16].astype(F64) for k in range(0, 64, 16)]
    np.testing.assert_allclose(r[:, :16], features[0], rtol=0)
    li, lj = interaction_pairs(5)
    for k, (i, j) in enumerate(zip(li, lj, strict=True)):
        np.testing.assert_allclose(r[:, 16 + k], (features[i] * features[j]).sum(axis=1),
                                   rtol=1e-5, atol=1e-7)


def test_ordered_matmul_sums_in_k_order_with_separate_roundings():
    rng = np.random.default_rng(3)
    scale = 10.0 ** rng.integers(-3, 4, (1, 40))
    a = (rng.standard_normal((3, 40)) * scale).astype(np.float32)
    b = (rng.standard_normal((40, 5)) * scale.T).astype(np.float32)
    got = ordered_matmul(a, b)
    for i in range(3):
        for j in range(5):
            acc = np.float32(a[i, 0] * b[0, j])
            for k in range(1, 40):
                acc = np.float32(acc + np.float32(a[i, k] * b[k, j]))
            assert got[i, j].tobytes() == acc.tobytes()
    np.testing.assert_allclose(got, a.astype(F64) @ b.astype(F64), rtol=1e-4,
                               atol=1e-5 * np.abs(a).max() * np.abs(b).max())
    batched = ordered_matmul(np.stack([a, 2 * a]), np.stack([b, b]))
    assert batched[0].tobytes() == got.tobytes() and batched.shape == (2, 3, 5)


def perturbed(arrays, index, position, delta):
    out = [a.copy() for a in arrays]
    out[index].flat[position] += delta
    return out


@pytest.mark.parametrize("interaction", ["dot", "cat"])
def test_mlp_gradients_match_central_differences(interaction):
    preset = small(interaction)
    tables, mlp = init_params(preset)
    batch = make_batch(preset, 2)
    mlp64 = mlp.astype(F64)
    dense = batch.dense.astype(F64)
    pooled = pooled64(tables, batch, preset)
    labels = batch.labels.astype(F64)
    fwd = dense_forward(mlp64, dense, pooled, interaction)
    grads, _ = dense_backward(mlp64, fwd, labels)
    assert float(bce_loss(fwd.probs, labels)) == pytest.approx(
        loss64(mlp64, dense, pooled, labels, interaction, preset.dim), rel=1e-12
    )
    rng = np.random.default_rng(0)
    eps = 1e-6
    arrays = mlp64.arrays()
    for index, grad in enumerate(grads.arrays()):
        for position in rng.choice(grad.size, size=min(grad.size, 6), replace=False):
            plus = mlp64.with_arrays(perturbed(arrays, index, position, eps))
            minus = mlp64.with_arrays(perturbed(arrays, index, position, -eps))
            fd = (loss64(plus, dense, pooled, labels, interaction, preset.dim)
                  - loss64(minus, dense, pooled, labels, interaction, preset.dim)) / (2 * eps)
            assert grad.flat[position] == pytest.approx(fd, rel=1e-5, abs=1e-9), (index, position)


@pytest.mark.parametrize(
    ("interaction", "pooling"), [("dot", "sum"), ("dot", "mean"), ("dot", "weighted"),
                                 ("cat", "sum")]
)
def test_embedding_gradients_match_central_differences(interaction, pooling):
    preset = small(interaction, pooling)
    tables, mlp = init_params(preset)
    batch = make_batch(preset, 3)
    mlp64 = mlp.astype(F64)
    dense, labels = batch.dense.astype(F64), batch.labels.astype(F64)
    tables64 = [t.astype(F64) for t in tables]
    fwd = dense_forward(mlp64, dense, pooled64(tables64, batch, preset), interaction)
    _, d_pooled = dense_backward(mlp64, fwd, labels)
    assert d_pooled.shape == (preset.batch_size, preset.num_tables * preset.dim)
    row_grads = embedding_bag_tbe_grad(tables, d_pooled, batch.indices, batch.offsets,
                                       preset.table_modes, batch.per_sample_weights)

    def loss_of(tables_):
        return loss64(mlp64, dense, pooled64(tables_, batch, preset), labels, interaction,
                      preset.dim)

    eps = 1e-6
    rng = np.random.default_rng(1)
    checked = 0
    for t, (rows, grads) in enumerate(row_grads):
        assert sorted(rows.tolist()) == sorted(set(batch.table_indices[t].tolist()))
        for k in rng.choice(rows.size, size=min(rows.size, 3), replace=False):
            for lane in (0, 7, 15):
                position = rows[k] * preset.dim + lane
                fd = (loss_of(perturbed(tables64, t, position, eps))
                      - loss_of(perturbed(tables64, t, position, -eps))) / (2 * eps)
                assert grads[k, lane] == pytest.approx(fd, rel=1e-5, abs=1e-9)
                checked += 1
    assert checked > 10
    # a row nobody looked up has zero gradient
    unused = sorted(set(range(preset.table_rows[0])) - set(batch.table_indices[0].tolist()))[0]
    fd = (loss_of(perturbed(tables64, 0, unused * preset.dim, eps))
          - loss_of(perturbed(tables64, 0, unused * preset.dim, -eps))) / (2 * eps)
    assert fd == pytest.approx(0.0, abs=1e-9)


def test_bce_clamps_logs_at_minus_100_and_sigmoid_is_stable():
    probs = np.array([0.0, 1.0, 0.0, 1.0], dtype=np.float32)
    labels = np.array([1.0, 0.0, 0.0, 1.0], dtype=np.float32)
    assert bce_loss(probs, labels) == pytest.approx(50.0)  # (100 + 100 + 0 + 0) / 4
    preset = small()
    tables, mlp = init_params(preset)
    huge = mlp.with_arrays([a * 1e4 for a in mlp.arrays()])
    batch = make_batch(preset, 0)
    fwd = dense_forward(huge, batch.dense, pool_embeddings(tables, batch, preset))
    assert np.isfinite(fwd.probs).all() and ((fwd.probs >= 0) & (fwd.probs <= 1)).all()


def test_init_follows_dlrm_distributions_and_is_seeded():
    preset = get_preset("kaggle")
    tables, mlp = init_params(preset)
    for table, rows in zip(tables, preset.table_rows, strict=True):
        assert table.dtype == np.float32 and table.shape == (rows, 16)
        assert np.abs(table).max() <= math.sqrt(1 / rows)
    first = mlp.bottom[1]  # 512 -> 256
    assert first.weight.shape == (256, 512) and first.weight.dtype == np.float32
    assert first.weight.std() == pytest.approx(math.sqrt(2 / (512 + 256)), rel=0.02)
    assert first.bias.std() == pytest.approx(math.sqrt(1 / 256), rel=0.2)
    assert mlp.top[0].weight.shape == (512, 367)  # dlrm's Kaggle top input width
    again_tables, again = init_params(preset)
    assert again.bit_equal(mlp) and all(
        (a == b).all() for a, b in zip(tables, again_tables, strict=True)
    )
    assert not init_params(preset.replace(seed=124))[1].bit_equal(mlp)


def test_sgd_step_is_w_minus_lr_g():
    preset = small()
    _, mlp = init_params(preset)
    grads = mlp.map(lambda a: np.full_like(a, 2.0))
    stepped = sgd_step(mlp, grads, 0.25)
    for before, after in zip(mlp.arrays(), stepped.arrays(), strict=True):
        assert after.dtype == np.float32
        assert (after == before - np.float32(0.5)).all()
    assert mlp.flat().size == sum(a.size for a in mlp.arrays())


def test_pooled_width_must_be_a_multiple_of_d():
    preset = small()
    _, mlp = init_params(preset)
    batch = make_batch(preset, 0)
    with pytest.raises(ValueError, match=r"pooled must be \(B, F\*D\) with B=4, D=16"):
        dense_forward(mlp, batch.dense, np.zeros((4, 20), dtype=np.float32))
