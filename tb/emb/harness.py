"""Shared pieces of the embedding-engine testbenches: random lookup cases, their golden
results, memory placement, AXI memory models with stress knobs, and a command driver.

A :class:`LookupCase` is what the host would hand the device: tables (float32, one pooling
mode each), TBE ``indices``/``offsets`` and optional per-sample weights. Its golden result comes
from ``sw_model`` table by table, so tables with different modes (including WEIGHTED next to
MEAN, which ``sw_model``'s all-tables TBE call does not accept) each get the exact semantics
of DESIGN.md section 3.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, RisingEdge, with_timeout
from cocotbext.axi import AxiBus
from cocotbext.axi.axi_channels import AxiARSink, AxiRSource
from cocotbext.axi.axi_ram import AxiRamRead, AxiRamWrite
from cocotbext.axi.constants import AxiResp

from hw.emb.layouts import (
    LINE_BYTES,
    ErrorCode,
    Opcode,
    PoolingMode,
    command_layout,
    counters_layout,
    region_layout,
    status_layout,
    table_layout,
)
from sim.rtl import design_from_env
from sw_model import embedding_bag_tbe
from sw_model.data import ZipfRows
from tb.common import pause_pattern, reset, rng, start_clock

__all__ = [
    "BUFFER_REGION",
    "BUFFER_REGION_SIZE",
    "GUARD_BYTE",
    "TABLE_REGION",
    "TABLE_REGION_SIZE",
    "Bench",
    "LookupCase",
    "LookupDriver",
    "Placement",
    "StressMemory",
    "golden",
    "random_case",
    "same_bits",
]

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


class _PoisonedRead(AxiRamRead):
    """cocotbext's RAM read side, answering SLVERR for lines in ``poison``."""

    def __init__(self, *args, poison, **kwargs):
        super().__init__(*args, **kwargs)
        self.poison = poison

    async def _read(self, address, length):
        if address // LINE_BYTES in self.poison:
            raise OSError(f"poisoned line at {address:#x}")
        return await super()._read(address, length)


class _PoisonedWrite(AxiRamWrite):
    def __init__(self, *args, poison, **kwargs):
        super().__init__(*args, **kwargs)
        self.poison = poison

    async def _write(self, address, data):
        if address // LINE_BYTES in self.poison:
            raise OSError(f"poisoned line at {address:#x}")
        await super()._write(address, data)


class _ShuffledRead:
    """AXI read slave that answers in a random order across IDs (in order within an ID),
    holding requests back at random so that several are pending to choose from."""

    def __init__(self, bus, clock, reset, *, memory, poison, seed, hold=0.6, pool=24):
        self.ar_channel = AxiARSink(bus.ar, clock, reset, True)
        self.r_channel = AxiRSource(bus.r, clock, reset, True)
        self.r_channel.queue_occupancy_limit = 2
        self._clock = clock
        self._memory = memory
        self._poison = poison
        self._random = random.Random(seed)
        self._hold = hold
        self._pool = pool
        cocotb.start_soon(self._run())

    async def _run(self):
        pending = []
        while True:
            while not self.ar_channel.empty():
                pending.append(self.ar_channel.recv_nowait())
            if not pending:
                await self.ar_channel.wait()
                continue
            if len(pending) < self._pool and self._random.random() < self._hold:
                await RisingEdge(self._clock)
                continue
            heads = {}
            for request in pending:
                heads.setdefault(int(request.arid), request)
            request = self._random.choice(list(heads.values()))
            pending.remove(request)
            address = int(request.araddr)
            for beat in range(int(request.arlen) + 1):
                line = address // LINE_BYTES + beat
                response = self.r_channel._transaction_obj()
                response.rid = int(request.arid)
                response.rlast = beat == int(request.arlen)
                if line in self._poison:
                    response.rresp = AxiResp.SLVERR
                    response.rdata = 0
                else:
                    response.rresp = AxiResp.OKAY
                    response.rdata = int.from_bytes(
                        self._memory.read(line * LINE_BYTES, LINE_BYTES), "little")
                await self.r_channel.send(response)


class StressMemory:
    """Device memory for the testbenches: cocotbext-axi RAM models with pause generators on
    every channel, optionally a response-shuffling read side, and poisoned lines that answer
    SLVERR (reads) or a SLVERR write response (writes)."""

    def __init__(self, dut, *, shuffle=False, busy=0.3, seed=0, size=2**32):
        bus = AxiBus.from_prefix(dut, "axi_")
        self.read_poison: set[int] = set()
        self.write_poison: set[int] = set()
        self.write_if = _PoisonedWrite(bus.write, dut.clk, dut.rst, size=size,
                                       poison=self.write_poison)
        if shuffle:
            self.read_if = _ShuffledRead(bus.read, dut.clk, dut.rst, memory=self.write_if,
                                         poison=self.read_poison, seed=seed)
        else:
            self.read_if = _PoisonedRead(bus.read, dut.clk, dut.rst, mem=self.write_if.mem,
                                         poison=self.read_poison)
        for model in (self.write_if, self.read_if):
            if hasattr(model, "log"):
                model.log.setLevel(logging.WARNING)  # one INFO line per burst otherwise
        self._busy = busy
        self._seed = seed
        self.set_busy(busy)

    def set_busy(self, busy):
        channels = [self.write_if.aw_channel, self.write_if.w_channel, self.write_if.b_channel,
                    self.read_if.ar_channel, self.read_if.r_channel]
        for k, channel in enumerate(channels):
            if busy:
                channel.set_pause_generator(pause_pattern(self._seed * 8 + k, busy))
            else:
                channel.clear_pause_generator()

    def write(self, address, data: bytes):
        self.write_if.write(address, data)

    def read(self, address, length) -> bytes:
        return self.write_if.read(address, length)


class LookupDriver:
    """Drives the engine's command/status/config ports from Python, packing every payload with
    the design's own layouts."""

    def __init__(self, dut, *, addr_width, max_tables, num_regions):
        self.dut = dut
        self.command_layout = command_layout(addr_width)
        self.tables_layout = table_layout(addr_width)
        self.max_tables = max_tables
        self.num_regions = num_regions
        self.region_layout = region_layout(addr_width)
        self.status_layout = status_layout()
        self.counters_layout = counters_layout()
        dut.cmd__valid.value = 0
        dut.done__ready.value = 1

    def set_tables(self, entries):
        """``entries``: dicts with base/rows/dim/mode; the rest are zero."""
        from amaranth.lib import data

        padded = list(entries) + [{}] * (self.max_tables - len(entries))
        layout = data.ArrayLayout(self.tables_layout, self.max_tables)
        self.dut.tables.value = layout.const(padded).as_bits()

    def set_regions(self, entries):
        from amaranth.lib import data

        padded = list(entries) + [{}] * (self.num_regions - len(entries))
        layout = data.ArrayLayout(self.region_layout, self.num_regions)
        self.dut.regions.value = layout.const(padded).as_bits()

    def counters(self) -> dict:
        value = self.counters_layout.from_bits(self.dut.counters.value.to_unsigned())
        return {name: int(getattr(value, name)) for name, _ in self.counters_layout}

    async def command(self, *, timeout_us=20000, **fields) -> dict:
        """Issue one command (fields of command_layout) and return its status as a dict."""
        dut = self.dut
        while not dut.cmd__ready.value:
            await RisingEdge(dut.clk)
        fields.setdefault("opcode", Opcode.LOOKUP)
        # Opcodes outside the enum (to test BAD_OPCODE) are packed by hand: field 0, 4 bits.
        opcode = fields.pop("opcode")
        opcode = opcode.value if isinstance(opcode, Opcode) else int(opcode)
        bits = self.command_layout.const({**fields, "opcode": Opcode.NOP}).as_bits() | opcode
        dut.cmd__payload.value = bits
        dut.cmd__valid.value = 1
        await RisingEdge(dut.clk)
        dut.cmd__valid.value = 0
        if not dut.done__valid.value:
            await with_timeout(RisingEdge(dut.done__valid), timeout_us, "us")
        raw = dut.done__payload.value.to_unsigned()
        status = self.status_layout.from_bits(raw & ~0xF)
        await ClockCycles(dut.clk, 2)
        raw_opcode = raw & 0xF
        return {
            "opcode": Opcode(raw_opcode) if raw_opcode in {o.value for o in Opcode}
            else raw_opcode,
            "batch": int(status.batch),
            "error": status.error,
            "table": int(status.table),
            "bag": int(status.bag),
            "position": int(status.position),
        }


TABLE_REGION = 0x1000_0000
TABLE_REGION_SIZE = 0x0100_0000
BUFFER_REGION = 0x2000_0000
BUFFER_REGION_SIZE = 0x0010_0000


class Bench:
    """One engine (LookupEngine or the EmbeddingEngine top), one memory model, and the steps
    every lookup test repeats."""

    def __init__(self, dut, *, shuffle=False, busy=0.3, stream=0):
        self.dut = dut
        self.params = design_from_env().params
        self.max_tables = self.params["max_tables"]
        self.max_dim = self.params["max_dim"]
        self.memory = StressMemory(dut, shuffle=shuffle, busy=busy,
                                   seed=cocotb.RANDOM_SEED * 16 + stream)
        self.driver = LookupDriver(dut, addr_width=self.params["addr_width"],
                                   max_tables=self.max_tables,
                                   num_regions=self.params["num_regions"])
        self.regions = [
            {"base": TABLE_REGION, "size": TABLE_REGION_SIZE, "enable": 1},
            {"base": BUFFER_REGION, "size": BUFFER_REGION_SIZE, "enable": 1},
        ]
        self.driver.set_regions(self.regions)
        self.rng = rng(stream)
        self.batch = 0

    async def start(self):
        start_clock(self.dut)
        await reset(self.dut)

    @property
    def index_capacity(self):
        return self.params["index_buffer_depth"]

    def place(self, case):
        return Placement.lay_out(case, table_region=TABLE_REGION, buffer_region=BUFFER_REGION,
                                 rng=self.rng)

    def load(self, case, placement):
        memory = self.memory
        for table, base in zip(case.tables, placement.table_base, strict=True):
            memory.write(base, table.tobytes())
        memory.write(placement.indices, case.indices.astype(np.uint32).tobytes())
        memory.write(placement.offsets, case.offsets.astype(np.uint32).tobytes())
        if case.weights is not None:
            memory.write(placement.weights, case.weights.astype(np.float32).tobytes())
        span = placement.output_bytes + 2 * placement.guard
        memory.write(placement.output - placement.guard, bytes([GUARD_BYTE]) * span)

    def table_entries(self, case, placement):
        return [{"base": base, "rows": table.shape[0], "dim": table.shape[1], "mode": mode}
                for table, mode, base in zip(case.tables, case.modes, placement.table_base,
                                             strict=True)]

    def command_fields(self, case, placement):
        self.batch += 1
        return {
            "opcode": Opcode.LOOKUP, "batch": self.batch, "bags": case.bags,
            "tables": len(case.tables), "num_indices": case.indices.size,
            "indices": placement.indices, "offsets": placement.offsets,
            "weights": placement.weights, "output": placement.output,
        }

    async def issue(self, case, placement=None, *, table_config=None, **overrides):
        """Load ``case``, run one command (``overrides`` replace command fields), return
        (status, placement)."""
        placement = placement or self.place(case)
        self.load(case, placement)
        self.driver.set_tables(table_config if table_config is not None
                               else self.table_entries(case, placement))
        fields = self.command_fields(case, placement)
        fields.update(overrides)
        status = await self.driver.command(**fields)
        assert status["batch"] == fields["batch"], status
        assert status["opcode"] == fields["opcode"], status
        return status, placement

    def output(self, case, placement):
        raw = self.memory.read(placement.output, placement.output_bytes)
        return np.frombuffer(raw, dtype=np.float32).reshape(case.bags, case.row_floats)

    def check_guards(self, placement, *, output_too=False):
        before = self.memory.read(placement.output - placement.guard, placement.guard)
        after = self.memory.read(placement.output + placement.output_bytes, placement.guard)
        assert before == bytes([GUARD_BYTE]) * placement.guard, "write below the output buffer"
        assert after == bytes([GUARD_BYTE]) * placement.guard, "write above the output buffer"
        if output_too and placement.output_bytes:
            inside = self.memory.read(placement.output, placement.output_bytes)
            assert inside == bytes([GUARD_BYTE]) * placement.output_bytes, \
                "a failing command wrote to the output buffer"

    async def lookup_and_compare(self, case, label=""):
        status, placement = await self.issue(case)
        assert status["error"] == ErrorCode.NONE, f"{label}: {status}"
        self.check_guards(placement)
        got = self.output(case, placement)
        expected = golden(case)
        match = same_bits(got, expected)
        if not match.all():
            bag, column = np.argwhere(~match)[0]
            raise AssertionError(
                f"{label}: {int((~match).sum())} of {match.size} floats differ; first at bag "
                f"{bag} column {column}: got {got[bag, column]!r} "
                f"({got.view(np.uint32)[bag, column]:#010x}), expected "
                f"{expected[bag, column]!r} ({expected.view(np.uint32)[bag, column]:#010x})")
        return placement
