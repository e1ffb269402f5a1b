"""Issue the line reads of a lookup, interleaving several bags so pooling never waits.

A bag's accumulation is a dependency chain through the adder (its latency is several cycles),
so the issuer keeps ``bag_slots`` bags open at once and takes one row from each in turn
(round robin over the slots whose next index is available). Each row becomes ``dim / 16``
line *ops*; the order of ops is the order the pooler will see them in, and within a bag it is
the index order of the golden model.
"""

import functools
import operator

from amaranth.hdl import Cat, Module, Mux, ResetInserter, Signal, unsigned
from amaranth.lib import data, enum, fifo, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from hw.fanout import word_of_line

from .bags import descriptor_layout
from .layouts import ErrorCode, PoolingMode, row_first_line, table_layout
from .validate import ERROR_LAYOUT

__all__ = ["ONE", "GatherIssuer", "OpKind", "op_layout"]

LANES = 16
ONE = 0x3F80_0000  # float32 1.0
_ALL_ONES = 0xFFFF_FFFF


def _first_minimum(values):
    """The least of ``values`` (equal widths), from one comparison per pair side by side: the
    first value no earlier one is at most and no later one is below is the one chosen."""
    at_most = {(a, b): values[a] <= values[b]
               for a in range(len(values)) for b in range(a + 1, len(values))}
    chosen = 0
    for i, value in enumerate(values):
        first = functools.reduce(operator.and_, [~at_most[j, i] for j in range(i)]
                                 + [at_most[i, j] for j in range(i + 1, len(values))], 1)
        chosen = chosen | Mux(first, value, 0)
    return chosen


class OpKind(enum.Enum, shape=2):
    ROW = 0    # a line of a row: row * factor added to the accumulator (or to +0.0 if first)
    SCALE = 1  # MEAN, after the last row: accumulator * factor (1/L) goes to the output
    ZERO = 2   # empty bag: +0.0 goes to the output


def op_layout(*, slot_bits, line_bits, line_addr_width):
    """What travels with each line through the reorder buffer to the pooler."""
    return data.StructLayout({
        "kind": OpKind,
        "slot": unsigned(slot_bits),
        "line": unsigned(line_bits),
        "first": 1,          # ROW: first row of its bag (start from +0.0)
        "last": 1,           # ROW: last row of a non-MEAN bag (the sum is the result)
        "factor": unsigned(32),
        "out_line": unsigned(line_addr_width),
    })


class GatherIssuer(wiring.Component):
    """Bag slots and the row/line sequencer of the lookup.

    Members
    -------
    start : ``In(1)``
        Pulse: empty every slot.
    stop : ``In(1)``
        Take no new work (abort).
    descriptors : ``In(stream.Signature(descriptor_layout(...)))``
    table_config : ``In(data.ArrayLayout(table_layout(addr_width), max_tables))``
    index_addr, index_data, weight_addr, weight_data :
        Read ports into the index and weight windows (data one cycle after the address).
    index_limit, weight_limit : ``In(32)``
        Positions below these are usable (validated indices; landed weights).
    requests : ``Out(stream.Signature({"addr", "read", "context"}))``
        Line ops for the reorder buffer; ``addr`` is a line address.
    freed : ``Out(32)``
        Index/weight window lines no bag needs any more.
    idle : ``Out(1)``
        No bag open and no op pending.
    error : ``Out(ERROR_LAYOUT)``
        An index at or above its table's rows reached the issuer (only possible if memory
        changed under a running command): the op is not issued. Its table, bag and position
        mean something only with a code (``NONE`` leaves them any value).
    row_issued : ``Out(1)``
        Strobe per row (for the counters).

    With ``registered_ready`` a slot's readiness is a register: each cycle compares the
    slot's position as it will be next cycle (the same, one further if chosen now, or a newly
    loaded bag's start) with the limits of this cycle, and the choice of slot picks the
    outcome. The slot choice then starts from flip-flops, not from the windows' fill counters
    and 32-bit comparisons. Both limits only grow while a pass runs, so an older limit is a
    safe one; a row waits a cycle longer when its index has only just landed. ``start`` and
    ``stop`` clear the readiness. The index limit is compared as a register too, a cycle old
    and 0 the cycle after ``start`` (the lookup's limit may fall in that cycle, as its
    choice of kept data changes with the pass): the comparisons then start from flip-flops,
    not from the lookup's choice of its limit (a ULX3S build's 14.3 ns path into ``ready``).
    A row waits a cycle longer for its index again.

    With ``registered_row_op`` the index, its table's configuration and the op's fields are
    registered in a stage of their own (Q) before the row op is formed, so the row's line
    address (a multiplier and an adder) starts from flip-flops, not from the 16-way choice of
    the index in its window line. It costs a cycle of latency and a deeper row queue
    (:attr:`row_queue_depth`), not throughput.

    With ``registered_index_address`` the chosen slot's fields are registered in a stage of
    their own (A) that reads the index and weight windows, so the windows' read address (the
    select of a 512-bit line choice) comes from flip-flops, not from the round-robin slot
    choice. It too costs a cycle of latency and a deeper row queue, not throughput; and
    ``freed``, the minimum of the bags' positions, is found over two cycles instead of one.
    Stage A registers the grant too, and the fields only a bag's load writes (table, bag,
    weighted, output line, scale) are chosen by that register in stage A, not by the fresh
    grant in front of it.
    """

    def __init__(self, *, max_tables, max_dim, addr_width, bag_slots, registered_ready=False,
                 registered_row_op=False, registered_index_address=False):
        self._registered_ready = bool(registered_ready)
        self._registered_row_op = bool(registered_row_op)
        self._registered_index_address = bool(registered_index_address)
        self._max_tables = max_tables
        self._max_lines = max_dim // LANES
        self._line_bits = max(1, ceil_log2(self._max_lines))
        self._slots = bag_slots
        self._slot_bits = exact_log2(bag_slots)
        self._line_addr_width = addr_width - 6
        self._op_layout = op_layout(slot_bits=self._slot_bits, line_bits=self._line_bits,
                                    line_addr_width=self._line_addr_width)
        super().__init__({
            "start": In(1),
            "stop": In(1),
            "descriptors": In(stream.Signature(descriptor_layout(self._line_addr_width))),
            "table_config": In(data.ArrayLayout(table_layout(addr_width), max_tables)),
            "index_addr": Out(32),
            "index_data": In(32 * LANES),
            "weight_addr": Out(32),
            "weight_data": In(32 * LANES),
            "index_limit": In(32),
            "weight_limit": In(32),
            "requests": Out(stream.Signature(data.StructLayout({
                "addr": unsigned(self._line_addr_width), "read": 1,
                "context": self._op_layout}))),
            "freed": Out(32),
            "idle": Out(1),
            "error": Out(ERROR_LAYOUT),
            "row_issued": Out(1),
        })

    @property
    def op_layout(self):
        return self._op_layout

    @property
    def row_queue_depth(self):
        """Row ops the queue holds: three keep a one-line row per cycle going out, and there
        is room for the ops in stage P (and A, and Q) besides, as ``room`` counts them (and
        for one more with ``registered_ready``, whose room is a cycle old)."""
        return (4 + self._registered_row_op + self._registered_index_address
                + self._registered_ready)

    def elaborate(self, platform):
        m = Module()
        slots = self._slots
        law = self._line_addr_width

        def per_slot(name, shape):
            return [Signal(shape, name=f"{name}_{s}") for s in range(slots)]

        active = per_slot("active", 1)
        final = per_slot("final", 1)       # rows done (or none): only the closing op is left
        empty_bag = per_slot("empty_bag", 1)
        first = per_slot("first", 1)
        weighted = per_slot("weighted", 1)
        mean = per_slot("mean", 1)
        position = per_slot("position", 32)
        last_row = per_slot("last_row", 1)  # position + 1 == end, kept as a register
        # end - 2, where the row before the last is: the next `last_row` is an equality of
        # two registers, not `position + 2 == end` (a carry chain in front of the equality
        # was a ULX3S build's 12.5 ns path into `last_row`). `position` never passes the
        # end, so the equality holds exactly where `position + 2 == end` does.
        before_last = per_slot("before_last", 32)
        table = per_slot("table", 8)
        bag = per_slot("bag", 16)
        out_line = per_slot("out_line", law)
        scale = per_slot("scale", 32)

        # --- choose a slot: round robin over the slots that can issue ------------------------
        index_limit = self.index_limit
        if self._registered_ready:
            index_limit = Signal(32)
            m.d.sync += index_limit.eq(Mux(self.start, 0, self.index_limit))

        def rows_ready_at(row_position, is_weighted):
            return (row_position < index_limit) & (
                ~is_weighted | (row_position < self.weight_limit))

        ready = Signal(slots)
        if not self._registered_ready:
            for s in range(slots):
                m.d.comb += ready[s].eq(active[s] & (final[s] | rows_ready_at(position[s],
                                                                              weighted[s])))

        row_queue = fifo.SyncFIFOBuffered(width=self._row_op_layout().size,
                                          depth=self.row_queue_depth)
        m.submodules.row_queue = ResetInserter(self.start)(row_queue)  # forget an aborted op
        a_valid = Signal()
        p_valid = Signal()
        q_valid = Signal()
        in_stages = p_valid
        if self._registered_index_address:
            in_stages = in_stages + a_valid
        if self._registered_row_op:
            in_stages = in_stages + q_valid
        if self._registered_ready:
            # Room as a register, a cycle old: at most one op enters the stages a cycle, so
            # room for two then is room for one now. The queue is a line deeper for it
            # (row_queue_depth), and `go` then starts from flip-flops, not from the level's
            # adders and comparison.
            room = Signal()
            m.d.sync += room.eq(self.start |
                                (row_queue.level + in_stages + 1 < self.row_queue_depth))
        else:
            room = row_queue.level + in_stages < self.row_queue_depth
        error_seen = Signal()
        # Whether an op may issue this cycle, apart from the slots: a function of flip-flops
        # and `stop` only, so a slot's `chosen_now` is its grant and this one AND (a grant
        # implies its ready bit, so `ready.any()` need not be in front of every slot's
        # enables, as it was in `go`).
        issue_enabled = Signal()
        go = Signal()
        m.d.comb += [issue_enabled.eq(~self.stop & ~error_seen & room),
                     go.eq(issue_enabled & ready.any())]

        # The round robin as a one-hot grant: slot s wins when it is ready and no slot after
        # the last chosen one and before s is. Each grant bit is then a function of the ready
        # bits and the one-hot last choice (two LUT levels for four slots), not of a rotation,
        # a priority encoder and an adder in a row (a ULX3S build's paths into the slots'
        # enables ran through all three).
        last_chosen = Signal(slots, init=1 << (slots - 1))
        grant = Signal(slots)
        for s in range(slots):
            wins = []
            for last in range(slots):
                between = [(last + 1 + k) % slots for k in range((s - last - 1) % slots)]
                wins.append(last_chosen[last] & ~Cat(ready[j] for j in between).any()
                            if between else last_chosen[last])
            m.d.comb += grant[s].eq(ready[s] & Cat(wins).any())
        chosen = Signal(self._slot_bits)           # the grant's index (an OR of its bits)
        m.d.comb += chosen.eq(functools.reduce(
            operator.or_, (Mux(grant[s], s, 0) for s in range(slots))))

        def pick(signals, name, select=grant):
            """The selected slot's value: an AND-OR over the one-hot ``select`` (the grant)."""
            value = Signal.like(signals[0], name=f"chosen_{name}")
            m.d.comb += value.eq(functools.reduce(
                operator.or_, (Mux(select[s], signals[s], 0) for s in range(slots))))
            return value

        c_final, c_empty = pick(final, "final"), pick(empty_bag, "empty")
        c_first, c_weighted, c_mean = pick(first, "first"), pick(weighted, "weighted"), \
            pick(mean, "mean")
        c_position = pick(position, "position")
        c_table, c_bag = pick(table, "table"), pick(bag, "bag")
        c_out_line, c_scale = pick(out_line, "out_line"), pick(scale, "scale")
        c_last_row = pick(last_row, "last_row")

        slot_op = data.StructLayout({
            "kind": OpKind, "slot": unsigned(self._slot_bits), "table": 8, "bag": 16,
            "position": 32, "first": 1, "last": 1, "weighted": 1, "out_line": unsigned(law),
            "scale": 32,
        })
        c_op = Signal(slot_op)
        m.d.comb += [
            c_op.kind.eq(Mux(c_final, Mux(c_empty, OpKind.ZERO, OpKind.SCALE), OpKind.ROW)),
            c_op.slot.eq(chosen), c_op.table.eq(c_table), c_op.bag.eq(c_bag),
            c_op.position.eq(c_position), c_op.first.eq(c_first),
            c_op.last.eq(c_last_row & ~c_mean), c_op.weighted.eq(c_weighted),
            c_op.out_line.eq(c_out_line), c_op.scale.eq(c_scale),
        ]
        with m.If(go):
            m.d.sync += last_chosen.eq(grant)

        # --- stage A (with ``registered_index_address``): the chosen op, registered, reads the
        # index and weight windows. Without, the choice itself reads them.
        p_op = Signal(slot_op)
        if self._registered_index_address:
            # Registered, loaded every cycle (`a_valid` says whether they hold the chosen op,
            # so their enables do not wait for the round robin's `go`): the grant and the
            # fields that choosing the slot changes (its position, first, last, kind).
            a_grant = Signal(slots)
            a_changing = Signal(slot_op)
            m.d.sync += [a_valid.eq(go), p_valid.eq(a_valid & ~self.start), a_grant.eq(grant),
                         a_changing.kind.eq(c_op.kind), a_changing.position.eq(c_op.position),
                         a_changing.first.eq(c_op.first), a_changing.last.eq(c_op.last)]
            # The fields only a load writes are chosen here, in stage A, by the registered
            # grant, not by the fresh one behind the readiness: a slot is loaded only while
            # inactive and chosen only while active, so the slot chosen last cycle still holds
            # them (a load writes them at the end of this cycle at the earliest). The round
            # robin's grant then reaches only the changing fields, not some eighty more bits
            # (a ULX3S build's `a_op.scale` bits were its latest issuer endpoints).
            a_op = Signal(slot_op)
            m.d.comb += [
                a_op.kind.eq(a_changing.kind), a_op.position.eq(a_changing.position),
                a_op.first.eq(a_changing.first), a_op.last.eq(a_changing.last),
                a_op.slot.eq(functools.reduce(
                    operator.or_, (Mux(a_grant[s], s, 0) for s in range(slots)))),
                a_op.table.eq(pick(table, "a_table", a_grant)),
                a_op.bag.eq(pick(bag, "a_bag", a_grant)),
                a_op.weighted.eq(pick(weighted, "a_weighted", a_grant)),
                a_op.out_line.eq(pick(out_line, "a_out_line", a_grant)),
                a_op.scale.eq(pick(scale, "a_scale", a_grant)),
            ]
            with m.If(a_valid):
                m.d.sync += p_op.eq(a_op)
            read_line = a_op.position >> 4
            next_word = Mux(a_valid, a_op.position[:4], p_op.position[:4])
        else:
            m.d.sync += p_valid.eq(go)
            with m.If(go):
                m.d.sync += p_op.eq(c_op)
            read_line = c_position >> 4
            next_word = None
        m.d.comb += [self.index_addr.eq(read_line), self.weight_addr.eq(read_line)]

        # --- stage P: the index (and weight) arrive; pick them and the table's configuration -
        p_kind, p_slot, p_table, p_bag = p_op.kind, p_op.slot, p_op.table, p_op.bag
        p_position, p_first, p_last, p_weighted = (p_op.position, p_op.first, p_op.last,
                                                   p_op.weighted)
        p_out_line, p_scale = p_op.out_line, p_op.scale

        # The index's and weight's 16-way choices in their lines: with
        # ``registered_index_address`` each group of their bits has a copy of the select of
        # its own, loaded as stage P is (one register spread over 64 multiplexers led a
        # ULX3S build's paths, most of it routing).
        replicate = self._registered_index_address
        index = word_of_line(m, self.index_data, next_word, p_position[:4],
                             name="index_select", replicate=replicate)
        weight = word_of_line(m, self.weight_data, next_word, p_position[:4],
                              name="weight_select", replicate=replicate)
        config = Signal(table_layout(law + 6))
        with m.Switch(p_table):
            for t in range(self._max_tables):
                with m.Case(t):
                    m.d.comb += config.eq(self.table_config[t])

        # --- stage Q: check the index and form the row op. With ``registered_row_op`` from
        # registers: the row's line address (a multiplier and an adder) is then the only
        # logic before the queue. Without, the same in stage P's cycle.
        q_op = Signal(self._row_op_layout())
        q_index = Signal(32)
        q_rows = Signal(32)
        q_base_line = Signal(law)
        q_table = Signal(8)
        q_bag = Signal(16)
        q_position = Signal(32)
        if self._registered_row_op:
            stage_q = m.d.sync
            m.d.sync += q_valid.eq(p_valid & ~self.start)
        else:
            stage_q = m.d.comb
            m.d.comb += q_valid.eq(p_valid)
        stage_q += [
            q_op.kind.eq(p_kind),
            q_op.slot.eq(p_slot),
            q_op.first.eq(p_first),
            q_op.last.eq(p_last),
            q_op.factor.eq(Mux(p_kind == OpKind.ROW, Mux(p_weighted, weight, ONE),
                               Mux(p_kind == OpKind.SCALE, p_scale, 0))),
            q_op.out_line.eq(p_out_line),
            q_op.lines.eq(config.dim >> 4),
            q_index.eq(index), q_rows.eq(config.rows), q_base_line.eq(config.base >> 6),
            q_table.eq(p_table), q_bag.eq(p_bag), q_position.eq(p_position),
        ]
        out_of_range = (q_op.kind == OpKind.ROW) & (q_index >= q_rows)

        row_op = Signal(self._row_op_layout())
        m.d.comb += [
            row_op.eq(q_op),
            row_op.row_line.eq(row_first_line(q_base_line, q_index, q_op.lines)),
            row_queue.w_data.eq(row_op),
            row_queue.w_en.eq(q_valid & ~out_of_range & ~error_seen),
            self.row_issued.eq(row_queue.w_en & (q_op.kind == OpKind.ROW)),
        ]
        # The error's code is `error_seen` itself, and its fields load every cycle until an
        # error is seen (they hold the erring op's then): the index's 32-bit comparison
        # reaches one flip-flop, not the enables of the 58 behind it (12.9 ns into them on
        # a ULX3S build). The fields mean something only with a code.
        error_fields = Signal(ERROR_LAYOUT)
        with m.If(self.start):
            m.d.sync += error_seen.eq(0)
        with m.Elif(q_valid & out_of_range):
            m.d.sync += error_seen.eq(1)
        with m.If(~error_seen):
            m.d.sync += [error_fields.table.eq(q_table), error_fields.bag.eq(q_bag),
                         error_fields.position.eq(q_position)]
        m.d.comb += [
            self.error.eq(error_fields),
            self.error.code.eq(Mux(error_seen, ErrorCode.INDEX_OUT_OF_RANGE, ErrorCode.NONE)),
        ]

        # --- expand each row op into its line ops --------------------------------------------
        head = Signal(self._row_op_layout())
        line = Signal(self._line_bits + 1)
        m.d.comb += head.eq(row_queue.r_data)
        context = Signal(self._op_layout)
        m.d.comb += [
            context.kind.eq(head.kind),
            context.slot.eq(head.slot),
            context.line.eq(line),
            context.first.eq(head.first),
            context.last.eq(head.last),
            context.factor.eq(head.factor),
            context.out_line.eq(head.out_line + line),
            self.requests.valid.eq(row_queue.r_rdy & ~self.stop),
            self.requests.payload.addr.eq(head.row_line + line),
            self.requests.payload.read.eq(head.kind == OpKind.ROW),
            self.requests.payload.context.eq(context),
        ]
        last_line = line + 1 == head.lines
        with m.If(self.start):
            m.d.sync += line.eq(0)
        with m.Elif(self.requests.valid & self.requests.ready):
            m.d.sync += line.eq(Mux(last_line, 0, line + 1))
            m.d.comb += row_queue.r_en.eq(last_line)

        # --- slot state: advance the chosen slot, load a free one ----------------------------
        free = Signal(slots)
        m.d.comb += free.eq(~Cat(active))
        load_slot = Signal(self._slot_bits)
        for s in reversed(range(slots)):
            with m.If(free[s]):
                m.d.comb += load_slot.eq(s)
        load = Signal()
        m.d.comb += [
            load.eq(self.descriptors.valid & free.any() & ~self.stop),
            self.descriptors.ready.eq(load),
        ]
        descriptor = self.descriptors.payload
        mode = Signal(PoolingMode)
        with m.Switch(descriptor.table):
            for t in range(self._max_tables):
                with m.Case(t):
                    m.d.comb += mode.eq(self.table_config[t].mode)
        frontier = Signal(32)  # where the next bag to be loaded starts
        no_rows = descriptor.length == 0

        loaded_weighted = mode == PoolingMode.WEIGHTED
        chosen_now = [issue_enabled & grant[s] for s in range(slots)]  # = go & grant[s]
        for s in range(slots):
            # The chosen slot advances from its own registers, not from the chosen_* copies:
            # the slot choice then only enables them, and the increment is not behind the
            # choice's multiplexers (a ULX3S build's longest path went through both).
            with m.If(self.start):
                m.d.sync += active[s].eq(0)
            with m.Elif(chosen_now[s]):
                m.d.sync += last_row[s].eq(position[s] == before_last[s])
                with m.If(final[s] | (last_row[s] & ~mean[s])):
                    m.d.sync += active[s].eq(0)
                with m.Elif(last_row[s]):
                    m.d.sync += [final[s].eq(1), position[s].eq(position[s] + 1)]
                with m.Else():
                    m.d.sync += [position[s].eq(position[s] + 1), first[s].eq(0)]
            with m.Elif(load & (load_slot == s)):
                m.d.sync += [
                    last_row[s].eq(descriptor.length == 1),
                    active[s].eq(1),
                    final[s].eq(no_rows),
                    first[s].eq(1),
                    position[s].eq(descriptor.start),
                ]
            # A slot is loaded only while free and chosen only while active, so the fields
            # that only a load writes need neither the start nor the choice in their enable
            # (the choice's adder and priority encoder were in front of ~100 enables a slot).
            with m.If(load & (load_slot == s)):
                m.d.sync += [
                    empty_bag[s].eq(no_rows),
                    weighted[s].eq(loaded_weighted),
                    mean[s].eq(mode == PoolingMode.MEAN),
                    before_last[s].eq(descriptor.start + descriptor.length - 2),
                    table[s].eq(descriptor.table),
                    bag[s].eq(descriptor.bag),
                    out_line[s].eq(descriptor.out_line),
                    scale[s].eq(descriptor.scale),
                ]
        if self._registered_ready:
            # Each slot's readiness next cycle, whole, as a register: what it will be if the
            # slot is chosen now, loaded now, or left, each from the registers and this
            # cycle's limits, chosen last by the slot's grant. The round robin then starts
            # from one flip-flop a slot, not from a choice among its comparisons.
            for s in range(slots):
                with m.If(self.start | self.stop):
                    m.d.sync += ready[s].eq(0)
                with m.Elif(chosen_now[s]):
                    # (Chosen: the bag closes, its closing op is next, or its next row.)
                    m.d.sync += ready[s].eq(
                        ~final[s] & (last_row[s] & mean[s]
                                     | ~last_row[s] & rows_ready_at(position[s] + 1,
                                                                    weighted[s])))
                with m.Elif(load & (load_slot == s)):
                    m.d.sync += ready[s].eq(no_rows | rows_ready_at(descriptor.start,
                                                                    loaded_weighted))
                with m.Else():
                    m.d.sync += ready[s].eq(active[s] & (final[s] | rows_ready_at(
                        position[s], weighted[s])))
        with m.If(self.start):
            m.d.sync += [frontier.eq(0), last_chosen.eq(1 << (slots - 1))]
        with m.Elif(load):
            m.d.sync += frontier.eq(descriptor.start + descriptor.length)

        # --- the oldest position still needed frees index/weight lines -----------------------
        candidates = [Mux(active[s] & ~final[s], position[s], _ALL_ONES) for s in range(slots)]
        candidates.append(frontier)
        if self._registered_index_address:  # stage A reads its line a cycle after the choice
            candidates.append(Mux(a_valid, a_op.position, _ALL_ONES))
        level = 0
        while len(candidates) > 1:
            if self._registered_index_address and level == 1:
                # From the staged minima in one step, every pair compared at once and the
                # first of the least chosen, not a tree of them: two comparisons and their
                # choices in series were the ULX3S design's lookup `freed` (11.8 ns at seed 1).
                candidates = [_first_minimum(candidates)]
                break
            paired = []
            for a, b in zip(candidates[::2], candidates[1::2], strict=False):
                paired.append(Mux(a < b, a, b))
            if len(candidates) % 2:
                paired.append(candidates[-1])
            candidates = paired
            level += 1
            if self._registered_index_address and level == 1 and len(candidates) > 1:
                # Three levels of 32-bit comparisons in one cycle were a long path (the
                # ULX3S design's lookup `freed`): the first level's minima are registered.
                # The oldest position needed never falls within a command, so a value a
                # cycle older is still a safe bound; `start` clears the stage.
                staged = [Signal(32, name=f"oldest_candidate_{k}")
                          for k in range(len(candidates))]
                m.d.sync += [register.eq(Mux(self.start, 0, candidate))
                             for register, candidate in zip(staged, candidates, strict=True)]
                candidates = staged
        oldest = Signal(32)
        m.d.sync += oldest.eq(Mux(self.start, 0, candidates[0]))
        m.d.comb += [
            self.freed.eq(oldest >> 4),
            self.idle.eq(~Cat(active).any() & ~a_valid & ~p_valid & ~q_valid &
                         (row_queue.level == 0)),
        ]
        return m

    def _row_op_layout(self):
        law = self._line_addr_width
        return data.StructLayout({
            "kind": OpKind,
            "slot": unsigned(self._slot_bits),
            "first": 1,
            "last": 1,
            "factor": unsigned(32),
            "out_line": unsigned(law),
            "row_line": unsigned(law),
            "lines": unsigned(self._line_bits + 1),
        })

