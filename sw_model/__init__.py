"""NumPy golden model of TrainingCXL's DLRM training and checkpoint contract.

Modules, one job each:

* `presets`    named configurations (`tiny`, `kaggle`, `rm1`, `rm2`), `get_preset`;
* `data`       seeded batches (uniform / Zipf indices, TBE form, teacher labels);
* `embedding`  bit-exact pooling and the coalesced, chunked sparse SGD update (the device);
* `relaxed`    relaxed lookup: batch N+1 pooled before UPDATE(N), then corrected (the device);
* `dlrm`       MLPs, interaction, BCE loss, backward, SGD (the host);
* `train`      the golden training loop with per-batch records and table digests;
* `checkpoint` the persistence contract: acceptable recovered states, golden continuation;
* `validation` input checks with messages naming the problem.

The numeric rules (accumulation order, zero sign, MEAN reciprocal, chunking) are in the
`embedding` module docstring; the exact relaxed-lookup formula in the `relaxed` module
docstring (also docs/relaxed_lookup.md); the recovery rules in the `checkpoint` module
docstring.
"""

from .checkpoint import (
    Acceptable,
    CheckpointOracle,
    Failure,
    Phase,
    RecoveredState,
    UnacceptableRecovery,
    acceptable_recovery,
    first_table_difference,
    is_snapshot_batch,
    newest_snapshot,
    snapshot_slot,
)
from .data import Batch, BatchGenerator, make_batch, to_tbe
from .dlrm import (
    Linear,
    MLPParams,
    bce_loss,
    dense_backward,
    dense_forward,
    init_params,
    interaction_pairs,
    ordered_matmul,
    pool_embeddings,
    sgd_step,
)
from .embedding import (
    SparseUpdate,
    embedding_bag,
    embedding_bag_tbe,
    embedding_bag_tbe_grad,
    mean_scale,
    sparse_sgd_update,
)
from .presets import PRESETS, Preset, get_preset
from .relaxed import RelaxedLookup, UndoLog, relaxed_lookup, update_deltas
from .train import (
    LOOKUP_MODES,
    BatchRecord,
    TrainResult,
    TrainState,
    initial_state,
    table_digest,
    train,
    train_step,
)

__all__ = [
    "LOOKUP_MODES",
    "PRESETS",
    "Acceptable",
    "Batch",
    "BatchGenerator",
    "BatchRecord",
    "CheckpointOracle",
    "Failure",
    "Linear",
    "MLPParams",
    "Phase",
    "Preset",
    "RecoveredState",
    "RelaxedLookup",
    "SparseUpdate",
    "TrainResult",
    "TrainState",
    "UnacceptableRecovery",
    "UndoLog",
    "acceptable_recovery",
    "bce_loss",
    "dense_backward",
    "dense_forward",
    "embedding_bag",
    "embedding_bag_tbe",
    "embedding_bag_tbe_grad",
    "first_table_difference",
    "get_preset",
    "init_params",
    "initial_state",
    "interaction_pairs",
    "is_snapshot_batch",
    "make_batch",
    "mean_scale",
    "newest_snapshot",
    "ordered_matmul",
    "pool_embeddings",
    "relaxed_lookup",
    "sgd_step",
    "snapshot_slot",
    "sparse_sgd_update",
    "table_digest",
    "to_tbe",
    "train",
    "train_step",
    "update_deltas",
]
