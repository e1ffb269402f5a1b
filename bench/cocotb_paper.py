"""cocotb side of the paper-style benchmark (``python -m bench paper``), on
:data:`tb.ckpt.designs.PAPER_SYSTEM` (or another channel count, ``--channels``): the same
preset's batches in every mode that exists in RTL, on one memory (every channel a PMEM model
with the same timing profile).

* ``nmp``: near-memory lookup and update, checkpointing off (``logging_enable`` clear);
* ``nmp_log_on_lookup``: the checkpoint engine on (log-on-lookup undo log, batch flag, gated
  in-place writes, commit record) and relaxed MLP snapshots every K batches;
* ``nmp_sync_log`` and ``nmp_log_after_lookup``: the same with ``CKPT_CONTROL.log_mode``
  AT_UPDATE and AFTER_LOOKUP (:data:`bench.paper.LOGGING_MODES`);
* ``host_gather``: the device's engines idle; the host reads every row the batch needs over the
  CXL.mem link (:class:`sim.host_link.HostLink`, one line per cycle each way at most), pools
  and updates at a stated rate, copies the touched rows to a log region and writes a flag
  (persistent) before writing the rows back in place, then a commit record. With several
  rates it runs once per rate (``host_rate_sweep``); the first is the baseline.

Every mode waits the same ``gpu_cycles`` between the pooled output and the gradient (the GPU's
MLP forward and backward). Then a power failure in an UPDATE and the device's RECOVER, and the
full-checkpoint reload through the link (read every table line from a checkpoint region, write
it in place) for comparison.

Specification from ``$BENCH_SPEC``, raw results to ``$BENCH_RESULT`` (JSON).
"""

import json
import os
import random
import time

import cocotb
import numpy as np
from cocotb.triggers import FallingEdge, RisingEdge
from cocotb.utils import get_sim_time

from bench.paper import LOGGING_MODES, RELAXED_MODES
from hw.ckpt.layouts import CheckpointPhase, LogMode
from hw.emb.layouts import LINE_BYTES
from sim.pmem import PROFILES
from sim.rtl import design_from_env
from sw_model.data import make_batch
from sw_model.presets import get_preset
from tb.ckpt.host import Device, FailurePlan, MemoryMap, Trainer
from tb.common import CLOCK_PERIOD_NS, reset, start_clock, wait_cycles

OP_READ_ROWS, OP_WRITE_ROWS, OP_READ_LINES, OP_WRITE_LINES = 0, 1, 2, 3


def _lines(nbytes: int) -> int:
    return -(-nbytes // LINE_BYTES)


def spec_preset(spec):
    return get_preset(spec["base"]).replace(name=spec["preset"], **{
        k: tuple(v) if isinstance(v, list) else v for k, v in spec["changes"].items()})


class Link:
    """Drives the host link ports of the paper system (one command at a time)."""

    def __init__(self, dut):
        self.dut = dut
        dut.link_start.value = 0
        dut.link_desc_we.value = 0
        dut.host_select.value = 0

    async def descriptors(self, addresses):
        dut = self.dut
        for k, address in enumerate(addresses):
            dut.link_desc_addr.value = k
            dut.link_desc_data.value = int(address)
            dut.link_desc_we.value = 1
            await RisingEdge(dut.clk)
        dut.link_desc_we.value = 0

    async def command(self, op, count, row_lines, *, base=0, buf_base=0):
        dut = self.dut
        dut.link_op.value = op
        dut.link_count.value = count
        dut.link_row_lines.value = row_lines
        dut.link_base.value = base
        dut.link_buf_base.value = buf_base
        dut.link_start.value = 1
        await RisingEdge(dut.clk)
        dut.link_start.value = 0
        await RisingEdge(dut.clk)  # Prime: busy is high from here
        if dut.link_busy.value:
            await FallingEdge(dut.link_busy)

    def lines(self):
        return int(self.dut.link_lines_read.value), int(self.dut.link_lines_written.value)


def _pmem_beats(dut):
    """The PMEM model's free-running (read, write) data-beat counters."""
    return int(dut.read_beats.value), int(dut.write_beats.value)


def _beats_since(dut, before, batches):
    """PMEM lines read and written per batch since ``before`` (counters wrap at 2**32)."""
    now = _pmem_beats(dut)
    return {"pmem_lines_read_per_batch": ((now[0] - before[0]) % 2**32) / batches,
            "pmem_lines_written_per_batch": ((now[1] - before[1]) % 2**32) / batches}


def _nmp_link_lines(preset, batch):
    """Lines the host moves over CXL.mem per batch in the near-memory modes: indices,
    offsets (and weights) in, pooled output out, gradient in."""
    written = (_lines(batch.indices.size * 4) + _lines(batch.offsets.size * 4)
               + (_lines(batch.indices.size * 4) if batch.per_sample_weights is not None else 0)
               + _lines(preset.batch_size * preset.num_tables * preset.dim * 4))
    read = _lines(preset.batch_size * preset.num_tables * preset.dim * 4)
    return read, written


async def run_host_gather(device, link, preset, layout, spec, rate):
    """The host-gather baseline, one batch at a time (module docstring), with the host
    pooling and updating ``rate`` floats per cycle."""
    dut = device.dut
    row_lines = preset.dim // 16
    row_bytes = preset.dim * 4
    batches = []
    dut.host_select.value = 1
    for n in range(preset.num_batches):
        batch = make_batch(preset, n)
        rows = [layout.table_bases[t] + int(r) * row_bytes
                for t, idx in enumerate(batch.table_indices) for r in np.unique(idx)]
        occurrences = int(batch.indices.size)
        unique = len(rows)
        # The host knows the batch's rows from its indices (as the device does from the
        # staged indices): the address list is written before the batch starts.
        await link.descriptors(rows)
        read0, written0 = link.lines()
        started = device.now()
        await link.command(OP_READ_ROWS, unique, row_lines)
        gathered = device.now()
        pool_cycles = -(-occurrences * preset.dim // rate)
        await wait_cycles(dut.clk, pool_cycles)
        await wait_cycles(dut.clk, spec["gpu_cycles"])
        # Gradient of every occurrence summed per row, then SGD (mul + sub) per unique row.
        update_cycles = -(-(occurrences + 2 * unique) * preset.dim // rate)
        await wait_cycles(dut.clk, update_cycles)
        host_done = device.now()
        # Checkpoint by copying: the old rows (held since the gather) to the log, persistent;
        # the batch flag; only then the rows in place; then the commit record.
        await link.command(OP_WRITE_LINES, unique, row_lines, base=layout.log)
        await link.command(OP_WRITE_LINES, 1, 1, base=layout.meta)
        logged = device.now()
        await link.command(OP_WRITE_ROWS, unique, row_lines)
        await link.command(OP_WRITE_LINES, 1, 1, base=layout.meta + LINE_BYTES)
        finished = device.now()
        read1, written1 = link.lines()
        batches.append({"batch": n, "gather": gathered - started,
                        "host_pool": pool_cycles, "gpu": spec["gpu_cycles"],
                        "host_update": update_cycles, "log_copy": logged - host_done,
                        "write_back": finished - logged, "total": finished - started,
                        "occurrences": occurrences, "unique_rows": unique,
                        "link_lines_read": read1 - read0,
                        "link_lines_written": written1 - written0})
        dut._log.info("host_gather batch %d: %d cycles (%d unique rows of %d)", n,
                      finished - started, unique, occurrences)
    dut.host_select.value = 0
    return batches


@cocotb.test()
async def measure(dut):
    spec = json.loads(open(os.environ["BENCH_SPEC"]).read())
    params = design_from_env().params
    device = Device(dut, addr_width=params["addr_width"], max_tables=params["max_tables"],
                    num_regions=params["num_regions"])
    link = Link(dut)
    start_clock(dut)
    await reset(dut)
    out = {"presets": {}}
    for preset_spec in spec["presets"]:
        out["presets"][preset_spec["preset"]] = await measure_preset(
            dut, device, link, params, {**spec, **preset_spec})
        # Written after every preset, so a long run leaves what it has measured.
        with open(os.environ["BENCH_RESULT"], "w") as f:
            json.dump(out, f, indent=1)


async def measure_preset(dut, device, link, params, spec):
    preset = spec_preset(spec).replace(num_batches=spec["batches"])
    layout = MemoryMap.for_preset(preset, Trainer.mlp_floats(preset))
    memory_bytes = params["memory_lines"] * LINE_BYTES
    table_lines = sum(preset.table_rows) * preset.dim // 16
    # The full checkpoint's region: after everything else, or (when PMEM is too small for
    # that) the undo log's area; the model's timing does not depend on the address.
    reload_source = layout.end
    if reload_source + table_lines * LINE_BYTES > memory_bytes:
        assert table_lines * LINE_BYTES <= layout.log_size, "PMEM too small"
        reload_source = layout.log
    results = {"preset": preset.name, "modes": {}, "profile": spec["profile"]}
    wall = time.monotonic()
    first_ns = get_sim_time("ns")
    for mode in spec["modes"]:
        checkpointing = mode in LOGGING_MODES
        relaxed = mode in RELAXED_MODES
        device.configure(preset, layout, memory_bytes, logging=checkpointing,
                         log_mode=LogMode[LOGGING_MODES.get(mode, "ON_LOOKUP")],
                         relaxed=relaxed)
        device.set_profile(spec["profile"])
        if mode == "host_gather":
            # One run per host rate (the same batches); the first is the baseline the other
            # modes are compared with, all of them the host-rate sweep.
            sweep = []
            for rate in spec["host_floats_per_cycle"]:
                started_wall, started = time.monotonic(), device.now()
                beats = _pmem_beats(dut)
                batches = await run_host_gather(device, link, preset, layout, spec, rate)
                sweep.append({
                    "host_floats_per_cycle": rate, "batches": batches,
                    "cycles": device.now() - started,
                    "seconds": time.monotonic() - started_wall,
                    **_beats_since(dut, beats, len(batches))})
            results["modes"][mode] = sweep[0]
            if len(sweep) > 1:
                results["host_rate_sweep"] = sweep
            continue
        await device.write(layout.meta, bytes(8 * LINE_BYTES))
        trainer = Trainer(device, preset, layout, max_unique_rows=params["max_unique_rows"],
                          checkpointing=checkpointing, host_gap=spec["gpu_cycles"],
                          relaxed=relaxed)
        await trainer.load_initial()
        before = device.counters()
        beats = _pmem_beats(dut)
        started_wall, started = time.monotonic(), device.now()
        while trainer.next_batch < preset.num_batches:
            assert await trainer.run_batch() is None
        after = device.counters()
        link_lines = [_nmp_link_lines(preset, make_batch(preset, b["batch"]))
                      for b in trainer.batch_cycles]
        for b, (read, written) in zip(trainer.batch_cycles, link_lines, strict=True):
            b["link_lines_read"], b["link_lines_written"] = read, written
            b["occurrences"] = int(make_batch(preset, b["batch"]).indices.size)
        results["modes"][mode] = {
            "batches": trainer.batch_cycles,
            "counters": {k: after[k] - before[k] for k in after},
            "cycles": device.now() - started, "seconds": time.monotonic() - started_wall,
            **_beats_since(dut, beats, preset.num_batches),
            # MLP snapshots (host writes of a slot + SNAPSHOT) happen after a batch's UPDATE,
            # outside the batch window: counted here, amortised per batch by the report.
            "snapshot_lines_per_k": _lines(Trainer.mlp_floats(preset) * 4)
            if checkpointing else 0,
        }
        dut._log.info("%s: %d cycles for %d batches", mode, device.now() - started,
                      preset.num_batches)
    if spec.get("recovery", True):
        trainer = Trainer(device, preset, layout, max_unique_rows=params["max_unique_rows"])
        await device.write(layout.meta, bytes(8 * LINE_BYTES))
        device.configure(preset, layout, memory_bytes)
        device.set_profile(spec["profile"])
        await trainer.load_initial()
        recovery_batch = min(1, preset.num_batches - 1)
        for _ in range(recovery_batch):
            assert await trainer.run_batch() is None
        draw = random.Random(spec["seed"])
        plan = FailurePlan(batch=recovery_batch, step="update", delay=draw.randrange(150, 400),
                           seed=draw.randrange(1, 2**31), on_phase=CheckpointPhase.UPDATE)
        injector = await trainer.run_batch(plan)
        result = await trainer.fail_and_recover(plan, injector)
        assert not result.errors, result.errors
        device.set_profile(spec["profile"])
        # Reloading a full checkpoint: every table line read from a checkpoint region and
        # written in place, through the host link, in chunks of the host buffer.
        dut.host_select.value = 1
        started = device.now()
        chunk = params["host_link"]["buffer_lines"]
        done = 0
        while done < table_lines:
            lines = min(chunk, table_lines - done)
            await link.command(OP_READ_LINES, lines, 1, base=reload_source + done * LINE_BYTES)
            await link.command(OP_WRITE_LINES, lines, 1, base=done * LINE_BYTES)
            done += lines
        reload_cycles = device.now() - started
        dut.host_select.value = 0
        results["recovery"] = {
            "batch": plan.batch, "recovery_cycles": result.recovery_cycles,
            "restored_entries": result.restored_entries, "table_lines": table_lines,
            "full_reload_cycles": reload_cycles,
        }
    results["simulated_cycles"] = int((get_sim_time("ns") - first_ns) // CLOCK_PERIOD_NS)
    results["wall_seconds"] = time.monotonic() - wall
    results["profile_timing"] = PROFILES[spec["profile"]].inputs()
    return results
