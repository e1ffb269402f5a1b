"""The host (GPU) side of DLRM training on the device: NumPy MLPs here, embeddings on the device.

One batch N, as in DESIGN.md section 2::

    host                                              device
    ----                                              ------
    (indices, offsets, weights of N are staged)
    ring LOOKUP(N) ----------------------------------> gather + pool into the output buffer
    read the pooled vectors (CXL.mem reads) <--------- completion
    MLP forward + backward (NumPy)
    GPU compute: wait ``gpu_cycles`` clock cycles,
      meanwhile stage batch N+1 (CXL.mem writes)
    write d(loss)/d(pooled) (CXL.mem writes)
    ring UPDATE(N) ----------------------------------> sparse SGD of the looked-up rows
    MLP SGD step                      <--------------- completion
    every K-th batch, with checkpointing:
    write the MLP parameters into the snapshot
    slot the device names (CXL.mem writes)
    ring SNAPSHOT(N) --------------------------------> the slot's completion record

Staging uses two slots (batch parity), so batch N+1's inputs can be written while batch N's
UPDATE still needs its own. All device traffic goes through the CXL.mem host model
(:class:`~tb.host.cxl_mem.CxlMemHost`) and the register driver
(:class:`~tb.host.driver.DeviceDriver`); nothing touches device memory behind their backs.
Times are clock cycles of the simulation, measured per phase.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import cocotb
import numpy as np
from cocotb.simtime import get_sim_time

from hw.ckpt.layouts import LogMode
from hw.emb.layouts import LINE_BYTES, Opcode, PoolingMode
from sw_model.checkpoint import is_snapshot_batch
from sw_model.data import Batch, make_batch
from sw_model.dlrm import MLPParams, bce_loss, dense_backward, dense_forward, sgd_step
from sw_model.presets import Preset
from tb.common import CLOCK_PERIOD_NS, wait_cycles
from tb.host.driver import NO_BATCH, DeviceDriver, RecoveryReport, TableConfig

__all__ = ["BatchTiming", "HostTrainer", "MemoryPlan", "StagingSlot", "mlp_parameters"]

_PAGE = 4096
_MODES = {"sum": PoolingMode.SUM, "mean": PoolingMode.MEAN, "weighted": PoolingMode.WEIGHTED}


def _align(value: int, alignment: int) -> int:
    return -(-value // alignment) * alignment


def _padded(raw: bytes) -> bytes:
    """Whole lines (CXL.mem writes are 64-byte lines)."""
    return raw + bytes(_align(len(raw), LINE_BYTES) - len(raw))


@dataclass(frozen=True)
class StagingSlot:
    """Device addresses of one batch's buffers."""

    indices: int
    offsets: int
    weights: int
    output: int     # pooled output (LOOKUP)
    gradient: int   # gradient of the pooled output (UPDATE)


@dataclass(frozen=True)
class MemoryPlan:
    """Where everything lives in device memory (DPA): the tables from 0, then the staging
    region (two slots), then the rest of memory, reserved for checkpointing: the metadata
    (4 KiB), the two MLP snapshot slots, the undo log (two areas, each big enough for a batch
    that touches a different line at every index). Regions are ``(base, size)``."""

    table_bases: tuple[int, ...]
    tables_region: tuple[int, int]     # engine region 0
    staging_region: tuple[int, int]    # engine region 1
    slots: tuple[StagingSlot, StagingSlot]
    reserved_region: tuple[int, int]   # everything below, and the rest of memory
    meta_region: tuple[int, int]
    snapshot_regions: tuple[tuple[int, int], tuple[int, int]]
    log_region: tuple[int, int]

    @classmethod
    def for_preset(cls, preset: Preset, memory_bytes: int) -> MemoryPlan:
        row_bytes = preset.dim * 4
        bases, cursor = [], 0
        for rows in preset.table_rows:
            bases.append(cursor)
            cursor = _align(cursor + rows * row_bytes, LINE_BYTES)
        tables_end = _align(cursor, _PAGE)
        max_indices = preset.batch_size * preset.num_tables * max(preset.max_bag, 1)
        sizes = {
            "indices": _align(4 * max_indices, LINE_BYTES),
            "offsets": _align(4 * (preset.batch_size * preset.num_tables + 1), LINE_BYTES),
            "weights": _align(4 * max_indices, LINE_BYTES),
            "output": _align(preset.batch_size * preset.num_tables * row_bytes, LINE_BYTES),
            "gradient": _align(preset.batch_size * preset.num_tables * row_bytes, LINE_BYTES),
        }
        slots, cursor = [], tables_end
        for _ in range(2):
            addresses = {}
            for name, size in sizes.items():
                addresses[name] = cursor
                cursor += size
            slots.append(StagingSlot(**addresses))
        staging_end = _align(cursor, _PAGE)
        meta = (staging_end, _PAGE)
        snapshot_bytes = _align(4 * mlp_parameters(preset), _PAGE)
        snapshots = ((meta[0] + meta[1], snapshot_bytes),
                     (meta[0] + meta[1] + snapshot_bytes, snapshot_bytes))
        # A log entry is one table line, a group holds 7 entries in 8 lines (hw/ckpt/layouts).
        entries = max_indices * (preset.dim // 16)
        area = -(-entries // 7) * 8 * LINE_BYTES
        log = (snapshots[1][0] + snapshot_bytes, _align(2 * area, _PAGE))
        end = log[0] + log[1]
        if end > memory_bytes:
            raise ValueError(f"preset {preset.name!r} needs {end} bytes of device memory; the "
                             f"device has {memory_bytes}")
        return cls(tuple(bases), (0, tables_end), (tables_end, staging_end - tables_end),
                   (slots[0], slots[1]), (staging_end, memory_bytes - staging_end),
                   meta, snapshots, log)


@dataclass
class BatchTiming:
    """Clock cycles of one batch's phases (``total`` from LOOKUP's doorbell to UPDATE's
    completion, staging of the next batch overlapped with the GPU phase)."""

    lookup: int = 0
    read_pooled: int = 0
    gpu: int = 0
    write_gradient: int = 0
    update: int = 0
    snapshot: int = 0    # writing the MLP snapshot and SNAPSHOT(N), when taken
    total: int = 0


@dataclass
class BatchResult:
    number: int
    loss: float
    pooled: np.ndarray
    timing: BatchTiming = field(default_factory=BatchTiming)


def mlp_parameters(preset: Preset) -> int:
    """float32 parameters of the preset's two MLPs (weights and biases)."""
    total = 0
    for widths in (preset.bottom_widths, preset.top_widths):
        total += sum(i * o + o for i, o in itertools.pairwise(widths))
    return total


def now_cycles() -> int:
    return int(get_sim_time("ns")) // CLOCK_PERIOD_NS


class HostTrainer:
    """Trains ``preset`` with the embeddings on the device (module docstring).

    ``host``: a :class:`~tb.host.cxl_mem.CxlMemHost`; ``driver``: a configured
    :class:`~tb.host.driver.DeviceDriver`; ``hpa_base``: the HPA at which DPA 0 appears
    (one-way HDM decoder); ``gpu_cycles``: cycles the GPU computes per batch.
    """

    def __init__(self, preset: Preset, *, host, driver: DeviceDriver, plan: MemoryPlan,
                 hpa_base: int, clock, gpu_cycles: int = 0):
        if not isinstance(gpu_cycles, int) or gpu_cycles < 0:
            raise ValueError(f"GPU cycles must be a non-negative integer, not {gpu_cycles!r}")
        self.preset = preset
        self.host = host
        self.driver = driver
        self.plan = plan
        self.hpa_base = hpa_base
        self.clock = clock
        self.gpu_cycles = gpu_cycles
        self.mlp: MLPParams | None = None
        self._staged: dict[int, Batch] = {}
        #: Take MLP snapshots every K batches (needs the checkpoint engine, attached).
        self.snapshots = False

    @property
    def checkpointing(self) -> bool:
        """The device has the checkpoint engine (from ``identify``)."""
        return bool(self.driver.capabilities.get("checkpointing"))

    def hpa(self, dpa: int) -> int:
        return self.hpa_base + dpa

    # --- setup ----------------------------------------------------------------------------
    async def configure(self, *, logging: bool = True,
                        log_mode: LogMode = LogMode.ON_LOOKUP) -> None:
        """Table descriptors, engine regions, learning rate. With checkpointing: its regions
        (the device closes metadata and log to the host), interval K, ``logging`` and
        ``log_mode`` (when the undo log is taken, ``CKPT_CONTROL.log_mode``);
        without: the whole reserved region closed to the host."""
        p, plan = self.preset, self.plan
        mode = _MODES[p.pooling]
        await self.driver.configure_tables([
            TableConfig(base, rows, p.dim, mode)
            for base, rows in zip(plan.table_bases, p.table_rows, strict=True)])
        await self.driver.configure_regions([plan.tables_region, plan.staging_region])
        await self.driver.set_learning_rate(p.lr)
        if self.checkpointing:
            await self.driver.configure_checkpoint(
                meta=plan.meta_region, log=plan.log_region, snapshots=plan.snapshot_regions,
                interval=p.snapshot_interval, logging=logging, log_mode=log_mode)
            await self.driver.protect([])
        else:
            await self.driver.protect([plan.reserved_region])

    # --- checkpointing -------------------------------------------------------------------------
    async def attach(self) -> RecoveryReport:
        """RECOVER: format fresh memory, or roll back to the last committed batch."""
        return await self.driver.recover()

    async def erase_checkpoint_state(self) -> None:
        """Zero the checkpoint metadata, so that the next RECOVER formats (a factory reset:
        memory is persistent, so an earlier run's state would otherwise be found). The region
        is closed to the host, so this opens it with CONTROL.debug_unlock for the writes."""
        base, size = self.plan.meta_region
        await self.driver.set_control(debug_unlock=1)
        await self.host.write(self.hpa(base), bytes(size))
        await self.driver.set_control(debug_unlock=0)

    async def write_snapshot(self, slot: int) -> None:
        """The MLP parameters (snapshot order, float32) into snapshot slot ``slot``."""
        raw = np.ascontiguousarray(self.mlp.flat(), dtype="<f4").tobytes()
        await self.host.write(self.hpa(self.plan.snapshot_regions[slot][0]), _padded(raw))

    async def read_snapshot(self, slot: int, template: MLPParams) -> MLPParams:
        """The MLP parameters in snapshot slot ``slot`` (shapes from ``template``)."""
        count = template.flat().size
        raw = await self.host.read(self.hpa(self.plan.snapshot_regions[slot][0]),
                                   _align(4 * count, LINE_BYTES))
        flat = np.frombuffer(raw, dtype="<f4")[:count]
        arrays, start = [], 0
        for array in template.arrays():
            arrays.append(flat[start:start + array.size].reshape(array.shape).copy())
            start += array.size
        return template.with_arrays(arrays)

    async def snapshot(self, number: int) -> None:
        """Write the MLP into the slot the device names, then SNAPSHOT(number); ``number`` -1
        seals the initial parameters."""
        slot = (await self.driver.read("CKPT_STATUS"))["next_snapshot_slot"]
        await self.write_snapshot(slot)
        await self.driver.run(Opcode.SNAPSHOT, batch=NO_BATCH if number == -1 else number)

    async def load(self, tables: list[np.ndarray], mlp: MLPParams) -> None:
        """Write the tables into device memory (CXL.mem) and take the MLP parameters."""
        for base, table in zip(self.plan.table_bases, tables, strict=True):
            await self.host.write(self.hpa(base), _padded(np.ascontiguousarray(
                table, dtype="<f4").tobytes()))
        self.mlp = mlp.copy()

    async def read_table(self, t: int) -> np.ndarray:
        rows = self.preset.table_rows[t]
        raw = await self.host.read(self.hpa(self.plan.table_bases[t]),
                                   _align(rows * self.preset.dim * 4, LINE_BYTES))
        return np.frombuffer(raw, dtype="<f4")[:rows * self.preset.dim].reshape(
            rows, self.preset.dim).copy()

    async def read_rows(self, t: int, rows) -> np.ndarray:
        """Rows ``rows`` of table ``t`` (one CXL.mem read per line, concurrently)."""
        row_bytes = self.preset.dim * 4
        base = self.hpa(self.plan.table_bases[t])
        tasks = [cocotb.start_soon(self.host.read(base + int(r) * row_bytes, row_bytes))
                 for r in rows]
        return np.stack([np.frombuffer(await task, dtype="<f4") for task in tasks]) \
            if tasks else np.zeros((0, self.preset.dim), np.float32)

    # --- one batch ----------------------------------------------------------------------------
    def forget_staged(self) -> None:
        """Drop batches staged ahead (after a power failure training resumes elsewhere)."""
        self._staged.clear()

    def slot(self, number: int) -> StagingSlot:
        return self.plan.slots[number % 2]

    async def stage(self, number: int) -> Batch:
        """Write batch ``number``'s indices, offsets (and weights) into its staging slot."""
        batch = make_batch(self.preset, number)
        slot = self.slot(number)
        buffers = [(slot.indices, batch.indices.astype("<u4").tobytes()),
                   (slot.offsets, batch.offsets.astype("<u4").tobytes())]
        if batch.per_sample_weights is not None:
            buffers.append((slot.weights, batch.per_sample_weights.astype("<f4").tobytes()))
        tasks = [cocotb.start_soon(self.host.write(self.hpa(address), _padded(raw)))
                 for address, raw in buffers if raw]   # a batch may have no index at all
        for task in tasks:
            await task
        self._staged[number] = batch
        return batch

    def _command(self, number: int, batch: Batch, output: int) -> dict:
        slot = self.slot(number)
        return {"batch": number, "bags": self.preset.batch_size,
                "tables": self.preset.num_tables, "num_indices": int(batch.indices.size),
                "indices": slot.indices, "offsets": slot.offsets, "weights": slot.weights,
                "output": output}

    async def train_batch(self, number: int, *, stage_next: bool = True) -> BatchResult:
        """Run batch ``number`` (staged already, or staged now) and stage ``number + 1`` in
        the GPU phase when ``stage_next``."""
        if self.mlp is None:
            raise RuntimeError("load() the initial state first")
        if number not in self._staged:
            await self.stage(number)
        batch = self._staged.pop(number)
        slot, p = self.slot(number), self.preset
        timing = BatchTiming()
        start = now_cycles()

        await self.driver.run(Opcode.LOOKUP, **self._command(number, batch, slot.output))
        mark = now_cycles()
        timing.lookup = mark - start

        row_floats = p.num_tables * p.dim
        raw = await self.host.read(self.hpa(slot.output), _align(
            p.batch_size * row_floats * 4, LINE_BYTES))
        pooled = np.frombuffer(raw, dtype="<f4")[:p.batch_size * row_floats].reshape(
            p.batch_size, row_floats).copy()
        timing.read_pooled = now_cycles() - mark

        forward = dense_forward(self.mlp, batch.dense, pooled, p.interaction)
        loss = float(bce_loss(forward.probs, batch.labels))
        grads, d_pooled = dense_backward(self.mlp, forward, batch.labels)

        mark = now_cycles()
        gpu = [cocotb.start_soon(wait_cycles(self.clock, self.gpu_cycles))] \
            if self.gpu_cycles else []
        if stage_next:
            gpu.append(cocotb.start_soon(self.stage(number + 1)))
        for task in gpu:
            await task
        timing.gpu = now_cycles() - mark

        mark = now_cycles()
        await self.host.write(self.hpa(slot.gradient), _padded(
            np.ascontiguousarray(d_pooled, dtype="<f4").tobytes()))
        timing.write_gradient = now_cycles() - mark

        mark = now_cycles()
        await self.driver.run(Opcode.UPDATE, **self._command(number, batch, slot.gradient))
        timing.update = now_cycles() - mark
        self.mlp = sgd_step(self.mlp, grads, p.lr)
        if self.snapshots and is_snapshot_batch(number, p.snapshot_interval):
            mark = now_cycles()
            await self.snapshot(number)
            timing.snapshot = now_cycles() - mark
        timing.total = now_cycles() - start
        return BatchResult(number, loss, pooled, timing)
