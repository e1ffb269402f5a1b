"""Lookup cases and their golden results, in plain NumPy (no cocotb): shared by the cocotb
testbenches, the Amaranth-simulator tests and the benchmark.

A :class:`LookupCase` is what the host would hand the device: tables (float32, one pooling
mode each), TBE ``indices``/``offsets`` and optional per-sample weights. Its golden result comes
from ``sw_model`` table by table, so tables with different modes (including WEIGHTED next to
MEAN, which ``sw_model``'s all-tables TBE call does not accept) each get the exact semantics
of DESIGN.md section 3.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hw.emb.layouts import LINE_BYTES, PoolingMode
from sw_model import embedding_bag_tbe
from sw_model.data import ZipfRows

__all__ = ["GUARD_BYTE", "LookupCase", "Placement", "golden", "random_case", "random_table",
           "same_bits"]

GUARD_BYTE = 0xA5
_MODE_NAMES = {PoolingMode.SUM: "sum", PoolingMode.MEAN: "mean", PoolingMode.WEIGHTED: "sum"}


@dataclass
class LookupCase:
    tables: list[np.ndarray]
    modes: list[PoolingMode]
    bags: int
    indices: np.ndarray            # uint32 (values may be out of range in error tests)
    offsets: np.ndarray            # uint32, bags * tables + 1 entries
    weights: np.ndarray | None = None
    note: str = ""

    @property
    def row_floats(self) -> int:
        return sum(t.shape[1] for t in self.tables)

    @property
    def weighted(self) -> bool:
        return PoolingMode.WEIGHTED in self.modes

    @property
    def useful_bytes(self) -> int:
        """Bytes of table rows the lookup has to read."""
        total = 0
        for t, table in enumerate(self.tables):
            begin, end = self.offsets[t * self.bags], self.offsets[(t + 1) * self.bags]
            total += int(end - begin) * table.shape[1] * 4
        return total


def golden(case: LookupCase) -> np.ndarray:
    """(bags, sum dim) float32, each table pooled by ``sw_model`` with its own mode."""
    blocks = []
    b = case.bags
    for t, (table, mode) in enumerate(zip(case.tables, case.modes, strict=True)):
        start, end = int(case.offsets[t * b]), int(case.offsets[(t + 1) * b])
        offsets = case.offsets[t * b:(t + 1) * b + 1].astype(np.int64) - start
        weights = None
        if mode == PoolingMode.WEIGHTED:
            weights = case.weights[start:end]
        blocks.append(embedding_bag_tbe([table], case.indices[start:end].astype(np.int64),
                                        offsets, [_MODE_NAMES[mode]], weights))
    if not blocks or b == 0:
        return np.zeros((b, case.row_floats), dtype=np.float32)
    return np.concatenate(blocks, axis=1)


def same_bits(got: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """Elementwise: identical bits, or both NaN (DESIGN.md section 3)."""
    both_nan = np.isnan(got) & np.isnan(expected)
    return (got.view(np.uint32) == expected.view(np.uint32)) | both_nan


_SPECIALS = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-45, -3e-39, 3.4e38, -3.4e38],
                     dtype=np.float32)


def random_table(rng, rows, dim, *, specials=False):
    scale = np.float32(2.0) ** rng.integers(-4, 5)
    table = (rng.standard_normal((rows, dim)) * scale).astype(np.float32)
    if specials:
        count = max(1, table.size // 50)
        spots = rng.integers(0, table.size, count)
        table.reshape(-1)[spots] = rng.choice(_SPECIALS, count)
    return table


def random_case(rng, *, max_tables, dims=(16, 32, 64, 128), max_bags=8, max_bag=6,
                max_rows=48, zipf=None, modes=None, specials=False) -> LookupCase:
    """A random valid lookup: duplicates come from small tables and Zipf draws."""
    num_tables = int(rng.integers(1, max_tables + 1))
    bags = int(rng.integers(0, max_bags + 1))
    tables, table_modes, indices, weights, offsets = [], [], [], [], []
    position = 0
    for t in range(num_tables):
        rows = int(rng.integers(1, max_rows + 1))
        dim = int(rng.choice(dims))
        tables.append(random_table(rng, rows, dim, specials=specials))
        mode = modes[t % len(modes)] if modes else PoolingMode(int(rng.integers(0, 3)))
        table_modes.append(mode)
        use_zipf = bool(rng.integers(0, 2)) if zipf is None else zipf
        sampler = ZipfRows(rows, 1.1, rng) if use_zipf else None
        for _ in range(bags):
            length = int(rng.integers(0, max_bag + 1))
            offsets.append(position)
            drawn = (sampler.draw(rng, length) if sampler is not None
                     else rng.integers(0, rows, length))
            indices.append(np.asarray(drawn, dtype=np.uint32))
            position += length
    offsets.append(position)
    indices = np.concatenate(indices) if indices else np.zeros(0, dtype=np.uint32)
    weights = rng.uniform(-1.5, 1.5, indices.size).astype(np.float32)
    return LookupCase(tables, table_modes, bags, indices.astype(np.uint32),
                      np.asarray(offsets, dtype=np.uint32), weights)


def _aligned(value, alignment=LINE_BYTES):
    return -(-value // alignment) * alignment


@dataclass
class Placement:
    """Where a case lives in device memory; every address 64-byte aligned, with gaps."""

    table_base: list[int]
    indices: int
    offsets: int
    weights: int
    output: int
    output_bytes: int
    guard: int = 256
    extra: dict = field(default_factory=dict)

    @classmethod
    def lay_out(cls, case: LookupCase, *, table_region: int, buffer_region: int,
                rng=None) -> Placement:
        def gap():
            return int(rng.integers(0, 4)) * LINE_BYTES if rng is not None else 0

        address = table_region + gap()
        bases = []
        for table in case.tables:
            bases.append(address)
            address = _aligned(address + table.nbytes) + gap()
        address = buffer_region + gap()
        spots = {}
        for name, size in (("indices", case.indices.size * 4),
                           ("offsets", case.offsets.size * 4),
                           ("weights", case.indices.size * 4)):
            spots[name] = address
            address = _aligned(address + max(size, 1)) + gap()
        guard = 256
        output = _aligned(address + guard)
        output_bytes = case.bags * case.row_floats * 4
        return cls(bases, spots["indices"], spots["offsets"], spots["weights"], output,
                   output_bytes, guard)
