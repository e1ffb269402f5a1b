"""The benchmark's simulated system: the lookup engine on a fixed-latency AXI memory."""

from amaranth.hdl import Module
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.emb.layouts import (
    command_layout,
    counters_layout,
    region_layout,
    status_layout,
    table_layout,
)
from hw.emb.lookup import LookupEngine
from sim.axi_memory import AxiMemory

__all__ = ["LookupBenchTop"]


class LookupBenchTop(wiring.Component):
    """:class:`~hw.emb.lookup.LookupEngine` wired to an :class:`~sim.axi_memory.AxiMemory`.

    Parameters: ``memory_lines`` (the memory's size in 64-byte lines) and the engine's own
    keyword parameters. Members: the engine's ``cmd``, ``done``, ``tables``, ``regions`` and
    ``counters``, plus the memory's ``read_latency`` and backdoor port.
    """

    def __init__(self, *, memory_lines=1 << 16, **engine):
        self._engine = engine
        self._memory_lines = memory_lines
        addr_width = engine.get("addr_width", 48)
        max_tables = engine.get("max_tables", 8)
        num_regions = engine.get("num_regions", 4)
        super().__init__({
            "cmd": In(stream.Signature(command_layout(addr_width))),
            "done": Out(stream.Signature(status_layout())),
            "tables": In(data.ArrayLayout(table_layout(addr_width), max_tables)),
            "regions": In(data.ArrayLayout(region_layout(addr_width), num_regions)),
            "counters": Out(counters_layout()),
            "read_latency": In(16),
            "backdoor_addr": In(range(memory_lines)),
            "backdoor_wdata": In(512),
            "backdoor_we": In(1),
            "backdoor_rdata": Out(512),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.engine = engine = LookupEngine(**self._engine)
        m.submodules.memory = memory = AxiMemory(
            depth=self._memory_lines, addr_width=self._engine.get("addr_width", 48),
            id_width=self._engine.get("id_width", 8))
        wiring.connect(m, engine.axi, memory.axi)
        wiring.connect(m, wiring.flipped(self.cmd), engine.cmd)
        wiring.connect(m, engine.done, wiring.flipped(self.done))
        m.d.comb += [
            engine.tables.eq(self.tables),
            engine.regions.eq(self.regions),
            self.counters.eq(engine.counters),
            memory.read_latency.eq(self.read_latency),
            memory.backdoor_addr.eq(self.backdoor_addr),
            memory.backdoor_wdata.eq(self.backdoor_wdata),
            memory.backdoor_we.eq(self.backdoor_we),
            self.backdoor_rdata.eq(memory.backdoor_rdata),
        ]
        return m
