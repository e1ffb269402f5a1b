"""Log-ahead for the relaxed lookup: the new value of every line a relaxed UPDATE(N) writes that
LOOKUP(N + 1) has already logged, appended to batch N + 1's undo log.

LOOKUP(N + 1) runs before UPDATE(N) and its tap logs the lines it reads as they are then. For the
lines UPDATE(N) rewrites those entries hold the wrong old value: batch N + 1 must roll back to
the tables *after* UPDATE(N). So while UPDATE(N) runs, each engine write whose line may be in
batch N + 1's log (:class:`~hw.ckpt.tap.LookupTap`'s ``member_hit``, never a false negative) is
appended to that log with the data written. A restore walks a log in order, so the later entry
wins; a false positive only logs a line with the value it keeps after UPDATE(N), which is what
rolling back N + 1 gives it anyway.

The write is observed as the join takes it (AW and W together); the membership answer comes a
cycle later, and the entry then goes into a small buffer, so writes are held (``w_hold``) while
the buffer may not have room for the one in flight and the next.
"""

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from .layouts import LINE_BITS, log_entry_layout

__all__ = ["UpdateWriteTap"]


class UpdateWriteTap(wiring.Component):
    """Turns the engine's in-place writes into undo-log entries for the next batch.

    Parameters (keyword-only)
    -------------------------
    addr_width : int
        Byte address width (as the checkpoint engine's).
    buffer_depth : int
        Entries buffered before writes are held (a power of two, >= 4).

    Members
    -------
    enable : ``In(1)``
        Observe writes (hold it for a whole UPDATE: from before its first write is taken to
        after its last).
    generation : ``In(1)``
        Copied into each entry: which of two batches in flight the entry's log is
        (:class:`~hw.ckpt.engine.CheckpointEngine` routes the entries by it).
    w_fire : ``In(1)``; w_line : ``In(addr_width - 6)``; w_data : ``In(512)``
        The join took an engine write of ``w_data`` to line ``w_line``.
    w_hold : ``Out(1)``
        Do not let the join take an engine write.
    member_line : ``Out(addr_width - 6)``; member_hit : ``In(1)``
        To and from the lookup tap (the answer comes a cycle after the question).
    entries : ``Out(stream.Signature({"line": addr_width - 6, "data": 512, "generation": 1}))``
    empty : ``Out(1)``
        No entry in the pipeline or the buffer.
    """

    def __init__(self, *, addr_width, buffer_depth=4):
        if buffer_depth < 4 or buffer_depth & (buffer_depth - 1):
            raise ValueError(f"Write tap buffer depth must be a power of two >= 4, "
                             f"not {buffer_depth!r}")
        self._addr_width = addr_width
        self._buffer_depth = buffer_depth
        law = addr_width - 6
        self.entry_layout = log_entry_layout(law)
        super().__init__({
            "enable": In(1),
            "generation": In(1),
            "w_fire": In(1),
            "w_line": In(law),
            "w_data": In(LINE_BITS),
            "w_hold": Out(1),
            "member_line": Out(law),
            "member_hit": In(1),
            "entries": Out(stream.Signature(self.entry_layout)),
            "empty": Out(1),
        })

    @property
    def buffer_depth(self):
        return self._buffer_depth

    def elaborate(self, platform):
        m = Module()
        law = self._addr_width - 6

        # Stage 1: the write taken, while the tap's filter answers whether its line is logged.
        s1_valid = Signal()
        s1_line = Signal(law)
        s1_data = Signal(LINE_BITS)
        s1_generation = Signal()
        m.d.comb += self.member_line.eq(self.w_line)
        m.d.sync += [s1_valid.eq(self.w_fire & self.enable), s1_line.eq(self.w_line),
                     s1_data.eq(self.w_data), s1_generation.eq(self.generation)]

        m.submodules.buffer = buffer = fifo.SyncFIFOBuffered(
            width=self.entry_layout.size, depth=self._buffer_depth)
        m.d.comb += [
            buffer.w_en.eq(s1_valid & self.member_hit),
            buffer.w_data.eq(Cat(s1_line, s1_data, s1_generation)),
            # Room for the write in stage 1 and one more taken this cycle.
            self.w_hold.eq(self.enable & (buffer.level > self._buffer_depth - 2)),
            self.entries.valid.eq(buffer.r_rdy),
            self.entries.payload.eq(data.View(self.entry_layout, buffer.r_data)),
            buffer.r_en.eq(self.entries.ready),
            self.empty.eq(~s1_valid & ~buffer.r_rdy),
        ]
        return m
