"""The DLRM around the embeddings: bottom MLP, interaction, top MLP, BCE loss, backward, SGD.

Follows facebookresearch/dlrm (`DLRM_Net`):

* bottom MLP: Linear + ReLU for every layer, the last included; its output x has width D;
* interaction ``dot``: T = [x, e_1, ..., e_F] (B, F+1, D), Z = T T^T, R = [x, Z pairs] with the
  pairs of the strict lower triangle in row-major order (1,0), (2,0), (2,1), (3,0), ...;
  ``cat``: R = [x, e_1, ..., e_F];
* top MLP: Linear + ReLU for every layer but the last, which is followed by a sigmoid;
* loss: BCE with mean reduction, each log clamped to >= -100 (torch.nn.BCELoss).

Backward: the gradient at the last pre-activation is the fused ``(p - y) / B`` (computed in the
model dtype), not torch's two-step BCE-then-sigmoid backward. Linear layers: dW = dz^T a,
db = sum_b dz, da = dz W; ReLU passes the gradient where its input was > 0. The gradient of the
pooled embeddings comes out in the TBE layout (B, F*D), ready for `sparse_sgd_update`.

Reproducibility: parameters are float32 (float64 works too, for finite-difference checks).
The MLPs are host-side and need not match the hardware, but their bits feed the embedding
update, so they should be the same on every machine. BLAS (and so @) changes its summation
order with the CPU and the thread count (measured: OpenBLAS with 1 vs 2 threads gives different
Kaggle tables after 3 batches). Every product here therefore goes through `ordered_matmul`
(sum over k in increasing order, each product and sum rounded on its own); bias gradients add
rows in order. The sigmoid is evaluated in float64 and rounded once to float32, so a last-bit
difference between float64 exp implementations could only show in the rare case it crosses a
float32 rounding boundary. The loss is reported in float64 and never fed back.

Initialisation follows dlrm's distributions and order (tables, then bottom, then top; weight
then bias per layer) from PCG64 seeded with ``[preset.seed, INIT_STREAM]``: tables
U(-sqrt(1/n), sqrt(1/n)), weights N(0, sqrt(2/(in+out))), biases N(0, sqrt(1/out)), drawn in
float64 and rounded to float32.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from dataclasses import dataclass

import numpy as np

from .data import Batch, rng_for
from .embedding import embedding_bag_tbe
from .presets import Preset

__all__ = [
    "Forward",
    "Linear",
    "MLPParams",
    "bce_loss",
    "dense_backward",
    "dense_forward",
    "init_params",
    "interaction_pairs",
    "ordered_matmul",
    "pool_embeddings",
    "sgd_step",
]

INIT_STREAM = 4


@dataclass(frozen=True, eq=False)
class Linear:
    weight: np.ndarray  # (out, in), as torch.nn.Linear
    bias: np.ndarray  # (out,)


@dataclass(frozen=True, eq=False)
class MLPParams:
    """Bottom and top MLP parameters (also used for their gradients)."""

    bottom: tuple[Linear, ...]
    top: tuple[Linear, ...]

    def arrays(self) -> list[np.ndarray]:
        """Snapshot order: bottom then top layers, each weight (row-major) then bias."""
        return [a for layer in (*self.bottom, *self.top) for a in (layer.weight, layer.bias)]

    def flat(self) -> np.ndarray:
        """All parameters as one vector in snapshot order."""
        return np.concatenate([a.ravel() for a in self.arrays()])

    def digest(self) -> str:
        """sha256 of the snapshot-order bytes (little-endian)."""
        h = hashlib.sha256()
        for a in self.arrays():
            h.update(np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes())
        return h.hexdigest()

    def with_arrays(self, arrays) -> MLPParams:
        """Parameters of the same structure holding `arrays` (in snapshot order)."""
        arrays = list(arrays)
        if len(arrays) != 2 * (len(self.bottom) + len(self.top)):
            raise ValueError(f"expected {2 * (len(self.bottom) + len(self.top))} arrays")
        layers = [Linear(w, b) for w, b in zip(arrays[::2], arrays[1::2], strict=True)]
        return MLPParams(tuple(layers[: len(self.bottom)]), tuple(layers[len(self.bottom) :]))

    def map(self, fn) -> MLPParams:
        """A new MLPParams with `fn` applied to every array."""
        return self.with_arrays(fn(a) for a in self.arrays())

    def copy(self) -> MLPParams:
        return self.map(np.copy)

    def astype(self, dtype) -> MLPParams:
        return self.map(lambda a: a.astype(dtype))

    def bit_equal(self, other: MLPParams) -> bool:
        mine, theirs = self.arrays(), other.arrays()
        return len(mine) == len(theirs) and all(
            a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()
            for a, b in zip(mine, theirs, strict=True)
        )


def _init_mlp(rng: np.random.Generator, widths: tuple[int, ...]) -> tuple[Linear, ...]:
    layers = []
    for fan_in, fan_out in itertools.pairwise(widths):
        weight = rng.normal(0.0, math.sqrt(2.0 / (fan_in + fan_out)), size=(fan_out, fan_in))
        bias = rng.normal(0.0, math.sqrt(1.0 / fan_out), size=fan_out)
        layers.append(Linear(weight.astype(np.float32), bias.astype(np.float32)))
    return tuple(layers)


def init_params(preset: Preset) -> tuple[list[np.ndarray], MLPParams]:
    """Seeded initial (tables, MLP parameters) of a preset, float32."""
    rng = rng_for(preset.seed, INIT_STREAM)
    tables = []
    for rows in preset.table_rows:
        bound = math.sqrt(1.0 / rows)
        tables.append(rng.uniform(-bound, bound, size=(rows, preset.dim)).astype(np.float32))
    bottom = _init_mlp(rng, preset.bottom_widths)
    top = _init_mlp(rng, preset.top_widths)
    return tables, MLPParams(bottom, top)


def pool_embeddings(tables, batch: Batch, preset: Preset) -> np.ndarray:
    """The pooled embeddings of a batch, (B, F*D) float32: the near-memory unit's output."""
    return embedding_bag_tbe(
        tables, batch.indices, batch.offsets, preset.table_modes, batch.per_sample_weights
    )


def interaction_pairs(num_features: int) -> tuple[np.ndarray, np.ndarray]:
    """dlrm's (li, lj) for F+1 = `num_features` vectors: strict lower triangle, row-major."""
    li = [i for i in range(num_features) for _ in range(i)]
    lj = [j for i in range(num_features) for j in range(i)]
    return np.array(li, dtype=np.int64), np.array(lj, dtype=np.int64)


@dataclass(frozen=True, eq=False)
class Forward:
    """Everything the backward pass needs."""

    bottom_inputs: tuple[np.ndarray, ...]  # input of every bottom layer
    bottom_pre: tuple[np.ndarray, ...]  # pre-activation of every bottom layer
    features: np.ndarray | None  # T (B, F+1, D) for 'dot'; None for 'cat'
    interaction: str
    top_inputs: tuple[np.ndarray, ...]  # input of every top layer (the first is R)
    top_pre: tuple[np.ndarray, ...]  # pre-activation of every top layer
    probs: np.ndarray  # (B,)

    @property
    def x(self) -> np.ndarray:
        return _relu(self.bottom_pre[-1])

    @property
    def logits(self) -> np.ndarray:
        return self.top_pre[-1][:, 0]


def ordered_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` for (..., M, K) x (..., K, N) with a fixed order: for each output element
    ``(((a0*b0) + a1*b1) + ...) + a_{K-1}*b_{K-1}``, every product and sum rounded on its own.
    Unlike BLAS, the bits do not depend on the CPU or the number of threads."""
    out = a[..., :, :1] * b[..., :1, :]
    for k in range(1, a.shape[-1]):
        out = out + a[..., :, k : k + 1] * b[..., k : k + 1, :]
    return out


def _column_sums(a: np.ndarray) -> np.ndarray:
    """Sum over the first axis, rows added in order."""
    out = a[0].copy()
    for row in a[1:]:
        out = out + row
    return out


def _relu(z: np.ndarray) -> np.ndarray:
    return np.maximum(z, z.dtype.type(0))


def _sigmoid(z: np.ndarray) -> np.ndarray:
    """Logistic function, evaluated in float64 and rounded once to the dtype of `z`."""
    z64 = z.astype(np.float64)
    e = np.exp(-np.abs(z64))  # never overflows
    return np.where(z64 >= 0, 1.0 / (1.0 + e), e / (1.0 + e)).astype(z.dtype)


def _mlp_forward(layers, a):
    """Inputs and pre-activations of every layer; ReLU between layers, the caller applies the
    last layer's activation."""
    inputs, pre = [], []
    for layer in layers:
        if pre:
            a = _relu(pre[-1])
        inputs.append(a)
        pre.append(ordered_matmul(a, layer.weight.T) + layer.bias)
    return tuple(inputs), tuple(pre)


def dense_forward(mlp: MLPParams, dense, pooled, interaction: str = "dot") -> Forward:
    """Forward pass of everything but the embedding lookup. `pooled` is (B, F*D), TBE layout."""
    bottom_inputs, bottom_pre = _mlp_forward(mlp.bottom, dense)
    x = _relu(bottom_pre[-1])  # dlrm: ReLU after the last bottom layer too
    batch, dim = x.shape
    if pooled.ndim != 2 or pooled.shape[0] != batch or pooled.shape[1] % dim:
        raise ValueError(f"pooled must be (B, F*D) with B={batch}, D={dim}; got {pooled.shape}")
    if interaction == "dot":
        features = np.concatenate([x[:, None, :], pooled.reshape(batch, -1, dim)], axis=1)
        z = ordered_matmul(features, features.transpose(0, 2, 1))
        li, lj = interaction_pairs(features.shape[1])
        r = np.concatenate([x, z[:, li, lj]], axis=1)
    elif interaction == "cat":
        features, r = None, np.concatenate([x, pooled], axis=1)
    else:
        raise ValueError(f"interaction must be 'dot' or 'cat', got {interaction!r}")
    top_inputs, top_pre = _mlp_forward(mlp.top, r)
    probs = _sigmoid(top_pre[-1][:, 0])
    return Forward(bottom_inputs, bottom_pre, features, interaction, top_inputs, top_pre, probs)


def bce_loss(probs: np.ndarray, labels: np.ndarray) -> float:
    """Mean binary cross-entropy, each log clamped to >= -100 (for reporting; float64)."""
    p, y = probs.astype(np.float64), labels.astype(np.float64)
    with np.errstate(divide="ignore"):  # log(0) = -inf is clamped below
        log_p = np.maximum(np.log(p), -100.0)
        log_q = np.maximum(np.log(1.0 - p), -100.0)
    return float(-_column_sums(y * log_p + (1.0 - y) * log_q) / y.size)


def _mlp_backward(layers, inputs, pre, dz):
    """Gradients of the layers and of the MLP input, given dz at the last pre-activation."""
    grads = [None] * len(layers)
    for i in reversed(range(len(layers))):
        grads[i] = Linear(ordered_matmul(dz.T, inputs[i]), _column_sums(dz))
        da = ordered_matmul(dz, layers[i].weight)
        if i > 0:
            dz = da * (pre[i - 1] > 0)
    return tuple(grads), da


def dense_backward(mlp: MLPParams, fwd: Forward, labels) -> tuple[MLPParams, np.ndarray]:
    """Gradients of the mean BCE loss: (MLP gradients, gradient of pooled in TBE layout)."""
    dtype = fwd.probs.dtype
    batch = fwd.probs.shape[0]
    dlogit = ((fwd.probs - labels.astype(dtype)) / dtype.type(batch))[:, None]
    top_grads, dr = _mlp_backward(mlp.top, fwd.top_inputs, fwd.top_pre, dlogit)
    dim = fwd.bottom_pre[-1].shape[1]
    dx = dr[:, :dim]
    if fwd.interaction == "dot":
        features = fwd.features
        li, lj = interaction_pairs(features.shape[1])
        dz = np.zeros((batch, features.shape[1], features.shape[1]), dtype=dtype)
        dz[:, li, lj] = dr[:, dim:]
        # Z_ij = T_i . T_j: the pair's gradient flows to both vectors
        dfeatures = ordered_matmul(dz + dz.transpose(0, 2, 1), features)
        dx = dx + dfeatures[:, 0, :]
        dpooled = dfeatures[:, 1:, :].reshape(batch, -1)
    else:
        dpooled = dr[:, dim:]
    dz_bottom = dx * (fwd.bottom_pre[-1] > 0)
    bottom_grads, _ = _mlp_backward(mlp.bottom, fwd.bottom_inputs, fwd.bottom_pre, dz_bottom)
    return MLPParams(bottom_grads, top_grads), np.ascontiguousarray(dpooled)


def sgd_step(mlp: MLPParams, grads: MLPParams, lr: float) -> MLPParams:
    """Plain SGD ``w - lr * g`` on every MLP parameter; returns new parameters."""
    pairs = zip(mlp.arrays(), grads.arrays(), strict=True)
    return mlp.with_arrays(w - w.dtype.type(lr) * g for w, g in pairs)
