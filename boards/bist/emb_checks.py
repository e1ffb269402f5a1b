"""Self-test checks of the embedding engine: LOOKUP, then UPDATE and a LOOKUP of the result,
against results computed at build time by the golden model (``sw_model``).

The workload is two small tables of different widths and pooling modes (MEAN with 32 floats
a row, WEIGHTED with 16), bags of Zipf-drawn rows (``sw_model.data.ZipfRows``, so rows repeat
within and across bags, and some bags are empty) and a gradient for the update. The on-chip
unique-row capacity is smaller than the distinct rows of the batch, so the update runs in
several chunks. Expected results:

- pooled outputs: ``sw_model.embedding_bag_tbe`` table by table (each with its own mode);
- updated tables: ``sw_model.sparse_sgd_update`` with the engine's ``max_unique_rows``; since
  the golden model takes per-sample weights only when every table is "sum", each occurrence
  gets its factor explicitly (its weight, ``mean_scale(L)`` or 1.0), which is the one
  multiply the golden model itself does for each mode.

Both checks run on one :class:`~boards.bist.emb_dut.EngineUnderTest`; the second sees the
tables as the first left them (unchanged: LOOKUP writes only its output buffer).
"""

from dataclasses import dataclass

import numpy as np
from amaranth import Const

from hw.emb.layouts import LINE_BYTES, ErrorCode, Opcode, PoolingMode, status_layout
from sw_model import embedding_bag_tbe, mean_scale, sparse_sgd_update
from sw_model.data import ZipfRows, rng_for, to_tbe

from .check import Check
from .emb_dut import ENGINE_DEFAULTS, EngineUnderTest, Step

__all__ = ["GUARD_BYTE", "EngineWorkload", "emb_checks", "engine_workload"]

# Fills every byte the workload does not define (the output buffers above all), so a line
# the engine should have written but did not cannot match by chance.
GUARD_BYTE = 0xA5
_WORKLOAD_STREAM = 0x4B1  # the sw_model.data stream number of this workload's draws
_LINES_PER_4K = 4096 // LINE_BYTES
_MODE_NAMES = {PoolingMode.SUM: "sum", PoolingMode.MEAN: "mean", PoolingMode.WEIGHTED: "sum"}


@dataclass(frozen=True, eq=False)
class EngineWorkload:
    """A batch for the engine and its golden results (all float32 arrays)."""
    tables: tuple
    modes: tuple
    bags: int
    indices: np.ndarray            # uint32, TBE order
    offsets: np.ndarray            # uint32, bags * tables + 1
    weights: np.ndarray            # float32, one per index (used by WEIGHTED tables)
    gradient: np.ndarray           # float32 (bags, sum dim)
    lr: np.float32
    max_unique_rows: int
    pooled: np.ndarray             # LOOKUP of the original tables
    updated_tables: tuple          # after UPDATE
    pooled_after: np.ndarray       # LOOKUP of the updated tables
    chunks: int                    # chunks the update takes

    @property
    def row_floats(self):
        return sum(table.shape[1] for table in self.tables)


def _pool(tables, modes, bags, indices, offsets, weights):
    blocks = []
    for t, (table, mode) in enumerate(zip(tables, modes, strict=True)):
        start, end = int(offsets[t * bags]), int(offsets[(t + 1) * bags])
        table_offsets = offsets[t * bags:(t + 1) * bags + 1].astype(np.int64) - start
        blocks.append(embedding_bag_tbe(
            [table], indices[start:end].astype(np.int64), table_offsets, [_MODE_NAMES[mode]],
            weights[start:end] if mode == PoolingMode.WEIGHTED else None))
    return np.concatenate(blocks, axis=1)


def _occurrence_factors(modes, bags, offsets, weights):
    factors = np.ones(len(weights), dtype=np.float32)
    for k in range(len(modes) * bags):
        mode = modes[k // bags]
        begin, end = int(offsets[k]), int(offsets[k + 1])
        if mode == PoolingMode.WEIGHTED:
            factors[begin:end] = weights[begin:end]
        elif mode == PoolingMode.MEAN and end > begin:
            factors[begin:end] = mean_scale(np.array([end - begin]))[0]
    return factors


def engine_workload(*, seed=0, rows=(24, 16), dims=(32, 16),
                    modes=(PoolingMode.MEAN, PoolingMode.WEIGHTED), bags=4, max_bag=5,
                    zipf_exponent=1.05, lr=0.3, max_unique_rows=ENGINE_DEFAULTS["max_unique_rows"]):
    """Draw a workload and compute its golden results (module docstring)."""
    if not len(rows) == len(dims) == len(modes) >= 1:
        raise ValueError("rows, dims and modes must have one entry per table")
    rng = rng_for(seed, _WORKLOAD_STREAM)
    tables, table_indices, table_offsets, table_weights = [], [], [], []
    for table_rows, dim in zip(rows, dims, strict=True):
        tables.append(rng.standard_normal((table_rows, dim)).astype(np.float32))
        sampler = ZipfRows(table_rows, zipf_exponent, rng)
        lengths = rng.integers(0, max_bag + 1, size=bags)
        lengths[rng.integers(bags)] = 0  # an empty bag in every table
        drawn = sampler.draw(rng, int(lengths.sum()))
        table_indices.append(drawn)
        table_offsets.append(np.cumsum(lengths) - lengths)
        table_weights.append(rng.uniform(0.5, 1.5, drawn.size).astype(np.float32))
    indices, offsets, weights = to_tbe(table_indices, table_offsets, table_weights)
    gradient = rng.standard_normal((bags, sum(dims))).astype(np.float32)
    lr = np.float32(lr)

    pooled = _pool(tables, modes, bags, indices, offsets, weights)
    update = sparse_sgd_update(tables, gradient, indices, offsets, "sum", float(lr),
                               _occurrence_factors(modes, bags, offsets, weights),
                               max_unique_rows=max_unique_rows)
    pooled_after = _pool(update.tables, modes, bags, indices, offsets, weights)
    for name, values in (("pooled", pooled), ("pooled_after", pooled_after),
                         *((f"table {t}", table) for t, table in enumerate(update.tables))):
        # The checks compare bits exactly, which is only the contract for non-NaN values.
        if np.isnan(values).any():
            raise ValueError(f"Workload seed {seed} gives a NaN in {name}; pick another seed")
    return EngineWorkload(
        tables=tuple(tables), modes=tuple(modes), bags=bags,
        indices=indices.astype(np.uint32), offsets=offsets.astype(np.uint32),
        weights=weights, gradient=gradient, lr=lr, max_unique_rows=max_unique_rows,
        pooled=pooled, updated_tables=tuple(update.tables), pooled_after=pooled_after,
        chunks=len(update.chunks))


class _Image:
    """Device memory at build time: 64-byte aligned buffers, guard bytes elsewhere."""

    def __init__(self):
        self.bytes = bytearray()
        self.addresses = {}

    def place(self, name, payload=b"", *, size=None):
        address = len(self.bytes)
        size = len(payload) if size is None else size
        lines = max(1, -(-size // LINE_BYTES))
        self.bytes += payload + bytes([GUARD_BYTE]) * (lines * LINE_BYTES - len(payload))
        self.addresses[name] = address
        return address

    def lines(self):
        return [int.from_bytes(self.bytes[k:k + LINE_BYTES], "little")
                for k in range(0, len(self.bytes), LINE_BYTES)]


def _lines_of(array):
    raw = np.ascontiguousarray(array).tobytes()
    return [int.from_bytes(raw[k:k + LINE_BYTES], "little")
            for k in range(0, len(raw), LINE_BYTES)]


def _read_steps(layout, address, size):
    """READ steps covering ``size`` bytes from ``address``, split at 4 KiB boundaries."""
    first, end = address // LINE_BYTES, -(-(address + size) // LINE_BYTES)
    steps = []
    while first < end:
        last = min(end, (first // _LINES_PER_4K + 1) * _LINES_PER_4K) - 1
        steps.append(_pack(layout, Step.READ, "read", {"line": first, "length": last - first}))
        first = last + 1
    return steps


def _pack(layout, step, name, value):
    return Const.cast(layout.const({"step": step, "arg": {name: value}})).value


def _status(opcode, batch):
    return Const.cast(status_layout().const(
        {"opcode": opcode, "batch": batch, "error": ErrorCode.NONE})).value


def emb_checks(*, seed=0, timeout_cycles=8192, workload=None, engine="embedding",
               **engine_params):
    """The engine's self-test: a LOOKUP check and an UPDATE + LOOKUP check on one
    :class:`~boards.bist.emb_dut.EngineUnderTest` (``engine_params`` override
    :data:`~boards.bist.emb_dut.ENGINE_DEFAULTS`).

    With ``engine="lookup"`` only the LOOKUP check runs; with ``engine="update"`` the UPDATE
    check, whose updated rows are then read back but not looked up.

    ``timeout_cycles`` must cover the longest command (the UPDATE), during which the device
    yields nothing.
    """
    params = {**ENGINE_DEFAULTS, **engine_params}
    if workload is None:
        workload = engine_workload(seed=seed, max_unique_rows=params["max_unique_rows"])
    if len(workload.tables) > params["max_tables"]:
        raise ValueError(f"The workload has {len(workload.tables)} tables; the engine takes "
                         f"{params['max_tables']}")
    image = _Image()
    table_bases = [image.place(f"table_{t}", table.tobytes())
                   for t, table in enumerate(workload.tables)]
    tables_end = len(image.bytes)
    image.place("indices", workload.indices.tobytes())
    image.place("offsets", workload.offsets.tobytes())
    image.place("weights", workload.weights.tobytes())
    image.place("gradient", workload.gradient.tobytes())
    output_bytes = workload.pooled.nbytes
    image.place("output", size=output_bytes)
    image.place("output_after", size=output_bytes)
    memory_init = image.lines()
    size = len(image.bytes)
    if size >= 1 << params["addr_width"]:
        raise ValueError(f"The workload needs {size} bytes, more than {params['addr_width']} "
                         f"address bits reach")

    dut = EngineUnderTest(memory_init=memory_init, memory_depth=len(memory_init),
                          engine=engine, **params)
    layout = dut.layout
    config = _pack(layout, Step.CONFIG, "config", {
        "tables": [{"base": base, "rows": table.shape[0], "dim": table.shape[1], "mode": mode}
                   for base, table, mode in zip(table_bases, workload.tables, workload.modes,
                                                strict=True)]
                  + [{}] * (params["max_tables"] - len(workload.tables)),
        "regions": [{"base": 0, "size": size, "enable": 1}]
                   + [{}] * (params["num_regions"] - 1),
        "lr": int(workload.lr.view(np.uint32)),
    })
    addresses = image.addresses

    def command(opcode, batch, output):
        return _pack(layout, Step.COMMAND, "command", {
            "opcode": opcode, "batch": batch, "bags": workload.bags,
            "tables": len(workload.tables), "num_indices": workload.indices.size,
            "indices": addresses["indices"], "offsets": addresses["offsets"],
            "weights": addresses["weights"], "output": addresses[output]})

    lookup = Check(
        name="emb_lookup", dut=dut, timeout_cycles=timeout_cycles,
        stimulus=[config, command(Opcode.LOOKUP, 1, "output"),
                  *_read_steps(layout, addresses["output"], output_bytes)],
        expected=[_status(Opcode.LOOKUP, 1), *_lines_of(workload.pooled)])
    updated = b"".join(table.tobytes() for table in workload.updated_tables)
    stimulus = [config, command(Opcode.UPDATE, 2, "gradient"),
                *_read_steps(layout, 0, tables_end)]
    expected = [_status(Opcode.UPDATE, 2), *_lines_of(np.frombuffer(updated, np.uint8))]
    if engine == "embedding":
        stimulus += [command(Opcode.LOOKUP, 3, "output_after"),
                     *_read_steps(layout, addresses["output_after"], output_bytes)]
        expected += [_status(Opcode.LOOKUP, 3), *_lines_of(workload.pooled_after)]
    update = Check(name="emb_update", dut=dut, timeout_cycles=timeout_cycles,
                   stimulus=stimulus, expected=expected)
    return {"embedding": [lookup, update], "lookup": [lookup], "update": [update]}[engine]
