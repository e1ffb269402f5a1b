"""The simulated system of the checkpoint testbenches: EmbeddingEngine + CheckpointEngine + the
PMEM model, in one Amaranth top (so the whole data path runs at Verilator speed and Python
acts per command).

::

    cmd/done -> CheckpointEngine -> EmbeddingEngine
                   engine_axi <------ axi
                   axi -> PmemModel (latency/bandwidth profile, power-fail, backdoor)
                   axi -> AxiArbiter -> PmemModel x channels   (``channels`` > 1)

With several channels each PMEM model is one memory controller with the whole profile (the
paper's prototype had four), lines interleaved on address bits [7:6] by the device's own
arbiter (``hw/mem/arbiter.py``); the backdoor, the power failure and the counters span them
all, so a testbench sees one memory whatever the count.
"""

from amaranth.hdl import Cat, Module, Mux, Signal
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
from hw.mem.arbiter import AxiArbiter
from hw.mem.interleave import channel_bits
from sim.host_link import HostLink
from sim.pmem import PmemModel

__all__ = ["CHANNEL_SEED_STEP", "CKPT_STATUS", "PMEM_INPUTS", "CheckpointSystem"]

#: CheckpointEngine outputs that the system top exposes under the same names.
CKPT_STATUS = {
    "phase": CheckpointPhase, "error": CheckpointError, "attached": 1, "last_committed": 32,
    "snapshot_batch": 32, "snapshot_valid": 1, "snapshot_slot": 1, "next_snapshot_slot": 1,
    "log_open": 1, "log_batch": 32, "log_entries": 32, "log_pending": 1,
    "recovery_cycles": 32, "restored_entries": 32, "rolled_back": 1, "gpf_done": 1,
    "gpf_drain_cycles": 32, "engine_protocol_error": 1,
}
#: PmemModel timing and power-fail inputs exposed under the same names.
PMEM_INPUTS = ("read_latency", "write_latency", "read_rate_num", "read_rate_den",
               "write_rate_num", "write_rate_den", "power_fail", "fail_seed", "fail_keep")
#: Channel ``c``'s torn-write seed is ``fail_seed + c * CHANNEL_SEED_STEP`` (mod 2**32), so
#: the channels draw independent verdicts from one seed.
CHANNEL_SEED_STEP = 0x9E3779B9
_PMEM_OUTPUTS = ("powered_down", "backdoor_rdata", "now", "read_beats", "write_beats",
                 "pending", "lost_beats", "kept_beats")


class CheckpointSystem(wiring.Component):
    """Parameters (keyword-only): ``memory_lines`` (PMEM size in lines), ``pending_beats``
    (the model's unacknowledged-beat ring), ``log_buffer_depth`` and ``dedup_entries`` (the
    checkpoint engine's), and the EmbeddingEngine's own parameters (``max_tables``,
    ``max_dim``, ``num_regions``, ``addr_width``, ``id_width``, ...).

    ``channels`` (1, 2 or 4) PMEM models share ``memory_lines`` through an :class:`AxiArbiter`
    with ``reorder_depth`` reads (and writes) in flight; with one channel the model is
    connected directly and ``reorder_depth`` is unused. ``fail_seed`` seeds channel ``c``'s
    torn-write draws with ``fail_seed + c * CHANNEL_SEED_STEP``.

    ``host_link`` (a dict of :class:`sim.host_link.HostLink` parameters, or None) adds the
    host-gather baseline's CXL.mem link: a second AXI manager on the PMEM model, selected
    instead of the device by ``host_select`` (ports ``link_*``; ``python -m bench paper``)."""

    def __init__(self, *, memory_lines=8192, pending_beats=64, log_buffer_depth=64,
                 dedup_entries=256, host_link=None, channels=1, reorder_depth=64, **engine):
        k = channel_bits(channels)   # raises with the valid counts
        if (not isinstance(memory_lines, int) or memory_lines < 2 << k
                or memory_lines & (memory_lines - 1)):
            raise ValueError(f"Memory lines must be a power of two, at least {2 << k} for "
                             f"{channels} channel(s), not {memory_lines!r}")
        self._engine = engine
        self._memory_lines = memory_lines
        self._pending_beats = pending_beats
        self._channels = channels
        self._ckpt = dict(log_buffer_depth=log_buffer_depth, dedup_entries=dedup_entries)
        aw = engine.get("addr_width", 48)
        self._aw = aw
        self._id_width = engine.get("id_width", 8)
        max_tables = engine.get("max_tables", 8)
        num_regions = engine.get("num_regions", 4)
        # Built here so that both components check their parameters in this constructor.
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
            "backdoor_addr": In(range(memory_lines)),
            "backdoor_wdata": In(512),
            "backdoor_we": In(1),
        }
        members.update({name: Out(shape) for name, shape in CKPT_STATUS.items()})
        self._arbiter = None
        if channels == 1:
            memories = [PmemModel(depth=memory_lines, addr_width=aw, id_width=self._id_width,
                                  pending_beats=pending_beats)]
        else:
            self._arbiter = AxiArbiter(num_managers=1, channels=channels, addr_width=aw,
                                       id_width=self._id_width, reorder_depth=reorder_depth)
            memories = [PmemModel(depth=memory_lines >> k,
                                  addr_width=self._arbiter.channel_addr_width,
                                  id_width=self._arbiter.channel_id_width,
                                  pending_beats=pending_beats)
                        for _ in range(channels)]
        shapes = memories[0].signature.members
        for name in PMEM_INPUTS:
            members[name] = In(shapes[name].shape)
        for name in _PMEM_OUTPUTS:
            members[name] = Out(shapes[name].shape)
        if channels > 1:   # sums over the channels
            members["pending"] = Out(range(channels * pending_beats + 1))
            members["lost_beats"] = Out(16 + k)
            members["kept_beats"] = Out(16 + k)
        self._memories = memories
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
        return self._memory_lines

    @property
    def channels(self):
        return self._channels

    @property
    def has_update(self):
        return self._embedding.has_update

    def elaborate(self, platform):
        m = Module()
        m.submodules.embedding = embedding = self._embedding
        m.submodules.checkpoint = checkpoint = self._checkpoint
        port = self._memory_port(m)
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
        self._connect_memories(m)
        return m

    def _memory_port(self, m):
        """The AXI port the system's manager drives: the PMEM model's, or the arbiter's."""
        for channel, memory in enumerate(self._memories):
            m.submodules[f"memory{channel}" if self._arbiter else "memory"] = memory
        if self._arbiter is None:
            return self._memories[0].axi
        m.submodules.arbiter = arbiter = self._arbiter
        for channel, memory in enumerate(self._memories):
            wiring.connect(m, arbiter.channels[channel], memory.axi)
        return arbiter.managers[0]

    def _connect_memories(self, m):
        """Timing, power failure, backdoor and counters across the channels: system line ``L``
        is line ``L >> k`` of channel ``L mod 2**k``, as the arbiter interleaves."""
        memories, k = self._memories, channel_bits(self._channels)
        for channel, memory in enumerate(memories):
            for name in PMEM_INPUTS:
                value = getattr(self, name)
                if name == "fail_seed":
                    value = (value + channel * CHANNEL_SEED_STEP)[:32]
                m.d.comb += getattr(memory, name).eq(value)
            m.d.comb += [
                memory.backdoor_addr.eq(self.backdoor_addr >> k),
                memory.backdoor_wdata.eq(self.backdoor_wdata),
                memory.backdoor_we.eq(self.backdoor_we
                                      & (self.backdoor_addr[:k] == channel if k else 1)),
            ]
        if k == 0:
            for name in _PMEM_OUTPUTS:
                m.d.comb += getattr(self, name).eq(getattr(memories[0], name))
            return
        # backdoor_rdata is the line addressed one cycle earlier: choose with that address.
        read_channel = Signal(k)
        m.d.sync += read_channel.eq(self.backdoor_addr[:k])
        with m.Switch(read_channel):
            for channel, memory in enumerate(memories):
                with m.Case(channel):
                    m.d.comb += self.backdoor_rdata.eq(memory.backdoor_rdata)
        m.d.comb += [
            self.now.eq(memories[0].now),   # the models count the same cycles
            self.powered_down.eq(Cat(*(memory.powered_down for memory in memories)).all()),
        ]
        for name in ("read_beats", "write_beats", "pending", "lost_beats", "kept_beats"):
            m.d.comb += getattr(self, name).eq(sum(getattr(memory, name) for memory in memories))

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
