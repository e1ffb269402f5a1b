"""cocotb pieces of the embedding-engine testbenches: AXI memory models with stress knobs, a
command driver, and the :class:`Bench` every lookup test uses. The cases and their golden
results are in :mod:`tb.emb.cases` (plain NumPy)."""

from __future__ import annotations

import logging
import random

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
    command_layout,
    counters_layout,
    region_layout,
    status_layout,
    table_layout,
)
from sim.rtl import design_from_env
from tb.common import pause_pattern, reset, rng, start_clock

from .cases import GUARD_BYTE, LookupCase, Placement, golden, random_case, same_bits

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
