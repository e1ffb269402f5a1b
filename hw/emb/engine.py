"""The near-memory embedding engine: one command port, one AXI4 master, two engines behind them.

LOOKUP commands go to :class:`~hw.emb.lookup.LookupEngine`, UPDATE commands to
:class:`~hw.emb.update.UpdateEngine`; NOP completes at once with no error and any other opcode
with BAD_OPCODE. One command runs at a time, so the AXI port simply belongs to the engine that
runs it (both engines end a command only once all their reads and writes are answered, so the
port changes hands on a quiet bus). For the same reason the two engines can share one 16-lane
float32 multiplier and one adder (``shared_lanes``, the default): the engine running the
command drives them, and their pipelines are empty when a command ends (its results are all
written). That halves the FP lanes, most of the engine's logic on an FPGA.
"""

import importlib.util

from amaranth.hdl import Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.fanout import replicated_register
from hw.fp import FPLanes
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
from .lookup import LANES, LookupEngine, check_bool, check_int

__all__ = ["EmbeddingEngine", "update_engine_class"]

# Signals the manager drives on each AXI channel (the rest come from memory).
_MANAGER_OUTPUTS = ("arid", "araddr", "arlen", "arsize", "arburst", "arvalid", "rready",
                    "awid", "awaddr", "awlen", "awsize", "awburst", "awvalid",
                    "wdata", "wstrb", "wlast", "wvalid", "bready")
_MEMORY_HANDSHAKES = ("arready", "rvalid", "awready", "wready", "bvalid")
#: What the memory answers with: reaches both engines as it is, since only the owner sees a
#: handshake (a 512-bit multiplexer on `rdata` put the owner register in front of every
#: engine's read data).
_MEMORY_PAYLOADS = ("rid", "rdata", "rresp", "rlast", "bid", "bresp")


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
    update_write_buffer : int or None
        Update engine's buffer of updated row lines (``write_buffer_lines``).
    relaxed_lookup : bool
        Build the relaxed lookup (default True). Without it the engine has no ``relaxed``,
        ``deferred`` and ``forget_deferred`` ports, every LOOKUP is strict, and the update
        engine leaves out its correction (:class:`~hw.emb.update.UpdateEngine`).
    correction_bags : int or None
        Bags of a relaxed lookup the update engine keeps on chip between the correction
        passes of a chunked UPDATE (:class:`~hw.emb.update.UpdateEngine`; ``None``: its
        default).
    correction_contexts : int or None
        Bags whose corrections the update engine interleaves on the adder
        (:class:`~hw.emb.update.UpdateEngine`; ``None``: its default).
    correction_queue_depth : int or None
        Occurrences each of those contexts queues (:class:`~hw.emb.update.UpdateEngine`;
        ``None``: its default).
    delta_lanes : bool or None
        The update engine's own adder lanes for the apply's ``new - old``
        (:class:`~hw.emb.update.UpdateEngine`; ``None``: shared).
    correction_lanes : bool or None
        The update engine's own FP lanes for the relaxed lookup's correction, which then runs
        beside the apply (:class:`~hw.emb.update.UpdateEngine`; ``None``: shared).
    add_stages, mul_stages : int or None
        Float32 pipeline depths of both engines.
    mean_reciprocal : ``"pipelined"`` or ``"sequential"``
        The lookup's MEAN factor divider (:class:`~hw.emb.lookup.LookupEngine`).
    fpga_pipelining : bool
        Registers for FPGA clock rates in both engines (:class:`~hw.emb.lookup.LookupEngine`,
        :class:`~hw.emb.update.UpdateEngine`) and, with ``shared_lanes``, a copy of the lane
        owner per lane (:mod:`hw.fanout`); default False.
    lane_fold : int
        Cycles a line takes through both engines' multipliers and adders: folded
        :class:`~hw.fp.FPLanes` with ``16 / lane_fold`` units each, for FPGA builds that trade
        the engines' FP rate for area (:class:`~hw.emb.lookup.LookupEngine`,
        :class:`~hw.emb.update.UpdateEngine`); default 1, results the same.
    shared_lanes : bool
        One multiplier and one adder (16 lanes each) for both engines (default True), or a
        set each (False: the engines as they are alone).

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
    relaxed : ``In(1)`` (with ``relaxed_lookup``, as the two below)
        Relaxed lookup (``sw_model.relaxed``), sampled with each LOOKUP. A LOOKUP that finds
        the UPDATE of the batch it follows still to come (a LOOKUP ended OK since the last
        UPDATE that did) is *deferred*: it pools the tables as they are, leaves MEAN bags
        unscaled, and the engine keeps its command. The next UPDATE then corrects it, and
        its status (not the LOOKUP's) says the pooled output is final. Any UPDATE ends the
        deferral, so after a failed UPDATE the LOOKUP is issued again. A second LOOKUP while
        one is deferred ends with ``LOOKUP_ALREADY_DEFERRED``.
    deferred : ``Out(1)``
        A deferred LOOKUP waits for its correction.
    forget_deferred : ``In(1)``
        Drop the deferred LOOKUP and the UPDATE owed (the host starts again from a committed
        batch: the checkpoint engine's RECOVER).
    """

    def __init__(self, *, max_tables=8, max_dim=128, num_regions=4, addr_width=48, id_width=8,
                 outstanding_reads=128, index_buffer_depth=8192, offset_buffer_depth=2048,
                 output_buffer_depth=128, bag_slots=16, max_unique_rows=64,
                 update_outstanding_reads=16, add_stages=None, mul_stages=None,
                 shared_lanes=True, update_write_buffer=None, relaxed_lookup=True,
                 correction_bags=None, correction_contexts=None, correction_queue_depth=None,
                 delta_lanes=None, correction_lanes=None, mean_reciprocal="pipelined",
                 fpga_pipelining=False, lane_fold=1):
        check_bool("Shared lanes", shared_lanes)
        check_bool("Relaxed lookup", relaxed_lookup)
        self._relaxed_lookup = relaxed_lookup
        self._lookup_params = dict(
            max_tables=max_tables, max_dim=max_dim, num_regions=num_regions,
            addr_width=addr_width, id_width=id_width, outstanding_reads=outstanding_reads,
            index_buffer_depth=index_buffer_depth, offset_buffer_depth=offset_buffer_depth,
            output_buffer_depth=output_buffer_depth, bag_slots=bag_slots,
            add_stages=add_stages, mul_stages=mul_stages, mean_reciprocal=mean_reciprocal,
            fpga_pipelining=fpga_pipelining, lane_fold=lane_fold)
        LookupEngine.check_parameters(**self._lookup_params)
        self._fpga_pipelining = fpga_pipelining
        self._update_params = dict(
            max_tables=max_tables, max_dim=max_dim, num_regions=num_regions,
            addr_width=addr_width, id_width=id_width,
            max_unique_rows=check_int("Unique-row capacity", max_unique_rows, minimum=1),
            outstanding_reads=check_int("Update outstanding reads", update_outstanding_reads,
                                        minimum=1),
            write_buffer_lines=update_write_buffer, relaxed_lookup=relaxed_lookup,
            correction_bags=correction_bags, correction_contexts=correction_contexts,
            correction_queue_depth=correction_queue_depth, delta_lanes=delta_lanes,
            correction_lanes=correction_lanes,
            add_stages=add_stages, mul_stages=mul_stages, fpga_pipelining=fpga_pipelining,
            lane_fold=lane_fold)
        # Built now so that the update engine's own parameter checks run in this constructor.
        update_class = update_engine_class()
        # (Without an update engine there is nothing to share.)
        self._shared_lanes = shared_lanes and update_class is not None
        self._lookup_params["shared_lanes"] = self._shared_lanes
        self._update_params["shared_lanes"] = self._shared_lanes
        self._update = None if update_class is None else update_class(**self._update_params)
        self._lookup = LookupEngine(**self._lookup_params)
        self._add_stages, self._mul_stages = add_stages, mul_stages
        self._lane_fold = lane_fold
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
            **({"relaxed": In(1), "deferred": Out(1), "forget_deferred": In(1)}
               if relaxed_lookup else {}),
        })

    @property
    def shared_lanes(self):
        """Whether both engines use one set of FP lanes."""
        return self._shared_lanes

    @property
    def relaxed_lookup(self):
        """Whether LOOKUP may run relaxed (the ``relaxed`` port exists)."""
        return self._relaxed_lookup

    @property
    def engines(self):
        """The engines the commands go to, by name: ``"lookup"`` and (if it exists)
        ``"update"``."""
        return {"lookup": self._lookup,
                **({} if self._update is None else {"update": self._update})}

    @property
    def has_update(self):
        """Whether UPDATE commands are served (``hw/emb/update.py`` exists)."""
        return self._update is not None

    def elaborate(self, platform):
        m = Module()
        engines = self.engines
        if self._update is not None:
            m.d.comb += self._update.lr.eq(self.lr)
        for name, engine in engines.items():
            m.submodules[name] = engine
            m.d.comb += [engine.tables.eq(self.tables), engine.regions.eq(self.regions)]

        opcode_engine = {"lookup": Opcode.LOOKUP, "update": Opcode.UPDATE}
        owner = Signal(range(len(engines)))  # valid while a command runs
        owner_next = Signal.like(owner)
        m.d.comb += owner_next.eq(owner)
        m.d.sync += owner.eq(owner_next)
        order = list(engines)
        reply = Signal(status_layout())
        command = self.cmd.payload

        # Relaxed lookup: whether an UPDATE is owed (a LOOKUP ended OK since the last UPDATE
        # that did), and the deferred LOOKUP's command.
        update_owed = Signal()
        deferred = Signal()
        deferred_command = Signal(command_layout(self._addr_width))
        running = Signal(command_layout(self._addr_width))
        running_deferred = Signal()
        is_lookup = command.opcode == Opcode.LOOKUP
        # (Without the relaxed lookup nothing is ever deferred: these are constants.)
        relaxed = self.relaxed if self._relaxed_lookup else Const(0)
        defer_now = relaxed & update_owed & is_lookup
        refuse_now = defer_now & deferred
        if self._relaxed_lookup:
            m.d.comb += self.deferred.eq(deferred)
        if self._update is not None and self._relaxed_lookup:
            m.d.comb += [self._update.correct.eq(deferred_command),
                         self._update.correct_enable.eq(deferred)]
        m.d.comb += engines["lookup"].defer_mean.eq(defer_now)

        with m.FSM(name="dispatch"):
            with m.State("Idle"):
                served = 0
                for index, name in enumerate(order):
                    engine = engines[name]
                    mine = (command.opcode == opcode_engine[name]) & ~refuse_now
                    served = served | mine
                    m.d.comb += [engine.cmd.payload.eq(command),
                                 engine.cmd.valid.eq(self.cmd.valid & mine)]
                    with m.If(mine):
                        m.d.comb += self.cmd.ready.eq(engine.cmd.ready)
                        with m.If(self.cmd.valid & engine.cmd.ready):
                            m.d.comb += owner_next.eq(index)
                            m.d.sync += [running.eq(command),
                                         running_deferred.eq(defer_now)]
                            m.next = "Busy"
                with m.If(~served):
                    m.d.comb += self.cmd.ready.eq(1)
                    with m.If(self.cmd.valid):
                        m.d.sync += [
                            reply.eq(status_layout().const({})),
                            reply.opcode.eq(command.opcode),
                            reply.batch.eq(command.batch),
                            reply.error.eq(Mux(refuse_now, ErrorCode.LOOKUP_ALREADY_DEFERRED,
                                               Mux(command.opcode == Opcode.NOP,
                                                   ErrorCode.NONE, ErrorCode.BAD_OPCODE))),
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
                            ok = engine.done.payload.error == ErrorCode.NONE
                            if name == "lookup":
                                with m.If(ok):
                                    m.d.sync += update_owed.eq(1)
                                    with m.If(running_deferred):
                                        m.d.sync += [deferred.eq(1),
                                                     deferred_command.eq(running)]
                            else:
                                m.d.sync += deferred.eq(0)
                                with m.If(ok):
                                    m.d.sync += update_owed.eq(deferred)
                            m.next = "Idle"
            with m.State("Reply"):
                m.d.comb += [self.done.valid.eq(1), self.done.payload.eq(reply)]
                with m.If(self.done.ready):
                    m.next = "Idle"
        if self._relaxed_lookup:
            with m.If(self.forget_deferred):  # (after the dispatcher: it wins)
                m.d.sync += [deferred.eq(0), update_owed.eq(0)]

        # The AXI port follows the owner (the other engine is idle and its bus quiet).
        for index, name in enumerate(order):
            bus = engines[name].axi
            selected = owner == index
            with m.If(selected):
                for signal in _MANAGER_OUTPUTS:
                    m.d.comb += getattr(self.axi, signal).eq(getattr(bus, signal))
            for signal in _MEMORY_HANDSHAKES:
                m.d.comb += getattr(bus, signal).eq(
                    Mux(selected, getattr(self.axi, signal), 0))
            for signal in _MEMORY_PAYLOADS:
                m.d.comb += getattr(bus, signal).eq(getattr(self.axi, signal))

        if self._shared_lanes:
            update_index = order.index("update")
            # The owner per lane: with fpga_pipelining no single register selects all 2,048
            # operand bits. The copies follow `owner` a cycle late: loaded from `owner_next`
            # they were behind the engines' `cmd.ready` and the command's decoding (a ULX3S
            # build's path, 19.4 ns). Neither engine gives its lanes an operand in its
            # command's first cycle (it reads memory first;
            # tests/boards/test_emb_bist.py checks this), so the copies are right whenever an
            # operand comes.
            if self._fpga_pipelining:
                lane_owners = replicated_register(m, owner == update_index, copies=LANES,
                                                  name="update_owns")
            else:
                lane_owners = [owner == update_index] * LANES
            self._share_lanes(m, engines, owner == update_index, lane_owners)

        counters = counters_layout()
        for field_name, _ in counters:
            m.d.comb += getattr(self.counters, field_name).eq(
                sum(getattr(engine.counters, field_name) for engine in engines.values()))
        return m

    def _share_lanes(self, m, engines, update_owns, lane_owners):
        """One multiplier and one adder, driven by the engine that runs the command; each
        engine sees results only while it is the owner (the other's pipeline is empty).
        ``lane_owners[k]`` is ``update_owns`` for lane ``k``'s operands."""
        lookup, update = engines["lookup"], engines["update"]
        mul_tag, add_tag = update.lanes_tag_widths
        units = {
            "mul": FPLanes(op="mul", stages=self._mul_stages, tag_width=mul_tag,
                           fold=self._lane_fold),
            "add": FPLanes(op="add", stages=self._add_stages, tag_width=add_tag,
                           fold=self._lane_fold),
        }
        for op, unit in units.items():
            m.submodules[f"shared_{op}"] = unit
            from_lookup = getattr(lookup, f"{op}_lanes")
            from_update = getattr(update, f"{op}_lanes")
            operands, mine, theirs = unit.i.payload, from_update.i.payload, from_lookup.i.payload
            m.d.comb += unit.i.valid.eq(Mux(update_owns, from_update.i.valid,
                                            from_lookup.i.valid))
            for k, owns in enumerate(lane_owners):
                m.d.comb += [operands.a[k].eq(Mux(owns, mine.a[k], theirs.a[k])),
                             operands.b[k].eq(Mux(owns, mine.b[k], theirs.b[k]))]
            if op == "add":
                m.d.comb += operands.sub.eq(Mux(update_owns, mine.sub, theirs.sub))
            if unit.tag_width:
                # Only the update engine's operands carry a tag, and only it reads the tag
                # back: no multiplexer (with one, the owner was the reset of every tag
                # register in the lanes, 535 of them).
                m.d.comb += operands.tag.eq(mine.tag)
            m.d.comb += [
                from_update.o.valid.eq(unit.o.valid & update_owns),
                from_update.o.payload.eq(unit.o.payload),
                from_lookup.o.valid.eq(unit.o.valid & ~update_owns),
                from_lookup.o.payload.eq(unit.o.payload.result),
            ]
