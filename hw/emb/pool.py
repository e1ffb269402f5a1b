"""Pool gathered lines into bags: ``acc = acc + line * factor``, 16 float32 lanes per cycle.

Every op goes through the same fixed pipeline, so results leave in op order::

    pop -> [mul: M stages] -> [add: A stages] -> accumulator write and/or output
           a = row line (ROW) | accumulator (SCALE) | 0 (ZERO);  b = factor
                              a = accumulator or +0.0 (ROW) | -0.0 (SCALE) | +0.0 (ZERO)

One accumulator line per (bag slot, line of the row). The adder's latency makes a bag a
dependency chain, so an op waits at ``pop`` while an earlier op on the same accumulator line
has not written it back yet (the issuer interleaves bags so that this rarely happens). The
multiplier is valid-only; ``x * 1.0`` is exact, so unweighted rows use it too, and MEAN's
final ``sum * (1/L)`` reuses it instead of needing a second one. ``sum * f + (-0.0)`` is
``sum * f`` bit for bit, which lets SCALE share the adder as well.

With ``registered_accumulator_read`` the adder's accumulator operand is read a cycle earlier
and held in a register, so the accumulators' read (a LUT RAM on an FPGA) does not also drive
the adder's first stage; the price is one more cycle in that wait.

With ``lane_replicas`` each of the 16 multiplier lanes gets its own register of the op's
operand choice and of its factor (:func:`hw.fanout.lane_copies`), loaded in the same
cycle as the shared ones, so no single register drives all 512 operand bits. The
accumulators are one memory per lane, read at registered addresses (a read that sees every
earlier cycle's writes); with ``lane_replicas`` each lane's memory has its own copies of them.

With ``lane_fold`` > 1 the multiplier and adder are folded :class:`~hw.fp.FPLanes` (half the
units for 2, each line over two cycles): ops are popped at most once in ``lane_fold`` cycles,
and the pipeline counts the lanes' longer latency (an FPGA build's trade of rate for area).

With ``registered_hazard`` the hazard check is a register: an op's comparison with the
pops in flight is made in its first cycle at ``pop`` and registered, for it is valid the
next cycle too (the op is still there, so nothing was popped in between, and every pop
moves a cycle further down the pipeline). ``ops.ready`` then starts at that register, not
behind the address comparisons, and the reorder buffer's slot registers behind ``ready``
follow (their path was a ULX3S build's longest, 19.4 ns). The price: an op is taken in its
second cycle at the earliest. Folded lanes take an op at most once in ``lane_fold`` >= 2
cycles anyway, so ops that arrive back to back lose nothing there; an op that arrives after
a gap waits a cycle more. Whether the output buffer has room is then a register too, a
cycle old: no op is taken the cycle after one is, so the room seen then is still there.

With both, the lanes' copies of what the op decides (its factor, operand choice and early
accumulator address) are loaded from four group copies, each loaded every cycle from the op
at the head (:func:`hw.fanout.staged_copies`): an op is taken only after a cycle there, so
the groups already hold it. The op's register no longer drives sixteen lanes spread over
the die directly (a ULX3S build's longest path, 15.4 ns of routing alone). With lane
replicas the copies of what a pipeline stage decides (the adder's operand choice, the late
accumulator address, the write address and enable) come through four group copies of the
stage two before it in the same way.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.fanout import LANE_GROUPS, lane_copies, staged_copies
from hw.fp import FPAdd, FPLanes, FPMul, fp_lanes_signature
from hw.fp.common import check_stages
from hw.fp.lanes import check_fold, folded_latency
from hw.params import check_bool

from .gather import OpKind

__all__ = ["Pooler"]

LANES = 16
_NEGATIVE_ZERO_LINE = Const(int("80000000" * LANES, 16), 32 * LANES)


class Pooler(wiring.Component):
    """The pooling datapath of the lookup engine.

    Members
    -------
    start : ``In(1)``
        Pulse: clear the error flag.
    discard : ``In(1)``
        Accept and drop every op (abort).
    ops : ``In(stream.Signature({"context": op_layout, "data": 512, "error": 1}))``
    out : ``Out(stream.Signature({"line", "data"}, always_ready=True))``
        Pooled output lines; only produced when ``out_level`` shows room for them.
    out_level : ``In(range(out_depth + 1))``
        Lines waiting in the output buffer (capacity ``out_depth``).
    idle : ``Out(1)``
        Nothing in the pipeline.
    error : ``Out(1)``
        An op carried a bus error.
    mul_lanes, add_lanes : ``In(fp_lanes_signature(op=..., lanes=16))``
        Only with ``shared_lanes``: the 16-lane multiplier and adder, built elsewhere with
        ``mul_stages`` and ``add_stages`` (see :class:`~hw.emb.engine.EmbeddingEngine`).

    ``registered_accumulator_read`` (default False): see the module docstring; it needs
    ``mul_stages >= 2``. ``lane_replicas`` and ``registered_hazard`` (default False): see the
    module docstring.
    """

    def __init__(self, *, op_layout, slot_bits, line_bits, line_addr_width, out_depth,
                 add_stages=None, mul_stages=None, shared_lanes=False,
                 registered_accumulator_read=False, lane_replicas=False, lane_fold=1,
                 registered_hazard=False):
        self._op_layout = op_layout
        self._slot_bits = slot_bits
        self._line_bits = line_bits
        self._out_depth = out_depth
        self._mul_stages = check_stages(mul_stages, default=FPMul.DEFAULT_STAGES,
                                        maximum=len(FPMul.CUTS) - 1)
        self._add_stages = check_stages(add_stages, default=FPAdd.DEFAULT_STAGES,
                                        maximum=len(FPAdd.CUTS) - 1)
        if self._mul_stages < 1:
            raise ValueError("The pooling multiplier needs at least one pipeline stage")
        self._fold = check_fold(lane_fold, lanes=LANES)
        self._mul_latency = folded_latency(self._mul_stages, self._fold)
        self._add_latency = folded_latency(self._add_stages, self._fold)
        self._shared_lanes = bool(shared_lanes)
        # (Validated by LookupEngine.check_parameters, as the stages are.)
        self._registered_read = bool(registered_accumulator_read)
        self._lane_replicas = bool(lane_replicas)
        self._registered_hazard = check_bool("Registered hazard", registered_hazard)
        lanes = {}
        if self._shared_lanes:
            lanes = {"mul_lanes": In(fp_lanes_signature(op="mul", lanes=LANES)),
                     "add_lanes": In(fp_lanes_signature(op="add", lanes=LANES))}
        super().__init__({
            **lanes,
            "start": In(1),
            "discard": In(1),
            "ops": In(stream.Signature(data.StructLayout({
                "context": op_layout, "data": unsigned(32 * LANES), "error": 1}))),
            "out": Out(stream.Signature(data.StructLayout({
                "line": unsigned(line_addr_width), "data": unsigned(32 * LANES)}),
                always_ready=True)),
            "out_level": In(range(out_depth + 1)),
            "idle": Out(1),
            "error": Out(1),
        })

    @property
    def hazard_window(self):
        """Cycles after an accumulating op's pop during which a ROW op on the same
        accumulator line must wait (the adder's latency, plus one with a registered read)."""
        return self._add_latency + self._registered_read

    @property
    def latency(self):
        """Cycles from an op's pop to its accumulator write or output."""
        return 1 + self._mul_latency + self._add_latency

    @property
    def lane_fold(self):
        """Cycles a line takes through the (folded) lanes; an op is popped at most once in
        that many cycles."""
        return self._fold

    def elaborate(self, platform):
        m = Module()
        if self._shared_lanes:
            mul, add = self.mul_lanes, self.add_lanes  # (driven and read as a unit's ports)
        else:
            m.submodules.mul = mul = FPLanes(op="mul", lanes=LANES, stages=self._mul_stages,
                                             fold=self._fold)
            m.submodules.add = add = FPLanes(op="add", lanes=LANES, stages=self._add_stages,
                                             fold=self._fold)
        mul_latency, add_latency = self._mul_latency, self._add_latency
        depth = mul_latency + add_latency

        # One accumulator memory per lane, each read through its own address register (with
        # lane_replicas a copy per lane; see the reads below), so that no register addresses
        # the LUT RAM of a whole 512-bit line.
        acc_writes, acc_early_reads, acc_late_reads = [], [], []
        for k in range(LANES):
            lane_memory = memory.Memory(
                shape=unsigned(32), depth=2 ** (self._slot_bits + self._line_bits), init=[])
            m.submodules[f"accumulators_{k}"] = lane_memory
            acc_writes.append(lane_memory.write_port())
            acc_early_reads.append(lane_memory.read_port(domain="comb"))  # SCALE, at pop
            acc_late_reads.append(lane_memory.read_port(domain="comb"))   # ROW, at the adder

        def address(context):
            return Cat(context.line, context.slot)

        def read_line(reads, addresses):
            """A line read lane by lane: each lane's port at that lane's address."""
            line = Signal(32 * LANES)
            for k in range(LANES):
                m.d.comb += [reads[k].addr.eq(addresses[k]),
                             line[32 * k:32 * (k + 1)].eq(reads[k].data)]
            return line

        def writes_back(context):
            return (context.kind == OpKind.ROW) & ~context.last

        def makes_output(context):
            return (context.kind != OpKind.ROW) | context.last

        op = self.ops.payload.context

        # --- hazards: the previous (mul + add) pops, as (writes back, address) ---------------
        history_valid = [Signal(name=f"history_valid_{k}") for k in range(depth)]
        history_address = [Signal(self._slot_bits + self._line_bits, name=f"history_address_{k}")
                           for k in range(depth)]
        here = address(op)
        # matches[k]: the op pops into an accumulator line the pop of k + 1 cycles ago
        # writes back.
        matches = [history_valid[k] & (history_address[k] == here) for k in range(depth)]

        def hazard_among(late, early):
            """The op must wait for the pops ``late`` (a ROW after its bag's first) or
            ``early`` (a SCALE) match."""
            return (((op.kind == OpKind.ROW) & ~op.first & Cat(late).any())
                    | ((op.kind == OpKind.SCALE) & Cat(early).any()))

        if self._registered_hazard:
            # Next cycle's check of this op: every pop then a cycle older, and none new,
            # since the op is still there (`held`).
            held = Signal()
            hazard = Signal()
            m.d.sync += [held.eq(self.ops.valid & ~self.ops.ready),
                         hazard.eq(hazard_among(matches[:self.hazard_window - 1],
                                                matches[:depth - 1]))]
            may_pop = held & ~hazard
        else:
            may_pop = ~hazard_among(matches[:self.hazard_window], matches)

        # valid[k]: an op kept k + 1 cycles ago (it enters the multiplier a cycle after).
        valid = [Signal(name=f"valid_{k}") for k in range(depth + 1)]
        # Folded lanes take an op at most once in `lane_fold` cycles.
        spacing = Cat(valid[:self._fold - 1]).any() if self._fold > 1 else Const(0)
        outputs_in_flight = Signal(range(self._out_depth + 1))
        if self._registered_hazard:
            has_room = Signal()
            m.d.sync += has_room.eq(self.out_level + outputs_in_flight < self._out_depth)
        else:
            has_room = self.out_level + outputs_in_flight < self._out_depth
        pop = Signal()
        keep = Signal()
        m.d.comb += [
            self.ops.ready.eq(self.discard |
                              (may_pop & ~spacing & (~makes_output(op) | has_room))),
            pop.eq(self.ops.valid & self.ops.ready),
            keep.eq(pop & ~self.discard),
        ]
        m.d.sync += [history_valid[0].eq(keep & writes_back(op)), history_address[0].eq(here)]

        def op_copies(value, current, name):
            """What the register ``current`` (loaded with the op's ``value``) holds once per
            lane: from group copies when the op waits a cycle before its pop (module
            docstring), else from :func:`lane_copies`."""
            if self._lane_replicas and self._registered_hazard:
                return staged_copies(m, value, copies=LANES, groups=LANE_GROUPS, name=name)
            return lane_copies(m, value, current, name=name, copies=LANES,
                               replicate=self._lane_replicas)

        # A read at a registered address sees the writes of every earlier cycle: a transparent
        # synchronous read at ``here``.
        early_addresses = op_copies(here, history_address[0], "acc_early_address")
        acc_early_data = read_line(acc_early_reads, early_addresses)
        for k in range(1, depth):
            m.d.sync += [history_valid[k].eq(history_valid[k - 1]),
                         history_address[k].eq(history_address[k - 1])]

        # --- the pipeline: stage k holds the op popped k + 1 cycles ago ----------------------
        stage_layout = data.StructLayout({
            "kind": OpKind, "slot": unsigned(self._slot_bits),
            "line": unsigned(self._line_bits), "first": 1, "last": 1,
            "out_line": self.out.payload.line.shape()})
        stage = [Signal(stage_layout, name=f"stage_{k}") for k in range(depth + 1)]
        row_data = Signal(32 * LANES)
        factor = Signal(32)
        m.d.sync += [valid[0].eq(keep), row_data.eq(self.ops.payload.data),
                     factor.eq(op.factor)]
        for name in ("kind", "slot", "line", "first", "last", "out_line"):
            m.d.sync += getattr(stage[0], name).eq(getattr(op, name))
        for k in range(1, depth + 1):
            m.d.sync += [valid[k].eq(valid[k - 1]), stage[k].eq(stage[k - 1])]

        head = stage[0]
        m.d.comb += mul.i.valid.eq(valid[0])
        # The operand choice and factor, lane by lane: with lane_replicas each lane has its own
        # copy of the registers (head.kind, factor) that hold them.
        copies = {"copies": LANES, "replicate": self._lane_replicas}
        uses_row = op_copies(op.kind == OpKind.ROW, head.kind == OpKind.ROW, "uses_row")
        uses_acc = op_copies(op.kind == OpKind.SCALE, head.kind == OpKind.SCALE, "uses_acc")
        factors = op_copies(op.factor, factor, "factor")
        for k in range(LANES):
            lane = slice(32 * k, 32 * (k + 1))
            m.d.comb += [
                mul.i.payload.a[k].eq(Mux(uses_row[k], row_data[lane],
                                          Mux(uses_acc[k], acc_early_data[lane], 0))),
                mul.i.payload.b[k].eq(factors[k]),
            ]

        def stage_copies(k, value_at, name):
            """``value_at(k)`` (of stage ``k``, which every stage passes on each cycle) once
            per lane: with lane replicas from group copies of ``value_at(k - 2)`` where
            there is such a stage, so no stage register drives all sixteen lanes (module
            docstring), else from :func:`lane_copies`."""
            if self._lane_replicas and k >= 2:
                return staged_copies(m, value_at(k - 2), copies=LANES, groups=LANE_GROUPS,
                                     name=name)
            return lane_copies(m, value_at(k - 1), value_at(k), name=name, **copies)

        # The adder's accumulator operand is read at the address of the op one stage before
        # it (two with a registered read); the stages shift every cycle, so that address
        # registered is the next stage's.
        read_stage = mul_latency - 1 - self._registered_read
        late_addresses = stage_copies(read_stage + 1, lambda k: address(stage[k]),
                                      "acc_late_address")
        acc_late_data = read_line(acc_late_reads, late_addresses)
        if self._registered_read:
            accumulated = Signal(32 * LANES)
            m.d.sync += accumulated.eq(acc_late_data)
        else:
            accumulated = acc_late_data
        m.d.comb += [
            add.i.valid.eq(valid[mul_latency]),
            add.i.payload.b.eq(mul.o.payload),
            add.i.payload.sub.eq(0),
        ]
        # The adder's operand: the accumulator for a row after the first, -0.0 for a SCALE
        # (x * r + -0.0 is x * r, signed zeros included), else 0.
        adds_acc = stage_copies(
            mul_latency, lambda k: (stage[k].kind == OpKind.ROW) & ~stage[k].first,
            "adds_accumulator")
        adds_neg = stage_copies(mul_latency, lambda k: stage[k].kind == OpKind.SCALE,
                                "adds_negative_zero")
        for k in range(LANES):
            lane = slice(32 * k, 32 * (k + 1))
            m.d.comb += add.i.payload.a[k].eq(
                Mux(adds_acc[k], accumulated[lane],
                    Mux(adds_neg[k], _NEGATIVE_ZERO_LINE[lane], 0)))

        tail = stage[depth]
        result = add.o.payload.as_value()
        push = Signal()
        m.d.comb += [
            push.eq(valid[depth] & makes_output(tail)),
            self.out.valid.eq(push),
            self.out.payload.line.eq(tail.out_line),
            self.out.payload.data.eq(result),
            self.idle.eq(~Cat(valid).any()),
        ]
        # Each lane's write address and enable from its own copy of the tail's registers (with
        # lane_replicas): one register drove the 128 LUT RAM cells of all 16 lanes.
        write_addresses = stage_copies(depth, lambda k: address(stage[k]), "acc_write_address")
        write_enables = stage_copies(depth, lambda k: valid[k] & writes_back(stage[k]),
                                     "acc_write_enable")
        for k, write in enumerate(acc_writes):
            m.d.comb += [write.addr.eq(write_addresses[k]),
                         write.data.eq(result[32 * k:32 * (k + 1)]),
                         write.en.eq(write_enables[k])]
        m.d.sync += outputs_in_flight.eq(outputs_in_flight + (keep & makes_output(op)) - push)

        with m.If(self.start):
            m.d.sync += self.error.eq(0)
        with m.Elif(pop & self.ops.payload.error):
            m.d.sync += self.error.eq(1)
        return m
