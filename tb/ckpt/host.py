"""The host side of the checkpoint testbenches: a driver for :class:`tb.ckpt.harness.
CheckpointSystem` and a training host that runs the MLPs in NumPy, drives one batch per command
sequence, injects power failures at chosen cycles, recovers, and checks every recovered state
bit for bit.

Golden states follow the path the run really takes (a :class:`PathGolden`): the tables after
each batch of this path and the MLP of each snapshot. Until the first failure of a run that is
the uninterrupted run of :class:`sw_model.checkpoint.CheckpointOracle` (checked), and after a
failure it is ``CheckpointOracle.continue_training`` from the recovered state; with several
failures in one run it keeps going the same way (the oracle's rules applied per failure).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import cocotb
import numpy as np
from amaranth.lib import data
from cocotb.triggers import ClockCycles, Event, FallingEdge, First, RisingEdge

from hw.ckpt.engine import counters_layout as ckpt_counters_layout
from hw.ckpt.layouts import NO_BATCH, CheckpointError, CheckpointPhase, LogMode
from hw.emb.layouts import (
    LINE_BYTES,
    ErrorCode,
    Opcode,
    PoolingMode,
    command_layout,
    region_layout,
    status_layout,
    table_layout,
)
from sim.pmem import PROFILES
from sw_model.checkpoint import Failure, Phase, acceptable_recovery, is_snapshot_batch
from sw_model.data import make_batch
from sw_model.dlrm import MLPParams, dense_backward, dense_forward, pool_embeddings, sgd_step
from sw_model.presets import Preset
from sw_model.relaxed import relaxed_lookup, update_deltas
from sw_model.train import initial_state
from tb.common import cycles_timer, wait_cycles

__all__ = ["Device", "FailurePlan", "MemoryMap", "PathGolden", "Trainer", "TrialResult"]

_POOLING = {"sum": PoolingMode.SUM, "mean": PoolingMode.MEAN, "weighted": PoolingMode.WEIGHTED}


def _align(value, to=4096):
    return -(-value // to) * to


def _signed(batch: int) -> int:
    return -1 if batch == NO_BATCH else batch


@dataclass(frozen=True)
class MemoryMap:
    """Where everything lives in the PMEM model (byte addresses, 64-byte aligned)."""

    table_bases: tuple[int, ...]
    indices: int
    offsets: int
    weights: int
    output: int
    meta: int
    log: int
    log_size: int
    slots: tuple[int, int]
    slot_size: int
    end: int
    #: A second set of (indices, offsets, weights, output) for odd batches with relaxed lookup:
    #: LOOKUP(N + 1) writes its output while UPDATE(N) still reads batch N's buffers.
    odd_staging: tuple[int, int, int, int] = (0, 0, 0, 0)

    def staging(self, batch: int) -> dict[str, int]:
        """Batch ``batch``'s buffers: the first set for even batches, else ``odd_staging``
        (the first set for every batch unless the host runs relaxed)."""
        names = ("indices", "offsets", "weights", "output")
        if batch % 2 and any(self.odd_staging):
            return dict(zip(names, self.odd_staging, strict=True))
        return {name: getattr(self, name) for name in names}

    @classmethod
    def for_preset(cls, preset: Preset, mlp_floats: int) -> MemoryMap:
        bases, at = [], 0
        for rows in preset.table_rows:
            bases.append(at)
            at += _align(rows * preset.dim * 4, LINE_BYTES)
        at = _align(at)
        max_indices = preset.num_tables * preset.batch_size * preset.max_bag
        indices, at = at, _align(at + max_indices * 4)
        offsets, at = at, _align(at + (preset.num_tables * preset.batch_size + 1) * 4)
        weights, at = at, _align(at + max_indices * 4)
        output, at = at, _align(at + preset.batch_size * preset.num_tables * preset.dim * 4)
        meta, at = at, _align(at + 8 * LINE_BYTES)
        entries = max_indices * (preset.dim // 16)
        area_lines = -(-entries // 7) * 8
        log_size = 2 * area_lines * LINE_BYTES
        log, at = at, _align(at + log_size)
        slot_size = _align(mlp_floats * 4, LINE_BYTES)
        slot0, at = at, _align(at + slot_size)
        slot1, at = at, _align(at + slot_size)
        odd_indices, at = at, _align(at + max_indices * 4)
        odd_offsets, at = at, _align(at + (preset.num_tables * preset.batch_size + 1) * 4)
        odd_weights, at = at, _align(at + max_indices * 4)
        odd_output, at = at, _align(at + preset.batch_size * preset.num_tables * preset.dim * 4)
        return cls(tuple(bases), indices, offsets, weights, output, meta, log, log_size,
                   (slot0, slot1), slot_size, at,
                   (odd_indices, odd_offsets, odd_weights, odd_output))


class Device:
    """Drives the system top from cocotb: configuration, backdoor, commands, power."""

    def __init__(self, dut, *, addr_width, max_tables, num_regions):
        self.dut = dut
        self.command_layout = command_layout(addr_width)
        self.status_layout = status_layout()
        self.region_layout = region_layout(addr_width)
        self.table_layout = table_layout(addr_width)
        self.addr_width = addr_width
        self.max_tables = max_tables
        self.num_regions = num_regions
        self.powered = Event()
        dut.cmd__valid.value = 0
        dut.done__ready.value = 1
        dut.backdoor_we.value = 0
        dut.power_fail.value = 0
        dut.gpf.value = 0

    # --- configuration -----------------------------------------------------------------------
    def set_profile(self, name: str):
        for port, value in PROFILES[name].inputs().items():
            getattr(self.dut, port).value = value

    def configure(self, preset: Preset, layout: MemoryMap, memory_bytes: int, *,
                  logging: bool = True, log_mode: LogMode = LogMode.ON_LOOKUP,
                  relaxed: bool = False):
        """Tables, regions, learning rate, checkpoint regions; ``logging`` off is the
        no-checkpoint baseline; ``log_mode`` says when the undo log is taken
        (``hw.ckpt.engine``)."""
        dut = self.dut
        tables = [{"base": base, "rows": rows, "dim": preset.dim,
                   "mode": _POOLING[preset.pooling]}
                  for base, rows in zip(layout.table_bases, preset.table_rows, strict=True)]
        tables += [{}] * (self.max_tables - len(tables))
        dut.tables.value = data.ArrayLayout(self.table_layout, self.max_tables).const(
            tables).as_bits()
        regions = [{"base": 0, "size": memory_bytes, "enable": 1}]
        regions += [{}] * (self.num_regions - 1)
        dut.regions.value = data.ArrayLayout(self.region_layout, self.num_regions).const(
            regions).as_bits()
        dut.lr.value = int(np.float32(preset.lr).view(np.uint32))
        region = self.region_layout
        dut.meta_region.value = region.const(
            {"base": layout.meta, "size": 8 * LINE_BYTES, "enable": 1}).as_bits()
        dut.log_region.value = region.const(
            {"base": layout.log, "size": layout.log_size, "enable": 1}).as_bits()
        dut.snapshot_regions.value = data.ArrayLayout(region, 2).const(
            [{"base": base, "size": layout.slot_size, "enable": 1}
             for base in layout.slots]).as_bits()
        dut.snapshot_interval.value = preset.snapshot_interval
        dut.logging_enable.value = int(logging)
        self.set_log_mode(log_mode)
        dut.relaxed.value = int(relaxed)

    def set_log_mode(self, log_mode: LogMode):
        """When the undo log is taken, from the next LOOKUP on (the engine samples it there)."""
        self.dut.log_mode.value = LogMode(log_mode).value

    # --- backdoor ------------------------------------------------------------------------------
    async def write(self, address: int, payload: bytes, *, stop: Event | None = None):
        """Write whole lines directly (persistent at once); stops early if ``stop`` is set."""
        assert address % LINE_BYTES == 0
        payload += bytes(-len(payload) % LINE_BYTES)
        dut = self.dut
        for k in range(len(payload) // LINE_BYTES):
            if stop is not None and stop.is_set():
                break
            dut.backdoor_addr.value = address // LINE_BYTES + k
            dut.backdoor_wdata.value = int.from_bytes(payload[k * 64:(k + 1) * 64], "little")
            dut.backdoor_we.value = 1
            await RisingEdge(dut.clk)
        dut.backdoor_we.value = 0

    async def read(self, address: int, length: int) -> bytes:
        assert address % LINE_BYTES == 0
        dut = self.dut
        lines = -(-length // LINE_BYTES)
        chunks = []
        # One line per cycle: the address set at a falling edge is read at the rising edge,
        # and its data is there at the next falling edge.
        await FallingEdge(dut.clk)
        dut.backdoor_addr.value = address // LINE_BYTES
        for k in range(lines):
            await FallingEdge(dut.clk)
            chunks.append(dut.backdoor_rdata.value.to_unsigned().to_bytes(64, "little"))
            if k + 1 < lines:
                dut.backdoor_addr.value = address // LINE_BYTES + k + 1
        return b"".join(chunks)[:length]

    # --- commands ------------------------------------------------------------------------------
    async def issue(self, opcode, batch, **fields):
        """Hand one command to the device (returns once it is accepted)."""
        dut = self.dut
        while not dut.cmd__ready.value:
            await RisingEdge(dut.clk)
        dut.cmd__payload.value = self.command_layout.const(
            {"opcode": opcode, "batch": batch & 0xFFFF_FFFF, **fields}).as_bits()
        dut.cmd__valid.value = 1
        await RisingEdge(dut.clk)
        dut.cmd__valid.value = 0

    async def finish(self, *, abort: Event | None = None, timeout_cycles=2_000_000):
        """The status of the command in flight, or None if ``abort`` fires first."""
        dut = self.dut
        if not dut.done__valid.value:
            waits = [RisingEdge(dut.done__valid), cycles_timer(timeout_cycles)]
            if abort is not None:
                waits.append(abort.wait())
            await First(*waits)
            if abort is not None and abort.is_set():
                return None
            if not dut.done__valid.value:
                raise AssertionError(f"no status after {timeout_cycles} cycles "
                                     f"(phase {self.phase().name})")
        status = self.status_layout.from_bits(dut.done__payload.value.to_unsigned())
        await RisingEdge(dut.clk)
        return {"opcode": status.opcode, "batch": int(status.batch), "error": status.error}

    async def command(self, opcode, batch, **fields):
        await self.issue(opcode, batch, **fields)
        return await self.finish()

    # --- status ------------------------------------------------------------------------------
    def phase(self) -> CheckpointPhase:
        return CheckpointPhase(self.dut.phase.value.to_unsigned())

    def error(self) -> CheckpointError:
        return CheckpointError(self.dut.error.value.to_unsigned())

    def value(self, name) -> int:
        return int(getattr(self.dut, name).value)

    def now(self) -> int:
        return self.value("now")

    def counters(self) -> dict[str, int]:
        """The checkpoint engine's counters (``hw.ckpt.engine.counters_layout``)."""
        layout = ckpt_counters_layout()
        value = layout.from_bits(self.value("ckpt_counters"))
        return {name: int(getattr(value, name)) for name, _ in layout}

    # --- power ---------------------------------------------------------------------------------
    async def power_cycle(self, *, seed: int, keep: int):
        """Fail power now (unacknowledged beats persist or not, from ``seed``), wait for the
        image, reset the design (memory contents survive)."""
        dut = self.dut
        dut.fail_seed.value = seed & 0xFFFF_FFFF
        dut.fail_keep.value = keep
        dut.power_fail.value = 1
        dut.cmd__valid.value = 0
        dut.backdoor_we.value = 0
        for _ in range(100_000):
            await RisingEdge(dut.clk)
            if dut.powered_down.value:
                break
        else:
            raise AssertionError("the PMEM model never finished powering down")
        lost, kept = self.value("lost_beats"), self.value("kept_beats")
        dut.power_fail.value = 0
        dut.rst.value = 1
        await ClockCycles(dut.clk, 2)
        dut.rst.value = 0
        await RisingEdge(dut.clk)
        return lost, kept


class PathGolden:
    """Golden tables and MLP snapshots along the path this run takes."""

    def __init__(self, preset: Preset):
        state = initial_state(preset)
        self.tables = {-1: [t.copy() for t in state.tables]}  # after batch n
        self.snapshots = {-1: state.mlp.copy()}                 # MLP after batch s
        self.mlp_after = {-1: state.mlp.copy()}                 # MLP after batch n (this path)

    def prune(self, keep_from: int):
        for book in (self.tables, self.mlp_after):
            for n in [n for n in book if n < keep_from - 2]:
                del book[n]

    def rewind(self, committed: int, snapshot: int):
        """Forget the abandoned path beyond ``committed``; the MLP restarts from the snapshot."""
        for book in (self.tables, self.mlp_after):
            for n in [n for n in book if n > committed]:
                del book[n]
        for n in [n for n in self.snapshots if n > snapshot]:  # not completed on this path
            del self.snapshots[n]
        self.mlp_after[committed] = self.snapshots[snapshot].copy()


@dataclass
class FailurePlan:
    """Fail power ``delay`` cycles into ``step`` of ``batch`` (or ``delay`` cycles after the
    device reaches ``on_phase`` in that step): step is one of "lookup", "update", "snapshot"
    (the host's slot writes and SNAPSHOT); and optionally again ``recovery_delay`` cycles
    into the RECOVER that follows."""

    batch: int
    step: str
    delay: int
    seed: int
    keep: int = 128
    recovery_delay: int | None = None
    on_phase: CheckpointPhase | None = None  # count the delay from when the device gets here


@dataclass
class TrialResult:
    failure: Failure
    device_phase: str
    reported_committed: int
    reported_snapshot: int
    lost_beats: int
    kept_beats: int
    recovery_cycles: int
    restored_entries: int
    recovery_failed_again: bool
    errors: list[str] = field(default_factory=list)


class _Injector:
    """Fails power ``delay`` cycles after it is armed, or after the device reaches
    ``on_phase`` (a cocotb task; the caller does the power cycle once ``fired`` is set)."""

    def __init__(self, device: Device, delay: int, on_phase: CheckpointPhase | None = None):
        self.device = device
        self.fired = Event()
        self.phase_at_failure = None
        # The step's command returned its status before the failure (set by the step).
        self.command_finished = False
        self.task = cocotb.start_soon(self._run(delay, on_phase))

    async def _run(self, delay, on_phase):
        if on_phase is not None:
            while self.device.phase() != on_phase:
                await RisingEdge(self.device.dut.clk)
        if delay:
            await wait_cycles(self.device.dut.clk, delay)
        self.phase_at_failure = self.device.phase()
        self.fired.set()

    def cancel(self):
        if not self.fired.is_set():
            self.task.cancel()


class Trainer:
    """Trains a preset on the device, one batch at a time, with optional power failures."""

    def __init__(self, device: Device, preset: Preset, layout: MemoryMap, *,
                 max_unique_rows: int, log=None, checkpointing: bool = True,
                 host_gap: int = 0, relaxed: bool = False):
        self.checkpointing = checkpointing  # False: logging off, no RECOVER/SNAPSHOT
        # Relaxed lookup (the device's ``relaxed`` input set): LOOKUP(N + 1) runs during the
        # GPU's time for batch N, and UPDATE(N) corrects it (``_run_relaxed_batch``).
        self.relaxed = relaxed
        self._ahead = None   # (batch, expected pooled output) of the LOOKUP that ran ahead
        self.host_gap = host_gap            # cycles of modelled GPU work between the commands
        self.device = device
        self.preset = preset
        self.layout = layout
        self.max_unique_rows = max_unique_rows
        self.golden = PathGolden(preset)
        self.next_batch = 0
        self.acknowledged = -1   # the last batch whose UPDATE status reached the host
        self.snapshot_acknowledged = -1  # the newest SNAPSHOT whose status reached the host
        self.log = log or (lambda message: None)
        # Per batch: cycles of LOOKUP (issue to status), of the host's part (reading the pooled
        # output, writing the gradient, host_gap), of UPDATE, and from LOOKUP to UPDATE done.
        self.batch_cycles: list[dict] = []
        self.recovered = []  # TrialResult per failure

    @property
    def interval(self):
        return self.preset.snapshot_interval

    @staticmethod
    def mlp_floats(preset: Preset) -> int:
        """Floats in one MLP snapshot (the slot size)."""
        return int(initial_state(preset).mlp.flat().size)

    async def load_initial(self):
        """Tables and the initial MLP into memory, RECOVER (formats), SNAPSHOT(-1)."""
        tables = self.golden.tables[-1]
        for table, base in zip(tables, self.layout.table_bases, strict=True):
            await self.device.write(base, table.astype("<f4").tobytes())
        if not self.checkpointing:
            return
        status = await self.device.command(Opcode.RECOVER, 0)
        assert status["error"] == ErrorCode.NONE, (status, self.device.error())
        assert self.device.value("last_committed") == NO_BATCH
        slot = self.device.value("next_snapshot_slot")
        assert slot == 1, slot
        await self.device.write(self.layout.slots[slot], self._mlp_bytes(self.golden.snapshots[-1]))
        status = await self.device.command(Opcode.SNAPSHOT, NO_BATCH)
        assert status["error"] == ErrorCode.NONE, (status, self.device.error())

    @staticmethod
    def _mlp_bytes(mlp: MLPParams) -> bytes:
        return mlp.flat().astype("<f4").tobytes()

    def _fields(self, batch):
        preset = self.preset
        return {"bags": preset.batch_size, "tables": preset.num_tables,
                "num_indices": int(batch.indices.size),
                **self.layout.staging(batch.number if self.relaxed else 0)}

    async def _stage(self, batch):
        """Batch ``batch``'s indices, offsets and weights into its buffers."""
        buffers = self.layout.staging(batch.number if self.relaxed else 0)
        await self.device.write(buffers["indices"], batch.indices.astype("<u4").tobytes())
        await self.device.write(buffers["offsets"], batch.offsets.astype("<u4").tobytes())
        if batch.per_sample_weights is not None:
            await self.device.write(buffers["weights"],
                                    batch.per_sample_weights.astype("<f4").tobytes())

    async def _host_step(self, n, batch, pooled_expected):
        """The host's part of batch ``n``: check the pooled output, run the MLP, write the
        gradient where the output was; the golden update. Returns the update's chunk deltas."""
        device, preset = self.device, self.preset
        output = self._fields(batch)["output"]
        raw = await device.read(output, preset.batch_size * preset.num_tables * preset.dim * 4)
        pooled = np.frombuffer(raw, dtype="<f4").reshape(preset.batch_size, -1)
        if pooled.tobytes() != pooled_expected.tobytes():
            raise AssertionError(f"batch {n}: pooled output differs from the golden model")
        tables, mlp = self.golden.tables[n - 1], self.golden.mlp_after[n - 1]
        fwd = dense_forward(mlp, batch.dense, pooled, preset.interaction)
        grads, d_pooled = dense_backward(mlp, fwd, batch.labels)
        await device.write(output, d_pooled.astype("<f4").tobytes())
        update, deltas = update_deltas(
            tables, d_pooled, batch.indices, batch.offsets, preset.table_modes, preset.lr,
            batch.per_sample_weights, max_unique_rows=self.max_unique_rows)
        self.golden.tables[n] = update.tables
        self.golden.mlp_after[n] = sgd_step(mlp, grads, preset.lr)
        return update, deltas

    # --- one batch ---------------------------------------------------------------------------
    async def run_batch(self, plan: FailurePlan | None = None) -> _Injector | None:
        """Train batch ``next_batch``; with a plan for it, return the injector once power
        has failed (the caller then recovers)."""
        if self.relaxed:
            return await self._run_relaxed_batch(plan)
        device, preset = self.device, self.preset
        n = self.next_batch
        tables = self.golden.tables[n - 1]
        batch = make_batch(preset, n)
        await self._stage(batch)
        fields = self._fields(batch)

        batch_started = device.now()
        injector, lookup_cycles = await self._step(plan, "lookup", Opcode.LOOKUP, n, fields)
        if injector:
            return injector
        host_started = device.now()
        await self._host_step(n, batch, pool_embeddings(tables, batch, preset))
        if self.host_gap:
            await wait_cycles(device.dut.clk, self.host_gap)
        host_cycles = device.now() - host_started

        injector, update_cycles = await self._step(plan, "update", Opcode.UPDATE, n, fields)
        if injector:
            return injector
        self.batch_cycles.append({"batch": n, "lookup": lookup_cycles, "host": host_cycles,
                                  "update": update_cycles,
                                  "total": device.now() - batch_started})
        return await self._after_update(n, plan)

    async def _step(self, plan, name, opcode, n, fields):
        """Run one command of batch ``n``, with the plan's failure if it is for step ``name``;
        returns (the injector, or None without a failure planned here; cycles). A status with an
        error fails the run."""
        device = self.device
        injector = (_Injector(device, plan.delay, plan.on_phase)
                    if plan and plan.step == name else None)
        started = device.now()
        await device.issue(opcode, n, **fields)
        status = await device.finish(abort=injector.fired if injector else None)
        cycles = device.now() - started
        # Checked before the failure's oracle sees it: a refused command has not finished.
        assert status is None or status["error"] == ErrorCode.NONE, (n, status, device.error())
        if injector:
            injector.command_finished = status is not None
            if not injector.fired.is_set():
                # The failure lands after the command, while the host computes.
                await injector.fired.wait()
        return injector, cycles

    async def _run_relaxed_batch(self, plan):
        """Batch N with relaxed lookup. LOOKUP(N) ran ahead during batch N - 1 (else it runs
        now, strict: the first batch, or the first after a recovery); the host checks its
        corrected output, runs the MLP and writes the gradient; LOOKUP(N + 1) then runs during
        the GPU's time (deferred by the device), and UPDATE(N) writes batch N's rows and
        corrects it. A plan's "lookup" step is the batch's first LOOKUP: LOOKUP(N) if it runs
        now, else LOOKUP(N + 1) (with its failure the host time that follows, too)."""
        device, preset = self.device, self.preset
        n = self.next_batch
        batch = make_batch(preset, n)
        looked_up_ahead = self._ahead is not None and self._ahead[0] == n
        # The plan's "lookup" is LOOKUP(N) if it runs now, else LOOKUP(N + 1), run ahead.
        ahead_plan = plan if looked_up_ahead else None
        if ahead_plan and ahead_plan.step == "lookup" and n + 1 >= preset.num_batches:
            raise ValueError(f"no LOOKUP in batch {n} to fail in: the run's last batch's "
                             f"LOOKUP ran ahead")
        batch_started = device.now()
        lookup_cycles = 0
        if looked_up_ahead:
            expected = self._ahead[1]
        else:
            await self._stage(batch)
            injector, lookup_cycles = await self._step(
                plan, "lookup", Opcode.LOOKUP, n, self._fields(batch))
            if injector:
                return injector
            expected = pool_embeddings(self.golden.tables[n - 1], batch, preset)
        host_started = device.now()
        update, deltas = await self._host_step(n, batch, expected)
        ahead = None
        if n + 1 < preset.num_batches:
            following = make_batch(preset, n + 1)
            await self._stage(following)
            ahead = cocotb.start_soon(self._step(ahead_plan, "lookup", Opcode.LOOKUP, n + 1,
                                                 self._fields(following)))
        if self.host_gap:
            await wait_cycles(device.dut.clk, self.host_gap)
        if ahead is not None:
            injector, cycles = await ahead
            if injector:
                return injector
            assert device.value("engine_deferred") == 1, "LOOKUP(N + 1) was not deferred"
            lookup_cycles += cycles
        host_cycles = device.now() - host_started
        injector, update_cycles = await self._step(plan, "update", Opcode.UPDATE, n,
                                                   self._fields(batch))
        if injector:
            return injector
        if ahead is not None:
            self._ahead = (n + 1, relaxed_lookup(
                self.golden.tables[n - 1], update.tables, update.updated_rows(),
                following.indices, following.offsets, preset.table_modes,
                following.per_sample_weights, chunk_deltas=deltas).pooled)
        self.batch_cycles.append({"batch": n, "lookup": lookup_cycles, "host": host_cycles,
                                  "update": update_cycles,
                                  "total": device.now() - batch_started})
        return await self._after_update(n, plan)

    async def _after_update(self, n, plan):
        """Batch ``n``'s UPDATE is done: commit bookkeeping and the snapshot."""
        device, layout = self.device, self.layout
        if not self.checkpointing:
            self.golden.prune(n)
            self.next_batch = n + 1
            return None
        assert device.value("last_committed") == n
        self.acknowledged = n
        if is_snapshot_batch(n, self.interval):
            snapshot = self.golden.mlp_after[n]
            # Known before the record is written: recovery may report it from then on.
            self.golden.snapshots[n] = snapshot
            injector = (_Injector(device, plan.delay, plan.on_phase)
                        if plan and plan.step == "snapshot" else None)
            slot = device.value("next_snapshot_slot")
            await device.write(layout.slots[slot], self._mlp_bytes(snapshot),
                               stop=injector.fired if injector else None)
            if not (injector and injector.fired.is_set()):
                await device.issue(Opcode.SNAPSHOT, n)
                status = await device.finish(abort=injector.fired if injector else None)
            if injector:
                if not injector.fired.is_set():
                    await injector.fired.wait()
                return injector
            assert status["error"] == ErrorCode.NONE, (n, status, device.error())
            self.snapshot_acknowledged = n
            for old in [s for s in self.golden.snapshots if s < n]:
                del self.golden.snapshots[old]
        self.golden.prune(n)
        self.next_batch = n + 1
        return None

    # --- failure and recovery ----------------------------------------------------------------
    def _oracle_phase(self, plan: FailurePlan, injector: _Injector) -> Failure:
        """The persistence-contract phase of the device at the failure."""
        n = plan.batch
        phase = injector.phase_at_failure
        if plan.step == "lookup":
            return Failure(n, Phase.LOOKUP)
        if plan.step == "snapshot":
            return Failure(n, Phase.SNAPSHOT)
        # UPDATE(n) in flight, or done: once its status has reached the host, batch n is
        # committed, whatever the device does next (after a relaxed LOOKUP(n + 1) that was not
        # logged ahead, it replays that lookup into n + 1's log at once: phase REPLAY again).
        if not injector.command_finished:
            if phase in (CheckpointPhase.REPLAY, CheckpointPhase.SEAL, CheckpointPhase.FLAG,
                         CheckpointPhase.UPDATE, CheckpointPhase.DRAIN):
                return Failure(n, Phase.UPDATE)
            if phase in (CheckpointPhase.COMMIT, CheckpointPhase.REPLY):
                return Failure(n, Phase.COMMIT)
        # UPDATE(n) finished before the failure: the host was about to go on.
        if is_snapshot_batch(n, self.interval):
            return Failure(n, Phase.SNAPSHOT)
        return Failure(n + 1, Phase.LOOKUP)

    async def fail_and_recover(self, plan: FailurePlan, injector: _Injector) -> TrialResult:
        device = self.device
        failure = self._oracle_phase(plan, injector)
        lost, kept = await device.power_cycle(seed=plan.seed, keep=plan.keep)
        again = False
        if plan.recovery_delay is not None:
            second = _Injector(device, plan.recovery_delay)
            await device.issue(Opcode.RECOVER, 0)
            status = await device.finish(abort=second.fired)
            if status is None:
                again = True
                await device.power_cycle(seed=plan.seed * 7 + 1, keep=plan.keep)
            else:
                second.cancel()
        status = await device.command(Opcode.RECOVER, 0)
        errors = []
        if status["error"] != ErrorCode.NONE:
            errors.append(f"RECOVER failed: {status} {device.error().name}")
        committed = _signed(device.value("last_committed"))
        snapshot = _signed(device.value("snapshot_batch"))
        result = TrialResult(failure, injector.phase_at_failure.name, committed, snapshot,
                             lost, kept, device.value("recovery_cycles"),
                             device.value("restored_entries"), again, errors)
        allowed = acceptable_recovery(failure, self.interval)
        if committed not in allowed.committed:
            errors.append(f"last committed {committed} not in {allowed.committed}")
        # The oracle's snapshot rule on this path: the newest snapshot acknowledged to the host
        # (the oracle's S(N - 1) when this is the run's first failure; an earlier failure may
        # have lost a snapshot, and training does not redo it), or N if its record was being
        # written.
        snapshots = {self.snapshot_acknowledged}
        if failure.phase is Phase.SNAPSHOT:
            snapshots.add(failure.batch)
        if snapshot not in snapshots:
            errors.append(f"snapshot {snapshot} not in {sorted(snapshots)} (oracle, first "
                          f"failure: {allowed.snapshot})")
        if errors:
            return result
        errors.extend(await self.check_memory(committed, snapshot))
        self.snapshot_acknowledged = snapshot
        self.golden.rewind(committed, snapshot)
        self.next_batch = committed + 1
        self._ahead = None   # RECOVER forgot a deferred LOOKUP: the next one runs strict
        self.recovered.append(result)
        return result

    async def check_memory(self, committed: int, snapshot: int) -> list[str]:
        """Tables as after ``committed`` and the newest slot holding snapshot ``snapshot``."""
        errors = []
        for t, (want, base) in enumerate(zip(self.golden.tables[committed],
                                             self.layout.table_bases, strict=True)):
            raw = await self.device.read(base, want.nbytes)
            got = np.frombuffer(raw, dtype="<f4").reshape(want.shape)
            differ = got.view(np.uint32) != want.view(np.uint32)
            if differ.any():
                row, lane = (int(i) for i in np.argwhere(differ)[0])
                errors.append(f"table {t}: {int(differ.any(axis=1).sum())} rows differ from "
                              f"the state after batch {committed}; first row {row} lane {lane}")
        slot = self.device.value("snapshot_slot")
        want = self._mlp_bytes(self.golden.snapshots[snapshot])
        got = await self.device.read(self.layout.slots[slot], len(want))
        if got != want:
            errors.append(f"snapshot slot {slot} does not hold the MLP of batch {snapshot}")
        return errors

    async def table_state(self) -> list[np.ndarray]:
        out = []
        for base, rows in zip(self.layout.table_bases, self.preset.table_rows, strict=True):
            raw = await self.device.read(base, rows * self.preset.dim * 4)
            out.append(np.frombuffer(raw, dtype="<f4").reshape(rows, self.preset.dim).copy())
        return out


def random_plan(draw: random.Random, batch: int, interval: int, *, step=None,
                during_recovery=None) -> FailurePlan:
    """A seeded failure point in ``batch``: the step, a delay that lands inside it or in the
    host's time after it, tearing odds, and sometimes a second failure during recovery."""
    if step is None:
        if is_snapshot_batch(batch, interval):
            step = draw.choice(["lookup", "update", "snapshot", "snapshot"])
        else:
            step = draw.choice(["lookup", "update", "update"])
    delay = {"lookup": draw.randrange(0, 900), "update": draw.randrange(0, 2500),
             "snapshot": draw.randrange(0, 160)}[step]
    keep = draw.choice([0, 64, 128, 192, 255])
    if during_recovery is None:
        during_recovery = draw.random() < 0.35
    # A recovery with nothing to roll back takes about 70 cycles; one that restores rows,
    # several hundred.
    recovery_delay = draw.choice([draw.randrange(0, 70), draw.randrange(70, 700)])
    return FailurePlan(batch, step, delay, draw.randrange(1, 2**31), keep,
                       recovery_delay if during_recovery else None)
