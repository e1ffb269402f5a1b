"""Validation of a command's offsets and indices: indices 16 (a line) per cycle, offsets 4.

Both validators walk a stream of lines holding consecutive uint32 entries and keep a cursor:
every entry below ``checked`` has passed. A line is split into *segments* that never cross a
table boundary, so each cycle's checks concern one table; a line that holds several table
boundaries (tiny tables or batches) takes one extra cycle per boundary. The offsets
validator's segments also stay within a window of :data:`WINDOW` entries: it makes four
32-bit comparisons per entry, and the bag sequencer after it takes one entry per cycle.
"""

import functools
import operator

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ..fanout import lane_copies, replicated_register
from ..params import check_bool
from .layouts import ErrorCode, table_layout

__all__ = ["IndexValidator", "OffsetsMode", "OffsetsValidator", "first_set", "lane_mask"]

LANES = 16
ENTRY_BITS = 32
#: Offsets entries the OffsetsValidator checks per cycle (a window of its line).
WINDOW = 4

#: Where a validator found the first problem.
ERROR_LAYOUT = data.StructLayout({
    "code": ErrorCode,
    "table": unsigned(8),
    "bag": unsigned(16),
    "position": unsigned(32),
})


class OffsetsMode(enum.Enum, shape=1):
    CHECK = 0   # validate (and optionally record where each table's indices start)
    COUNT = 1   # count entries <= threshold (to find the bag holding an index)


def lane_mask(m, low, high, *, name, lanes=LANES):
    """Bit ``k`` set when ``low <= k < high`` (lanes of one segment)."""
    mask = Signal(lanes, name=name)
    for k in range(lanes):
        m.d.comb += mask[k].eq((low <= k) & (high > k))
    return mask


def first_set(m, bits, *, name):
    """(any, index) of the lowest set bit of ``bits``."""
    index = Signal(range(len(bits)), name=name)
    for k in reversed(range(len(bits))):
        with m.If(bits[k]):
            m.d.comb += index.eq(k)
    return bits.any(), index


def error_record(m, error, fields, *, stops, start, registered, recording):
    """The statements that record an error: ``fields`` (name: value) into ``error`` as the
    judgement ``stops`` the walk, or, ``registered``, a cycle later from registers loaded
    with them every cycle (``recording`` is set that cycle; ``start`` cancels the record).
    Returns the statements for the judgement's cycle (none when ``registered``) and, when
    ``registered``, the registers and whether they are recorded this cycle."""
    if not registered:
        return [getattr(error, name).eq(value) for name, value in fields.items()], None, None
    recorded = Signal.like(error, name="recorded_error")
    m.d.sync += [recording.eq(stops & ~start),
                 *(getattr(recorded, name).eq(value) for name, value in fields.items())]
    records = recording & ~start
    with m.If(records):
        m.d.sync += error.eq(recorded)
    return [], recorded, records


def _lanes(line):
    return [line[ENTRY_BITS * k:ENTRY_BITS * (k + 1)] for k in range(LANES)]


class OffsetsValidator(wiring.Component):
    """Check the TBE offsets array (``bags * tables + 1`` entries), or count entries.

    CHECK mode, per entry ``i`` in order: ``offsets[0] == 0`` (else OFFSETS_NOT_FROM_ZERO),
    ``offsets[i] >= offsets[i-1]`` (else OFFSETS_DECREASING), ``offsets[i] <= num_indices``
    and, for the last entry, ``== num_indices`` (else OFFSETS_PAST_END). The error names
    entry ``i`` as table ``i // bags``, bag ``i % bags`` (the last entry is table ``tables``,
    bag 0). With ``capture`` set, ``table_starts[t] = offsets[t * bags]`` for t in 0..tables
    (where each table's indices begin; entry ``tables`` is ``num_indices``).

    COUNT mode counts the entries in ``[first, end)`` whose value is ``<= threshold``.

    Members
    -------
    start : ``In(1)``
        Pulse; ``mode``, ``capture``, ``first``, ``end``, ``bags``, ``tables``,
        ``num_indices``, ``threshold`` are sampled with it. ``lines`` must then deliver the
        lines from the one holding entry ``first`` on. CHECK mode walks the whole array:
        ``first`` is 0.
    lines : ``In(stream.Signature(512))``
    checked : ``Out(32)``
        Entries below this have been processed (and passed, in CHECK mode). It follows the
        walk by :attr:`checked_latency` cycles: a segment's comparisons are registered and
        judged the next cycle, so the walk's cursor never waits for them.
    lines_done : ``Out(32)``
        Lines consumed since ``start``.
    done : ``Out(1)``
        Finished (all entries processed, or an error found) and ``table_starts`` written.
    error : ``Out(ERROR_LAYOUT)``
        ``code`` is NONE unless a check failed.
    count : ``Out(32)``
    table_starts : ``Out(data.ArrayLayout(32, max_tables + 1))``

    With ``registered_window`` the window's entries, and the values each is compared
    against, are registered when the walk takes the segment, and compared the cycle after:
    on an FPGA the line's choice of slot and of window then ends at flip-flops, not at
    sixteen 32-bit comparators and the segment's mask. It costs a cycle of latency
    (``checked`` and ``done``; a bad entry stops the walk two segments late), not
    throughput.

    With ``decide_ahead`` each step is decided a cycle before the walk takes it: the
    segment's length, what it ends and the distances' "near" values after each length are
    registered from the walk's registers, and the step applies them (the cursor and the
    distances move by the registered length through adders). The walk then takes a segment
    every other cycle at most, up to two entries a cycle, still twice what the bag sequencer
    consumes; on an FPGA the decision (a table of eight register bits and the distances'
    subtractions) no longer sits in front of the walk's registers and the line's ready.

    With ``registered_error`` a bad entry stops the walk as it is judged, and the error is
    recorded the cycle after, from registers loaded every cycle (the bag, a subtraction, is
    taken there from registers): the error fields' enables are then one flip-flop, not the
    judged lanes' OR, and the bag's 32-bit subtraction not behind the lanes' priority (a
    ULX3S build's paths into the lookup's error). ``done`` waits for the record.

    With ``registered_start`` the distances' "near" values and whether the walk has entries
    are loaded the cycle after ``start``, from the registers it loads (``left``, ``bags``),
    not from ``end - first`` and ``bags`` as ``start`` samples them: the walk's first step
    waits that cycle. On an FPGA the start's subtraction and its "below 8" carry chain are
    then not in front of ``left_near`` and ``active`` (a ULX3S build's worst path, 13.9 ns,
    from the lookup's start through both carry chains). It costs a cycle at each ``start``
    (``done`` of an empty walk too), not throughput.
    """

    def __init__(self, *, max_tables, registered_window=False, decide_ahead=False,
                 registered_error=False, registered_start=False):
        self._max_tables = max_tables
        self._registered_window = check_bool("Registered window", registered_window)
        self._decide_ahead = check_bool("Decide ahead", decide_ahead)
        self._registered_error = check_bool("Registered error", registered_error)
        self._registered_start = check_bool("Registered start", registered_start)
        super().__init__({
            "start": In(1),
            "mode": In(OffsetsMode),
            "capture": In(1),
            "first": In(32),
            "end": In(32),
            "bags": In(16),
            "tables": In(8),
            "num_indices": In(32),
            "threshold": In(32),
            "lines": In(stream.Signature(ENTRY_BITS * LANES)),
            "checked": Out(32),
            "lines_done": Out(32),
            "done": Out(1),
            "error": Out(ERROR_LAYOUT),
            "count": Out(32),
            "table_starts": Out(data.ArrayLayout(32, max_tables + 1)),
        })

    @property
    def checked_latency(self):
        """Cycles by which ``checked`` follows the walk's cursor (2 with
        ``registered_window``, else 1)."""
        return 1 + self._registered_window

    def elaborate(self, platform):
        m = Module()
        mode = Signal(OffsetsMode)
        capture = Signal()
        end = Signal(32)
        bags = Signal(16)
        num_indices = Signal(32)
        threshold = Signal(32)
        cursor = Signal(32)
        active = Signal()
        table = Signal(8)
        table_entry = Signal(32)       # entry where `table` begins (table * bags)
        # The value lane j's entry must not be below, entry cursor - 1's, is lane j - 1 of
        # the same window for j > 0 (CHECK mode walks from entry 0, so the last segment ended
        # there and read the same entry), and for lane 0 the last entry of the window before,
        # kept here as a step leaves it: no choice of the last segment's end, and one 32-bit
        # register, not the last segment's four entries (their enable, the step, a LUT behind
        # the line's valid, was a net to 128 flip-flops: 14.1 ns, 11.4 of it routing, in a
        # ULX3S build). After `start` it is never read: entry 0 is compared with zero.
        previous = Signal(ENTRY_BITS, name="previous_value")
        by_tables = Signal()           # CHECK mode with bags: segments stop at table ends
        # The walk's decisions (how far this step goes, whether it leaves the line) come from
        # distances kept in registers, each also as a 3-bit "near" register (the distance,
        # or 7 from 7 on), so they are a table of 8 register bits, not 32-bit comparisons
        # behind an adder on the cursor (nor 3-bit ones on carry chains); they drive the line
        # stream's ready.
        left = Signal(32)              # end - cursor
        left_near = Signal(3)          # min(left, 7)
        to_table = Signal(16)          # entries to the next table's start (by_tables)
        table_near = Signal(3)         # min(to_table, 7) with by_tables, else 7
        bags_near = Signal(3)          # table_near at a table's start
        at_table_start = Signal()      # cursor == table_entry

        # A cycle looks at one window of WINDOW entries of the line (the one holding the
        # cursor), not the whole line: a quarter of the comparators, and still faster than the
        # bag sequencer that consumes the entries (one per cycle).
        window_bits = exact_log2(WINDOW)
        line = self.lines.payload
        lanes = _lanes(line)
        values = [Signal(ENTRY_BITS, name=f"value_{j}") for j in range(WINDOW)]
        # With `registered_window` each entry of the window is chosen by a copy of the
        # cursor's window bits of its own, so one register does not spread over 128 bits'
        # multiplexers.
        next_cursor = Signal(32)
        window_selects = lane_copies(m, next_cursor[window_bits:4], cursor[window_bits:4],
                                     copies=WINDOW, name="window_select",
                                     replicate=self._registered_window)
        for j, window_select in enumerate(window_selects):
            with m.Switch(window_select):
                for w in range(LANES // WINDOW):
                    with m.Case(w):
                        m.d.comb += values[j].eq(lanes[w * WINDOW + j])
        low = cursor[:window_bits]

        # This step's segment: up to the window's end (`room`), `end`, or the next table's
        # start, whichever is nearest: its length (one-hot and binary), and whether it ends
        # the walk, the table or the window, all as one table of (low, left_near, table_near).
        length_is = Signal(WINDOW + 1)
        length = Signal(window_bits + 1)
        high = Signal(window_bits + 1)
        ends_walk = Signal()
        ends_table = Signal()
        fills_window = Signal()        # length == room
        with m.Switch(Cat(low, left_near, table_near)):
            for key in range(1 << (window_bits + 6)):
                low_, left_, table_ = (key & (WINDOW - 1), (key >> window_bits) & 7,
                                       key >> (window_bits + 3))
                room_ = WINDOW - low_
                length_ = min(left_, table_, room_)
                with m.Case(key):
                    m.d.comb += [length_is[length_].eq(1), length.eq(length_),
                                 high.eq(low_ + length_), ends_walk.eq(left_ == length_),
                                 ends_table.eq(table_ == length_),
                                 fills_window.eq(room_ == length_)]
        # Where the cursor and the distances go for each length a step may have, from the
        # registers alone: the step's length only chooses among them, so its logic (behind
        # the three distances) is not in front of 32-bit adders and their "below 8" checks
        # (a ULX3S build's lookup paths into `left_small`, `at_table_start` and the line's
        # ready, 15-18 ns).
        def near(distance, applies=1):
            return Mux(applies & (distance < 8), distance[:3], 7)

        segment_end = Signal(32)
        left_after = Signal(32)
        left_near_after = Signal(3)
        to_table_after = Signal(16)
        table_near_after = Signal(3)
        step = Signal()     # the walk takes this segment
        # With `registered_start`, the cycle after `start`: the near values and `active` are
        # loaded from the registers `start` loaded, so no step is decided from them.
        settling = Const(0)
        if self._registered_start:
            settling = Signal()
            m.d.sync += settling.eq(self.start)
        decided = ~settling  # the step of the walk's position is decided
        if self._decide_ahead:
            # Loaded every cycle: the walk's registers change only at a step (or `start`),
            # so the cycle after one they hold its position's decision.
            decided = Signal()
            m.d.sync += decided.eq(~self.start & ~settling & ~step)

            def ahead(value, name):
                registered = Signal.like(value, name=f"decided_{name}")
                m.d.sync += registered.eq(value)
                return registered

            # (The segment's end too: the cursor's next value, and its copies in the window
            # selects, then come from a register, not from an adder behind it.) A segment
            # stays in its window, so the end is the window's or the next one's, with the
            # entry `high` in it: the carry chain is on the cursor's register alone, and the
            # step's length only chooses (a 32-bit adder behind the length's table was a
            # ULX3S netlist's 14.7 ns, 7 levels, into the 34 bits of this register).
            window_after = Signal(32 - window_bits)
            m.d.comb += window_after.eq(cursor[window_bits:] + 1)
            end_ahead = ahead(Cat(high[:window_bits],
                                  Mux(high[window_bits], window_after, cursor[window_bits:])),
                              "segment_end")
            length_is, length, high = (ahead(length_is, "length_is"), ahead(length, "length"),
                                       ahead(high, "high"))
            ends_walk, ends_table, fills_window = (ahead(ends_walk, "ends_walk"),
                                                   ahead(ends_table, "ends_table"),
                                                   ahead(fills_window, "fills_window"))
            lefts_near = [ahead(near(left - k), f"left_near_{k}") for k in range(WINDOW + 1)]
            tables_near = [ahead(near(to_table - k, by_tables), f"table_near_{k}")
                           for k in range(WINDOW + 1)]
            m.d.comb += [
                segment_end.eq(end_ahead), left_after.eq(left - length),
                to_table_after.eq(to_table - length),
                left_near_after.eq(functools.reduce(operator.or_, (
                    Mux(length_is[k], lefts_near[k], 0) for k in range(WINDOW + 1)))),
                table_near_after.eq(functools.reduce(operator.or_, (
                    Mux(length_is[k], tables_near[k], 0) for k in range(WINDOW + 1)))),
            ]
        else:
            chosen = {name: [] for name in ("end", "left", "left_near", "to_table",
                                            "table_near")}
            for k in range(WINDOW + 1):
                left_k = Signal(32, name=f"left_after_{k}")
                to_table_k = Signal(16, name=f"to_table_after_{k}")
                end_k = Signal(32, name=f"segment_end_{k}")
                m.d.comb += [left_k.eq(left - k), to_table_k.eq(to_table - k),
                             end_k.eq(cursor + k)]
                for name, value in (("end", end_k), ("left", left_k),
                                    ("left_near", near(left_k)), ("to_table", to_table_k),
                                    ("table_near", near(to_table_k, by_tables))):
                    chosen[name].append(Mux(length_is[k], value, 0))
            for target, name in ((segment_end, "end"), (left_after, "left"),
                                 (left_near_after, "left_near"), (to_table_after, "to_table"),
                                 (table_near_after, "table_near")):
                m.d.comb += target.eq(functools.reduce(operator.or_, chosen[name]))
        mask = lane_mask(m, low, high, name="mask", lanes=WINDOW)

        # What a segment's checks read: the window's entries, the value each must not be
        # below, and its lanes, first entry and last entry.
        first_window = Signal()
        is_last = Signal(WINDOW)
        m.d.comb += first_window.eq(cursor[window_bits:] == 0)
        for j in range(WINDOW):
            # Lane j holds entry end - 1 when it is the left-th entry from the cursor.
            m.d.comb += is_last[j].eq((left_near == j + 1 - low) & (low <= j))
        segment = {"values": values, "previous": previous, "first_window": first_window,
                   "is_last": is_last, "mask": mask, "window": cursor[window_bits:],
                   "table": table, "table_entry": table_entry, "end": segment_end}
        taken = step    # the segment compared this cycle was taken by the walk this cycle
        if self._registered_window:
            # The segment is registered as the walk takes it and compared the next cycle, so
            # the line's choice of slot and window ends at flip-flops. Loaded every cycle, with
            # no enable: `taken` says whether they hold a segment.
            taken = Signal()
            m.d.sync += taken.eq(step & ~self.start)
            registered = {}
            for name, value in segment.items():
                if isinstance(value, list):
                    registered[name] = [Signal.like(v, name=f"window_{name}_{j}")
                                        for j, v in enumerate(value)]
                    m.d.sync += [r.eq(v) for r, v in zip(registered[name], value, strict=True)]
                else:
                    registered[name] = Signal.like(value, name=f"window_{name}")
                    m.d.sync += registered[name].eq(value)
            segment = registered

        if self._registered_window and self._decide_ahead:
            # Deciding ahead, the walk takes no segment the cycle after a step, so `previous`
            # is loaded then, from the window's registers with `taken` (a flip-flop) as its
            # enable, and the segment's checks read it as it was before the step, unregistered.
            segment["previous"] = previous
            with m.If(taken):
                m.d.sync += previous.eq(segment["values"][WINDOW - 1])
        else:
            with m.If(step & ~self.start):
                m.d.sync += previous.eq(values[WINDOW - 1])

        zero_bad = Signal(WINDOW)
        falls = Signal(WINDOW)
        past = Signal(WINDOW)
        counted = Signal(WINDOW)
        for j in range(WINDOW):
            value = segment["values"][j]
            is_first = segment["first_window"] & (j == 0)
            m.d.comb += [
                zero_bad[j].eq(is_first & (value != 0)),
                falls[j].eq(~is_first & (value < (segment["values"][j - 1] if j
                                                  else segment["previous"]))),
                past[j].eq((value > num_indices)
                           | (segment["is_last"][j] & (value != num_indices))),
                counted[j].eq(value <= threshold),
            ]
        bad = Signal(WINDOW)
        m.d.comb += bad.eq(Mux(mode == OffsetsMode.CHECK,
                               segment["mask"] & (zero_bad | falls | past), 0))

        def entry_at(choice, entries):
            chosen = Signal(32)
            with m.Switch(choice):
                for j in range(WINDOW):
                    with m.Case(j):
                        m.d.comb += chosen.eq(entries[j])
            return chosen

        last_window_of_line = cursor[window_bits:4] == (LANES // WINDOW) - 1
        finishes_line = ends_walk | (last_window_of_line & fills_window)
        # A table start is captured a cycle after the step that finds it: the decision (a
        # 32-bit comparison behind the line's valid) then drives one register, not the enables
        # of every `table_starts` flip-flop. `done` waits for that write.
        capture_pending = Signal()
        capture_every = Signal()   # bags == 0: every table starts at offsets[0]
        capture_table = Signal(8)
        # The walk takes a segment each step whatever its entries hold; the segment's checks
        # are registered and judged the next cycle, which stops the walk (a segment late, two
        # with `registered_window`) on the first bad entry. `checked` only passes judged
        # segments.
        judge = Signal()             # a segment compared last cycle is judged now
        judged_bad = Signal(WINDOW)
        judged_zero_bad = Signal(WINDOW)
        judged_falls = Signal(WINDOW)
        judged_window = Signal(32 - window_bits)
        judged_table = Signal(8)
        judged_table_entry = Signal(32)
        judged_end = Signal(32)
        judged_counted = Signal(WINDOW)  # COUNT: the segment's entries at or below threshold
        recording = Signal()  # with registered_error: the error judged last cycle is recorded
        m.d.comb += [
            step.eq(active & self.lines.valid & decided),
            self.lines.ready.eq(step & finishes_line),
            self.done.eq(~active & ~judge & ~capture_pending & ~recording
                         & (~taken if self._registered_window else 1)),
        ]
        # The step's first entry, read only at `capture_pending` (the cycle after the step),
        # from registers loaded every cycle, so they need no enable in front of their bits.
        # With `registered_window` the window's entries are registered anyway: it is chosen
        # after them by the step's `low`, not before a register of its own (the choice behind
        # the window's was a ULX3S build's 13.9 ns path, from the cursor into that register).
        m.d.sync += capture_pending.eq(0)
        if self._registered_window:
            capture_low = Signal.like(low)
            m.d.sync += capture_low.eq(low)
            capture_value = entry_at(capture_low, segment["values"])
        else:
            capture_value = Signal(32)
            m.d.sync += capture_value.eq(entry_at(low, values))
        with m.If(capture_pending):
            for t in range(self._max_tables + 1):
                with m.If(capture_every | (capture_table == t)):
                    m.d.sync += self.table_starts[t].eq(capture_value)

        m.d.comb += next_cursor.eq(Mux(self.start, self.first, Mux(step, segment_end, cursor)))
        if self._registered_start:
            # No step is taken while settling (nor is `active` cleared), so this needs no
            # priority over the walk; a `start` now, below, still has it.
            with m.If(settling):
                m.d.sync += [left_near.eq(near(left)), table_near.eq(near(bags, by_tables)),
                             bags_near.eq(near(bags, by_tables)), active.eq(left != 0)]
        with m.If(self.start):
            left_at_start = Signal(32)
            by_tables_at_start = (self.mode == OffsetsMode.CHECK) & (self.bags != 0)
            m.d.comb += left_at_start.eq(self.end - self.first)
            m.d.sync += [
                mode.eq(self.mode), capture.eq(self.capture), end.eq(self.end),
                bags.eq(self.bags), num_indices.eq(self.num_indices),
                threshold.eq(self.threshold), cursor.eq(self.first),
                by_tables.eq(by_tables_at_start), left.eq(left_at_start),
                to_table.eq(self.bags), at_table_start.eq(1), table.eq(0), table_entry.eq(0),
                self.count.eq(0),
                self.lines_done.eq(0), self.error.eq(ERROR_LAYOUT.const({})),
                self.checked.eq(self.first), judge.eq(0),
            ]
            if self._registered_start:
                m.d.sync += active.eq(1)   # until settled: `done` waits for it
            else:
                m.d.sync += [left_near.eq(near(left_at_start)),
                             table_near.eq(near(self.bags, by_tables_at_start)),
                             bags_near.eq(near(self.bags, by_tables_at_start)),
                             active.eq(self.first != self.end)]
        with m.Elif(step):
            with m.If(self.lines.ready):
                m.d.sync += self.lines_done.eq(self.lines_done + 1)
            with m.If(capture & (mode == OffsetsMode.CHECK) & ((bags == 0) | at_table_start)):
                m.d.sync += [capture_pending.eq(1), capture_every.eq(bags == 0),
                             capture_table.eq(table)]
            m.d.sync += [cursor.eq(segment_end), left.eq(left_after),
                         left_near.eq(left_near_after), at_table_start.eq(ends_table)]
            with m.If(ends_walk):
                m.d.sync += active.eq(0)
            with m.If(ends_table):
                m.d.sync += [table.eq(table + 1), table_entry.eq(table_entry + bags),
                             to_table.eq(bags), table_near.eq(bags_near)]
            with m.Else():
                m.d.sync += [to_table.eq(to_table_after), table_near.eq(table_near_after)]

        with m.If(~self.start):
            m.d.sync += [
                judge.eq(taken), judged_bad.eq(bad), judged_zero_bad.eq(zero_bad),
                judged_falls.eq(falls), judged_window.eq(segment["window"]),
                judged_table.eq(segment["table"]),
                judged_table_entry.eq(segment["table_entry"]), judged_end.eq(segment["end"]),
                judged_counted.eq(Mux(mode == OffsetsMode.COUNT,
                                      segment["mask"] & counted, 0)),
            ]
        any_bad, bad_lane = first_set(m, judged_bad, name="bad_lane")
        code = Mux(judged_zero_bad.bit_select(bad_lane, 1),
                   ErrorCode.OFFSETS_NOT_FROM_ZERO,
                   Mux(judged_falls.bit_select(bad_lane, 1),
                       ErrorCode.OFFSETS_DECREASING, ErrorCode.OFFSETS_PAST_END))
        position = Cat(bad_lane, judged_window)
        fields = {"code": code, "table": judged_table, "position": position}
        if not self._registered_error:
            fields["bag"] = position - judged_table_entry
        error_fields, recorded, records = error_record(
            m, self.error, fields, stops=judge & any_bad, start=self.start,
            registered=self._registered_error, recording=recording)
        if self._registered_error:
            # The bag is subtracted as the error is recorded, from registers.
            recorded_table_entry = Signal.like(judged_table_entry)
            m.d.sync += recorded_table_entry.eq(judged_table_entry)
            with m.If(records):
                m.d.sync += self.error.bag.eq(recorded.position - recorded_table_entry)
        with m.If(judge & ~self.start):
            # Counted a cycle late too: the count's adder does not follow the comparisons.
            hits = sum(judged_counted[j] for j in range(WINDOW))
            m.d.sync += self.count.eq(self.count + hits)
            with m.If(any_bad):
                m.d.sync += [
                    *error_fields,
                    active.eq(0),
                    judge.eq(0),   # the segment taken meanwhile is past the error
                ]
                if self._registered_window:
                    m.d.sync += taken.eq(0)   # as is the one the walk takes now
            with m.Else():
                m.d.sync += self.checked.eq(judged_end)
        return m


class IndexValidator(wiring.Component):
    """Check that every index is below the row count of its table.

    The table of position ``p`` is the ``t`` with ``table_starts[t] <= p <
    table_starts[t + 1]`` (from the offsets, already validated). An error names the position
    and the table; the bag is found afterwards (see :class:`OffsetsValidator` COUNT mode).

    Members
    -------
    start : ``In(1)``
        Pulse; ``num_indices`` is sampled (with ``replicated_rows``, as it was the cycle
        before). ``lines`` must deliver the index lines from 0.
    table_starts : ``In(data.ArrayLayout(32, max_tables + 1))``
        Read from ``start`` on (with ``replicated_rows``, from the cycle before it); must
        not change while the validator runs.
    tables : ``In(data.ArrayLayout(table_layout(addr_width), max_tables))``
    lines : ``In(stream.Signature(512))``
    checked, lines_done, done, error :
        As for :class:`OffsetsValidator` (``error.bag`` is left 0).

    The current table's row count is a register loaded when the table changes, so the
    lanes' comparators start from flip-flops. With ``replicated_rows`` each lane compares
    against its own copy of it (:func:`hw.fanout.replicated_register`), loaded a cycle after
    the count itself, so the walk waits a cycle at each new table: on an FPGA the one register
    otherwise reaches all 16 lanes' 32-bit comparators over one long net. In that cycle the
    next table's end and flags, computed ahead into registers, catch up too (a table with no
    indices then takes two cycles). ``tables`` is read at ``start`` and at each change of
    table; it must not change while the validator runs.

    With ``registered_error`` a bad index stops the walk as it is judged, and the error is
    recorded the cycle after, from registers (the bad lane's number among them) loaded every
    cycle: the error fields' enables are then one flip-flop, not the judged lanes' OR behind
    the judgement, and their data not the lanes' priority (a ULX3S build's paths into
    ``error.position``). ``done`` waits for the record.
    """

    def __init__(self, *, max_tables, addr_width, replicated_rows=False, registered_error=False):
        self._max_tables = max_tables
        self._replicated_rows = check_bool("Replicated rows", replicated_rows)
        self._registered_error = check_bool("Registered error", registered_error)
        super().__init__({
            "start": In(1),
            "num_indices": In(32),
            "table_starts": In(data.ArrayLayout(32, max_tables + 1)),
            "tables": In(data.ArrayLayout(table_layout(addr_width), max_tables)),
            "lines": In(stream.Signature(ENTRY_BITS * LANES)),
            "checked": Out(32),
            "lines_done": Out(32),
            "done": Out(1),
            "error": Out(ERROR_LAYOUT),
        })

    def elaborate(self, platform):
        m = Module()
        num_indices = Signal(32)
        cursor = Signal(32)
        active = Signal()
        table = Signal(range(self._max_tables + 1))
        if self._replicated_rows:
            # The starts and the index count as they were a cycle before, from registers of
            # their own next to the validator: the engines' command and start registers
            # reach many other places, and their nets were in front of the start's end
            # arithmetic (a ULX3S build's longest path, 19.4 ns).
            table_starts = Signal.like(self.table_starts)
            given_indices = Signal(32)
            m.d.sync += [table_starts.eq(self.table_starts), given_indices.eq(self.num_indices)]
        else:
            table_starts, given_indices = self.table_starts, self.num_indices

        # Where the current table's indices end, a register loaded from the (stable) starts
        # when the table changes: the segment arithmetic starts from flip-flops.
        table_end = Signal(32)
        following_end = Signal(32)  # table_starts[table + 2], the end after the next table
        with m.Switch(table):
            for t in range(self._max_tables - 1):
                with m.Case(t):
                    m.d.comb += following_end.eq(table_starts[t + 2])
        following_rows = Signal(32)  # tables[table + 1].rows, the next table's row count
        with m.Switch(table):
            for t in range(self._max_tables - 1):
                with m.Case(t):
                    m.d.comb += following_rows.eq(self.tables[t + 1].rows)
        rows = Signal(32)       # tables[table].rows
        rows_next = Signal(32)  # what `rows` holds next cycle
        m.d.comb += rows_next.eq(rows)
        m.d.sync += rows.eq(rows_next)
        # The lanes' copies load from `rows` itself, a cycle behind it, so that only a
        # flip-flop is in front of their 512 inputs (loaded from `rows_next` they were behind
        # the start and the walk's step: 17 ns in a ULX3S build). The cycle after `rows`
        # takes a new table's count (`rows_fresh`) the walk waits.
        rows_fresh = Signal()
        if self._replicated_rows:
            # The copies ignore the engine's per-command reset: the walk does not read them
            # until a cycle after `start` loads `rows`. With it, Yosys put `rows & ~reset` in
            # a LUT per bit in front of all sixteen copies (a ULX3S build's update validator,
            # 13.1 ns, 10.3 of them the route from that LUT to the copies).
            rows_per_lane = replicated_register(m, rows, copies=LANES, name="rows",
                                                reset_less=True)
        else:
            rows_per_lane = [rows] * LANES

        line = self.lines.payload
        values = _lanes(line)
        low = cursor[:4]
        # The line after the cursor's, a register kept as the cursor moves: the step's flags
        # for the next line compare it with the table's end, with no adder on the cursor in
        # front of the comparisons (a ULX3S build's paths into `segment_is_table`).
        line_after = Signal(28, init=1)
        line_end = Cat(Const(0, 4), line_after)
        # The segment is the rest of the cursor's line, or of its table if that ends sooner.
        # Offsets validated first mean cursor < table_end <= num_indices while the walk steps,
        # so two line-number equalities decide it, with no comparator in front of the lane
        # mask: the table ends in this line (before its end), or by its end.
        # `table_last_line` (the line of table_end - 1) and `table_end_final` (table_end ==
        # num_indices) are registered with table_end.
        table_last_line = Signal(28)
        table_end_final = Signal()
        # table_end < line_end, table_end <= line_end and table_end == cursor: registers, kept
        # equal to those comparisons as table_end and the cursor move, since they drive the
        # lines' ready and the loads of the table's registers.
        ends_in_line = Signal()
        segment_is_table = Signal()  # the segment ends the table
        table_exhausted = Signal()   # also covers tables with no indices at all
        segment_end = Signal(32)
        m.d.comb += segment_end.eq(Mux(segment_is_table, table_end, line_end))
        # The segment's lanes, low <= k < (table_end[:4] if ends_in_line else LANES), from
        # the registers' decoded values: equalities, not comparisons, which synthesis made
        # carry chains of behind `ends_in_line`'s multiplexer (`high`), ahead of the lanes'
        # comparators and five more LUT levels into `judged_bad` (a ULX3S build's longest
        # path, 14.4 ns). `from_low` and `past_end` are kept as signals of their own (one
        # LUT each per lane), so that synthesis neither chains them through each other nor
        # merges them with the comparators: each lane's comparator, from the line's LUT RAM
        # read and the row count's copy, then ends in one LUT (with its mask) in front of
        # `judged_bad`.
        from_low = Signal(LANES, attrs={"keep": 1})  # low <= k
        past_end = Signal(LANES, attrs={"keep": 1})  # table_end[:4] <= k
        for k in range(LANES):
            m.d.comb += [
                from_low[k].eq(functools.reduce(operator.or_,
                                                [low == j for j in range(k + 1)])),
                past_end[k].eq(functools.reduce(operator.or_,
                                                [table_end[:4] == j for j in range(k + 1)])),
            ]
        mask = Signal(LANES)
        m.d.comb += mask.eq(from_low & ~(past_end & ends_in_line.replicate(LANES)))
        too_big = Signal(LANES)
        for k in range(LANES):
            m.d.comb += too_big[k].eq(values[k] >= rows_per_lane[k])
        bad = Signal(LANES)
        m.d.comb += bad.eq(mask & too_big)

        # As in OffsetsValidator: the walk takes a segment each step whatever its indices
        # hold; the segment's check is registered and judged the next cycle, which stops the
        # walk (a segment late) on the first bad index. `checked` only passes judged segments.
        # Only `judge` says whether the judged registers hold a segment: they load every cycle
        # and have no reset, so they are flip-flops with no enable or reset of their own, which
        # the placer may put next to the lanes' comparators (with `start`'s enable and the
        # engine's reset they sat a 6 ns route from them in a ULX3S build).
        judge = Signal()
        judged_bad = Signal(LANES, reset_less=True)
        judged_line = Signal(28, reset_less=True)
        judged_table = Signal.like(table, reset_less=True)
        judged_end = Signal(32, reset_less=True)
        recording = Signal()  # with registered_error: the error judged last cycle is recorded
        step = Signal()
        m.d.comb += [
            step.eq(active & ~table_exhausted & ~rows_fresh & self.lines.valid),
            # The segment ends the line, or ends the last table (num_indices) inside it.
            self.lines.ready.eq(step & (~ends_in_line | table_end_final)),
            self.done.eq(~active & ~judge & ~recording),
        ]

        def track(end, last_line, exhausted, line):
            """The flags for a table ending at ``end`` (its last index in line ``last_line``)
            and the cursor in line ``line``."""
            return [table_exhausted.eq(exhausted), ends_in_line.eq(end[4:] == line),
                    segment_is_table.eq(last_line == line)]

        def load_table_end(end, indices, at):
            """table_end and what is registered with it, the cursor at (or moving to) ``at``."""
            last_line = (end - 1)[4:32]
            return [table_end.eq(end), table_last_line.eq(last_line),
                    table_end_final.eq(end == indices),
                    *track(end, last_line, end == at, at[4:])]

        def new_rows(value):
            m.d.comb += rows_next.eq(value)
            if self._replicated_rows:
                m.d.sync += rows_fresh.eq(1)

        if self._replicated_rows:
            # The next table's end and flags, computed every cycle into registers: a change
            # of table then loads registers, not the end's subtraction and the line
            # comparisons behind the table's choice (a ULX3S build's paths into
            # `segment_is_table`). They are a cycle stale after each change of table, when
            # `rows_fresh` holds the walk anyway.
            # The end after the next table is a register too, loaded with the table (at a
            # change of table from a register loaded every cycle with the end after that), so
            # the flags' comparisons start from flip-flops, not behind the starts' choice by
            # `table` (a ULX3S build's `next_is_table`, 12.2 ns routed, 8 levels in the
            # netlist, and `next_exhausted`, 12.2 ns). That register is stale the cycle after
            # `table` changes, when `rows_fresh` holds the walk and the table.
            following_end = Signal(32, name="following_end_kept")
            end_after_following = Signal(32)  # table_starts[table + 3]
            with m.Switch(table):
                for t in range(self._max_tables - 2):
                    with m.Case(t):
                        m.d.sync += end_after_following.eq(table_starts[t + 3])
                with m.Default():
                    m.d.sync += end_after_following.eq(0)
            next_end = Signal(32)
            next_last_line = Signal(28)
            following_last_line = (following_end - 1)[4:32]
            m.d.sync += [next_end.eq(following_end), next_last_line.eq(following_last_line)]
            next_flags = [Signal(name=f"next_{name}") for name in
                          ("final", "exhausted", "ends_in_line", "is_table")]
            # The next table's last line is table_end's line when its end is inside that
            # line, or the line after when its end starts the line after: line equalities,
            # with no subtraction behind the starts' choice in front of them (a ULX3S build's
            # 13.6 ns path into `next_is_table`, 6 levels in the netlist).
            same_line = following_end[4:] == table_end[4:]
            end_line_after = Signal(28)
            m.d.comb += end_line_after.eq(table_end[4:] + 1)
            m.d.sync += [flag.eq(value) for flag, value in zip(next_flags, [
                following_end == num_indices, following_end == table_end, same_line,
                Mux(following_end[:4] == 0, following_end[4:] == end_line_after, same_line)],
                strict=True)]
            next_final, next_exhausted, next_ends_in_line, next_is_table = next_flags

        def next_table():
            # The cursor is at (or moves to) the old table_end.
            if self._replicated_rows:
                m.d.sync += [table.eq(table + 1), table_end.eq(next_end),
                             following_end.eq(end_after_following),
                             table_last_line.eq(next_last_line), table_end_final.eq(next_final),
                             table_exhausted.eq(next_exhausted),
                             ends_in_line.eq(next_ends_in_line),
                             segment_is_table.eq(next_is_table)]
            else:
                m.d.sync += [table.eq(table + 1),
                             *load_table_end(following_end, num_indices, at=table_end)]
            new_rows(following_rows)

        if self._replicated_rows:
            m.d.sync += rows_fresh.eq(0)
        with m.If(self.start):
            new_rows(self.tables[0].rows)
            m.d.sync += [
                num_indices.eq(given_indices), cursor.eq(0), line_after.eq(1), table.eq(0),
                *load_table_end(table_starts[1], given_indices, at=Const(0, 32)),
                *([following_end.eq(table_starts[2] if self._max_tables >= 2 else 0)]
                  if self._replicated_rows else []),
                active.eq(given_indices != 0), self.lines_done.eq(0),
                self.error.eq(ERROR_LAYOUT.const({})), self.checked.eq(0), judge.eq(0),
            ]
        with m.Elif(active & table_exhausted & ~rows_fresh):
            next_table()
        with m.Elif(step):
            with m.If(self.lines.ready):
                m.d.sync += self.lines_done.eq(self.lines_done + 1)
            m.d.sync += [cursor.eq(segment_end),
                         line_after.eq(Mux(segment_is_table, table_end[4:] + 1, line_after + 1))]
            with m.If(segment_is_table):
                next_table()
                with m.If(table_end_final):
                    m.d.sync += active.eq(0)
            with m.Else():
                # On to the next line, still short of table_end (which is past this line).
                m.d.sync += track(table_end, table_last_line, 0, line_after)

        m.d.sync += [judged_bad.eq(bad), judged_line.eq(cursor[4:]), judged_table.eq(table),
                     judged_end.eq(segment_end)]
        with m.If(~self.start):
            m.d.sync += judge.eq(step)
        any_bad, bad_lane = first_set(m, judged_bad, name="bad_lane")
        error_fields, _, _ = error_record(
            m, self.error, {"code": ErrorCode.INDEX_OUT_OF_RANGE, "table": judged_table,
                            "position": Cat(bad_lane, judged_line)},
            stops=judge & any_bad, start=self.start, registered=self._registered_error,
            recording=recording)
        with m.If(judge & ~self.start):
            with m.If(any_bad):
                m.d.sync += [
                    *error_fields,
                    active.eq(0),
                    judge.eq(0),   # the segment taken meanwhile is past the error
                ]
            with m.Else():
                m.d.sync += self.checked.eq(judged_end)
        return m
