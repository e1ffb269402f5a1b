"""Input checks shared by the embedding kernels.

Every check raises on the first problem it finds, with a message that names the argument, the
position and the offending value, so a failing testbench vector can be traced back directly.

Accepted index/offset dtypes are int32, int64 and uint32: the hardware keeps indices and
offsets as 32-bit unsigned words in device memory, and the host side naturally uses int64.
Negative values are rejected. Python sequences are converted with ``np.asarray``; an empty
sequence counts as an empty int64 array.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

INDEX_DTYPES = (np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.uint32))
POOLING_MODES = ("sum", "mean")


def as_index_array(values, name: str) -> np.ndarray:
    """Return `values` as a 1-D int64 array after checking dtype, shape and sign."""
    if not isinstance(values, np.ndarray):
        values = np.asarray(values)
        if values.size == 0:
            values = values.astype(np.int64)  # `[]` becomes float64; treat it as no indices
    if values.dtype not in INDEX_DTYPES:
        raise TypeError(
            f"{name} must be an integer array of dtype int32, int64 or uint32, "
            f"got dtype {values.dtype}"
        )
    if values.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {values.shape}")
    values = values.astype(np.int64)
    negative = np.flatnonzero(values < 0)
    if negative.size:
        pos = int(negative[0])
        raise ValueError(f"{name}[{pos}] = {values[pos]} is negative")
    return values


def check_offsets(offsets: np.ndarray, num_indices: int, *, last_is_total: bool) -> None:
    """Check bag offsets against the index count.

    offsets[0] must be 0 (as torch.nn.EmbeddingBag requires), offsets never decrease and never
    point past the end of the indices. In the TBE form (`last_is_total`) the final entry must
    equal the number of indices exactly, as FBGEMM requires.
    """
    if offsets.size == 0:  # the TBE form always has B*T + 1 >= 1 entries
        if num_indices:
            raise ValueError(f"offsets is empty (no bags) but there are {num_indices} indices")
        return
    if offsets[0] != 0:
        raise ValueError(f"offsets[0] must be 0, got {offsets[0]}")
    falls = np.flatnonzero(offsets[1:] < offsets[:-1])
    if falls.size:
        pos = int(falls[0]) + 1
        raise ValueError(
            f"offsets decrease at position {pos}: offsets[{pos}] = {offsets[pos]} < "
            f"offsets[{pos - 1}] = {offsets[pos - 1]}"
        )
    past = np.flatnonzero(offsets > num_indices)
    if past.size:
        pos = int(past[0])
        raise ValueError(
            f"offsets[{pos}] = {offsets[pos]} is past the end of indices ({num_indices} indices)"
        )
    if last_is_total and offsets[-1] != num_indices:
        raise ValueError(
            f"the last offset (offsets[{offsets.size - 1}] = {offsets[-1]}) must equal the "
            f"number of indices ({num_indices})"
        )


def check_index_range(
    indices: np.ndarray,
    bag_starts: np.ndarray,
    rows: int,
    *,
    table: int | None,
    index_base: int = 0,
) -> None:
    """Check every index of one table is below `rows`, naming table, bag and position if not.

    `bag_starts` are the offsets of this table's bags into `indices`; `index_base` is where
    `indices` starts inside the full indices array (TBE form), so messages give the global
    position.
    """
    bad = np.flatnonzero(indices >= rows)
    if not bad.size:
        return
    pos = int(bad[0])
    bag = int(np.searchsorted(bag_starts, pos, side="right")) - 1
    where = f"bag {bag}" if table is None else f"table {table}, bag {bag}"
    raise ValueError(
        f"index {indices[pos]} at indices[{index_base + pos}] ({where}, position "
        f"{pos - int(bag_starts[bag])}) is out of range for a table of {rows} rows"
    )


def check_table(weight, name: str) -> None:
    """An embedding table is a 2-D float32 array (rows, D)."""
    if not isinstance(weight, np.ndarray):
        raise TypeError(f"{name} must be a numpy array, got {type(weight).__name__}")
    if weight.dtype != np.float32:
        raise TypeError(f"{name} must have dtype float32, got {weight.dtype}")
    if weight.ndim != 2:
        raise ValueError(f"{name} must be 2-D (rows, D), got shape {weight.shape}")


def check_tables(weights, name: str = "weights") -> list[np.ndarray]:
    if isinstance(weights, np.ndarray) or not isinstance(weights, Sequence):
        raise TypeError(f"{name} must be a list of 2-D float32 tables, one per table")
    if len(weights) == 0:
        raise ValueError(f"{name} must contain at least one table")
    for t, weight in enumerate(weights):
        check_table(weight, f"{name}[{t}]")
    return list(weights)


def check_mode(mode, name: str = "mode") -> str:
    if mode not in POOLING_MODES:
        raise ValueError(f"{name} must be 'sum' or 'mean', got {mode!r}")
    return mode


def check_modes(modes, num_tables: int) -> tuple[str, ...]:
    """`modes` is one pooling mode for every table or a sequence with one per table."""
    if isinstance(modes, str):
        modes = (modes,) * num_tables
    modes = tuple(modes)
    if len(modes) != num_tables:
        raise ValueError(f"modes has {len(modes)} entries but there are {num_tables} tables")
    for t, mode in enumerate(modes):
        check_mode(mode, f"modes[{t}]")
    return modes


def check_per_sample_weights(per_sample_weights, num_indices: int, modes) -> np.ndarray | None:
    """Per-sample weights: float32, one per index, only for tables pooled with 'sum'."""
    if per_sample_weights is None:
        return None
    if not isinstance(per_sample_weights, np.ndarray):
        raise TypeError("per_sample_weights must be a float32 numpy array")
    if per_sample_weights.dtype != np.float32:
        raise TypeError(
            f"per_sample_weights must have dtype float32, got {per_sample_weights.dtype}"
        )
    if per_sample_weights.ndim != 1:
        raise ValueError(f"per_sample_weights must be 1-D, got shape {per_sample_weights.shape}")
    if per_sample_weights.size != num_indices:
        raise ValueError(
            f"per_sample_weights has {per_sample_weights.size} entries but indices has "
            f"{num_indices}; there must be one weight per index"
        )
    for t, mode in enumerate(modes):
        if mode != "sum":
            where = "" if len(modes) == 1 else f" (table {t})"
            raise ValueError(
                f"per_sample_weights are only supported with mode 'sum', got mode {mode!r}{where}"
            )
    return per_sample_weights
