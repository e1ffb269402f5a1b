"""The TrainingCXL device: CXL.mem front end, registers, embedding engine and memory arbiter.

::

    CXL.mem M2S Req/RwD ──> CxlMemFrontEnd ──(host AXI)────────────┐
    CXL.mem S2M NDR/DRS <──        ^ HDM decoders, protection       │
                                   │                                ├─> AxiArbiter ─> mem[0..N-1]
    AXI4-Lite (CXL.io BAR) ─> CsrBank (hw/device_regs.py)           │   (lines interleaved
                                   │ CMD_* + DOORBELL                │    on bits [7:6])
                                   v                                │
                       command queue ─> EmbeddingEngine ─(engine AXI)┘
                       completion queue <─┘   (LOOKUP, UPDATE)

Commands. ``DOORBELL`` pushes the command held in the ``CMD_*`` registers into a queue of
``command_queue_depth``; the engine runs one command at a time, in order, and each status goes
into a queue of ``completion_queue_depth`` with its sequence number (the command's submission
number), where the host reads and pops it. So the host can queue the next batch's LOOKUP
while the current UPDATE runs. A full completion queue holds the engine's next status back.

Host errors. The front end's sticky error flags are kept clear (``clear_errors`` held high), so
each flag is a one-cycle pulse per event, and the sticky, write-1-to-clear copy lives in the
``ERRORS`` register instead; the front end's counters are read through ``HOST_*``.

Checkpointing. With ``checkpointing=True`` the CheckpointEngine (``hw/ckpt/engine.py``) sits
between the command queue and the embedding engine and between the engine's AXI port and the
arbiter (it handles SNAPSHOT and RECOVER itself, and its own log, flag and record writes share
the engine's arbiter port). Its regions come from the ``CKPT_*`` registers; the metadata and
log regions are closed to the host by two extra protected ranges of the front end (the
snapshot slots stay open: the host writes the MLP parameters there). ``gpf`` (power-fail
warning) goes to it, ``gpf_done`` reports the drain. Without the module in the tree, asking
for checkpointing is an error.
Relaxed lookup. ``CONTROL.relaxed_lookup`` lets a LOOKUP run before the UPDATE of the batch
before it (``EmbeddingEngine.relaxed``): the engine defers it and that UPDATE corrects its
output; ``STATUS.lookup_deferred`` shows one waiting. With checkpointing the bit goes to the
CheckpointEngine, which accepts only LOOKUP(N + 1) after LOOKUP(N) so, does not log its stale
reads, and replays it into the log once UPDATE(N) commits.
"""

import importlib.util

from amaranth.hdl import Cat, Module, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from hw.csr import CsrBank
from hw.cxl.frontend import COUNTERS as HOST_COUNTERS
from hw.cxl.frontend import ERRORS as HOST_ERRORS
from hw.cxl.frontend import CxlMemFrontEnd, protected_region_layout
from hw.cxl.hdm import HDM_DECODER
from hw.cxl.messages import M2S_REQ, M2S_RWD, S2M_DRS, S2M_NDR, struct_value
from hw.device_regs import (
    CHECKPOINT_COUNTERS,
    CYCLE_COUNTER_WIDTH,
    ENGINE_COUNTER_WIDTH,
    ENGINE_COUNTERS,
    MAGIC,
    VERSION,
    RegisterConfig,
    device_register_map,
    wide_words,
)
from hw.emb.engine import EmbeddingEngine
from hw.emb.layouts import ErrorCode, command_layout, region_layout, status_layout, table_layout
from hw.mem.arbiter import AxiArbiter
from hw.mem.axi import AXI4LiteSignature, AXI4Signature
from hw.mem.interleave import channel_bits

__all__ = ["TrainingCxlDevice", "checkpoint_engine_available", "device_params"]

#: Arbiter managers, in port order.
HOST_PORT, ENGINE_PORT = 0, 1
SEQUENCE_WIDTH = 16
MAX_QUEUE_DEPTH = 16


def checkpoint_engine_available() -> bool:
    """Whether ``hw/ckpt/engine.py`` exists (it is built concurrently with this top)."""
    try:
        return importlib.util.find_spec("hw.ckpt.engine") is not None
    except ModuleNotFoundError:   # no hw/ckpt package yet
        return False


def _checkpoint_engine_class():
    from hw.ckpt.engine import CheckpointEngine

    return CheckpointEngine


def _pow2_at_least(value: int, minimum: int) -> int:
    return 1 << ceil_log2(max(value, minimum))


def device_params(preset, *, channels: int = 4, checkpointing: bool | None = None) -> dict:
    """The device configuration of a preset (``hw/tops.py`` and the testbenches use it): tables
    and dims from the preset, on-chip buffers sized so that one batch is read once, four
    memory channels as in the paper's prototype (four memory controllers), and a
    memory of ``2**addr_width`` bytes with room for the tables twice over plus 64 KiB (staging
    buffers, undo logs and MLP snapshots). Memory is kept small on purpose: the simulation
    model's contents are initialised in the generated Verilog, which costs build time.
    ``checkpointing`` None: with the checkpoint engine when ``hw/ckpt/engine.py`` exists."""
    if checkpointing is None:
        checkpointing = checkpoint_engine_available()
    table_bytes = sum(preset.table_rows) * preset.dim * 4
    indices = preset.batch_size * preset.num_tables * preset.max_bag
    return {
        "max_tables": preset.num_tables,
        "max_dim": preset.dim,
        "num_regions": 2,
        "addr_width": max(16, ceil_log2(2 * table_bytes + (1 << 16))),
        "channels": channels,
        "reorder_depth": 32,   # reads in flight per arbiter port: covers the engine's 32
        "id_width": 6,
        "outstanding_reads": 32,
        "index_buffer_depth": _pow2_at_least(indices, 32),
        "offset_buffer_depth": _pow2_at_least(preset.batch_size * preset.num_tables + 1, 32),
        "output_buffer_depth": 16,
        "bag_slots": 16,
        "max_unique_rows": 32,
        "update_outstanding_reads": 8,
        "checkpointing": checkpointing,
    }


def _check(name, value, low, high):
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ValueError(f"{name} must be an integer in {low}..{high}, not {value!r}")
    return value


class TrainingCxlDevice(wiring.Component):
    """The whole device (module docstring for the structure).

    Parameters (keyword-only)
    -------------------------
    max_tables, max_dim, num_regions : int
        Embedding engine: table descriptors, largest dim, engine regions
        (:class:`~hw.emb.engine.EmbeddingEngine` checks them).
    addr_width : int
        Device physical address bits, 16..52: the device has ``2**addr_width`` bytes of memory;
        host accesses beyond are NXM.
    channels : int
        Memory channels, 1, 2 or 4 (``hw/mem/interleave.py``).
    id_width : int
        AXI ID width of the front end and the engine, 1..16.
    host_outstanding : int
        Host reads and, separately, writes in flight in the front end (its ID pools).
    num_decoders, num_protected : int
        HDM decoders (1..10) and protected ranges (1..16).
    command_queue_depth, completion_queue_depth : int
        1..16 each.
    reorder_depth : int
        With several channels: reads and writes in flight per arbiter port.
    outstanding_reads, index_buffer_depth, offset_buffer_depth, output_buffer_depth,
    bag_slots, max_unique_rows, update_outstanding_reads, correction_bags,
    correction_contexts, correction_queue_depth, delta_lanes, correction_lanes :
        Passed to the embedding engine.
    checkpointing : bool
        Put the CheckpointEngine in (needs ``hw/ckpt/engine.py``).
    log_buffer_depth, write_tap_buffer_depth, dedup_entries, checkpoint_outstanding_writes : int
        Passed to the CheckpointEngine (``max_outstanding_writes``) when checkpointing.

    Members
    -------
    m2s_req, m2s_rwd : ``In(stream.Signature(M2S_REQ / M2S_RWD))``
    s2m_ndr, s2m_drs : ``Out(stream.Signature(S2M_NDR / S2M_DRS))``
        CXL.mem message channels (``hw/cxl/messages.py``).
    csr : ``In(AXI4LiteSignature(addr_width=register_map.addr_width, data_width=32))``
        The registers (``hw/device_regs.py``).
    mem : ``Out(AXI4Signature(addr_width=memory_addr_width, data_width=512,
        id_width=memory_id_width)).array(channels)``
        The memory channels; each sees its own compact address space.
    irq : ``Out(1)``
        A completion is queued and ``CONTROL.irq_enable`` is set.
    gpf : ``In(1)``, gpf_done : ``Out(1)``
        With checkpointing only: power-fail warning, and its drain complete.
    """

    def __init__(self, *, max_tables=4, max_dim=16, num_regions=2, addr_width=20, channels=1,
                 id_width=6, host_outstanding=16, num_decoders=2, num_protected=4,
                 command_queue_depth=4, completion_queue_depth=4, reorder_depth=16,
                 outstanding_reads=32, index_buffer_depth=128, offset_buffer_depth=64,
                 output_buffer_depth=16, bag_slots=16, max_unique_rows=32,
                 update_outstanding_reads=8, correction_bags=64, correction_contexts=None,
                 correction_queue_depth=None, delta_lanes=None, correction_lanes=None,
                 checkpointing=False,
                 log_buffer_depth=64, write_tap_buffer_depth=4, dedup_entries=256,
                 checkpoint_outstanding_writes=64):
        _check("Address width", addr_width, 16, 52)
        channel_bits(channels)   # raises with the valid counts
        _check("Command queue depth", command_queue_depth, 1, MAX_QUEUE_DEPTH)
        _check("Completion queue depth", completion_queue_depth, 1, MAX_QUEUE_DEPTH)
        if not isinstance(checkpointing, bool):
            raise TypeError(f"checkpointing must be a bool, not {checkpointing!r}")
        self._ckpt = None
        if checkpointing:
            if not checkpoint_engine_available():
                raise ValueError("Checkpointing needs the CheckpointEngine "
                                 "(hw/ckpt/engine.py), which is not in this tree yet")
            # Two of the front end's 16 protected ranges guard the metadata and the log.
            _check("Protected range count (with checkpointing)", num_protected, 1, 14)
            self._ckpt = _checkpoint_engine_class()(
                addr_width=addr_width, id_width=id_width, max_tables=max_tables,
                log_buffer_depth=log_buffer_depth, write_tap_buffer_depth=write_tap_buffer_depth,
                dedup_entries=dedup_entries, max_outstanding_writes=checkpoint_outstanding_writes)
            if isinstance(outstanding_reads, int) and \
                    outstanding_reads + 3 > self._ckpt.engine_id_limit:
                raise ValueError(
                    f"With checkpointing the engine's IDs must stay below "
                    f"{self._ckpt.engine_id_limit} (the top four of {id_width} ID bits are the "
                    f"checkpoint engine's): {outstanding_reads} outstanding reads plus 3 "
                    f"stream IDs do not")
        self._frontend = CxlMemFrontEnd(
            addr_width=addr_width, id_width=id_width, max_outstanding=host_outstanding,
            num_decoders=num_decoders, num_protected=num_protected + 2 * checkpointing)
        self._engine = EmbeddingEngine(
            max_tables=max_tables, max_dim=max_dim, num_regions=num_regions,
            addr_width=addr_width, id_width=id_width, outstanding_reads=outstanding_reads,
            index_buffer_depth=index_buffer_depth, offset_buffer_depth=offset_buffer_depth,
            output_buffer_depth=output_buffer_depth, bag_slots=bag_slots,
            max_unique_rows=max_unique_rows, update_outstanding_reads=update_outstanding_reads,
            correction_bags=correction_bags, correction_contexts=correction_contexts,
            correction_queue_depth=correction_queue_depth, delta_lanes=delta_lanes,
            correction_lanes=correction_lanes)
        self._arbiter = AxiArbiter(num_managers=2, channels=channels, addr_width=addr_width,
                                   id_width=id_width, reorder_depth=reorder_depth)
        self._config = RegisterConfig(
            max_tables=max_tables, max_dim=max_dim, num_regions=num_regions,
            num_decoders=num_decoders, num_protected=num_protected, addr_width=addr_width,
            channels=channels, command_queue_depth=command_queue_depth,
            completion_queue_depth=completion_queue_depth, max_unique_rows=max_unique_rows,
            has_update=self._engine.has_update, checkpointing=checkpointing)
        self._map = device_register_map(self._config)
        self._addr_width = addr_width
        self._channels = channels
        self._num_protected = num_protected
        checkpoint_ports = {"gpf": In(1), "gpf_done": Out(1)} if checkpointing else {}
        super().__init__({
            "m2s_req": In(stream.Signature(M2S_REQ)),
            "m2s_rwd": In(stream.Signature(M2S_RWD)),
            "s2m_ndr": Out(stream.Signature(S2M_NDR)),
            "s2m_drs": Out(stream.Signature(S2M_DRS)),
            "csr": In(AXI4LiteSignature(addr_width=self._map.addr_width, data_width=32)),
            "mem": Out(AXI4Signature(addr_width=self._arbiter.channel_addr_width,
                                     data_width=512, id_width=self._arbiter.channel_id_width)
                       ).array(channels),
            "irq": Out(1),
            **checkpoint_ports,
        })

    # --- what testbenches and drivers need to know (also in the JSON sidecar) ---------------
    @property
    def register_map(self):
        return self._map

    @property
    def register_config(self):
        return self._config

    @property
    def addr_width(self):
        return self._addr_width

    @property
    def memory_bytes(self):
        """Bytes of device memory (all channels together)."""
        return 1 << self._addr_width

    @property
    def channel_count(self):
        return self._channels

    @property
    def memory_addr_width(self):
        return self._arbiter.channel_addr_width

    @property
    def memory_id_width(self):
        return self._arbiter.channel_id_width

    @property
    def has_update(self):
        return self._engine.has_update

    @property
    def checkpointing(self):
        return self._config.checkpointing

    @property
    def hdm_config_latency(self):
        """Cycles from stable HDM registers to decoding with them."""
        return self._frontend.config_latency

    def elaborate(self, platform):
        m = Module()
        config = self._config
        aw = self._addr_width
        frontend = m.submodules.frontend = self._frontend
        engine = m.submodules.engine = self._engine
        arbiter = m.submodules.arbiter = self._arbiter
        bank = m.submodules.registers = CsrBank(regmap=self._map)
        regs = bank.regs

        for name in ("m2s_req", "m2s_rwd"):
            wiring.connect(m, wiring.flipped(getattr(self, name)), getattr(frontend, name))
        for name in ("s2m_ndr", "s2m_drs"):
            wiring.connect(m, getattr(frontend, name), wiring.flipped(getattr(self, name)))
        wiring.connect(m, wiring.flipped(self.csr), bank.bus)
        wiring.connect(m, frontend.axi, arbiter.managers[HOST_PORT])
        ckpt = self._ckpt
        if ckpt is None:
            wiring.connect(m, engine.axi, arbiter.managers[ENGINE_PORT])
            command_port, status_port = engine.cmd, engine.done
        else:
            m.submodules.checkpoint = ckpt
            wiring.connect(m, ckpt.engine_cmd, engine.cmd)
            wiring.connect(m, engine.done, ckpt.engine_done)
            wiring.connect(m, engine.axi, ckpt.engine_axi)
            wiring.connect(m, ckpt.axi, arbiter.managers[ENGINE_PORT])
            command_port, status_port = ckpt.cmd, ckpt.done
        for channel in range(self._channels):
            wiring.connect(m, arbiter.channels[channel], wiring.flipped(self.mem[channel]))

        def register_value(prefix, field, width):
            """A quantity split over ``<prefix>_0 .. _n`` (hw/device_regs.py conventions)."""
            return Cat(*(getattr(getattr(regs, f"{prefix}_{word}"), field)
                         for word in range(wide_words(width))))[:width]

        def drive_register(prefix, field, value, width):
            for word in range(wide_words(width)):
                bits = min(32, width - 32 * word)
                m.d.comb += getattr(getattr(regs, f"{prefix}_{word}"), field).eq(
                    value[32 * word:32 * word + bits])

        # --- identification ---------------------------------------------------------------
        major, minor, patch = VERSION
        m.d.comb += [
            regs.ID.magic.eq(MAGIC),
            regs.VERSION.major.eq(major), regs.VERSION.minor.eq(minor),
            regs.VERSION.patch.eq(patch),
            regs.CAPS0.max_tables.eq(config.max_tables),
            regs.CAPS0.channels.eq(config.channels),
            regs.CAPS0.num_regions.eq(config.num_regions),
            regs.CAPS0.num_decoders.eq(config.num_decoders),
            regs.CAPS0.num_protected.eq(config.num_protected),
            regs.CAPS0.update.eq(config.has_update),
            regs.CAPS0.checkpointing.eq(config.checkpointing),
            regs.CAPS1.max_dim.eq(config.max_dim),
            regs.CAPS1.addr_width.eq(aw),
            regs.CAPS1.command_queue_depth.eq(config.command_queue_depth),
            regs.CAPS1.completion_queue_depth.eq(config.completion_queue_depth),
            regs.CAPS2.max_unique_rows.eq(config.max_unique_rows),
        ]

        # --- host access configuration -------------------------------------------------------
        m.d.comb += [
            frontend.hdm_enable.eq(regs.CONTROL.hdm_enable),
            frontend.poison_nxm_reads.eq(regs.CONTROL.poison_nxm_reads),
            frontend.debug_unlock.eq(regs.CONTROL.debug_unlock),
            frontend.clear_errors.eq(1),   # flags become event pulses (module docstring)
        ]
        for d in range(config.num_decoders):
            control = getattr(regs, f"HDM{d}_CONTROL")
            m.d.comb += frontend.decoders[d].eq(struct_value(HDM_DECODER, {
                "base": getattr(regs, f"HDM{d}_BASE").base,
                "size": getattr(regs, f"HDM{d}_SIZE").size,
                "skip": getattr(regs, f"HDM{d}_SKIP").skip,
                "ig": control.ig, "iw": control.iw, "position": control.position,
                "committed": control.committed,
            }))
        for p in range(config.num_protected):
            m.d.comb += frontend.protected_ranges[p].eq(struct_value(
                protected_region_layout(aw), {
                    "base": register_value(f"PROTECT{p}_BASE", "address", aw),
                    "size": register_value(f"PROTECT{p}_SIZE", "size", aw),
                    "enable": getattr(regs, f"PROTECT{p}_ENABLE").enable,
                }))

        # --- engine configuration -------------------------------------------------------------
        m.d.comb += [engine.lr.eq(regs.LR.value),
                     regs.STATUS.lookup_deferred.eq(engine.deferred)]
        if ckpt is None:
            m.d.comb += engine.relaxed.eq(regs.CONTROL.relaxed_lookup)
        else:
            m.d.comb += [
                ckpt.tables.eq(engine.tables),   # table extents for the log tap
                # Relaxed lookup goes through the checkpoint engine, which decides when a
                # LOOKUP may run ahead of the UPDATE it follows.
                ckpt.relaxed.eq(regs.CONTROL.relaxed_lookup),
                engine.relaxed.eq(ckpt.engine_relaxed),
                engine.forget_deferred.eq(ckpt.engine_forget),
            ]
        for t in range(config.max_tables):
            table_format = getattr(regs, f"TABLE{t}_FORMAT")
            m.d.comb += engine.tables[t].eq(struct_value(table_layout(aw), {
                "base": register_value(f"TABLE{t}_BASE", "address", aw),
                "rows": getattr(regs, f"TABLE{t}_ROWS").rows,
                "dim": table_format.dim, "mode": table_format.mode,
            }))
        for r in range(config.num_regions):
            m.d.comb += engine.regions[r].eq(struct_value(region_layout(aw), {
                "base": register_value(f"REGION{r}_BASE", "address", aw),
                "size": register_value(f"REGION{r}_SIZE", "size", aw),
                "enable": getattr(regs, f"REGION{r}_ENABLE").enable,
            }))

        # --- command queue: DOORBELL pushes the CMD_* registers --------------------------------
        commands = m.submodules.commands = SyncFIFOBuffered(
            width=command_layout(aw).size, depth=config.command_queue_depth)
        ring = regs.DOORBELL.opcode_stb
        submitted = Signal(SEQUENCE_WIDTH)
        m.d.comb += [
            commands.w_en.eq(ring),
            commands.w_data.eq(struct_value(command_layout(aw), {
                "opcode": regs.DOORBELL.opcode,
                "batch": regs.CMD_BATCH.batch,
                "bags": regs.CMD_SHAPE.bags,
                "tables": regs.CMD_SHAPE.tables,
                "num_indices": regs.CMD_NUM_INDICES.num_indices,
                "indices": register_value("CMD_INDICES", "address", aw),
                "offsets": register_value("CMD_OFFSETS", "address", aw),
                "weights": register_value("CMD_WEIGHTS", "address", aw),
                "output": register_value("CMD_OUTPUT", "address", aw),
            })),
            regs.COMMAND_QUEUE.submitted.eq(submitted),
            regs.COMMAND_QUEUE.level.eq(commands.level),
        ]
        m.d.sync += submitted.eq(submitted + (ring & commands.w_rdy))

        m.d.comb += [
            command_port.valid.eq(commands.r_rdy),
            command_port.payload.eq(commands.r_data),
            commands.r_en.eq(command_port.ready),
        ]
        running = Signal()   # a command was handed to the engine and has not completed
        with m.If(status_port.valid & status_port.ready):
            m.d.sync += running.eq(0)
        with m.If(command_port.valid & command_port.ready):
            m.d.sync += running.eq(1)

        # --- completion queue -------------------------------------------------------------------
        entry = data.StructLayout({"status": status_layout(),
                                   "sequence": unsigned(SEQUENCE_WIDTH)})
        completions = m.submodules.completions = SyncFIFOBuffered(
            width=entry.size, depth=config.completion_queue_depth)
        produced = Signal(32)
        finish = status_port.valid & status_port.ready
        m.d.comb += [
            status_port.ready.eq(completions.w_rdy),
            completions.w_en.eq(status_port.valid),
            completions.w_data.eq(Cat(status_port.payload.as_value(),
                                      produced[:SEQUENCE_WIDTH])),
        ]
        m.d.sync += produced.eq(produced + finish)
        head = data.View(entry, completions.r_data)
        m.d.comb += [
            regs.COMPLETION.valid.eq(completions.r_rdy),
            regs.COMPLETION.opcode.eq(head.status.opcode.as_value()),
            regs.COMPLETION.error.eq(head.status.error.as_value()),
            regs.COMPLETION.sequence.eq(head.sequence),
            regs.COMPLETION_BATCH.batch.eq(head.status.batch),
            regs.COMPLETION_WHERE.table.eq(head.status.table),
            regs.COMPLETION_WHERE.bag.eq(head.status.bag),
            regs.COMPLETION_POSITION.position.eq(head.status.position),
            regs.COMPLETED.count.eq(produced),
            completions.r_en.eq(regs.COMPLETION_POP.pop_stb & regs.COMPLETION_POP.pop),
            self.irq.eq(regs.CONTROL.irq_enable & completions.r_rdy),
        ]

        # --- status and errors ------------------------------------------------------------------
        m.d.comb += [
            regs.STATUS.busy.eq(running),
            regs.STATUS.host_idle.eq(frontend.status.idle),
            regs.STATUS.command_level.eq(commands.level),
            regs.STATUS.completion_level.eq(completions.level),
        ]
        for name in HOST_ERRORS:
            m.d.comb += getattr(regs.ERRORS, f"{name}_set").eq(
                getattr(frontend.status.errors, name))
        m.d.comb += [
            regs.ERRORS.command_error_set.eq(
                finish & (status_port.payload.error != ErrorCode.NONE)),
            regs.ERRORS.doorbell_overflow_set.eq(ring & ~commands.w_rdy),
            regs.ERRORS.long_burst_set.eq(arbiter.long_burst),
        ]
        if ckpt is None:
            m.d.comb += regs.ERRORS.checkpoint_protocol_set.eq(0)
        else:
            self._connect_checkpoint(m, ckpt, regs, register_value)

        # --- counters, copied into the registers by COUNTERS_LATCH ------------------------------
        cycles = Signal(CYCLE_COUNTER_WIDTH)
        m.d.sync += cycles.eq(cycles + 1)
        live = {"CYCLES": (cycles, CYCLE_COUNTER_WIDTH)}
        for name in ENGINE_COUNTERS:
            live[f"ENGINE_{name.upper()}"] = (getattr(engine.counters, name),
                                              ENGINE_COUNTER_WIDTH)
        for name in HOST_COUNTERS:
            live[f"HOST_{name.upper()}"] = (getattr(frontend.status, name), 32)
        for channel in range(self._channels):
            live[f"MEM{channel}_READS"] = (arbiter.counters.reads[channel], 32)
            live[f"MEM{channel}_WRITES"] = (arbiter.counters.writes[channel], 32)
        live["HOST_MEM_WAITS"] = (arbiter.counters.waits[HOST_PORT], 32)
        live["ENGINE_MEM_WAITS"] = (arbiter.counters.waits[ENGINE_PORT], 32)
        if ckpt is not None:
            for name in CHECKPOINT_COUNTERS:
                live[f"CKPT_{name.upper()}"] = (getattr(ckpt.counters, name), 32)
        latch = regs.COUNTERS_LATCH.latch_stb & regs.COUNTERS_LATCH.latch
        for prefix, (value, width) in live.items():
            shadow = Signal(width, name=f"latched_{prefix.lower()}")
            with m.If(latch):
                m.d.sync += shadow.eq(value)
            if hasattr(regs, prefix):   # a 32-bit counter has one register, named plainly
                m.d.comb += getattr(regs, prefix).count.eq(shadow)
            else:
                drive_register(prefix, "count", shadow, width)
        return m

    def _connect_checkpoint(self, m, ckpt, regs, register_value):
        """The checkpoint engine's configuration, status and the host's protection from its
        metadata and log."""
        aw = self._addr_width

        def region(name):
            size = register_value(f"CKPT_{name}_SIZE", "size", aw)
            return struct_value(region_layout(aw), {
                "base": register_value(f"CKPT_{name}_BASE", "address", aw), "size": size,
                "enable": size != 0})

        meta, log = region("META"), region("LOG")
        m.d.comb += [
            ckpt.meta_region.eq(meta),
            ckpt.log_region.eq(log),
            ckpt.snapshot_regions[0].eq(region("SNAPSHOT0")),
            ckpt.snapshot_regions[1].eq(region("SNAPSHOT1")),
            ckpt.snapshot_interval.eq(regs.CKPT_INTERVAL.interval),
            ckpt.logging_enable.eq(regs.CKPT_CONTROL.logging_enable),
            ckpt.log_mode.as_value().eq(regs.CKPT_CONTROL.log_mode),
            ckpt.gpf.eq(self.gpf),
            self.gpf_done.eq(ckpt.gpf_done),
            # The front end's last two protected ranges: the host never sees the metadata or
            # the undo log (its own regions and layouts are the region layout's shape).
            self._frontend.protected_ranges[self._num_protected].eq(meta),
            self._frontend.protected_ranges[self._num_protected + 1].eq(log),
            regs.ERRORS.checkpoint_protocol_set.eq(ckpt.engine_protocol_error),
        ]
        status = regs.CKPT_STATUS
        m.d.comb += [
            status.phase.eq(ckpt.phase.as_value()),
            status.error.eq(ckpt.error.as_value()),
            status.attached.eq(ckpt.attached),
            status.snapshot_valid.eq(ckpt.snapshot_valid),
            status.snapshot_slot.eq(ckpt.snapshot_slot),
            status.next_snapshot_slot.eq(ckpt.next_snapshot_slot),
            status.log_open.eq(ckpt.log_open),
            status.log_pending.eq(ckpt.log_pending),
            status.rolled_back.eq(ckpt.rolled_back),
            status.gpf.eq(self.gpf),
            status.gpf_done.eq(ckpt.gpf_done),
        ]
        for register, value in (("LAST_COMMITTED", ckpt.last_committed),
                                ("SNAPSHOT_BATCH", ckpt.snapshot_batch),
                                ("LOG_BATCH", ckpt.log_batch),
                                ("LOG_BATCH_ENTRIES", ckpt.log_entries),
                                ("RECOVERY_CYCLES", ckpt.recovery_cycles),
                                ("RESTORED_ENTRIES", ckpt.restored_entries),
                                ("GPF_DRAIN_CYCLES", ckpt.gpf_drain_cycles)):
            m.d.comb += getattr(regs, register).value.eq(value)

