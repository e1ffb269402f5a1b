"""The distinct rows of one update chunk: a small content-addressable memory (CAM).

Each occurrence's (table, row) is looked up in one cycle; a row seen for the first time in the
chunk gets the next free slot (slots are handed out in order of first occurrence, like the
golden model's chunk lists). When all slots are taken and a new row arrives, the occurrence
waits (``full``) until the owner applies the chunk and clears the table: that is exactly the
chunk boundary of ``sw_model.sparse_sgd_update``.
"""

from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.params import check_bool

__all__ = ["UniqueRows"]


class UniqueRows(wiring.Component):
    """Maps (table, row) to a slot in ``0 .. capacity-1``; one lookup per cycle.

    Keys live in registers and are compared in parallel: this suits capacities up to a few
    hundred (the engine limits it to 1024).

    Parameters
    ----------
    capacity : int
        Number of slots M.
    table_width : int
        Width of the table number.
    payload_shape : shape-like
        Data carried along with each occurrence, untouched.

    Members
    -------
    i : ``In(stream.Signature({"table", "row": 32, "data": payload_shape}))``
        Occurrences in order.
    o : ``Out(stream.Signature({"slot", "fresh": 1, "data": payload_shape}))``
        The occurrence's slot; ``fresh`` marks the first occurrence of the slot in the chunk
        (its gradient sum starts from +0.0).
    full : ``Out(1)``
        An occurrence waits for a slot: the chunk is complete. With ``registered_accept``
        from the cycle after its key's comparison found no slot (from flip-flops, so the
        comparisons do not reach the engine's state).
    count : ``Out(range(capacity + 1))``
        Slots in use.
    clear : ``In(1)``
        Forget every row (start a new chunk). No occurrence is accepted in that cycle. With
        ``registered_accept`` only while ``o`` holds no occurrence (the engine clears a
        chunk once it has drained).
    key_slot : ``In(range(capacity))``, key : ``Out({"table", "row": 32})``
        The key held in a slot (combinational read), for the update pass.
    probe : ``In(1)``, probe_key : ``In({"table", "row": 32})``
        Look ``probe_key`` up instead of ``i`` (which then waits): ``probe_hit`` and
        ``probe_slot`` answer in the same cycle and nothing is inserted. The correction of a
        relaxed lookup asks this way which of its rows the chunk holds.

    With ``registered_accept`` the key comparisons reach neither ``i.ready`` nor the keys'
    enables, so the queue behind ``i`` and the key registers load from flip-flops: while
    there is room an occurrence is taken whether its key is known or not, and once the chunk
    is full one is taken only the cycle after its comparison found its key (a cycle more per
    occurrence then, against one per cycle). Nor do they reach the count's enable or the
    output's slot register: an occurrence's comparison is registered with it in ``o``, its
    slot and ``fresh`` are chosen from those registers, and a new row is counted as it leaves
    ``o``, its key written into the uncounted slot while it waits there (``count``, ``key`` and
    the comparisons see it in ``o`` until then). The slots, the chunks and every output's
    timing are the same.
    """

    def __init__(self, *, capacity, table_width, payload_shape, registered_accept=False):
        if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 1:
            raise ValueError(f"Capacity must be a positive integer, not {capacity!r}")
        if not isinstance(table_width, int) or isinstance(table_width, bool) or table_width < 1:
            raise ValueError(f"Table width must be a positive integer, not {table_width!r}")
        self._capacity = capacity
        self._registered_accept = check_bool("Registered accept", registered_accept)
        self._key_layout = data.StructLayout({"table": unsigned(table_width), "row": 32})
        slot_shape = range(capacity)
        super().__init__({
            "i": In(stream.Signature(data.StructLayout({
                "table": unsigned(table_width), "row": 32, "data": payload_shape}))),
            "o": Out(stream.Signature(data.StructLayout({
                "slot": slot_shape, "fresh": 1, "data": payload_shape}))),
            "full": Out(1),
            "count": Out(range(capacity + 1)),
            "clear": In(1),
            "key_slot": In(slot_shape),
            "key": Out(self._key_layout),
            "probe": In(1),
            "probe_key": In(self._key_layout),
            "probe_hit": Out(1),
            "probe_slot": Out(slot_shape),
        })

    @property
    def capacity(self):
        return self._capacity

    def elaborate(self, platform):
        m = Module()
        registered = self._registered_accept
        keys = [Signal(self._key_layout, name=f"key_{slot}") for slot in range(self._capacity)]
        # Slots whose keys are written (with registered_accept, not the one in `o`).
        count = Signal(range(self._capacity + 1))

        wanted = Signal(self._key_layout)
        with m.If(self.probe):
            m.d.comb += wanted.eq(self.probe_key)
        with m.Else():
            m.d.comb += [wanted.table.eq(self.i.payload.table),
                         wanted.row.eq(self.i.payload.row)]
        matches = [(slot < count) & (key.as_value() == wanted.as_value())
                   for slot, key in enumerate(keys)]
        hit = Signal()
        hit_slot = Signal(range(self._capacity))
        if registered:
            # The occurrence in `o` was compared as it was taken: whether its key was known
            # then (`held_hit`), the slot found and its key. A new one (`held_new`) takes slot
            # `count`, and is counted as it leaves `o`: until then the comparisons
            # see it in `held_key`, in slot `count`. (They count only with `o.valid`, and have
            # no reset: the engine's per-command reset would reach the comparisons' ends.)
            held_hit = Signal(reset_less=True)
            held_slot = Signal(range(self._capacity), reset_less=True)
            held_key = Signal(self._key_layout, reset_less=True)
            held_new = Signal()
            m.d.comb += held_new.eq(self.o.valid & ~held_hit)
            held_match = held_new & (held_key.as_value() == wanted.as_value())
            extras = [(held_match, count)]
            m.d.comb += self.count.eq(count + held_new)
        else:
            extras = []
            m.d.comb += self.count.eq(count)
        # Keys are distinct, so at most one slot matches: bit b of its number is the OR of the
        # matches of the slots that have bit b set (flat, so 1,024 slots elaborate too).
        m.d.comb += hit.eq(Cat(*matches, *(match for match, _ in extras)).any())
        for bit in range(len(hit_slot)):
            m.d.comb += hit_slot[bit].eq(
                Cat(*(match for slot, match in enumerate(matches) if slot >> bit & 1),
                    *(match & slot[bit] for match, slot in extras)).any())
        m.d.comb += [self.probe_hit.eq(hit), self.probe_slot.eq(hit_slot)]

        # Whether the occurrence may be taken: while there is room, always; when the chunk is
        # full, with registered_accept only if last cycle's comparison (of the same
        # occurrence: it was not taken, and no key changes while full) found its key.
        output_free = ~self.o.valid | self.o.ready
        known = hit
        if registered:
            # count != capacity and count + 1 != capacity, as registers: room for one more
            # with or without the new row in `o`.
            room_now = Signal(init=1)
            room_after = Signal(init=int(self._capacity != 1))
            room = Mux(held_new, room_after, room_now)
            compared, compared_hit = Signal(), Signal(reset_less=True)
            m.d.sync += [compared.eq(self.i.valid & ~self.probe & ~room & ~self.clear
                                     & ~self.i.ready),
                         compared_hit.eq(hit)]
            known = compared & compared_hit
            # The occurrence compared last cycle is still the one offered (it was not taken)
            # and no key has changed since (a new row leaving `o` was one of the keys it was
            # compared with), so its comparison still holds unless a probe takes the
            # comparators now.
            m.d.comb += self.full.eq(compared & ~compared_hit & ~self.probe)
        else:
            room = count != self._capacity
            m.d.comb += self.full.eq(self.i.valid & ~self.probe & ~hit & ~room)
        insert = Signal()   # a new row takes slot `count`
        with m.If(self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        with m.If(~self.clear & self.i.valid & ~self.probe & output_free & (known | room)):
            m.d.comb += self.i.ready.eq(1)
            m.d.sync += self.o.valid.eq(1)
            if not registered:
                m.d.comb += insert.eq(~hit)
        if registered:
            # A new row is counted as it leaves `o` (its key written while it waits): the
            # comparisons reach registers' data only (the occurrence's, loaded whenever `o` is
            # free), not the count's, the keys' or the room's enables.
            m.d.comb += insert.eq(held_new & self.o.ready)
        with m.If(self.clear):
            m.d.sync += count.eq(0)
            if registered:
                m.d.sync += [room_now.eq(1), room_after.eq(self._capacity != 1)]
        with m.Elif(insert):
            m.d.sync += count.eq(count + 1)
            if registered:
                m.d.sync += [room_now.eq(count + 1 != self._capacity),
                             room_after.eq(count + 2 != self._capacity)]
        # The output's payload loads whenever the output is free, taken or not (``o.valid``
        # says whether it holds one), so the key comparisons behind ``hit`` reach its data
        # only, not the enable of every bit.
        with m.If(output_free):
            m.d.sync += self.o.payload.data.eq(self.i.payload.data)
            if registered:
                m.d.sync += [held_hit.eq(hit), held_slot.eq(hit_slot), held_key.eq(wanted)]
            else:
                m.d.sync += [self.o.payload.fresh.eq(~hit),
                             self.o.payload.slot.eq(Mux(hit, hit_slot, count))]
        if registered:
            # (`count` does not change while the occurrence waits in `o`.)
            m.d.comb += [self.o.payload.fresh.eq(~held_hit),
                         self.o.payload.slot.eq(Mux(held_hit, held_slot, count))]
        # One enable per key, not a switch over ``count`` in every key's process: that is
        # capacity x capacity cases in the netlist (1,024 slots: a million, more than
        # Verilator's memory holds).
        # With registered_accept a new row's key is written into slot `count` for as long as
        # it waits in `o`, not only as it leaves: the slot is compared only once counted,
        # `key` answers for it from `held_key` meanwhile, and the row does leave (nothing
        # clears a chunk under it), so the key's enables are registers' logic, not behind
        # the consumer's `o.ready` (12.59 ns into the keys' enables in a ULX3S build).
        written_key = held_key if registered else wanted
        writing = held_new if registered else insert
        for slot, key in enumerate(keys):
            with m.If(writing & (count == slot)):
                m.d.sync += key.eq(written_key)

        with m.Switch(self.key_slot):
            for slot, key in enumerate(keys):
                with m.Case(slot):
                    m.d.comb += self.key.eq(key)
        if registered:
            with m.If(held_new & (count == self.key_slot)):
                m.d.comb += self.key.eq(held_key)
        return m
