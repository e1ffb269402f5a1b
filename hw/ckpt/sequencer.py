"""The ordering of one UPDATE(N) under logging (DESIGN.md section 4, invariants 1-3): the part
of the checkpoint engine that the formal proof (:mod:`hw.ckpt.formal`) covers.

1. **Seal**: ask the log writer to write its open group header (``flush``) and wait until
   nothing of the log is left on chip (``log_drained``) and no LOG write is outstanding, i.e.
   every entry of N is persistent (invariant 2). If the log's entries are all counted and fit
   its area (``log_fits``), the seal cannot end in ``LOG_OVERFLOW``: UPDATE(N) is forwarded to
   the embedding engine at once, so its validation, gradient and row reads overlap the log's
   last writes (a log still draining after the GPU's time costs no more than its remainder
   beyond those reads). The engine's writes wait for step 3 all the same.
2. **Flag**: write N's batch flag ``{N, entries, SET}``; once it is accepted, ask for UPDATE(N)
   to be forwarded (if it was not already; its reads then overlap the flag's write latency).
3. **Update**: the engine's writes pass (``write_gate``) only once the flag has its B response
   (invariant 1: every entry is persistent before any in-place write is issued).
4. **Drain**: after the engine reports done, wait until every one of its writes has its B.
5. **Commit**: write the commit record ``{c = N}`` (invariant 3) and wait for its B.

The three decisions are methods, so that the formal mutants can each break exactly one.
"""

from amaranth.hdl import Const, Module, Signal, unsigned
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out

from .layouts import (
    COMMIT_LAYOUT,
    COMMIT_MAGIC,
    FLAG_LAYOUT,
    FLAG_MAGIC,
    LINE_BITS,
    CheckpointPhase,
    FlagState,
    MetaLine,
    OwnWrite,
)
from .records import record_line

__all__ = ["UpdateOutcome", "UpdateSequencer"]


class UpdateOutcome(enum.Enum, shape=2):
    COMMITTED = 0      # N's commit record is persistent
    LOG_OVERFLOW = 1   # the log is incomplete: nothing was written, nothing forwarded
    ENGINE_FAILED = 2  # the engine reported an error after the flag: N must be rolled back
    BUS_ERROR = 3      # one of the own writes was not OKAY


class UpdateSequencer(wiring.Component):
    """Seal, flag, update, drain, commit (module docstring).

    Parameters (keyword-only)
    -------------------------
    line_address_width : int
    count_shape : shape
        Of the outstanding-write counters (:class:`~hw.ckpt.join.AxiJoin`).

    Members
    -------
    start : ``In(1)``
        Begin UPDATE(``batch``) (only while ``busy`` is low).
    batch : ``In(32)``; meta_line : ``In(line_address_width)``
    log_drained : ``In(1)``
        No log entry or header waits to be issued.
    log_count : ``In(32)``; log_overflow : ``In(1)``
    log_fits : ``In(1)``
        Every entry of the log is counted and within its area: ``log_overflow`` stays low
        until the UPDATE ends (the environment's promise), so UPDATE may be forwarded during
        the seal.
    own_outstanding : ``In(data.ArrayLayout(count_shape, 4))``
    engine_outstanding : ``In(count_shape)``
        From the join: accepted and not yet answered writes.
    own_error : ``In(1)``
        Strobe: an own write or read was not OKAY.
    engine_done : ``In(1)``, engine_failed : ``In(1)``
        Strobe: the engine's status for UPDATE was taken, and whether it is an error.
    write : ``Out(stream.Signature({"line", "data", "kind"}))``
        The flag (FLAG) and the commit record (COMMIT).
    flush : ``Out(1)``
        Ask the log writer to write its open header.
    forward : ``Out(1)``
        Strobe: hand UPDATE(N) to the engine now (once per UPDATE).
    forwarded : ``Out(1)``
        UPDATE(N) went to the engine (during the seal or with the flag).
    engine_reported : ``Out(1)``
        The engine's status for this UPDATE was taken (before the flag, it can only be an
        error that wrote nothing: the gate is shut until then).
    write_gate : ``Out(1)``
        The engine's writes may pass.
    busy : ``Out(1)``; phase : ``Out(CheckpointPhase)``
    finished : ``Out(1)``
        Strobe, with ``outcome``; ``busy`` falls with it.
    outcome : ``Out(UpdateOutcome)``
    interlock : ``Out(1)``
        Cycles from ``start`` until the gate opens (the cost of the ordering).
    """

    def __init__(self, *, line_address_width, count_shape):
        self._law = line_address_width
        super().__init__({
            "start": In(1),
            "batch": In(32),
            "meta_line": In(line_address_width),
            "log_drained": In(1),
            "log_count": In(32),
            "log_overflow": In(1),
            "log_fits": In(1),
            "own_outstanding": In(data.ArrayLayout(count_shape, len(OwnWrite))),
            "engine_outstanding": In(count_shape),
            "own_error": In(1),
            "engine_done": In(1),
            "engine_failed": In(1),
            "write": Out(stream.Signature(data.StructLayout({
                "line": unsigned(line_address_width), "data": unsigned(LINE_BITS),
                "kind": OwnWrite}))),
            "flush": Out(1),
            "forward": Out(1),
            "forwarded": Out(1),
            "engine_reported": Out(1),
            "write_gate": Out(1),
            "busy": Out(1),
            "phase": Out(CheckpointPhase),
            "finished": Out(1),
            "outcome": Out(UpdateOutcome),
            "interlock": Out(1),
        })

    # The three ordering decisions (the formal mutants override exactly one each).

    def _flag_may_be_written(self, log_drained, log_persistent):
        """Invariant 2: the flag only after every log entry and header is persistent."""
        return log_drained & log_persistent

    def _engine_writes_open(self, flag_persistent):
        """Invariant 1: in-place writes only once the flag (hence every entry) persists."""
        return flag_persistent

    def _commit_may_be_written(self, engine_finished, engine_writes_persistent):
        """Invariant 3: the commit record only after every in-place write is persistent."""
        return engine_finished & engine_writes_persistent

    def elaborate(self, platform):
        m = Module()
        batch = Signal(32)
        entries = Signal(32)
        failed = Signal()
        bus_error = Signal()
        forwarded = Signal()   # UPDATE(N) went to the engine
        reported = Signal()    # and its status came back
        outcome = Signal(UpdateOutcome)
        interlock = Signal()
        counts = self.own_outstanding
        log_persistent = counts[OwnWrite.LOG.value] == 0
        flag_persistent = counts[OwnWrite.FLAG.value] == 0
        commit_persistent = counts[OwnWrite.COMMIT.value] == 0

        flag_record, flag_line = record_line(m, FLAG_LAYOUT, "flag_record")
        commit_record, commit_line = record_line(m, COMMIT_LAYOUT, "commit_record")
        m.d.comb += [
            flag_record.magic.eq(FLAG_MAGIC), flag_record.batch.eq(batch),
            flag_record.entries.eq(entries), flag_record.state.eq(FlagState.SET),
            flag_record.area.eq(batch[0]),
            commit_record.magic.eq(COMMIT_MAGIC), commit_record.batch.eq(batch),
        ]
        with m.If(self.own_error):
            m.d.sync += bus_error.eq(1)

        def forward_once():
            with m.If(~forwarded):
                m.d.comb += self.forward.eq(1)
                m.d.sync += forwarded.eq(1)

        def take_report():
            # Before the flag only an error that wrote nothing can come back (the gate is
            # shut); it is a failed UPDATE all the same, so RECOVER rolls N back.
            with m.If(self.engine_done):
                m.d.sync += [reported.eq(1), failed.eq(self.engine_failed)]

        def finish(result):
            m.d.sync += outcome.eq(result)
            m.next = "Done"

        with m.FSM(name="update"):
            with m.State("Idle"):
                m.d.comb += self.phase.eq(CheckpointPhase.IDLE)
                with m.If(self.start):
                    m.d.sync += [batch.eq(self.batch), failed.eq(0), bus_error.eq(0),
                                 interlock.eq(1), forwarded.eq(0), reported.eq(0)]
                    m.next = "Seal"
            with m.State("Seal"):
                m.d.comb += [self.busy.eq(1), self.phase.eq(CheckpointPhase.SEAL),
                             self.flush.eq(1)]
                with m.If(self.log_fits & ~self.log_overflow):
                    forward_once()
                take_report()
                with m.If(self._flag_may_be_written(self.log_drained, log_persistent)):
                    with m.If(self.log_overflow & ~forwarded):
                        m.d.sync += interlock.eq(0)
                        finish(UpdateOutcome.LOG_OVERFLOW)
                    with m.Else():
                        m.d.sync += entries.eq(self.log_count)
                        m.next = "Flag"
            with m.State("Flag"):
                m.d.comb += [
                    self.busy.eq(1), self.phase.eq(CheckpointPhase.FLAG),
                    self.write.valid.eq(1),
                    self.write.payload.line.eq(self.meta_line + MetaLine.FLAG_0 + batch[0]),
                    self.write.payload.data.eq(flag_line),
                    self.write.payload.kind.eq(OwnWrite.FLAG),
                ]
                take_report()
                with m.If(self.write.ready):
                    forward_once()
                    m.next = "Update"
            with m.State("Update"):
                open_now = self._engine_writes_open(flag_persistent)
                m.d.comb += [self.busy.eq(1), self.phase.eq(CheckpointPhase.UPDATE),
                             self.write_gate.eq(open_now)]
                with m.If(open_now):
                    m.d.sync += interlock.eq(0)
                take_report()
                with m.If(self.engine_done | reported):
                    m.next = "Drain"
            with m.State("Drain"):
                # The engine has reported done (that is what brought us here).
                m.d.comb += [self.busy.eq(1), self.phase.eq(CheckpointPhase.DRAIN)]
                with m.If(self._commit_may_be_written(Const(1), self.engine_outstanding == 0)
                          & flag_persistent):
                    m.d.sync += interlock.eq(0)
                    with m.If(failed):
                        finish(UpdateOutcome.ENGINE_FAILED)
                    with m.Elif(bus_error):
                        finish(UpdateOutcome.BUS_ERROR)
                    with m.Else():
                        m.next = "Commit"
            with m.State("Commit"):
                m.d.comb += [
                    self.busy.eq(1), self.phase.eq(CheckpointPhase.COMMIT),
                    self.write.valid.eq(1),
                    self.write.payload.line.eq(self.meta_line + MetaLine.COMMIT),
                    self.write.payload.data.eq(commit_line),
                    self.write.payload.kind.eq(OwnWrite.COMMIT),
                ]
                with m.If(self.write.ready):
                    m.next = "CommitWait"
            with m.State("CommitWait"):
                m.d.comb += [self.busy.eq(1), self.phase.eq(CheckpointPhase.COMMIT)]
                with m.If(commit_persistent):
                    finish(UpdateOutcome.COMMITTED)
                    with m.If(bus_error | self.own_error):
                        m.d.sync += outcome.eq(UpdateOutcome.BUS_ERROR)
            with m.State("Done"):
                m.d.comb += [self.busy.eq(1), self.phase.eq(CheckpointPhase.REPLY),
                             self.finished.eq(1)]
                m.next = "Idle"
        m.d.comb += [self.outcome.eq(outcome), self.interlock.eq(interlock),
                     self.forwarded.eq(forwarded), self.engine_reported.eq(reported)]
        return m
