"""Formal harness of the UPDATE ordering (DESIGN.md section 4, invariants 1-3).

The design under proof is the real RTL that decides the order: :class:`~hw.ckpt.sequencer.
UpdateSequencer` (seal, flag, gate, commit) driving :class:`~hw.ckpt.join.AxiJoin` (the memory
port, the write gate, the completion counters), exactly as the CheckpointEngine connects them.
Everything around them is free:

* UPDATE(N) may start at any time the sequencer is idle, for any batch;
* an abstract log writer issues LOG writes at any time while it says it has something left
  (``log_pending``), and once it has drained it stays drained until the UPDATE ends (the tap is
  off after LOOKUP);
* an abstract embedding engine offers any reads and writes at any time and reports done (with
  or without an error) any time after UPDATE was forwarded to it, which may be during the
  seal when the log says it fits (``log_fits``, after which it never overflows);
* an abstract memory answers with any timing and data, but a B or R only for a request of
  the same class (ID) that is outstanding.

Shadow counters at the memory port classify every write by its AXI ID (own writes carry
``2**id_width - 4 + OwnWrite``) and the assertions say, for every cycle:

1. *log before flag* (invariant 2): a flag write is issued only during an UPDATE, with no LOG
   write outstanding and nothing of the log left on chip;
2. *flag before in-place writes* (invariant 1): during an UPDATE, a write of the embedding
   engine is issued only after the flag's B response, with no LOG or FLAG write outstanding;
3. *in-place writes before commit* (invariant 3): the commit record is issued only during an
   UPDATE, after the engine reported done and every one of its writes has its B response;
4. *commit before success*: the sequencer reports COMMITTED only after the commit's B.

The properties hold in every reachable state: ``python -m hw.ckpt.formal`` proves them by
k-induction (``--mode bmc`` checks them to a bounded depth only). An induction step may start
from any state that satisfies the assertions, reachable or not, so auxiliary assertions (true
in every reachable state, checked like the properties) rule out the unreachable ones:

* the shadow counters agree with the join's (accepted = issued + the write waiting in the
  join's register stage); no OTHER write is outstanding; ``updating`` is the sequencer's
  ``busy``;
* per sequencer phase: outside UPDATE and DRAIN no engine write, flag or commit record is
  outstanding, and outside SEAL, FLAG and UPDATE nothing is forwarded; from FLAG on the log is
  drained and has no write outstanding; in UPDATE and DRAIN at most the one flag write is
  outstanding, it is persistent exactly when none is, and an engine write is outstanding only
  once it is; the engine is busy (``forwarded``) or has reported (the sequencer's
  ``engine_reported``) in SEAL, FLAG and UPDATE, never both, and has finished in DRAIN and
  COMMIT; in
  COMMIT everything before the commit record is persistent, and the record is not yet
  accepted (Commit) or is the one outstanding write of its kind, persistent exactly when
  none is (CommitWait).

With them the properties are 1-inductive. Covers show that each event is reachable. The
environment's assumptions restrict only the free inputs (given the current state), never the
sequencer's or the join's registers.
"""

from amaranth.asserts import AnyConst, AnySeq
from amaranth.hdl import Assert, Assume, Cover, Elaboratable, Module, ResetSignal, Signal

from hw.ckpt.join import AxiJoin, own_id_base
from hw.ckpt.layouts import CheckpointPhase, OwnWrite
from hw.ckpt.sequencer import UpdateOutcome, UpdateSequencer

__all__ = ["FORMAL_PARAMETERS", "OrderingHarness"]

#: Small but complete: 3-bit IDs (4 for the engine, 4 own), three writes in flight per kind.
FORMAL_PARAMETERS = {"addr_width": 12, "id_width": 3, "max_outstanding_writes": 3}


class OrderingHarness(Elaboratable):
    """``sequencer_class`` (UpdateSequencer or a mutant) + AxiJoin on free inputs, with the
    shadow model and the assertions of the module docstring.

    ``auxiliary=False`` leaves out the auxiliary invariants, so that only the four ordering
    properties are checked (for the mutants: a counterexample then violates a property, not
    merely an invariant of the real sequencer's implementation). Without them the properties
    still hold, but only the bounded check can show it.
    """

    def __init__(self, sequencer_class=UpdateSequencer, *, auxiliary=True, **parameters):
        self.sequencer_class = sequencer_class
        self.auxiliary = auxiliary
        self.parameters = {**FORMAL_PARAMETERS, **parameters}

    def elaborate(self, platform):
        m = Module()
        params = self.parameters
        aw, iw = params["addr_width"], params["id_width"]
        m.submodules.join = join = AxiJoin(
            addr_width=aw, id_width=iw, max_outstanding_writes=params["max_outstanding_writes"])
        count_shape = join.own_outstanding[0].shape()
        m.submodules.sequencer = seq = self.sequencer_class(line_address_width=aw - 6,
                                                            count_shape=count_shape)
        # Registers start from their init values; no reset afterwards (in an induction step a
        # reset tied to Initial() could strike at any cycle).
        m.d.comb += Assume(~ResetSignal())
        base = own_id_base(iw)

        def own(kind):
            return base + kind.value

        # --- the abstract engine, memory and log writer: free signals ------------------------
        engine, memory = join.engine, join.memory
        for port in (engine.arid, engine.araddr, engine.arlen, engine.arvalid, engine.rready,
                     engine.awid, engine.awaddr, engine.awlen, engine.awvalid, engine.wdata,
                     engine.wstrb, engine.wlast, engine.wvalid, engine.bready,
                     memory.arready, memory.rid, memory.rdata, memory.rresp, memory.rlast,
                     memory.rvalid, memory.awready, memory.wready, memory.bid, memory.bresp,
                     memory.bvalid):
            m.d.comb += port.eq(AnySeq(port.shape()))
        m.d.comb += [join.own_ar.valid.eq(0), join.own_r.ready.eq(1),
                     join.engine_read_open.eq(1), join.engine_ar_hold.eq(0),
                     join.engine_r_hold.eq(0)]

        log_pending = Signal()
        log_w_valid = Signal()
        m.d.comb += [log_pending.eq(AnySeq(1)), log_w_valid.eq(AnySeq(1))]
        log_overflow = Signal()
        log_fits = Signal()
        m.d.comb += [log_overflow.eq(AnySeq(1)), log_fits.eq(AnySeq(1))]
        start = Signal()
        engine_done = Signal()
        m.d.comb += [start.eq(AnySeq(1)), engine_done.eq(AnySeq(1))]
        m.d.comb += [
            seq.start.eq(start), seq.batch.eq(AnySeq(32)), seq.meta_line.eq(AnyConst(aw - 6)),
            seq.log_drained.eq(~log_pending), seq.log_count.eq(AnySeq(32)),
            seq.log_overflow.eq(log_overflow), seq.log_fits.eq(log_fits),
            seq.own_outstanding.eq(join.own_outstanding),
            seq.engine_outstanding.eq(join.engine_outstanding),
            seq.own_error.eq(join.own_error),
            seq.engine_done.eq(engine_done), seq.engine_failed.eq(AnySeq(1)),
            join.engine_write_open.eq(seq.write_gate),
        ]
        # The own-write mux of the CheckpointEngine: the sequencer first, else the log.
        with m.If(seq.write.valid):
            m.d.comb += [join.own_w.valid.eq(1), join.own_w.payload.eq(seq.write.payload),
                         seq.write.ready.eq(join.own_w.ready)]
        with m.Else():
            m.d.comb += [join.own_w.valid.eq(log_w_valid),
                         join.own_w.payload.line.eq(AnySeq(aw - 6)),
                         join.own_w.payload.data.eq(AnySeq(512)),
                         join.own_w.payload.kind.eq(OwnWrite.LOG)]

        # --- shadow counters at the memory port -----------------------------------------------
        aw_fire = memory.awvalid & memory.awready
        b_fire = memory.bvalid & memory.bready

        def shadow(name, issued, completed):
            count = Signal(4, name=name)
            m.d.sync += count.eq(count + issued - completed)
            return count

        counts = {kind: shadow(f"issued_{kind.name.lower()}",
                               aw_fire & (memory.awid == own(kind)),
                               b_fire & (memory.bid == own(kind)))
                  for kind in OwnWrite}
        engine_writes = shadow("issued_engine", aw_fire & (memory.awid < base),
                               b_fire & (memory.bid < base))

        # The memory answers only writes that it has been given (and reads: none are asked
        # for here except the engine's, whose data is irrelevant to the order).
        b_count = Signal.like(engine_writes)
        with m.If(memory.bid < base):
            m.d.comb += b_count.eq(engine_writes)
        for kind in OwnWrite:
            with m.If(memory.bid == own(kind)):
                m.d.comb += b_count.eq(counts[kind])
        m.d.comb += Assume(~memory.bvalid | (b_count != 0))

        # --- the environment's rules ------------------------------------------------------------
        updating = Signal()        # from start to finished
        forwarded = Signal()       # UPDATE handed to the engine, its done not yet seen
        flag_persisted = Signal()
        engine_finished = Signal()
        commit_persisted = Signal()
        drained_seen = Signal()    # the log said "drained" during this UPDATE
        fits_seen = Signal()       # the log said it fits during this UPDATE
        m.d.comb += [
            Assume(~start | ~seq.busy),
            Assume(~engine_done | forwarded),
            Assume(~log_w_valid | log_pending | seq.write.valid),
            Assume(~(updating & drained_seen & log_pending)),
            Assume(~(updating & (fits_seen | log_fits) & log_overflow)),
        ]
        with m.If(start):
            m.d.sync += [updating.eq(1), flag_persisted.eq(0), engine_finished.eq(0),
                         commit_persisted.eq(0), drained_seen.eq(0), fits_seen.eq(0)]
        with m.If(updating & log_fits):
            m.d.sync += fits_seen.eq(1)
        with m.If(seq.finished):
            m.d.sync += updating.eq(0)
        with m.If(updating & ~log_pending):
            m.d.sync += drained_seen.eq(1)
        with m.If(seq.forward):
            m.d.sync += forwarded.eq(1)
        with m.If(engine_done):
            m.d.sync += [forwarded.eq(0), engine_finished.eq(1)]
        with m.If(b_fire & (memory.bid == own(OwnWrite.FLAG)) & updating):
            m.d.sync += flag_persisted.eq(1)
        with m.If(b_fire & (memory.bid == own(OwnWrite.COMMIT)) & updating):
            m.d.sync += commit_persisted.eq(1)

        # --- the properties -------------------------------------------------------------------
        engine_write = aw_fire & (memory.awid < base)
        flag_write = aw_fire & (memory.awid == own(OwnWrite.FLAG))
        commit_write = aw_fire & (memory.awid == own(OwnWrite.COMMIT))
        with m.If(flag_write):
            m.d.comb += Assert(updating & (counts[OwnWrite.LOG] == 0) & ~log_pending)
        with m.If(engine_write & updating):
            m.d.comb += Assert(flag_persisted & (counts[OwnWrite.LOG] == 0)
                               & (counts[OwnWrite.FLAG] == 0))
        with m.If(commit_write):
            m.d.comb += Assert(updating & engine_finished & (engine_writes == 0))
        with m.If(seq.finished & (seq.outcome == UpdateOutcome.COMMITTED)):
            m.d.comb += Assert(commit_persisted)

        if self.auxiliary:
            self._auxiliary_invariants(
                m, join=join, seq=seq, counts=counts, engine_writes=engine_writes,
                updating=updating, forwarded=forwarded, flag_persisted=flag_persisted,
                engine_finished=engine_finished, commit_persisted=commit_persisted,
                drained_seen=drained_seen, fits_seen=fits_seen)

        sealing = seq.phase == CheckpointPhase.SEAL
        m.d.comb += [
            Cover(seq.forward & sealing),
            Cover(engine_done & sealing),
            Cover(engine_write & updating),
            Cover(commit_write),
            Cover(seq.finished & (seq.outcome == UpdateOutcome.COMMITTED)),
        ]
        return m

    def _auxiliary_invariants(self, m, *, join, seq, counts, engine_writes, updating, forwarded,
                              flag_persisted, engine_finished, commit_persisted, drained_seen,
                              fits_seen):
        """True in every reachable state; they rule out the unreachable states that an
        induction step could otherwise start from (e.g. an engine write accepted while the flag
        is still outstanding), which makes the properties provable by k-induction, not only
        bounded (module docstring)."""
        base = own_id_base(self.parameters["id_width"])
        own_count = join.own_outstanding

        def outstanding(kind):
            return own_count[kind.value]

        # The join's counts are the issued ones plus the write waiting in its stage.
        for kind in OwnWrite:
            waiting = join.stage_aw & (join.stage_id == base + kind.value)
            m.d.comb += Assert(outstanding(kind) == counts[kind] + waiting)
        waiting = join.stage_aw & (join.stage_id < base)
        m.d.comb += Assert(join.engine_outstanding == engine_writes + waiting)
        # Nothing here writes with the OTHER kind (restores, snapshots: not part of UPDATE).
        m.d.comb += Assert(outstanding(OwnWrite.OTHER) == 0)
        m.d.comb += Assert(updating == seq.busy)

        # What each step of the sequencer implies about the shadow state.
        phase = seq.phase
        idle = phase == CheckpointPhase.IDLE
        sealing = phase == CheckpointPhase.SEAL
        flagging = phase == CheckpointPhase.FLAG
        in_update = phase == CheckpointPhase.UPDATE
        draining = phase == CheckpointPhase.DRAIN
        committing = phase == CheckpointPhase.COMMIT    # Commit (write.valid) and CommitWait
        replying = phase == CheckpointPhase.REPLY
        m.d.comb += Assert(idle | sealing | flagging | in_update | draining | committing
                           | replying)
        no_flag = outstanding(OwnWrite.FLAG) == 0
        no_commit = outstanding(OwnWrite.COMMIT) == 0
        no_log = outstanding(OwnWrite.LOG) == 0
        no_engine = join.engine_outstanding == 0
        # Outside UPDATE and DRAIN the gate is shut and no engine write is outstanding; no flag
        # or commit record is outstanding outside their own phases.
        with m.If(idle | sealing | flagging | replying):
            m.d.comb += Assert(no_engine & no_flag & no_commit)
        with m.If(idle | replying):
            m.d.comb += Assert(~forwarded)
        with m.If(sealing | flagging):
            m.d.comb += Assert(~flag_persisted & ~commit_persisted)
        # An UPDATE forwarded during the seal was so only once the log fit.
        with m.If(sealing & seq.forwarded):
            m.d.comb += Assert(fits_seen)
        # From FLAG on, the log of this UPDATE is drained and persistent (and stays so).
        with m.If(flagging | in_update | draining | committing):
            m.d.comb += Assert(drained_seen & no_log)
        # UPDATE and DRAIN: the one flag write is outstanding or persistent, and the engine's
        # writes were accepted only after its B; the engine is busy exactly in UPDATE.
        with m.If(in_update | draining):
            m.d.comb += Assert((outstanding(OwnWrite.FLAG) <= 1) & (flag_persisted == no_flag)
                               & (flag_persisted | no_engine)
                               & no_commit & ~commit_persisted)
        # Forwarded once: busy until it reports; the sequencer remembers both.
        with m.If(sealing | flagging | in_update):
            m.d.comb += Assert(~(forwarded & engine_finished)
                               & (seq.forwarded == (forwarded | engine_finished))
                               & (seq.engine_reported == engine_finished))
        with m.If(in_update):
            m.d.comb += Assert(seq.forwarded)
        with m.If(forwarded):
            m.d.comb += Assert(sealing | flagging | in_update)
        with m.If(draining):
            m.d.comb += Assert(engine_finished & ~forwarded)
        # COMMIT: everything before it is persistent; the one commit write is not yet accepted
        # (Commit), or outstanding or persistent (CommitWait).
        with m.If(committing):
            m.d.comb += Assert(engine_finished & flag_persisted & ~forwarded
                               & no_engine & no_flag)
        with m.If(committing & seq.write.valid):
            m.d.comb += Assert(no_commit & ~commit_persisted)
        with m.If(committing & ~seq.write.valid):
            m.d.comb += Assert((outstanding(OwnWrite.COMMIT) <= 1)
                               & (commit_persisted == no_commit))
