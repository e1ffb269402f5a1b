"""Turn the validated offsets into one descriptor per bag, in TBE order (table-major)."""

from amaranth.hdl import Cat, Module, Mux, ResetInserter, Signal, unsigned
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.fanout import WORD_SELECT_COPIES, lane_copies, replicated_register, word_of_line
from hw.params import check_bool

from .layouts import PoolingMode, table_layout
from .reciprocal import Reciprocal
from .update_reciprocal import Reciprocal as SequentialReciprocal

__all__ = ["MEAN_RECIPROCALS", "BagSequencer", "check_mean_reciprocal", "descriptor_layout"]

LANES = 16

#: How MEAN factors are computed: a pipelined divider (a descriptor per cycle) or a
#: sequential one (a MEAN bag per :attr:`SequentialReciprocal.latency` cycles, far smaller).
MEAN_RECIPROCALS = ("pipelined", "sequential")


def check_mean_reciprocal(value):
    """Validate a ``mean_reciprocal`` parameter (one of :data:`MEAN_RECIPROCALS`)."""
    if value not in MEAN_RECIPROCALS:
        raise ValueError(f"MEAN reciprocal must be one of {', '.join(MEAN_RECIPROCALS)}, "
                         f"not {value!r}")
    return value


def descriptor_layout(line_addr_width):
    """One bag: its table, number, index range, output line and MEAN factor."""
    return data.StructLayout({
        "table": unsigned(8),
        "bag": unsigned(16),
        "start": unsigned(32),      # position of its first index in ``indices``
        "length": unsigned(32),
        "out_line": unsigned(line_addr_width),  # line address of its first output line
        "scale": unsigned(32),      # float32(1) / float32(length) (MEAN tables only)
    })


class BagSequencer(wiring.Component):
    """Walk ``offsets[0 .. bags*tables]`` and emit a descriptor per bag, one per cycle.

    Bag ``b`` of table ``t`` writes its pooled row at output line ``output_line +
    b * row_lines + (sum of dim/16 over tables before t)``; that address is kept as a running
    sum, so no multiplier is needed. With ``mean_reciprocal="pipelined"`` every bag's
    descriptor goes through a pipelined :class:`Reciprocal` (its factor is used for MEAN bags);
    a descriptor enters it only when the FIFO behind it has room, so nothing is ever dropped.
    With ``"sequential"`` a MEAN bag's descriptor waits for a sequential divider
    (``hw/emb/update_reciprocal.py``, about 15 cycles) and the walk waits with it; other bags
    pass at once with ``scale`` 0 (unused). Both are bit-exact with ``float32(1) / L``.

    With ``registered_descriptor`` a bag's offsets and fields go into a register stage of their
    own (E), and its descriptor goes on from there a cycle later, not at the subtraction of
    its length and the queue (or divider) behind it; the entries are fetched out of the lines
    (once validated) into a queue of three words, two cycles ahead of the walk, so the offset
    word's 16-way choice in its line ends at flip-flops, over two cycles (a 4-way choice in
    each quad of the line's words, registered, then the quad's), and neither the line
    stream's ``ready`` nor the word's select waits for the walk's take; each group of the
    word's bits is chosen by copies of the selects of its own; and whether an entry is
    validated, and the walk's last, come from registers. It costs three cycles of latency
    (and one more where the walk waits for the validator), not throughput. The
    sequential divider then finds a length's highest bit a cycle before shifting by it (a
    cycle more per MEAN bag).

    With ``given_entries`` the walk's entry count, ``bags * tables + 1``, is the ``entries``
    input (sampled with ``start``), where a caller holds it in a register already.

    ``reciprocal_steps_per_cycle`` (a divisor of 24, default 2) is how many quotient bits the
    sequential divider finds a cycle: 1 puts one 25-bit compare-and-subtract between its
    registers instead of two, at 12 more cycles per MEAN bag. The pipelined divider ignores it.

    Members
    -------
    start : ``In(1)``
        Pulse; ``bags``, ``tables``, ``output_line``, ``row_lines`` are sampled.
    lines : ``In(stream.Signature(512))``
        The offsets lines from line 0.
    limit : ``In(32)``
        Offsets entries below this have been validated and may be used.
    entries : ``In(32)``
        With ``given_entries``: ``bags * tables + 1``.
    freed : ``Out(32)``
        Offsets lines no longer needed.
    descriptors : ``Out(stream.Signature(descriptor_layout(...)))``
    done : ``Out(1)``
        Every descriptor has been handed over.
    """

    def __init__(self, *, max_tables, addr_width, fifo_depth=None, mean_reciprocal="pipelined",
                 registered_descriptor=False, reciprocal_steps_per_cycle=2,
                 given_entries=False):
        check_mean_reciprocal(mean_reciprocal)
        self._given_entries = check_bool("Given entries", given_entries)
        self._registered_descriptor = check_bool("Registered descriptor", registered_descriptor)
        self._max_tables = max_tables
        self._line_addr_width = addr_width - 6
        self._pipelined = mean_reciprocal == "pipelined"
        if self._pipelined:
            self._reciprocal = Reciprocal(
                tag_width=descriptor_layout(self._line_addr_width).size)
            # (One more with registered_descriptor, whose room is a bag short: see there.)
            self._fifo_depth = (fifo_depth
                                or self._reciprocal.latency + 4 + self._registered_descriptor)
        else:
            self._reciprocal = SequentialReciprocal(
                steps_per_cycle=reciprocal_steps_per_cycle,
                registered_leading=self._registered_descriptor)
            # Descriptors wait only for the gather issuer here, not for a pipeline.
            self._fifo_depth = fifo_depth or 4
        super().__init__({
            "start": In(1),
            "bags": In(16),
            "tables": In(8),
            "output_line": In(self._line_addr_width),
            "row_lines": In(20),
            "table_config": In(data.ArrayLayout(table_layout(addr_width), max_tables)),
            "lines": In(stream.Signature(32 * LANES)),
            "limit": In(32),
            **({"entries": In(32)} if self._given_entries else {}),
            "freed": Out(32),
            "descriptors": Out(stream.Signature(descriptor_layout(self._line_addr_width))),
            "done": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        layout = descriptor_layout(self._line_addr_width)
        # `start` also empties the pipeline and the FIFO (after an aborted command).
        reciprocal = self._reciprocal
        m.submodules.reciprocal = ResetInserter(self.start)(reciprocal)
        queue = fifo.SyncFIFOBuffered(width=layout.size, depth=self._fifo_depth)
        m.submodules.queue = ResetInserter(self.start)(queue)

        bags = Signal(16)
        entries = Signal(32)          # bags * tables + 1
        entry = Signal(32)            # next offsets entry to read
        previous = Signal(32)         # offsets[entry - 1]
        table = Signal(8)
        bag = Signal(16)
        row_lines = Signal(20)
        table_line = Signal(self._line_addr_width)  # output line of (bag 0, this table)
        bag_line = Signal(self._line_addr_width)
        active = Signal()
        # Whether the entry held is past the first, and the bag the table's last, as
        # registers: the table's and the bag's line registers are then enabled by `take` and
        # two flip-flops, not by 32- and 16-bit comparisons behind it (a ULX3S build's path
        # into `table_line`).
        past_first = Signal()
        last_bag = Signal()           # bag + 1 == bags
        in_flight = Signal(range(self._fifo_depth + 1))

        take = Signal()
        value = Signal(32)            # offsets[entry] (when an entry is there to take)
        if self._registered_descriptor:
            # The entries are fetched out of the lines into a queue of words ahead of the
            # walk, by registers of their own (`fetch_entry`): the offset word's 16-way choice
            # (behind the line's 3-way slot choice in the prefetch) then ends at flip-flops,
            # not at stage E or `previous` behind `take`; and neither the line stream's ready
            # (the prefetch's pointer copies) nor the word's select copies wait for `take`. An
            # entry is fetched only once validated (so the queue holds no word it may not
            # use), and the walk takes from the queue: latency, not throughput.
            fetch_entry = Signal(32)
            fetched = Signal()
            fetch = Signal()
            # The word's choice takes two cycles (stage F): the word at the select's low bits
            # in each quad of the line's words, with the slot's choice in front, into
            # registers, then the quad's (a 4-way choice) into the queue. At once, the slot's
            # and the 16-way choice over the whole line were 13.9 ns into the queue on a
            # ULX3S build (4 LUT levels, the line's bits spread over the die). Each group of
            # the word's bits has copies of the selects of its own.
            next_word = Mux(self.start, 0, Mux(fetch, (fetch_entry + 1)[:4], fetch_entry[:4]))
            selects = lane_copies(m, next_word, fetch_entry[:4], copies=WORD_SELECT_COPIES,
                                  name="word_select", replicate=True)
            bits = 32 // WORD_SELECT_COPIES
            quads = [Signal(32, name=f"quad_{q}") for q in range(LANES // 4)]
            for copy, chosen in enumerate(selects):
                group = slice(copy * bits, (copy + 1) * bits)
                for q, quad in enumerate(quads):
                    words_of_quad = self.lines.payload[128 * q:128 * (q + 1)]
                    m.d.sync += quad[group].eq(words_of_quad.word_select(chosen[:2], 32)[group])
            f_valid = Signal()       # stage F holds a fetched entry's quads
            # (No reset: they are read only with `f_valid`, which has one.)
            quad_selects = replicated_register(m, fetch_entry[2:4], copies=4,
                                               name="quad_select", reset_less=True)
            word = Signal(32)
            quad_bits = 32 // len(quad_selects)
            for copy, chosen in enumerate(quad_selects):
                group = slice(copy * quad_bits, (copy + 1) * quad_bits)
                m.d.comb += word[group].eq(Cat(*quads).word_select(chosen, 32)[group])
            # Three words keep a take every cycle with one in stage F.
            queued = 3
            words = [Signal(32, name=f"word_{k}") for k in range(queued)]
            words_held = Signal(range(queued + 1))
            owed = Signal(range(queued + 1))   # words held and in stage F
            word_in = Signal(range(queued))    # the queued word written next
            word_out = Signal(range(queued))   # the queued word taken next
            with m.Switch(word_out):
                for k, held in enumerate(words):
                    with m.Case(k):
                        m.d.comb += value.eq(held)
            for k, held in enumerate(words):
                with m.If(f_valid & (word_in == k)):
                    m.d.sync += held.eq(word)
        else:
            # The offset word's 16-way choice in its line, at the entry taken.
            next_word = Mux(self.start, 0, Mux(take, (entry + 1)[:4], entry[:4]))
            m.d.comb += value.eq(word_of_line(m, self.lines.payload, next_word, entry[:4],
                                              name="word_select", replicate=False))

        # Stage E holds a formed descriptor (with ``registered_descriptor``); ``accept`` says
        # the divider side takes one this cycle: one MEAN bag at a time with the sequential
        # divider, and nothing overtakes it.
        e_valid = Signal()
        accept = Signal()
        emit = Signal()
        mean = Signal()
        if self._pipelined:
            m.d.comb += accept.eq(1)
        elif self._registered_descriptor:
            # Whether the divider is free (no MEAN bag waits, the divider idle), kept as a
            # register: taking an offsets line then starts at it, not at the divider's state
            # decode and the count of bags at it (in front of the offsets prefetch's pointer
            # copies on a ULX3S build). A MEAN bag takes the divider; its factor (the
            # divider's last cycle before Idle) or a start frees it.
            divider_free = Signal(init=1)
            with m.If(self.start | reciprocal.o.valid):
                m.d.sync += divider_free.eq(1)
            with m.Elif(emit & mean):
                m.d.sync += divider_free.eq(0)
            m.d.comb += accept.eq(divider_free)
        else:
            m.d.comb += accept.eq((in_flight == 0) & reciprocal.i.ready)
        if self._registered_descriptor:
            # Room for one more, from a register: the bags held (queued, at the divider and
            # in stage E) grow by one a cycle at most, so one short of full last cycle is
            # room now (a bag waits a cycle more when the queue is one short of full).
            room_ahead = Signal()
            m.d.sync += room_ahead.eq(queue.level + in_flight + e_valid + 1 < self._fifo_depth)
            room = room_ahead & (~e_valid | accept)
        else:
            room = (queue.level + in_flight < self._fifo_depth) & accept
        # Whether the entry held is validated, and the walk's last. With
        # ``registered_descriptor`` both come from registers, so neither the fetch nor the
        # walk waits for a 32-bit comparison: each is made for the entry held (fetched next,
        # or taken next) and the one after it, and the next cycle picks by whether one was
        # fetched (taken). ``limit`` only grows during a walk, so last cycle's is a safe
        # bound (an entry is fetched a cycle late at worst). The cycle after ``start``
        # fetches nothing: its comparisons were of the walk before.
        validated = Signal()
        last_entry = Signal()
        # Whether taking (fetching) the entry also frees its line (the line's last word, or
        # the walk's last entry).
        frees_line = Signal()
        if self._registered_descriptor:
            # (`start` clears the validations: the cycle after it fetches nothing.) Whether
            # the entry is validated and frees its line is a register of its own, so the
            # line stream's ready is the fetch's logic, not behind it (in front of the offsets
            # prefetch's pointer copies on a ULX3S build).
            took = Signal()
            validated_held, validated_next = Signal(), Signal()
            last_held, last_next = Signal(), Signal()
            frees_held, frees_next = Signal(), Signal()
            m.d.sync += [
                took.eq(take),
                fetched.eq(fetch),
                validated_held.eq(~self.start & (fetch_entry < self.limit)),
                validated_next.eq(~self.start & (fetch_entry + 1 < self.limit)),
                last_held.eq(entry + 1 == entries), last_next.eq(entry + 2 == entries),
                frees_held.eq(~self.start & (fetch_entry < self.limit) &
                              ((fetch_entry[:4] == LANES - 1) | (fetch_entry + 1 == entries))),
                frees_next.eq(~self.start & (fetch_entry + 1 < self.limit) &
                              ((fetch_entry[:4] == LANES - 2) | (fetch_entry + 2 == entries))),
            ]
            m.d.comb += [validated.eq(Mux(fetched, validated_next, validated_held)),
                         last_entry.eq(Mux(took, last_next, last_held)),
                         frees_line.eq(Mux(fetched, frees_next, frees_held))]
            # The walk takes from the queue (every word in it validated); the fetch fills it
            # when it has room without this cycle's take, so the words owed (held and in
            # stage F), not `take`, decide it.
            fetches = active & self.lines.valid & (owed != queued)
            m.d.comb += [
                fetch.eq(fetches & validated),
                take.eq(active & (words_held != 0) & room),
                self.lines.ready.eq(fetches & frees_line),
            ]
            with m.If(self.start):
                m.d.sync += [fetch_entry.eq(0), f_valid.eq(0), words_held.eq(0), owed.eq(0),
                             word_in.eq(0), word_out.eq(0)]
            with m.Else():
                m.d.sync += [f_valid.eq(fetch), words_held.eq(words_held + f_valid - take),
                             owed.eq(owed + fetch - take)]
                with m.If(fetch):
                    m.d.sync += fetch_entry.eq(fetch_entry + 1)
                with m.If(f_valid):
                    m.d.sync += word_in.eq(Mux(word_in == queued - 1, 0, word_in + 1))
                with m.If(take):
                    m.d.sync += word_out.eq(Mux(word_out == queued - 1, 0, word_out + 1))
        else:
            m.d.comb += [validated.eq(entry < self.limit), last_entry.eq(entry + 1 == entries),
                         frees_line.eq(validated & ((entry[:4] == LANES - 1) | last_entry))]
            takes = active & self.lines.valid & room
            m.d.comb += [take.eq(takes & validated),
                         self.lines.ready.eq(takes & frees_line)]
        m.d.comb += [
            self.freed.eq(entry >> 4),
            self.done.eq(~active & (in_flight == 0) & (queue.level == 0) & ~e_valid),
        ]

        formed = Signal(layout)
        form = Signal()
        dim = Signal(16)
        mode = Signal(PoolingMode)
        with m.Switch(table):
            for t in range(self._max_tables):
                with m.Case(t):
                    m.d.comb += [dim.eq(self.table_config[t].dim),
                                 mode.eq(self.table_config[t].mode)]
        m.d.comb += [
            form.eq(take & past_first),
            formed.table.eq(table),
            formed.bag.eq(bag),
            formed.start.eq(previous),
            formed.length.eq(value - previous),
            formed.out_line.eq(bag_line),
            self.descriptors.valid.eq(queue.r_rdy),
            self.descriptors.payload.eq(queue.r_data),
            queue.r_en.eq(self.descriptors.ready),
        ]
        # ``descriptor`` goes on when ``emit``; ``mean`` says it is a MEAN bag's.
        descriptor = Signal(layout)
        if self._registered_descriptor:
            # The bag's end offset is registered as read, and its length subtracted after.
            e_formed = Signal(layout)
            e_end = Signal(32)
            e_mean = Signal()
            with m.If(self.start):
                m.d.sync += e_valid.eq(0)
            with m.Elif(~e_valid | accept):
                m.d.sync += [e_valid.eq(form), e_formed.eq(formed), e_end.eq(value),
                             e_mean.eq(mode == PoolingMode.MEAN)]
            m.d.comb += [descriptor.eq(e_formed),
                         descriptor.length.eq(e_end - e_formed.start),
                         emit.eq(e_valid & accept), mean.eq(e_mean)]
        else:
            m.d.comb += [emit.eq(form), descriptor.eq(formed),
                         mean.eq(mode == PoolingMode.MEAN)]
        finished = Signal(layout)
        if self._pipelined:
            m.d.comb += [
                reciprocal.i.valid.eq(emit),
                reciprocal.i.payload.n.eq(descriptor.length),
                reciprocal.i.payload.tag.eq(descriptor),
                finished.eq(reciprocal.o.payload.tag),
                finished.scale.eq(reciprocal.o.payload.result),
                queue.w_en.eq(reciprocal.o.valid),
                queue.w_data.eq(finished),
            ]
            with m.If(self.start):
                m.d.sync += in_flight.eq(0)
            with m.Else():
                m.d.sync += in_flight.eq(in_flight + emit - reciprocal.o.valid)
        else:
            waiting = Signal(layout)  # the MEAN bag whose factor is being computed
            m.d.comb += [
                reciprocal.i.valid.eq(emit & mean),
                reciprocal.i.payload.eq(descriptor.length),
                reciprocal.o.ready.eq(1),
                finished.eq(waiting),
                finished.scale.eq(reciprocal.o.payload),
                queue.w_en.eq(Mux(in_flight != 0, reciprocal.o.valid, emit & ~mean)),
                queue.w_data.eq(Mux(in_flight != 0, finished, descriptor)),
            ]
            with m.If(self.start):
                m.d.sync += in_flight.eq(0)
            with m.Elif(emit & mean):
                m.d.sync += [in_flight.eq(1), waiting.eq(descriptor)]
            with m.Elif(reciprocal.o.valid):
                m.d.sync += in_flight.eq(0)

        # With ``given_entries`` the count is the caller's register, not a multiplier (and
        # its adder) of our own in front of `entries` (synthesis shares it with the
        # lookup's: 12.7 ns from the command register on a ULX3S build).
        walk_entries = self.entries if self._given_entries else self.bags * self.tables + 1
        with m.If(self.start):
            m.d.sync += [
                bags.eq(self.bags), entries.eq(walk_entries), entry.eq(0),
                previous.eq(0), table.eq(0), bag.eq(0), row_lines.eq(self.row_lines),
                table_line.eq(self.output_line), bag_line.eq(self.output_line),
                active.eq(1), past_first.eq(0), last_bag.eq(self.bags == 1),
            ]
        with m.Elif(take):
            m.d.sync += [entry.eq(entry + 1), previous.eq(value), past_first.eq(1)]
            with m.If(last_entry):
                m.d.sync += active.eq(0)
            with m.If(form):
                with m.If(last_bag):
                    next_table_line = table_line + (dim >> 4)
                    m.d.sync += [bag.eq(0), table.eq(table + 1), table_line.eq(next_table_line),
                                 bag_line.eq(next_table_line), last_bag.eq(bags == 1)]
                with m.Else():
                    m.d.sync += [bag.eq(bag + 1), bag_line.eq(bag_line + row_lines),
                                 last_bag.eq(bag + 2 == bags)]
        return m

