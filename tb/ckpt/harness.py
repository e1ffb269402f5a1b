"""The simulated system of the checkpoint testbenches: EmbeddingEngine + CheckpointEngine + the
PMEM model, in one Amaranth top (so the whole data path runs at Verilator speed and Python
acts per command).

::

    cmd/done -> CheckpointEngine -> EmbeddingEngine
                   engine_axi <------ axi
                   axi -> PmemChannels (1, 2 or 4 PmemModels: latency/bandwidth profile,
                                        power-fail, backdoor; sim/pmem_channels.py)

With several channels each PMEM model is one memory controller with the whole profile (the
paper's prototype had four), lines interleaved on address bits [7:6] by the device's own
arbiter; the backdoor, the power failure and the counters span them all, so a testbench sees
one memory whatever the count.
"""

from amaranth.hdl import Module, Mux
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.ckpt.engine import CheckpointEngine
from hw.ckpt.engine import counters_layout as ckpt_counters_layout
from hw.ckpt.layouts import CheckpointError, CheckpointPhase, LogMode
from hw.emb.engine import EmbeddingEngine
from hw.emb.layouts import (
    command_layout,
    counters_layout,
    region_layout,
    status_layout,
    table_layout,
)
from sim.host_link import HostLink
from sim.pmem_channels import CHANNEL_SEED_STEP, PMEM_INPUTS, PMEM_OUTPUTS, PmemChannels

__all__ = ["CHANNEL_SEED_STEP", "CKPT_STATUS", "PMEM_INPUTS", "CheckpointSystem"]

#: CheckpointEngine outputs that the system top exposes under the same names.
CKPT_STATUS = {
    "phase": CheckpointPhase, "error": CheckpointError, "attached": 1, "last_committed": 32,
    "snapshot_batch": 32, "snapshot_valid": 1, "snapshot_slot": 1, "next_snapshot_slot": 1,
    "log_open": 1, "log_batch": 32, "log_entries": 32, "log_pending": 1,
    "recovery_cycles": 32, "restored_entries": 32, "rolled_back": 1, "gpf_done": 1,
    "gpf_drain_cycles": 32, "engine_protocol_error": 1,
}
#: The memory's ports the system top exposes under the same names.
_MEMORY_PORTS = (*PMEM_INPUTS, *PMEM_OUTPUTS, "backdoor_addr", "backdoor_wdata", "backdoor_we")


class CheckpointSystem(wiring.Component):
    """Parameters (keyword-only): ``memory_lines`` (PMEM size in lines), ``pending_beats``
    (the model's unacknowledged-beat ring), ``log_buffer_depth``, ``write_tap_buffer_depth``
    and ``dedup_entries`` (the checkpoint engine's), and the EmbeddingEngine's own parameters
    (``max_tables``, ``max_dim``, ``num_regions``, ``addr_width``, ``id_width``, ...).

    ``channels`` (1, 2 or 4) PMEM models share ``memory_lines`` through an
    :class:`~hw.mem.arbiter.AxiArbiter` with ``reorder_depth`` reads (and writes) in flight
    (:class:`~sim.pmem_channels.PmemChannels`); with one channel the model is connected
    directly and ``reorder_depth`` is unused. ``fail_seed`` seeds channel ``c``'s torn-write
    draws with ``fail_seed + c * CHANNEL_SEED_STEP``.

    ``host_link`` (a dict of :class:`sim.host_link.HostLink` parameters, or None) adds the
    host-gather baseline's CXL.mem link: a second AXI manager on the PMEM model, selected
    instead of the device by ``host_select`` (ports ``link_*``; ``python -m bench paper``)."""

    def __init__(self, *, memory_lines=8192, pending_beats=64, log_buffer_depth=64,
                 write_tap_buffer_depth=4, dedup_entries=256, host_link=None, channels=1,
                 reorder_depth=64, **engine):
        self._ckpt = dict(log_buffer_depth=log_buffer_depth,
                          write_tap_buffer_depth=write_tap_buffer_depth,
                          dedup_entries=dedup_entries)
        aw = engine.get("addr_width", 48)
        self._id_width = engine.get("id_width", 8)
        max_tables = engine.get("max_tables", 8)
        num_regions = engine.get("num_regions", 4)
        # Built here so that the components check their parameters in this constructor.
        self._memory = PmemChannels(memory_lines=memory_lines, channels=channels,
                                    addr_width=aw, id_width=self._id_width,
                                    pending_beats=pending_beats, reorder_depth=reorder_depth)
        self._embedding = EmbeddingEngine(**engine)
        self._checkpoint = CheckpointEngine(addr_width=aw, id_width=self._id_width,
                                            max_tables=max_tables, **self._ckpt)
        outstanding = engine.get("outstanding_reads", 128)
        if outstanding + 3 > self._checkpoint.engine_id_limit:
            raise ValueError(
                f"Outstanding reads ({outstanding}) plus 3 stream IDs must stay below the "
                f"checkpoint engine's reserved IDs (limit {self._checkpoint.engine_id_limit})")
        members = {
            "cmd": In(stream.Signature(command_layout(aw))),
            "done": Out(stream.Signature(status_layout())),
            "tables": In(data.ArrayLayout(table_layout(aw), max_tables)),
            "regions": In(data.ArrayLayout(region_layout(aw), num_regions)),
            "lr": In(32),
            "meta_region": In(region_layout(aw)),
            "log_region": In(region_layout(aw)),
            "snapshot_regions": In(data.ArrayLayout(region_layout(aw), 2)),
            "snapshot_interval": In(32),
            "logging_enable": In(1),
            "log_mode": In(LogMode),
            "relaxed": In(1),
            "engine_deferred": Out(1),
            "gpf": In(1),
            "counters": Out(counters_layout()),
            "ckpt_counters": Out(ckpt_counters_layout()),
        }
        members.update({name: Out(shape) for name, shape in CKPT_STATUS.items()})
        memory_members = self._memory.signature.members
        members.update({name: memory_members[name] for name in _MEMORY_PORTS})
        self._link = None
        if host_link is not None:
            self._link = HostLink(addr_width=aw, id_width=self._id_width, **host_link)
            members["host_select"] = In(1)
            for name, member in self._link.signature.members.items():
                if name != "axi":
                    members[f"link_{name}"] = member
        super().__init__(members)

    @property
    def memory_lines(self):
        return self._memory.memory_lines

    @property
    def channels(self):
        return self._memory.channels

    @property
    def has_update(self):
        return self._embedding.has_update

    def elaborate(self, platform):
        m = Module()
        m.submodules.embedding = embedding = self._embedding
        m.submodules.checkpoint = checkpoint = self._checkpoint
        m.submodules.memory = memory = self._memory
        port = memory.axi
        wiring.connect(m, wiring.flipped(self.cmd), checkpoint.cmd)
        wiring.connect(m, checkpoint.done, wiring.flipped(self.done))
        wiring.connect(m, checkpoint.engine_cmd, embedding.cmd)
        wiring.connect(m, embedding.done, checkpoint.engine_done)
        wiring.connect(m, embedding.axi, checkpoint.engine_axi)
        if self._link is None:
            wiring.connect(m, checkpoint.axi, port)
        else:
            m.submodules.link = link = self._link
            self._select_manager(m, checkpoint.axi, link.axi, port)
            for name, member in link.signature.members.items():
                if name == "axi":
                    continue
                ours = getattr(self, f"link_{name}")
                if member.flow == In:
                    m.d.comb += getattr(link, name).eq(ours)
                else:
                    m.d.comb += ours.eq(getattr(link, name))
        m.d.comb += [
            embedding.tables.eq(self.tables),
            embedding.regions.eq(self.regions),
            embedding.lr.eq(self.lr),
            self.counters.eq(embedding.counters),
            checkpoint.tables.eq(self.tables),
            checkpoint.meta_region.eq(self.meta_region),
            checkpoint.log_region.eq(self.log_region),
            checkpoint.snapshot_regions.eq(self.snapshot_regions),
            checkpoint.snapshot_interval.eq(self.snapshot_interval),
            checkpoint.logging_enable.eq(self.logging_enable),
            checkpoint.log_mode.eq(self.log_mode),
            checkpoint.relaxed.eq(self.relaxed),
            embedding.relaxed.eq(checkpoint.engine_relaxed),
            embedding.forget_deferred.eq(checkpoint.engine_forget),
            self.engine_deferred.eq(embedding.deferred),
            checkpoint.gpf.eq(self.gpf),
            self.ckpt_counters.eq(checkpoint.counters),
        ]
        for name in CKPT_STATUS:
            m.d.comb += getattr(self, name).eq(getattr(checkpoint, name))
        for name in _MEMORY_PORTS:
            if memory.signature.members[name].flow == In:
                m.d.comb += getattr(memory, name).eq(getattr(self, name))
            else:
                m.d.comb += getattr(self, name).eq(getattr(memory, name))
        return m

    def _select_manager(self, m, device, host, memory):
        """The PMEM model's AXI port to the device or (``host_select``) the host link; the
        other manager sees no handshakes."""
        select = self.host_select
        for name, member in memory.signature.members.items():
            if member.flow == In:   # manager -> memory
                m.d.comb += getattr(memory, name).eq(
                    Mux(select, getattr(host, name), getattr(device, name)))
            else:
                value = getattr(memory, name)
                handshake = name.endswith("valid") or name.endswith("ready")
                m.d.comb += [
                    getattr(host, name).eq(value & select if handshake else value),
                    getattr(device, name).eq(value & ~select if handshake else value),
                ]
