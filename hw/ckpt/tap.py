"""Log-on-lookup: turn the table lines a LOOKUP reads into undo-log entries, with no extra read.

While ``enable`` is set (a LOOKUP runs under logging), every read address the embedding engine
issues is compared with the extents of the command's tables; a table read is remembered by its
AXI ID (its line address, in a small memory indexed by ID), and each beat of read data that
comes back on that ID becomes an entry ``{line address, old contents}``. Reads of the index,
offset and weight buffers (outside every table) are ignored, and so is data with an error
response. The EmbeddingEngine gives each row read its own ID until the data is back, so one
table read per ID is in flight; should a second table read with the same ID come while the
first is in flight, its address is held until the first has returned all its beats. Bursts
are followed beat by beat (the remembered line advances).

Deduplication (``dedup_entries`` > 0): a direct-mapped filter of the lines logged in this
batch, indexed by an XOR fold of the line address and holding the full address, so a hit is
always exact (duplicates of one batch hold the same old value; skipping them saves PMEM write
bandwidth, the scarce resource). A miss that evicts another line only costs a second entry
for that line later, which is harmless. The filter is emptied by ``start``, at no cost: each
word holds the epoch it was written in, and only a word of the bank's current epoch is valid
(a bank is swept only when its epochs wrap, ``epoch_bits``), so the filter, valid bits
included, is block RAM of any size.

Membership (``member_line`` -> ``member_hit``): may a line have been read as a table line since
``start``? Never a false negative, for the write tap (:mod:`hw.ckpt.write_tap`), which logs the
new value of each line a relaxed UPDATE(N) writes that LOOKUP(N + 1) has logged. A line in the
filter is a member; so is any table line whose filter slot has lost a line of this batch to
another one (the lost line may be the one asked about). Without a filter every table line is.

Shared lines (``skip_previous``, with a filter): ``start`` keeps the previous batch's filter
beside the new one. When LOOKUP(N + 1) is logged ahead, a line that batch N logged (an exact hit
in that filter) is one UPDATE(N) will rewrite, so its old value here would be superseded by the
write tap's entry anyway: it is remembered (so it is a member, and its repeats are duplicates)
but not logged. This relies on UPDATE(N) writing every line LOOKUP(N) read (the host sends both
with the same batch), as the undo log relies on it writing no other.

Entries go into a FIFO of ``buffer_depth`` lines; when it is nearly full the engine's read data
is held (``r_hold``), so an entry is never dropped; the log writer drains it in the background
(the host's MLP work overlaps it), and UPDATE waits until it is empty and persistent. With
``lossy`` set the read data is never held: an entry that finds the FIFO full is dropped
instead (not remembered by the filter either) and ``dropped`` is set, so that a second pass
over the same reads (a replay, without ``start``) logs exactly the lines that are missing.
"""

from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from hw.emb.layouts import table_layout

from .layouts import LINE_BITS, log_entry_layout

__all__ = ["LookupTap", "fold"]

#: Pipeline stages between an R handshake and the FIFO write (4), plus one: the FIFO keeps this
#: much room (the join cannot hold a beat it has already offered).
_PIPELINE = 5


def fold(value, width, bits):
    """XOR-fold a ``width``-bit value into ``bits`` bits (the filter's index hash)."""
    folded = value[:bits]
    for low in range(bits, width, bits):
        folded = folded ^ value[low:min(low + bits, width)]
    return folded


class LookupTap(wiring.Component):
    """Observes the engine's AR and R channels and produces undo-log entries.

    Parameters (keyword-only)
    -------------------------
    addr_width, id_width, max_tables : int
    buffer_depth : int
        Entries buffered before the read data is held (a power of two, >= 8).
    dedup_entries : int
        Lines in the duplicate filter (each of its two banks): 0 (off) or a power of two,
        2..16384. The filter is in memory, valid bits included (``epoch_bits``).
    epoch_bits : int
        Width of each filter word's epoch, 1..16: ``start`` empties a bank by moving its epoch
        on, and only every ``2**epoch_bits - 1``-th use of a bank (and after a reset) sweeps
        it, which takes ``sweep_cycles`` before ``ready``.

    Members
    -------
    tables : ``In(data.ArrayLayout(table_layout(addr_width), max_tables))``
    table_count : ``In(8)``
        The command's table count (tables beyond it are not logged).
    start : ``In(1)``
        Compute the table extents and empty the filter (``ready`` afterwards).
    ready : ``Out(1)``
    enable : ``In(1)``
        Record table reads (hold it only while the engine runs a LOOKUP).
    arvalid, arid, araddr, arlen : ``In(...)``
        The engine's read address channel, as offered (before the join).
    ar_fire : ``In(1)``
        The join took it.
    ar_hold : ``Out(1)``
        Do not take the current read address yet (its ID has a table read in flight).
    r_fire, rid, rdata, rresp, rlast : ``In(...)``
        The engine's read data, as handed to it.
    r_hold : ``Out(1)``
        Hold read data: the entry buffer is nearly full (never while ``lossy``).
    lossy : ``In(1)``
        Drop entries that find the buffer full rather than hold the read data.
    dropped : ``Out(1)``
        An entry was dropped since ``start``.
    settled : ``Out(1)``
        No read beat is between the R channel and the buffer (``dropped`` is final for the
        beats seen so far).
    entries : ``Out(stream.Signature({"line": addr_width - 6, "data": 512, "generation": 1}))``
    generation : ``In(1)``
        Copied into each entry as it enters the buffer: which of two batches in flight the
        entry's log is (the buffer may still hold the previous batch's after ``start``).
    empty : ``Out(1)``
        No entry in the pipeline or the buffer.
    logged, duplicates : ``Out(32)``
        Entries produced and table beats skipped as duplicates since ``start``.
    member_line : ``In(addr_width - 6)``
    member_hit : ``Out(1)``
        For the line given the cycle before: it may have been logged since ``start`` (module
        docstring). Exact only for a tap that dropped nothing; ask only while no table read is
        being logged.
    skip_previous : ``In(1)``
        Sampled at ``start``: lines in the previous batch's filter are remembered but not
        logged (module docstring).
    shared : ``Out(32)``
        Table beats skipped that way since ``start``.
    """

    def __init__(self, *, addr_width, id_width, max_tables, buffer_depth=64, dedup_entries=256,
                 epoch_bits=8):
        if isinstance(epoch_bits, bool) or not isinstance(epoch_bits, int) \
                or not 1 <= epoch_bits <= 16:
            raise ValueError(f"Filter epoch width must be an integer in 1..16, not {epoch_bits!r}")
        self._epoch_bits = epoch_bits
        self._addr_width = addr_width
        self._id_width = id_width
        self._max_tables = max_tables
        self._buffer_depth = buffer_depth
        self._dedup_entries = dedup_entries
        law = addr_width - 6
        self.entry_layout = log_entry_layout(law)
        super().__init__({
            "tables": In(data.ArrayLayout(table_layout(addr_width), max_tables)),
            "table_count": In(8),
            "start": In(1),
            "ready": Out(1),
            "enable": In(1),
            "arvalid": In(1), "arid": In(id_width), "araddr": In(addr_width), "arlen": In(8),
            "ar_fire": In(1),
            "ar_hold": Out(1),
            "r_fire": In(1), "rid": In(id_width), "rdata": In(LINE_BITS), "rresp": In(2),
            "rlast": In(1),
            "r_hold": Out(1),
            "lossy": In(1),
            "dropped": Out(1),
            "settled": Out(1),
            "entries": Out(stream.Signature(self.entry_layout)),
            "generation": In(1),
            "empty": Out(1),
            "logged": Out(32),
            "duplicates": Out(32),
            "member_line": In(law),
            "member_hit": Out(1),
            "skip_previous": In(1),
            "shared": Out(32),
        })

    @property
    def sweep_cycles(self):
        """Cycles a sweep of the filter takes (after a reset, and when a bank's epochs run
        out): one per word, both banks at once."""
        return self._dedup_entries

    def elaborate(self, platform):
        m = Module()
        law = self._addr_width - 6
        ids = 2 ** self._id_width

        # --- table extents, one table per cycle after start (one multiplier) -----------------
        # Three stages, each from registers: pick the table, multiply its rows by its lines
        # per row, add its base and store (the pick and the product are each a long path).
        lows = Signal(data.ArrayLayout(unsigned(law), self._max_tables))
        highs = Signal(data.ArrayLayout(unsigned(law + 1), self._max_tables))
        enabled = Signal(self._max_tables)
        computing = Signal()
        index = Signal(range(self._max_tables + 1))
        picked = Signal(table_layout(self._addr_width))
        picked_valid = Signal()
        picked_index = Signal(range(self._max_tables))
        picked_enabled = Signal()
        spanned_low = Signal(law)
        spanned_lines = Signal(law + 1)   # (modulo 2 ** (law + 1), as the sum it goes into)
        spanned_valid = Signal()
        spanned_index = Signal(range(self._max_tables))
        spanned_enabled = Signal()
        with m.If(self.start):
            m.d.sync += [computing.eq(1), index.eq(0)]
        with m.Elif(computing):
            m.d.sync += index.eq(index + 1)
            with m.If(index == self._max_tables - 1):
                m.d.sync += computing.eq(0)
        m.d.sync += [picked_valid.eq(computing & ~self.start), picked.eq(self.tables[index]),
                     picked_index.eq(index), picked_enabled.eq(index < self.table_count)]
        m.d.sync += [spanned_valid.eq(picked_valid & ~self.start),
                     spanned_low.eq(picked.base[6:]),
                     spanned_lines.eq(picked.rows * picked.dim[4:]),  # dim: 16 floats a line
                     spanned_index.eq(picked_index), spanned_enabled.eq(picked_enabled)]
        with m.If(spanned_valid & ~self.start):
            for t in range(self._max_tables):
                with m.If(spanned_index == t):
                    m.d.sync += [lows[t].eq(spanned_low),
                                 highs[t].eq(spanned_low + spanned_lines),
                                 enabled[t].eq(spanned_enabled)]

        def in_tables(line):
            return Cat(enabled[t] & (line >= lows[t]) & (line < highs[t])
                       for t in range(self._max_tables)).any()

        ar_line = self.araddr[6:]
        is_table = Signal()
        m.d.comb += is_table.eq(in_tables(ar_line))
        asked_line = Signal(law)   # member_line, registered (the filter read takes a cycle)
        m.d.sync += asked_line.eq(self.member_line)

        # --- per-ID context: the line the next beat of a table read holds ---------------------
        m.submodules.context = context = memory.Memory(shape=unsigned(law), depth=ids, init=[])
        record = context.write_port()
        advance = context.write_port()
        lookup = context.read_port(transparent_for=(record, advance))
        in_flight = Signal(ids)
        tapped_ar = self.enable & self.arvalid & is_table
        m.d.comb += self.ar_hold.eq(tapped_ar & in_flight.bit_select(self.arid, 1))
        # A table read's line is recorded the cycle after its AR handshake, from registers (the
        # handshake comes from the join's arbitration): its first beat comes a cycle later at
        # the earliest, and the context read is transparent for the write.
        m.d.sync += [record.addr.eq(self.arid), record.data.eq(ar_line),
                     record.en.eq(tapped_ar & self.ar_fire)]

        # Stage 1: the R beat is registered; the context read finishes.
        s1_valid = Signal()
        s1_last = Signal()
        s1_id = Signal(self._id_width)
        s1_data = Signal(LINE_BITS)
        tapped_r = self.r_fire & in_flight.bit_select(self.rid, 1)
        m.d.comb += lookup.addr.eq(self.rid)
        s1_tapped = Signal()   # (a beat with an error response is not logged, but counts)
        m.d.sync += [s1_tapped.eq(tapped_r), s1_valid.eq(tapped_r & (self.rresp == 0)),
                     s1_last.eq(self.rlast), s1_id.eq(self.rid), s1_data.eq(self.rdata)]
        set_mask = Signal(ids)
        clear_mask = Signal(ids)
        with m.If(tapped_ar & self.ar_fire):
            m.d.comb += set_mask.eq(1 << self.arid)
        with m.If(tapped_r & self.rlast):
            m.d.comb += clear_mask.eq(1 << self.rid)
        m.d.sync += in_flight.eq((in_flight | set_mask) & ~clear_mask)
        # A burst's next line is written back a cycle after its beat, from registers, so the
        # context read and the increment do not drive the write data of every ID. The read of
        # a beat that comes right after one on the same ID misses that write: it is bypassed.
        advancing = Signal()
        advance_id = Signal(self._id_width)
        advance_line = Signal(law)
        s1_line = Signal(law)
        m.d.comb += s1_line.eq(Mux(advancing & (advance_id == s1_id), advance_line,
                                   lookup.data))
        # Only within a burst (after its last beat the ID is free for a new table read). The
        # write-back of a burst's second-to-last beat comes at most a cycle after its last beat,
        # before any new read on that ID records its line.
        m.d.sync += [advancing.eq(s1_tapped & ~s1_last), advance_id.eq(s1_id),
                     advance_line.eq(s1_line + 1)]
        m.d.comb += [advance.addr.eq(advance_id), advance.data.eq(advance_line),
                     advance.en.eq(advancing)]

        # Stage 2: the filter is read at the registered line's slot (the context read and the
        # bypass above take a whole cycle). Stage 3: the filter read finishes; the comparison is
        # registered. Stage 4: push and remember, from registers (the push enables every word
        # of the buffer).
        s2_valid = Signal()
        s2_line = Signal(law)
        s2_data = Signal(LINE_BITS)
        m.d.sync += [s2_valid.eq(s1_valid), s2_line.eq(s1_line), s2_data.eq(s1_data)]
        s3_valid = Signal()
        s3_line = Signal(law)
        s3_data = Signal(LINE_BITS)
        m.d.sync += [s3_valid.eq(s2_valid), s3_line.eq(s2_line), s3_data.eq(s2_data)]
        s4_valid = Signal()
        s4_hit = Signal()   # s4's line is a duplicate
        s4_line = Signal(law)
        s4_data = Signal(LINE_BITS)
        m.submodules.buffer = buffer = fifo.SyncFIFOBuffered(
            width=self.entry_layout.size, depth=self._buffer_depth)
        logged = Signal(32)
        duplicates = Signal(32)
        shared = Signal(32)
        push = Signal()
        fresh = Signal()   # s4's line is not a duplicate (push it if there is room)
        s4_shared = Signal()   # s4's line is in the previous batch's filter (skip_previous)
        remembered = Signal()  # s4's line goes into the filter (pushed, or skipped as shared)
        m.d.comb += [fresh.eq(s4_valid & ~s4_hit & ~s4_shared),
                     push.eq(fresh & buffer.w_rdy),
                     remembered.eq(push | (s4_valid & ~s4_hit & s4_shared))]
        m.d.sync += [s4_valid.eq(s3_valid), s4_line.eq(s3_line), s4_data.eq(s3_data)]
        sweeping = Signal()   # the filter is being emptied (``ready`` waits for it)
        if self._dedup_entries:
            bits = exact_log2(self._dedup_entries)
            # Two filters: ``start`` swaps them, so the previous batch's stays readable. A
            # word is valid when its epoch is its bank's: ``start`` empties the new bank by
            # moving its epoch on; when the epochs run out (and after a reset, as memory keeps
            # its contents) the bank is swept instead, every word's epoch set to 0 (never a
            # bank's).
            word = data.StructLayout({"line": unsigned(law),
                                      "epoch": unsigned(self._epoch_bits), "lost": 1})
            last_epoch = 2 ** self._epoch_bits - 1
            bank = Signal()
            skipping = Signal()
            epochs = [Signal(self._epoch_bits, init=1, name=f"epoch{index}")
                      for index in range(2)]
            sweep = Signal(2, init=0b11)   # the banks being swept
            sweep_slot = Signal(bits)
            m.d.comb += sweeping.eq(sweep.any())
            with m.If(self.start):
                m.d.sync += [bank.eq(~bank), skipping.eq(self.skip_previous)]
                for other, epoch in enumerate(epochs):
                    with m.If(bank != other):   # the bank that becomes the active one
                        with m.If(epoch == last_epoch):
                            m.d.sync += [epoch.eq(1), sweep.eq(sweep | (1 << other)),
                                         sweep_slot.eq(0)]
                        with m.Else():
                            m.d.sync += epoch.eq(epoch + 1)
            with m.Elif(sweeping):
                m.d.sync += sweep_slot.eq(sweep_slot + 1)
                with m.If(sweep_slot == self._dedup_entries - 1):
                    m.d.sync += sweep.eq(0)
            active_epoch = Mux(bank, epochs[1], epochs[0])
            previous_epoch = Mux(bank, epochs[0], epochs[1])
            slot = fold(s3_line, law, bits)
            s4_slot = fold(s4_line, law, bits)
            s4_slot_taken = Signal()   # s4's slot holds a line of this batch (not s4's)
            written = Signal(word)     # what s4 remembers
            m.d.comb += [written.line.eq(s4_line), written.epoch.eq(active_epoch),
                         written.lost.eq(s4_slot_taken)]
            check_data = []
            probe_data = []
            for index in range(2):
                seen = memory.Memory(shape=word, depth=self._dedup_entries, init=[])
                m.submodules[f"filter{index}"] = seen
                remember = seen.write_port()
                check = seen.read_port(transparent_for=(remember,))
                probe = seen.read_port(transparent_for=(remember,))
                m.d.comb += [check.addr.eq(fold(s2_line, law, bits)),
                             probe.addr.eq(fold(self.member_line, law, bits))]
                with m.If(sweep[index]):
                    m.d.comb += [remember.addr.eq(sweep_slot), remember.en.eq(1)]
                with m.Else():
                    m.d.comb += [remember.addr.eq(s4_slot), remember.data.eq(written),
                                 remember.en.eq(remembered & ~self.start & (bank == index))]
                check_data.append(check.data)
                probe_data.append(probe.data)
            active = data.View(word, Mux(bank, check_data[1], check_data[0]))
            previous = data.View(word, Mux(bank, check_data[0], check_data[1]))
            active_valid = active.epoch == active_epoch
            # The line remembered this cycle is remembered too late for s3's filter read:
            # compared directly.
            same_slot = remembered & (s4_slot == slot)
            m.d.sync += [
                s4_hit.eq((active_valid & (active.line == s3_line))
                          | (remembered & (s4_line == s3_line))),
                s4_shared.eq(skipping & (previous.epoch == previous_epoch)
                             & (previous.line == s3_line)),
                # A line remembered into a valid slot (it did not hit) replaces another line
                # of this batch: the slot has lost it, for the rest of the batch (a valid slot
                # is taken again only by a line that marks it so).
                s4_slot_taken.eq(active_valid | same_slot),
            ]
            probed = data.View(word, Mux(bank, probe_data[1], probe_data[0]))
            m.d.comb += self.member_hit.eq(
                in_tables(asked_line) & (probed.epoch == active_epoch)
                & ((probed.line == asked_line) | probed.lost))
            with m.If(s4_valid & s4_hit & ~self.start):
                m.d.sync += duplicates.eq(duplicates + 1)
            with m.If(s4_valid & ~s4_hit & s4_shared & ~self.start):
                m.d.sync += shared.eq(shared + 1)
        else:
            m.d.comb += self.member_hit.eq(in_tables(asked_line))
        with m.If(self.start):
            m.d.sync += [logged.eq(0), duplicates.eq(0), shared.eq(0), self.dropped.eq(0)]
        with m.Elif(fresh & ~buffer.w_rdy):
            m.d.sync += self.dropped.eq(1)  # (only while lossy: r_hold keeps room otherwise)
        with m.Elif(push):
            m.d.sync += logged.eq(logged + 1)
        m.d.comb += self.ready.eq(~computing & ~picked_valid & ~spanned_valid & ~sweeping
                                  & ~self.start)
        m.d.comb += [buffer.w_en.eq(push), buffer.w_data.eq(Cat(s4_line, s4_data, self.generation))]

        entry = data.View(self.entry_layout, buffer.r_data)
        m.d.comb += [
            self.entries.valid.eq(buffer.r_rdy), self.entries.payload.eq(entry),
            buffer.r_en.eq(self.entries.ready),
            # Room for every beat already in the pipeline plus the one that may arrive now.
            self.r_hold.eq(~self.lossy & (buffer.level > self._buffer_depth - _PIPELINE - 1)),
            self.empty.eq(~buffer.r_rdy & ~s1_valid & ~s2_valid & ~s3_valid & ~s4_valid),
            self.settled.eq(~s1_valid & ~s2_valid & ~s3_valid & ~s4_valid),
            self.logged.eq(logged), self.duplicates.eq(duplicates), self.shared.eq(shared),
        ]
        return m
