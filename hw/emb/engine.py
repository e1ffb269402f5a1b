"""The near-memory embedding engine: one command port, one AXI4 master, two engines behind them.

LOOKUP commands go to :class:`~hw.emb.lookup.LookupEngine`, UPDATE commands to
:class:`~hw.emb.update.UpdateEngine`; NOP completes at once with no error and any other opcode
with BAD_OPCODE. One command runs at a time, so the AXI port simply belongs to the engine that
runs it (both engines end a command only once all their reads and writes are answered, so the
port changes hands on a quiet bus).
"""

import importlib.util

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.mem.axi import AXI4Signature

from .layouts import (
    ErrorCode,
    Opcode,
    command_layout,
    counters_layout,
    region_layout,
    status_layout,
    table_layout,
)
from .lookup import LookupEngine, check_int

__all__ = ["EmbeddingEngine", "update_engine_class"]

# Signals the manager drives on each AXI channel (the rest come from memory).
_MANAGER_OUTPUTS = ("arid", "araddr", "arlen", "arsize", "arburst", "arvalid", "rready",
                    "awid", "awaddr", "awlen", "awsize", "awburst", "awvalid",
                    "wdata", "wstrb", "wlast", "wvalid", "bready")
_MEMORY_OUTPUTS = ("arready", "rid", "rdata", "rresp", "rlast", "rvalid",
                   "awready", "wready", "bid", "bresp", "bvalid")


def update_engine_class():
    """The UpdateEngine class, or None while ``hw/emb/update.py`` does not exist (then UPDATE
    ends with BAD_OPCODE). An update module that exists but fails to import is an error."""
    if importlib.util.find_spec("hw.emb.update") is None:
        return None
    from .update import UpdateEngine

    return UpdateEngine


class EmbeddingEngine(wiring.Component):
    """LOOKUP (gather + pool) and UPDATE (sparse SGD) over one AXI4 port.

    Parameters (keyword-only)
    -------------------------
    max_tables, max_dim, num_regions, addr_width, id_width :
        Shared by both engines (see :class:`~hw.emb.lookup.LookupEngine` for the ranges).
    outstanding_reads : int
        Lookup row reads in flight (its ID pool; bandwidth x latency).
    index_buffer_depth, offset_buffer_depth, output_buffer_depth, bag_slots :
        Lookup buffers (see :class:`~hw.emb.lookup.LookupEngine`).
    max_unique_rows : int
        Update engine's on-chip distinct rows per chunk.
    update_outstanding_reads : int
        Update engine's gradient and row lines in flight.
    add_stages, mul_stages : int or None
        Float32 pipeline depths of both engines.

    Members
    -------
    cmd : ``In(stream.Signature(command_layout(addr_width)))``
    done : ``Out(stream.Signature(status_layout()))``
    tables : ``In(data.ArrayLayout(table_layout(addr_width), max_tables))``
    regions : ``In(data.ArrayLayout(region_layout(addr_width), num_regions))``
    lr : ``In(32)``
        Learning rate (float32 bits) for UPDATE.
    axi : ``Out(AXI4Signature(addr_width=addr_width, data_width=512, id_width=id_width))``
    counters : ``Out(counters_layout())``
        Sums of both engines' counters.
    """

    def __init__(self, *, max_tables=8, max_dim=128, num_regions=4, addr_width=48, id_width=8,
                 outstanding_reads=128, index_buffer_depth=8192, offset_buffer_depth=2048,
                 output_buffer_depth=128, bag_slots=16, max_unique_rows=64,
                 update_outstanding_reads=16, add_stages=None, mul_stages=None):
        self._lookup_params = dict(
            max_tables=max_tables, max_dim=max_dim, num_regions=num_regions,
            addr_width=addr_width, id_width=id_width, outstanding_reads=outstanding_reads,
            index_buffer_depth=index_buffer_depth, offset_buffer_depth=offset_buffer_depth,
            output_buffer_depth=output_buffer_depth, bag_slots=bag_slots,
            add_stages=add_stages, mul_stages=mul_stages)
        LookupEngine.check_parameters(**self._lookup_params)
        self._update_params = dict(
            max_tables=max_tables, max_dim=max_dim, num_regions=num_regions,
            addr_width=addr_width, id_width=id_width,
            max_unique_rows=check_int("Unique-row capacity", max_unique_rows, minimum=1),
            outstanding_reads=check_int("Update outstanding reads", update_outstanding_reads,
                                        minimum=1),
            add_stages=add_stages, mul_stages=mul_stages)
        # Built now so that the update engine's own parameter checks run in this constructor.
        update_class = update_engine_class()
        self._update = None if update_class is None else update_class(**self._update_params)
        self._max_tables = max_tables
        self._addr_width = addr_width
        self._id_width = id_width
        super().__init__({
            "cmd": In(stream.Signature(command_layout(addr_width))),
            "done": Out(stream.Signature(status_layout())),
            "tables": In(data.ArrayLayout(table_layout(addr_width), max_tables)),
            "regions": In(data.ArrayLayout(region_layout(addr_width), num_regions)),
            "lr": In(32),
            "axi": Out(AXI4Signature(addr_width=addr_width, data_width=512, id_width=id_width)),
            "counters": Out(counters_layout()),
        })

    @property
    def has_update(self):
        """Whether UPDATE commands are served (``hw/emb/update.py`` exists)."""
        return self._update is not None

    def elaborate(self, platform):
        m = Module()
        engines = {"lookup": LookupEngine(**self._lookup_params)}
        if self._update is not None:
            engines["update"] = self._update
            m.d.comb += self._update.lr.eq(self.lr)
        for name, engine in engines.items():
            m.submodules[name] = engine
            m.d.comb += [engine.tables.eq(self.tables), engine.regions.eq(self.regions)]

        opcode_engine = {"lookup": Opcode.LOOKUP, "update": Opcode.UPDATE}
        owner = Signal(range(len(engines)))  # valid while a command runs
        order = list(engines)
        reply = Signal(status_layout())
        command = self.cmd.payload

        with m.FSM(name="dispatch"):
            with m.State("Idle"):
                served = 0
                for index, name in enumerate(order):
                    engine = engines[name]
                    mine = command.opcode == opcode_engine[name]
                    served = served | mine
                    m.d.comb += [engine.cmd.payload.eq(command),
                                 engine.cmd.valid.eq(self.cmd.valid & mine)]
                    with m.If(mine):
                        m.d.comb += self.cmd.ready.eq(engine.cmd.ready)
                        with m.If(self.cmd.valid & engine.cmd.ready):
                            m.d.sync += owner.eq(index)
                            m.next = "Busy"
                with m.If(~served):
                    m.d.comb += self.cmd.ready.eq(1)
                    with m.If(self.cmd.valid):
                        m.d.sync += [
                            reply.eq(status_layout().const({})),
                            reply.opcode.eq(command.opcode),
                            reply.batch.eq(command.batch),
                            reply.error.eq(Mux(command.opcode == Opcode.NOP,
                                               ErrorCode.NONE, ErrorCode.BAD_OPCODE)),
                        ]
                        m.next = "Reply"
            with m.State("Busy"):
                for index, name in enumerate(order):
                    engine = engines[name]
                    with m.If(owner == index):
                        m.d.comb += [self.done.valid.eq(engine.done.valid),
                                     self.done.payload.eq(engine.done.payload),
                                     engine.done.ready.eq(self.done.ready)]
                        with m.If(engine.done.valid & self.done.ready):
                            m.next = "Idle"
            with m.State("Reply"):
                m.d.comb += [self.done.valid.eq(1), self.done.payload.eq(reply)]
                with m.If(self.done.ready):
                    m.next = "Idle"

        # The AXI port follows the owner (the other engine is idle and its bus quiet).
        for index, name in enumerate(order):
            bus = engines[name].axi
            selected = owner == index
            with m.If(selected):
                for signal in _MANAGER_OUTPUTS:
                    m.d.comb += getattr(self.axi, signal).eq(getattr(bus, signal))
            for signal in _MEMORY_OUTPUTS:
                m.d.comb += getattr(bus, signal).eq(
                    Mux(selected, getattr(self.axi, signal), 0))

        counters = counters_layout()
        for field_name, _ in counters:
            m.d.comb += getattr(self.counters, field_name).eq(
                sum(getattr(engine.counters, field_name) for engine in engines.values()))
        return m
