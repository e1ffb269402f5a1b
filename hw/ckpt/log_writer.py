"""Undo-log writer: packs tapped entries into 8-line groups of a log area (layouts module).

Entry i goes to data line ``1 + i % 7`` of group ``i // 7``; the group's header line (the 7 line
addresses, the batch, the count) is written when the group is full, and on ``flush`` for a
partial group (rewritten later if more entries arrive). Entries are written as soon as they
arrive, headers when due: nothing waits for a B response here, because validity comes from
the batch flag that the controller writes only after every one of these writes has completed.
An entry beyond ``capacity`` is dropped and sets ``overflow`` (the batch cannot be updated).
"""

from amaranth.hdl import Module, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .layouts import (
    ENTRIES_PER_GROUP,
    GROUP_HEADER_LAYOUT,
    GROUP_LINES,
    GROUP_MAGIC,
    LINE_BITS,
    OwnWrite,
    log_entry_layout,
)

__all__ = ["LogWriter"]


class LogWriter(wiring.Component):
    """Writes one batch's undo log into one area.

    Parameters (keyword-only): ``addr_width``.

    Members
    -------
    entries : ``In(stream.Signature(log_entry_layout(addr_width - 6)))``
        From :class:`~hw.ckpt.tap.LookupTap` or :class:`~hw.ckpt.write_tap.UpdateWriteTap`
        (the generation is the engine's to route by; it is not written).
    start : ``In(1)``
        Begin a batch: ``batch``, ``area`` (first line of the area) and ``capacity`` (entries
        that fit) are taken; the count restarts at 0.
    batch : ``In(32)``, area : ``In(addr_width - 6)``, capacity : ``In(32)``
    flush : ``In(1)``
        Write the header of a partial group once no entry waits.
    own_w : ``Out(stream.Signature({"line", "data", "kind"}))``
        Single-line writes (kind LOG).
    count : ``Out(32)``
        Entries written so far in this batch.
    overflow : ``Out(1)``
    sealed : ``Out(1)``
        No entry waits and every header is written (issued; completion is counted by the join).
    """

    def __init__(self, *, addr_width):
        self._law = addr_width - 6
        super().__init__({
            "entries": In(stream.Signature(log_entry_layout(self._law))),
            "start": In(1),
            "batch": In(32),
            "area": In(self._law),
            "capacity": In(32),
            "flush": In(1),
            "own_w": Out(stream.Signature(data.StructLayout({
                "line": unsigned(self._law), "data": unsigned(LINE_BITS), "kind": OwnWrite}))),
            "count": Out(32),
            "overflow": Out(1),
            "sealed": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        batch = Signal(32)
        capacity = Signal(32)
        count = Signal(32)
        slot = Signal(range(ENTRIES_PER_GROUP + 1))
        group = Signal(self._law)
        lines = Signal(data.ArrayLayout(unsigned(64), ENTRIES_PER_GROUP))
        dirty = Signal()     # the current group's header is not written with its latest count
        overflow = Signal()

        header = Signal(GROUP_HEADER_LAYOUT)
        m.d.comb += [
            header.magic.eq(GROUP_MAGIC), header.count.eq(slot), header.batch.eq(batch),
            header.lines.eq(lines),
        ]
        out = self.own_w
        # The payload is assigned once, unconditionally (see CheckpointEngine's records).
        out_line = Signal(self._law)
        out_data = Signal(LINE_BITS)
        m.d.comb += [out.payload.line.eq(out_line), out.payload.data.eq(out_data),
                     out.payload.kind.eq(OwnWrite.LOG)]
        full = slot == ENTRIES_PER_GROUP
        entry = self.entries.payload
        with m.If(self.start):
            m.d.sync += [batch.eq(self.batch), capacity.eq(self.capacity), count.eq(0),
                         slot.eq(0), group.eq(self.area), dirty.eq(0), overflow.eq(0)]
        with m.Elif(full):
            m.d.comb += [out.valid.eq(1), out_line.eq(group),
                         out_data.eq(header)]
            with m.If(out.ready):
                m.d.sync += [group.eq(group + GROUP_LINES), slot.eq(0), dirty.eq(0)]
        with m.Elif(self.entries.valid):
            with m.If(count == capacity):
                m.d.comb += self.entries.ready.eq(1)
                m.d.sync += overflow.eq(1)
            with m.Else():
                m.d.comb += [out.valid.eq(1), out_line.eq(group + 1 + slot),
                             out_data.eq(entry.data),
                             self.entries.ready.eq(out.ready)]
                with m.If(out.ready):
                    for k in range(ENTRIES_PER_GROUP):
                        with m.If(slot == k):
                            m.d.sync += lines[k].eq(entry.line)
                    m.d.sync += [slot.eq(slot + 1), count.eq(count + 1), dirty.eq(1)]
        with m.Elif(self.flush & dirty):
            m.d.comb += [out.valid.eq(1), out_line.eq(group),
                         out_data.eq(header)]
            with m.If(out.ready):
                m.d.sync += dirty.eq(0)

        m.d.comb += [
            self.count.eq(count),
            self.overflow.eq(overflow),
            self.sealed.eq(~self.entries.valid & ~dirty),
        ]
        return m
