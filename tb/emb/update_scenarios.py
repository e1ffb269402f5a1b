"""UPDATE command scenarios for the update engine's testbenches: memory image, command, and
the expected outcome (pure Python and NumPy; no simulator needed).

The expected tables come from ``sw_model.sparse_sgd_update`` with the engine's
``max_unique_rows``. The golden model allows per-sample weights only with all tables "sum",
while the engine has a mode per table, so the scenario hands it one factor per occurrence:
the weight (WEIGHTED), ``float32(1)/float32(L)`` (MEAN, the golden model's own
``mean_scale``) or 1.0 (SUM). That is exactly one multiply per occurrence in each case, the
same arithmetic the golden model does for those modes (checked against it directly for
weight-free scenarios by :func:`golden_tables`).

The expected status of a bad command follows the engine's documented check order
(``hw/emb/update_checks.py`` and ``hw/emb/update_walker.py``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from hw.emb.layouts import (
    ErrorCode,
    Opcode,
    PoolingMode,
    command_layout,
    region_layout,
    table_layout,
)
from sw_model import sparse_sgd_update
from sw_model.embedding import mean_scale

__all__ = [
    "LINE",
    "Scenario",
    "expected_counters",
    "expected_status",
    "golden_tables",
    "random_scenario",
]

LINE = 64
MEMORY_BYTES = 1 << 22
_FIRST_ADDRESS = 0x1000  # below it nothing is mapped (a target for out-of-region tests)
_MODE_NAMES = {PoolingMode.SUM: "sum", PoolingMode.MEAN: "mean"}


def _lines(words: int) -> int:
    return (words + 15) // 16


@dataclass
class Scenario:
    """One UPDATE command and the memory it runs on. Every field can be corrupted on purpose
    (``dataclasses.replace``); :func:`expected_status` says what the engine must report."""

    tables: list[np.ndarray]          # float32 (rows, dim), the real table contents
    modes: list[PoolingMode]
    table_bases: list[int]
    bags: int
    indices: np.ndarray               # uint32, as stored in memory
    offsets: np.ndarray               # uint32, as stored in memory
    weights: np.ndarray               # float32 per index (used by WEIGHTED tables only)
    gradient: np.ndarray              # float32 (bags, sum dim)
    lr: np.float32
    addresses: dict[str, int]         # indices, offsets, weights, output
    regions: list[tuple[int, int, int]]  # (base, size, enable)
    image: bytearray                  # the whole memory before the command
    batch: int = 7
    opcode: Opcode = Opcode.UPDATE
    table_count: int | None = None    # command.tables (None: len(tables))
    num_indices: int | None = None    # command.num_indices (None: len(indices))
    descriptor_overrides: dict[int, dict] = field(default_factory=dict)

    @property
    def dims(self) -> list[int]:
        return [table.shape[1] for table in self.tables]

    def descriptors(self, max_tables: int) -> list[dict]:
        result = []
        for t in range(max_tables):
            if t < len(self.tables):
                rows, dim = self.tables[t].shape
                entry = {"base": self.table_bases[t], "rows": rows, "dim": dim,
                         "mode": self.modes[t]}
            else:  # unused descriptors hold junk the engine must ignore
                entry = {"base": 0x40, "rows": 0, "dim": 0, "mode": PoolingMode.SUM}
            entry.update(self.descriptor_overrides.get(t, {}))
            result.append(entry)
        return result

    def command(self) -> dict:
        return {
            "opcode": self.opcode,
            "batch": self.batch,
            "bags": self.bags,
            "tables": len(self.tables) if self.table_count is None else self.table_count,
            "num_indices": (len(self.indices) if self.num_indices is None
                            else self.num_indices),
            "indices": self.addresses["indices"],
            "offsets": self.addresses["offsets"],
            "weights": self.addresses["weights"],
            "output": self.addresses["output"],
        }

    def command_bits(self, addr_width: int) -> int:
        return command_layout(addr_width).const(self.command()).as_bits()

    def descriptor_bits(self, addr_width: int, max_tables: int) -> int:
        layout = table_layout(addr_width)
        bits = 0
        for t, entry in enumerate(self.descriptors(max_tables)):
            bits |= layout.const(entry).as_bits() << (t * layout.size)
        return bits

    def region_bits(self, addr_width: int, num_regions: int) -> int:
        layout = region_layout(addr_width)
        regions = [*self.regions, *[(0, 0, 0)] * num_regions][:num_regions]
        bits = 0
        for r, (base, size, enable) in enumerate(regions):
            bits |= layout.const({"base": base, "size": size, "enable": enable}).as_bits() \
                << (r * layout.size)
        return bits

    def occurrence_lines(self) -> int:
        """Gradient lines the update pass reads: one row block per occurrence."""
        total = 0
        for k in range(len(self.tables) * self.bags):
            t = k // self.bags
            total += int(self.offsets[k + 1] - self.offsets[k]) * self.dims[t] // 16
        return total


class _Allocator:
    """64-byte aligned buffers with random guard bytes between them."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.next = _FIRST_ADDRESS

    def take(self, size: int) -> int:
        address = self.next
        self.next = address + -(-size // LINE) * LINE + LINE * int(self.rng.integers(1, 4))
        return address


def _zipf_rows(rng, rows: int, count: int, exponent: float) -> np.ndarray:
    """Power-law row choice: a few hot rows take most occurrences (duplicates galore)."""
    order = rng.permutation(rows)
    return order[(rng.zipf(exponent, size=count) - 1) % rows].astype(np.uint32)


def _floats(rng, shape, *, specials: bool) -> np.ndarray:
    values = rng.standard_normal(shape).astype(np.float32)
    if specials and values.size:
        flat = values.reshape(-1)
        picks = rng.integers(0, flat.size, size=max(1, flat.size // 50))
        table = np.array([0.0, -0.0, 1e-40, -3e-39, 6e4, -1e-30, 1.0], dtype=np.float32)
        flat[picks] = table[rng.integers(0, table.size, size=picks.size)]
    return values


def random_scenario(rng: np.random.Generator, *, max_tables: int, dims=(16, 32, 64, 128),
                    rows=(1, 200), bags=(1, 8), bag_length=(0, 10), zipf: float = 1.3,
                    modes=tuple(PoolingMode), specials: bool = True) -> Scenario:
    """A valid random command: 1..max_tables tables, Zipf indices, mixed modes."""
    table_count = int(rng.integers(1, max_tables + 1))
    dims_chosen = [int(rng.choice(dims)) for _ in range(table_count)]
    row_counts = [int(rng.integers(rows[0], rows[1] + 1)) for _ in range(table_count)]
    mode_list = [modes[int(rng.integers(len(modes)))] for _ in range(table_count)]
    bag_count = int(rng.integers(bags[0], bags[1] + 1))

    lengths = rng.integers(bag_length[0], bag_length[1] + 1, size=table_count * bag_count)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.uint32)
    indices = np.empty(int(offsets[-1]), dtype=np.uint32)
    for t in range(table_count):
        begin, end = int(offsets[t * bag_count]), int(offsets[(t + 1) * bag_count])
        indices[begin:end] = _zipf_rows(rng, row_counts[t], end - begin, zipf)
    weights = _floats(rng, indices.size, specials=specials)
    gradient = _floats(rng, (bag_count, sum(dims_chosen)), specials=specials)
    tables = [_floats(rng, (r, d), specials=specials) for r, d in zip(row_counts, dims_chosen,
                                                                        strict=True)]
    lr = np.float32(rng.uniform(0.01, 0.5))

    allocate = _Allocator(rng)
    table_bases = [allocate.take(table.nbytes) for table in tables]
    table_end = allocate.next
    addresses = {
        "indices": allocate.take(max(indices.nbytes, 4)),
        "offsets": allocate.take(offsets.nbytes),
        "weights": allocate.take(max(weights.nbytes, 4)),
        "output": allocate.take(max(gradient.nbytes, 4)),
    }
    if allocate.next > MEMORY_BYTES:
        raise ValueError("scenario does not fit the simulated memory")
    # Two enabled regions (tables; buffers) and a disabled one covering everything.
    regions = [(_FIRST_ADDRESS, table_end - _FIRST_ADDRESS, 1),
               (table_end, allocate.next - table_end, 1),
               (0, MEMORY_BYTES, 0)]

    image = bytearray(rng.integers(0, 256, size=allocate.next + 4 * LINE,
                                   dtype=np.uint8).tobytes())
    scenario = Scenario(tables, mode_list, table_bases, bag_count, indices, offsets, weights,
                        gradient, lr, addresses, regions, image)
    write_buffers(scenario)
    return scenario


def write_buffers(scenario: Scenario) -> None:
    """Store tables and buffers into ``scenario.image`` (guards keep their random bytes)."""
    image = scenario.image
    for base, table in zip(scenario.table_bases, scenario.tables, strict=True):
        image[base:base + table.nbytes] = table.tobytes()
    for name, array in (("indices", scenario.indices), ("offsets", scenario.offsets),
                        ("weights", scenario.weights), ("output", scenario.gradient)):
        address = scenario.addresses[name]
        image[address:address + array.nbytes] = np.ascontiguousarray(array).tobytes()


def occurrence_factors(scenario: Scenario) -> np.ndarray:
    """The per-occurrence factor the engine multiplies each gradient row block by."""
    factors = np.ones(len(scenario.indices), dtype=np.float32)
    for k in range(len(scenario.tables) * scenario.bags):
        t = k // scenario.bags
        begin, end = int(scenario.offsets[k]), int(scenario.offsets[k + 1])
        if scenario.modes[t] == PoolingMode.WEIGHTED:
            factors[begin:end] = scenario.weights[begin:end]
        elif scenario.modes[t] == PoolingMode.MEAN and end > begin:
            factors[begin:end] = mean_scale(np.array([end - begin]))[0]
    return factors


def golden_tables(scenario: Scenario, max_unique_rows: int):
    """``sw_model.sparse_sgd_update`` for the scenario: (updated tables, chunks)."""
    offsets = scenario.offsets.astype(np.int64)
    indices = scenario.indices.astype(np.int64)
    result = sparse_sgd_update(scenario.tables, scenario.gradient, indices, offsets, "sum",
                               float(scenario.lr), occurrence_factors(scenario),
                               max_unique_rows=max_unique_rows)
    if PoolingMode.WEIGHTED not in scenario.modes:
        # Without weights the golden model takes the modes itself: it must agree bit for bit.
        direct = sparse_sgd_update(scenario.tables, scenario.gradient, indices, offsets,
                                   [_MODE_NAMES[mode] for mode in scenario.modes],
                                   float(scenario.lr), max_unique_rows=max_unique_rows)
        for ours, theirs in zip(result.tables, direct.tables, strict=True):
            assert ours.tobytes() == theirs.tobytes(), "factor trick disagrees with sw_model"
        assert result.chunks == direct.chunks
    return result


def expected_image(scenario: Scenario, max_unique_rows: int) -> tuple[bytearray, list]:
    """Memory after a successful command, and the chunks."""
    result = golden_tables(scenario, max_unique_rows)
    image = bytearray(scenario.image)
    for base, table in zip(scenario.table_bases, result.tables, strict=True):
        image[base:base + table.nbytes] = table.tobytes()
    return image, result.chunks


def expected_counters(scenario: Scenario, chunks) -> dict:
    """Exact counter increments of a successful command."""
    dims = scenario.dims
    lines_written = sum(dims[t] // 16 for chunk in chunks for t, _ in chunk)
    entries = len(scenario.tables) * scenario.bags + 1
    indices = len(scenario.indices)
    weighted = PoolingMode.WEIGHTED in scenario.modes
    # Offsets: the validation walk and the update walk; indices: the line-wide check and the
    # update walk; weights: the update walk.
    lines_read = (2 * _lines(entries) + 2 * _lines(indices) + weighted * _lines(indices) +
                  scenario.occurrence_lines() + lines_written)
    return {
        "rows_read": sum(len(chunk) for chunk in chunks),
        "bytes_written": LINE * lines_written,
        "bytes_read": LINE * lines_read,
    }


def _inside(regions, start: int, length: int) -> bool:
    return any(enable and base <= start and start + length <= base + size
               for base, size, enable in regions)


def expected_status(scenario: Scenario, *, max_tables: int, max_dim: int) -> dict:
    """The status the engine must report: error code and location (all 0 when NONE)."""

    def error(code, table=0, bag=0, position=0):
        return {"error": code, "table": table, "bag": bag, "position": position}

    command = scenario.command()
    if command["opcode"] != Opcode.UPDATE:
        return error(ErrorCode.BAD_OPCODE)
    count = command["tables"]
    if not 1 <= count <= max_tables:
        return error(ErrorCode.BAD_TABLE_COUNT)
    descriptors = scenario.descriptors(max_tables)[:count]
    for t, entry in enumerate(descriptors):
        dim = entry["dim"]
        if dim == 0 or dim % 16 or dim > max_dim:
            return error(ErrorCode.BAD_DIMENSION, t)
        if entry["base"] % LINE:
            return error(ErrorCode.MISALIGNED_ADDRESS, t)
        length = entry["rows"] * dim * 4
        if length and not _inside(scenario.regions, entry["base"], length):
            return error(ErrorCode.ADDRESS_OUT_OF_REGION, t)
    bags, num_indices = command["bags"], command["num_indices"]
    entries = count * bags + 1
    row_lines = sum(entry["dim"] for entry in descriptors) // 16
    weighted = any(entry["mode"] == PoolingMode.WEIGHTED for entry in descriptors)
    buffers = [("indices", _lines(num_indices)), ("offsets", _lines(entries))]
    if weighted:
        buffers.append(("weights", _lines(num_indices)))
    buffers.append(("output", bags * row_lines))
    for name, lines in buffers:
        address = command[name]
        if lines == 0:
            continue
        if address % LINE:
            return error(ErrorCode.MISALIGNED_ADDRESS)
        if not _inside(scenario.regions, address, lines * LINE):
            return error(ErrorCode.ADDRESS_OUT_OF_REGION)

    image = scenario.image
    offsets = np.frombuffer(bytes(image[command["offsets"]:command["offsets"] + 4 * entries]),
                            dtype=np.uint32).astype(np.int64)
    for e, value in enumerate(offsets):
        table, bag = divmod(e, bags) if bags else (0, 0)
        where = dict(table=table, bag=bag, position=e)
        if e == 0 and value != 0:
            return error(ErrorCode.OFFSETS_NOT_FROM_ZERO, **where)
        if e > 0 and value < offsets[e - 1]:
            return error(ErrorCode.OFFSETS_DECREASING, **where)
        if value > num_indices or (e == entries - 1 and value != num_indices):
            return error(ErrorCode.OFFSETS_PAST_END, **where)
    indices = np.frombuffer(bytes(image[command["indices"]:command["indices"] + 4 * num_indices]),
                            dtype=np.uint32)
    for k in range(count * bags):
        t, b = divmod(k, bags)
        for p in range(int(offsets[k]), int(offsets[k + 1])):
            if indices[p] >= descriptors[t]["rows"]:
                return error(ErrorCode.INDEX_OUT_OF_RANGE, t, b, p)
    return error(ErrorCode.NONE)


def corrupted(scenario: Scenario, **changes) -> Scenario:
    """A copy with some fields replaced and the memory image rebuilt from them."""
    result = dataclasses.replace(scenario, image=bytearray(scenario.image), **changes)
    write_buffers(result)
    return result
