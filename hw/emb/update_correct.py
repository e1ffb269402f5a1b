"""The correction of a relaxed lookup, run by the update engine after batch N's rows are written.

A relaxed LOOKUP(N+1) pooled the tables before UPDATE(N) and left its MEAN bags unscaled
(``LookupEngine.defer_mean``). Once UPDATE(N) has applied a chunk, the gradient buffer holds
``delta = new - old`` for every row of the chunk and the unique-row CAM says which slot holds
which row; this sequencer runs once per chunk. It walks batch N+1's occurrences in TBE order
(table, bag, position: the order of ``sw_model.relaxed`` step 3) and, per bag:

* loads the bag's pooled lines from the output buffer when it first needs them: at its first
  occurrence of a row the chunk wrote, or (after the last chunk) at its first occurrence at
  all for a MEAN table;
* adds ``delta * factor`` for every such occurrence (factor: the per-sample weight for
  WEIGHTED tables, 1.0 otherwise);
* scales MEAN bags by ``float32(1) / float32(L)`` (step 4) and stores the lines back.

Bags that need neither keep the bits the lookup wrote; so do empty bags (+0.0).

A pass walks only the tables its chunk can touch (the engine starts the walk at the first
table not yet finished and ends it at ``boundary``, the table where the chunk ended, or at the
last table after the last chunk). Every bag of a table before ``boundary`` is then finished:
its last correction is in, so it is scaled if MEAN and written to memory. The bags of
``boundary`` itself may get more corrections from the next chunk: they wait in the datapath's
bag store rather than in memory (the table's first ``cached_bags`` non-empty bags, counted
from the table's start, the same in every pass), and the next pass, which starts at that
table, loads them back. So a bag is read from memory once and written once per UPDATE, and a
pass need not wait for the previous one's writes. Bags beyond the store go through memory
(``spilled`` says one did).
"""

from amaranth.hdl import Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .layouts import PoolingMode, table_layout
from .update_datapath import CorrectionKind, correction_op_layout
from .update_walker import occurrence_layout

__all__ = ["CorrectionSequencer"]

_ONE = 0x3F80_0000  # binary32 1.0


class CorrectionSequencer(wiring.Component):
    """Turns batch N+1's occurrences into the datapath's correction ops (module docstring).

    Members
    -------
    start : ``In(1)``
        Begin a correction (the walker starts in the same cycle).
    occurrences : ``In(stream.Signature(occurrence_layout(...)))``
        Batch N+1's walk in UPDATE mode; ``gradient`` is the bag's first output line.
    walk_done : ``In(1)``
        The walker has emitted its last occurrence.
    final : ``In(1)``
        This pass follows the update's last chunk: every bag it walks is finished.
    boundary : ``In(8)``
        Without ``final``: the table where the chunk ended; the walk's earlier tables are
        finished. A finished bag is loaded even without a correction if MEAN (to be scaled)
        or held in the store (to be written to memory).
    descriptors : ``In(ArrayLayout(table_layout, max_tables))``
    probe, probe_key, probe_hit, probe_slot :
        The unique-row CAM's lookup port (``Out``, ``Out``, ``In``, ``In``).
    bag_request : ``Out(stream.Signature(line address))``
        Reads of a bag's pooled lines (they arrive on the datapath's ``bag_lines``).
    ops : ``Out(stream.Signature(correction_op_layout(...)))``
    done : ``Out(1)``
        Every op has been handed over (held until the next ``start``).
    spilled : ``Out(1)``
        This pass (not the last) stored a bag to memory: the next pass loads it from there,
        so it waits for the writes to complete. Cleared by ``start``.

    ``contexts`` (with the datapath's ``context_width``): the bags it loads take the
    datapath's contexts in turn, so up to that many are corrected at once.

    The bag store's contents are per UPDATE: reset the sequencer with each command.
    """

    def __init__(self, *, max_tables, addr_width, table_width, line_width, slot_width,
                 cached_bags=0, bag_width=1, contexts=1, context_width=1):
        self._max_tables = max_tables
        self._cached_bags = cached_bags
        self._contexts = contexts
        law = addr_width - 6
        self._line_address_width = law
        super().__init__({
            "start": In(1),
            "occurrences": In(stream.Signature(occurrence_layout(
                table_width=table_width, line_width=line_width, line_address_width=law))),
            "walk_done": In(1),
            "final": In(1),
            "boundary": In(8),
            "descriptors": In(data.ArrayLayout(table_layout(addr_width), max_tables)),
            "probe": Out(1),
            "probe_key": Out(data.StructLayout({"table": unsigned(table_width), "row": 32})),
            "probe_hit": In(1),
            "probe_slot": In(unsigned(slot_width)),
            "bag_request": Out(stream.Signature(law)),
            "ops": Out(stream.Signature(correction_op_layout(
                slot_width=slot_width, line_width=line_width, line_address_width=law,
                bag_width=bag_width, context_width=context_width))),
            "done": Out(1),
            "spilled": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        occurrence = self.occurrences.payload
        mode = Signal(PoolingMode)
        with m.Switch(occurrence.table):
            for t in range(self._max_tables):
                with m.Case(t):
                    m.d.comb += mode.eq(self.descriptors[t].mode)

        # The bag held in the datapath's registers.
        held = Signal()
        held_line = Signal(self._line_address_width)
        held_lines = Signal.like(occurrence.lines)
        held_mean = Signal()
        held_finished = Signal()
        held_reciprocal = Signal(32)
        requested = Signal.like(occurrence.lines)

        # The bag's number among its table's non-empty bags (``cached_bags``: past the
        # store), and whether the store holds it from an earlier pass.
        ordinal = Signal(range(self._cached_bags + 1))
        walked = Signal()   # an occurrence of this pass was taken
        walked_line = Signal.like(occurrence.gradient)
        walked_table = Signal.like(occurrence.table)
        new_bag = ~walked | (occurrence.gradient != walked_line)
        this_ordinal = Signal.like(ordinal)
        with m.If(~walked | (occurrence.table != walked_table)):
            m.d.comb += this_ordinal.eq(0)
        with m.Elif(new_bag & (ordinal != self._cached_bags)):
            m.d.comb += this_ordinal.eq(ordinal + 1)
        with m.Else():
            m.d.comb += this_ordinal.eq(ordinal)
        with m.If(self.occurrences.valid & self.occurrences.ready):
            m.d.sync += [walked.eq(1), walked_line.eq(occurrence.gradient),
                         walked_table.eq(occurrence.table), ordinal.eq(this_ordinal)]
        cached = Signal(max(1, self._cached_bags))  # per store entry: holds its bag

        def in_store(number):
            return number != self._cached_bags

        def stored(number):
            if not self._cached_bags:
                return Const(0)
            return in_store(number) & cached.bit_select(number, 1)

        held_ordinal = Signal.like(ordinal)
        # The datapath context of the held bag: bags take the contexts in turn (the order in
        # which the datapath expects their LOADs).
        held_context = Signal(range(self._contexts))
        next_context = Signal(range(self._contexts))

        m.d.comb += [
            self.probe.eq(self.occurrences.valid),
            self.probe_key.table.eq(occurrence.table),
            self.probe_key.row.eq(occurrence.row),
        ]
        hit = self.probe_hit
        mean = mode == PoolingMode.MEAN
        finished = self.final | (occurrence.table != self.boundary)
        scaled = mean & finished
        needed = hit | scaled | (finished & stored(this_ordinal))
        same_bag = held & (held_line == occurrence.gradient)
        op = self.ops.payload

        def offer(kind, **fields):
            """Offer an op on the held bag's lines; returns its acceptance."""
            m.d.comb += [self.ops.valid.eq(1), op.kind.eq(kind), op.lines.eq(held_lines),
                         op.context.eq(held_context),
                         *(getattr(op, name).eq(value) for name, value in fields.items())]
            return self.ops.ready

        with m.FSM():
            with m.State("Idle"):
                with m.If(self.start):
                    m.d.sync += [held.eq(0), walked.eq(0), self.spilled.eq(0)]
                    m.next = "Run"

            with m.State("Run"):
                with m.If(self.occurrences.valid):
                    with m.If(~needed):
                        m.d.comb += self.occurrences.ready.eq(1)
                    with m.Elif(same_bag):
                        with m.If(hit):
                            m.d.comb += [
                                self.ops.valid.eq(1),
                                op.kind.eq(CorrectionKind.CORRECT),
                                op.context.eq(held_context),
                                op.slot.eq(self.probe_slot),
                                op.lines.eq(occurrence.lines),
                                op.factor.eq(Mux(mode == PoolingMode.WEIGHTED,
                                                 occurrence.scale, _ONE)),
                                self.occurrences.ready.eq(self.ops.ready),
                            ]
                        with m.Else():
                            m.d.comb += self.occurrences.ready.eq(1)
                    with m.Elif(held):
                        m.next = "Scale"
                    with m.Else():
                        # A new bag: the reads of its lines, then the LOAD op (which the
                        # datapath takes once the lines are in).
                        m.d.sync += [
                            held_line.eq(occurrence.gradient),
                            held_lines.eq(occurrence.lines),
                            held_mean.eq(scaled),
                            held_finished.eq(finished),
                            held_reciprocal.eq(occurrence.scale),
                            held_ordinal.eq(this_ordinal),
                            requested.eq(0),
                            held_context.eq(next_context),
                            next_context.eq(Mux(next_context == self._contexts - 1, 0,
                                                next_context + 1)),
                        ]
                        with m.If(stored(this_ordinal)):
                            m.next = "Load-Op"
                        with m.Else():
                            m.next = "Load"
                with m.Elif(self.walk_done):
                    with m.If(held):
                        m.next = "Scale"
                    with m.Else():
                        m.next = "Done"

            with m.State("Load"):
                m.d.comb += [self.bag_request.valid.eq(1),
                             self.bag_request.payload.eq(held_line + requested)]
                with m.If(self.bag_request.ready):
                    m.d.sync += requested.eq(requested + 1)
                    with m.If(requested + 1 == held_lines):
                        m.next = "Load-Op"

            with m.State("Load-Op"):
                # (The store's entry cannot change between Run and here: only Store sets it.)
                with m.If(offer(CorrectionKind.LOAD, cached=stored(held_ordinal),
                                bag=held_ordinal)):
                    m.d.sync += held.eq(1)
                    m.next = "Run"

            with m.State("Scale"):
                with m.If(held_mean):
                    with m.If(offer(CorrectionKind.SCALE, factor=held_reciprocal)):
                        m.next = "Store"
                with m.Else():
                    m.next = "Store"

            with m.State("Store"):
                # To the store between passes; to memory once finished, or past the store.
                keep = in_store(held_ordinal) & ~held_finished
                with m.If(offer(CorrectionKind.STORE, cached=keep, bag=held_ordinal,
                                address=held_line)):
                    m.d.sync += held.eq(0)
                    with m.If(~keep & ~held_finished):
                        m.d.sync += self.spilled.eq(1)
                    if self._cached_bags:
                        with m.If(in_store(held_ordinal)):
                            # Freed once its bag is finished: the next table's bag of the
                            # same number is loaded from memory.
                            m.d.sync += cached.bit_select(held_ordinal, 1).eq(keep)
                    m.next = "Run"

            with m.State("Done"):
                m.d.comb += self.done.eq(1)
                with m.If(self.start):
                    m.d.sync += [held.eq(0), walked.eq(0), self.spilled.eq(0)]
                    m.next = "Run"
        return m
