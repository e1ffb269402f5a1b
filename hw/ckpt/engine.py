"""The checkpoint engine: batch-aware undo logging, batch flags, commit records, MLP snapshot
records, recovery and GPF drain, between the command source and the embedding engine.

::

    cmd/done  ->  CheckpointEngine  ->  engine_cmd/engine_done  ->  EmbeddingEngine
                      |  ^ engine_axi  <------------------------------ its AXI port
                      v  |
                     axi  -> memory (the engine's traffic + log, flags, records, restores)

Persistent layout: :mod:`hw.ckpt.layouts`. Pieces: :class:`~hw.ckpt.tap.LookupTap` (log entries
from the lookup's own reads), :class:`~hw.ckpt.log_writer.LogWriter` (groups in a log area),
:class:`~hw.ckpt.join.AxiJoin` (one memory port, the write gate, completion counters).

Ordering (DESIGN.md section 4, after PMDK)
------------------------------------------
A batch N runs LOOKUP(N), UPDATE(N), then possibly SNAPSHOT(N):

* LOOKUP(N) (N must be last committed + 1): table reads are tapped into log area N % 2 while
  the command runs; its status is returned as soon as the embedding engine finishes, and the
  log drains in the background.
* UPDATE(N) *seals* the log: it waits until every entry and header is written and every LOG
  write has its B response (invariant 2), then writes N's flag ``{N, entries, SET}``. UPDATE(N)
  goes to the embedding engine as soon as the log's entries are all counted and fit its area
  (at once, unless the tap is still settling), so the engine validates and reads gradients
  and rows while the log drains; otherwise (an overflow, refused) it never goes. The engine's
  writes pass the join only once the flag's B response is back (invariant 1: every entry is
  persistent before any in-place write is issued). When the
  engine reports UPDATE done and every one of its writes has its B response, the commit
  record ``{c = N}`` is written (invariant 3), and the status goes back once it is persistent.
* Area N % 2 is next written by LOOKUP(N + 2), which is accepted only after N is committed
  (invariant 4: strictly, after N + 1 is; relaxed, LOOKUP(N + 2) may run ahead of UPDATE(N + 1)
  and log ahead). Recovery restores only the entries the flag counts, which were
  all persistent before the flag was written, so it never sees a torn entry, and only batch
  c + 1's entries (invariant 6); it marks the flag ROLLED_BACK after the restored rows are
  persistent, so a second recovery does nothing more, and a recovery cut short by a power
  failure restores the same entries again (invariant 5).

When the undo log is taken (``log_mode``)
-----------------------------------------
``log_mode`` (:class:`~hw.ckpt.layouts.LogMode`) is sampled when LOOKUP(N) is accepted and holds
for batch N: UPDATE(N) always follows the mode of its LOOKUP, so a batch is never left with
half a log. It only matters with ``logging_enable`` set.

* ``ON_LOOKUP`` (above): the tap logs LOOKUP(N)'s own table reads. No row is read twice, but
  LOOKUP runs at the pace of the log's writes once the tap's buffer is full.
* ``AT_UPDATE`` (the ``nmp_sync_log`` comparison point: the log on the critical path).
  LOOKUP(N) runs under the same rules (N must be last committed + 1; ``log_open`` and
  ``log_batch`` afterwards) but the tap takes no entries, and the command descriptor is
  latched. UPDATE(N) first *replays* LOOKUP(N) (the latched descriptor, same batch number) to
  the embedding engine, phase ``REPLAY``, with the tap taking entries into log area N % 2
  exactly as on lookup (same filter, same entries, same ``counters.log_entries``): the replay
  re-reads every table row of the batch, which is the synchronous undo log's read of the old
  values. The replay's writes (the pooled output buffer) are answered here and dropped: the
  tables are unchanged since LOOKUP(N), so they would rewrite identical values, and the host
  may already have put UPDATE(N)'s gradients into that very buffer (``output`` is the
  gradient buffer of UPDATE; the testbench host uses one buffer for both). Nothing of the
  replay reaches memory but its reads and the log. When the replayed LOOKUP is done,
  UPDATE(N) proceeds exactly as above (seal, flag, forward UPDATE(N), gate, commit): the flag
  is still written only after every entry is persistent, so RECOVER is unchanged. If the
  replayed LOOKUP reports an error, UPDATE(N) is refused (``BAD_OPCODE``, the location fields
  of the engine's status, ``CheckpointError.REPLAY_FAILED``) with no flag written and no
  table row changed; the batch stays open, so UPDATE(N) may be sent again (it replays again),
  as may LOOKUP(N). A GPF during the replay cuts the log as during a LOOKUP: UPDATE(N) is then
  refused with ``LOG_OVERFLOW`` and may be retried.
* ``AFTER_LOOKUP``: LOOKUP(N) runs unlogged at full speed, as ``AT_UPDATE``; its status goes
  back at once, and the same replay then starts in the background (phase ``REPLAY``) while the
  host reads the pooled output, runs its MLP and writes the gradients: the log is written
  during the host's time instead of holding up LOOKUP or UPDATE. Commands wait (``cmd`` is not
  ready) until the replay is done; UPDATE(N) then seals the log as after an ``ON_LOOKUP``
  LOOKUP. If the background replay reported an error or a GPF cut it, UPDATE(N) replays again
  first, exactly as ``AT_UPDATE`` (so a second failure refuses it with ``REPLAY_FAILED``).
  Reads the host makes meanwhile see the tables as LOOKUP(N) left them (only the log and the
  dropped output writes are the replay's), and the host writing the gradient buffer races
  nothing.
* ``LOOKUP_THEN_REPLAY``: the tap logs LOOKUP(N)'s reads as ``ON_LOOKUP`` does, but *lossy*: it
  never holds the read data, and an entry that finds its buffer full is dropped (and not
  remembered by the duplicate filter). LOOKUP(N) so runs as fast as unlogged while the log's
  writes start at once. After its status, if anything was dropped, the replay of
  ``AFTER_LOOKUP`` runs in the background *without restarting the log*: the filter skips the
  lines already logged, so it logs the missing ones (and any the filter forgot, harmless
  duplicates). Failures are handled as for ``AFTER_LOOKUP``: UPDATE(N) then replays with a
  fresh log, as ``AT_UPDATE``.

The embedding engine's own counters count a replayed LOOKUP as a second lookup.

Relaxed lookup (``relaxed``, ``sw_model.relaxed``)
--------------------------------------------------
With ``relaxed`` set, LOOKUP(N + 1) is also accepted while batch N is open (LOOKUP(N) ended OK,
UPDATE(N) not yet committed) and no other lookup is deferred. It goes to the embedding engine
with its ``relaxed`` input set, so the engine defers it: it pools the tables before UPDATE(N),
and UPDATE(N) corrects its output. Nothing else about batch N changes (its log, flag, gate and
commit), except that the correction's writes of LOOKUP(N + 1)'s output pass the gate with
UPDATE(N)'s. How batch N + 1's undo log is taken depends on ``log_mode`` when LOOKUP(N + 1)
comes:

* ``ON_LOOKUP``, if batch N's log is complete (taken on lookup, or by a finished background
  replay) and did not overflow: *log-ahead*. The tap starts batch N + 1 at once, while N's
  last entries may still wait in its buffer: each entry carries its batch's generation bit,
  and the log writer closes N's log (its last header issued, its entry count kept for N's
  flag) once none of N's entries waits, then moves on to N + 1's. The tap logs LOOKUP(N + 1)'s
  reads into area (N + 1) % 2 (free: N - 1 is committed), holding the read data as on lookup
  (the buffer is shared: N's log draining slowly holds LOOKUP(N + 1) only when it is full;
  UPDATE(N) goes to the engine once N's log is closed), except the lines batch N logged (the
  tap's previous filter): UPDATE(N) rewrites those. The entries hold the values before
  UPDATE(N); for the lines UPDATE(N) rewrites, batch N + 1 must roll back to UPDATE(N)'s
  values instead. So while UPDATE(N) runs, the write tap
  (:class:`~hw.ckpt.write_tap.UpdateWriteTap`) appends each engine write whose line may be in
  N + 1's log (the tap's filter answers with no false negative) to that log, with the data
  written: RECOVER restores a log in order, so the later entry wins. When UPDATE(N) commits,
  batch N + 1 opens with its log taken, as after an ``ON_LOOKUP`` LOOKUP: no replay, and
  LOOKUP(N + 2) may follow at once. Batch N's seal waits only for the LOG writes issued
  before its log closed (B responses of one ID come in order), not for N + 1's, which may
  still drain from the tap's buffer while UPDATE(N) runs.
* otherwise, or if the tap was cut by a GPF or the log overflowed: LOOKUP(N + 1)'s reads are
  not logged. When UPDATE(N) commits, batch N + 1 opens as if its LOOKUP had just run in
  ``AFTER_LOOKUP`` mode: the background replay of LOOKUP(N + 1), now on the updated tables,
  takes its undo log while the host works (and UPDATE(N + 1) replays it again if that failed).

An UPDATE(N) that reached the engine and failed ends the deferral with it; RECOVER drops it in
the engine too (``engine_forget``), since the host starts again from c + 1.

Snapshots: the host writes the MLP parameters into slot ``next_snapshot_slot`` (the slot that
does not hold the newest complete snapshot) over CXL.mem, waits for its writes to complete,
then sends SNAPSHOT(N); the slot's completion record ``{N}`` is written and the slot becomes the
newest. ``next_snapshot_slot`` equals ``(N // K) % 2`` (``sw_model.checkpoint.snapshot_slot``)
as long as every snapshot batch gets its record; after a power failure that lost one, the
device keeps the surviving snapshot and points the host at the other slot instead (the fixed
formula would then overwrite the only complete snapshot). SNAPSHOT(-1) (batch 0xFFFFFFFF) seals
the initial parameters in slot 1 after formatting.

RECOVER: reads the metadata; with no valid superblock it formats (commit record c = -1, flags
and snapshot records cleared, superblock last); otherwise it rolls back batch c + 1 if its flag
is SET, finds the newest complete snapshot, and reports them. It must be the first command
after reset; LOOKUP, UPDATE and SNAPSHOT are refused until it has succeeded.

Refused commands are answered with ``ErrorCode.BAD_OPCODE`` and change nothing; the reason is
on ``error`` (:class:`~hw.ckpt.layouts.CheckpointError`).

GPF: while ``gpf`` is set no command is accepted, the engine's new reads and writes are held,
no new log entry is taken (a LOOKUP cut short this way cannot be followed by its UPDATE), and
the log buffer, open headers and every accepted write drain; ``gpf_done`` rises when all are
persistent, with the time it took in ``gpf_drain_cycles``.

With ``logging_enable`` clear, LOOKUP and UPDATE pass straight through (the no-checkpoint
baseline, whatever ``log_mode`` says), and the persistent state is not maintained.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.emb.layouts import (
    ErrorCode,
    Opcode,
    command_layout,
    region_layout,
    status_layout,
    table_layout,
)
from hw.mem.axi import AXI4Signature

from .join import AxiJoin
from .layouts import (
    COMMIT_LAYOUT,
    COMMIT_MAGIC,
    ENTRIES_PER_GROUP,
    FLAG_LAYOUT,
    FLAG_MAGIC,
    GROUP_HEADER_LAYOUT,
    GROUP_LINES,
    GROUP_MAGIC,
    LINE_BITS,
    META_LINES,
    NO_BATCH,
    SNAPSHOT_LAYOUT,
    SNAPSHOT_MAGIC,
    SUPERBLOCK_LAYOUT,
    SUPERBLOCK_MAGIC,
    VERSION,
    CheckpointError,
    CheckpointPhase,
    FlagState,
    LogMode,
    MetaLine,
    OwnWrite,
)
from .log_writer import LogWriter
from .records import later, record_line, record_valid
from .sequencer import UpdateOutcome, UpdateSequencer
from .tap import LookupTap
from .write_tap import UpdateWriteTap

__all__ = ["CheckpointEngine", "counters_layout"]


def counters_layout() -> data.StructLayout:
    """Free-running counters of the checkpoint engine (wrap at 2**32)."""
    return data.StructLayout({
        "log_entries": unsigned(32),      # entries logged (all batches)
        "log_duplicates": unsigned(32),   # table beats not logged: already logged this batch
        "own_writes": unsigned(32),       # own writes issued (log, flags, records, restores)
        "interlock_cycles": unsigned(32),  # from UPDATE accepted to the write gate opening
        "log_shared": unsigned(32),       # table beats of a lookup logged ahead not logged:
                                          # batch N logged them, UPDATE(N)'s writes log them
    })


def _check_int(value, name, low, high, *, power_of_two=False, zero=False):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer, not {value!r}")
    if zero and value == 0:
        return value
    if not low <= value <= high or (power_of_two and value & (value - 1)):
        kind = "a power of two" if power_of_two else "an integer"
        extra = "0 or " if zero else ""
        raise ValueError(f"{name} must be {extra}{kind} in {low}..{high}, not {value!r}")
    return value


class CheckpointEngine(wiring.Component):
    """Crash-consistent checkpointing in front of the embedding engine (module docstring).

    Parameters (keyword-only)
    -------------------------
    addr_width : int
        Byte address width, 12..64 (as the embedding engine's).
    id_width : int
        AXI ID width, 3..16, of both AXI ports. The embedding engine must use IDs below
        ``2**id_width - 4`` (for the EmbeddingEngine: ``outstanding_reads + 3 <=
        2**id_width - 4``); the top four are this engine's.
    max_tables : int
        Table descriptors, 1..255 (as the embedding engine's).
    log_buffer_depth : int
        Log entries buffered on chip (a power of two, 8..4096); the lookup's read data waits
        when it is full.
    write_tap_buffer_depth : int
        Log-ahead's entries from UPDATE(N)'s writes buffered on chip (a power of two,
        4..4096); UPDATE's writes wait when it is full. The engine's writes go to memory
        before the log's, so a deep buffer lets these entries drain in the gaps between
        UPDATE's writes instead of taking turns with them.
    dedup_entries : int
        Lines in the per-batch duplicate filter: 0 (off) or a power of two, 2..16384. Its two
        banks are block RAM, valid bits included (each word holds the epoch it was written
        in), so emptying a bank costs nothing, except that after a reset, and once in every
        255 batches a bank serves, it is swept: the LOOKUP that opens that batch waits
        ``dedup_entries`` cycles.
    max_outstanding_writes : int
        Own writes of one kind, and engine writes, in flight: 1..1024.

    Members
    -------
    cmd : ``In(stream.Signature(command_layout(addr_width)))``
    done : ``Out(stream.Signature(status_layout()))``
        The device's command port: LOOKUP/UPDATE go on to the engine, SNAPSHOT and RECOVER
        are handled here.
    engine_cmd : ``Out(stream.Signature(command_layout(addr_width)))``
    engine_done : ``In(stream.Signature(status_layout()))``
        To and from :class:`~hw.emb.engine.EmbeddingEngine`.
    engine_axi : ``In(AXI4Signature(addr_width=addr_width, data_width=512, id_width=id_width))``
        The embedding engine's AXI port arrives here.
    axi : ``Out(AXI4Signature(...))``
        Toward memory: the engine's traffic plus this engine's own (IDs ``2**id_width - 4..``).
    tables : ``In(data.ArrayLayout(table_layout(addr_width), max_tables))``
        The same descriptors the embedding engine gets (table extents for the tap).
    meta_region, log_region : ``In(region_layout(addr_width))``
        Metadata (at least 8 lines) and undo log (two areas of at least one 8-line group);
        64-byte aligned; must hold still from RECOVER on.
    snapshot_regions : ``In(data.ArrayLayout(region_layout(addr_width), 2))``
        The two MLP snapshot slots (recorded in the superblock).
    snapshot_interval : ``In(32)``
        K: SNAPSHOT(N) requires (N + 1) % K == 0 (K = 0: any batch).
    logging_enable : ``In(1)``
        Clear: LOOKUP/UPDATE pass straight through (no logging, no ordering, no commit).
    log_mode : ``In(LogMode)``
        With logging: when the undo log is taken (module docstring); sampled when LOOKUP(N)
        is accepted, held for batch N.
    relaxed : ``In(1)``
        Relaxed lookup (module docstring); without logging it goes straight to the engine.
    engine_relaxed, engine_forget : ``Out(1)``
        To the embedding engine's ``relaxed`` and ``forget_deferred``.
    gpf : ``In(1)``
        Power-fail warning (module docstring).

    Status (outputs)
    ----------------
    phase : ``CheckpointPhase``; error : ``CheckpointError`` (of the last command)
    attached : RECOVER has succeeded since reset (and no UPDATE failed since)
    last_committed : batch c (0xFFFFFFFF: none)
    snapshot_batch, snapshot_valid, snapshot_slot : the newest complete snapshot
    next_snapshot_slot : where the host writes the next snapshot
    log_open, log_batch, log_entries : the current batch's log (LOOKUP done, no UPDATE yet)
    lookup_deferred : LOOKUP(log_batch + 1) ran relaxed and waits for UPDATE(log_batch)
    log_pending : log entries or headers not yet issued
    recovery_cycles, restored_entries, rolled_back : of the last RECOVER
    gpf_done, gpf_drain_cycles
    engine_protocol_error : sticky, the engine used a reserved ID or a write burst
    counters : ``counters_layout()``
    """

    def __init__(self, *, addr_width=48, id_width=8, max_tables=8, log_buffer_depth=64,
                 write_tap_buffer_depth=4, dedup_entries=256, max_outstanding_writes=64):
        _check_int(addr_width, "Address width", 12, 64)
        _check_int(id_width, "ID width", 3, 16)
        _check_int(max_tables, "Maximum table count", 1, 255)
        _check_int(log_buffer_depth, "Log buffer depth", 8, 4096, power_of_two=True)
        _check_int(write_tap_buffer_depth, "Write tap buffer depth", 4, 4096, power_of_two=True)
        _check_int(dedup_entries, "Duplicate filter size", 2, 16384, power_of_two=True,
                   zero=True)
        _check_int(max_outstanding_writes, "Outstanding write limit", 1, 1024)
        self._addr_width = addr_width
        self._id_width = id_width
        self._max_tables = max_tables
        self._log_buffer_depth = log_buffer_depth
        self._write_tap_buffer_depth = write_tap_buffer_depth
        self._dedup_entries = dedup_entries
        self._max_writes = max_outstanding_writes
        axi = AXI4Signature(addr_width=addr_width, data_width=LINE_BITS, id_width=id_width)
        self._axi_signature = axi
        super().__init__({
            "cmd": In(stream.Signature(command_layout(addr_width))),
            "done": Out(stream.Signature(status_layout())),
            "engine_cmd": Out(stream.Signature(command_layout(addr_width))),
            "engine_done": In(stream.Signature(status_layout())),
            "engine_axi": In(axi),
            "axi": Out(axi),
            "tables": In(data.ArrayLayout(table_layout(addr_width), max_tables)),
            "meta_region": In(region_layout(addr_width)),
            "log_region": In(region_layout(addr_width)),
            "snapshot_regions": In(data.ArrayLayout(region_layout(addr_width), 2)),
            "snapshot_interval": In(32),
            "logging_enable": In(1),
            "log_mode": In(LogMode),
            "relaxed": In(1),
            "engine_relaxed": Out(1),
            "engine_forget": Out(1),
            "gpf": In(1),
            "phase": Out(CheckpointPhase),
            "error": Out(CheckpointError),
            "attached": Out(1),
            "last_committed": Out(32),
            "snapshot_batch": Out(32),
            "snapshot_valid": Out(1),
            "snapshot_slot": Out(1),
            "next_snapshot_slot": Out(1),
            "log_open": Out(1),
            "log_batch": Out(32),
            "log_entries": Out(32),
            "log_pending": Out(1),
            "lookup_deferred": Out(1),
            "recovery_cycles": Out(32),
            "restored_entries": Out(32),
            "rolled_back": Out(1),
            "gpf_done": Out(1),
            "gpf_drain_cycles": Out(32),
            "engine_protocol_error": Out(1),
            "counters": Out(counters_layout()),
        })

    @property
    def addr_width(self):
        return self._addr_width

    @property
    def id_width(self):
        return self._id_width

    @property
    def max_tables(self):
        return self._max_tables

    @property
    def log_buffer_depth(self):
        return self._log_buffer_depth

    @property
    def write_tap_buffer_depth(self):
        return self._write_tap_buffer_depth

    @property
    def dedup_entries(self):
        return self._dedup_entries

    @property
    def engine_id_limit(self):
        """The embedding engine must use AXI IDs below this."""
        return 2 ** self._id_width - 4

    def elaborate(self, platform):
        m = Module()
        aw = self._addr_width
        law = aw - 6

        m.submodules.join = join = AxiJoin(addr_width=aw, id_width=self._id_width,
                                           max_outstanding_writes=self._max_writes)
        m.submodules.tap = tap = LookupTap(addr_width=aw, id_width=self._id_width,
                                           max_tables=self._max_tables,
                                           buffer_depth=self._log_buffer_depth,
                                           dedup_entries=self._dedup_entries)
        m.submodules.log_writer = log = LogWriter(addr_width=aw)
        m.submodules.write_tap = write_tap = UpdateWriteTap(
            addr_width=aw, buffer_depth=self._write_tap_buffer_depth)
        wiring.connect(m, join.memory, wiring.flipped(self.axi))
        # Each entry carries the generation of the batch whose log it is (the two taps copy
        # ``tap_generation`` in): with log-ahead the lookup tap starts batch N + 1 while
        # batch N's last entries still wait in its buffer, and the log writer takes only its
        # own batch's (``log_generation``); it moves to N + 1 when N's are all issued.
        tap_generation = Signal()
        log_generation = Signal()
        switch_pending = Signal()   # N + 1's log waits for N's last entries (log-ahead)
        m.d.comb += [tap.generation.eq(tap_generation), write_tap.generation.eq(tap_generation)]
        tap_head = tap.entries.payload
        write_head = write_tap.entries.payload
        # The write tap's entries follow the lookup tap's of their batch (log-ahead: an entry
        # of UPDATE(N) must follow LOOKUP(N + 1)'s of that line).
        tap_holds_write_batch = (
            (tap.entries.valid & (tap_head.generation == write_head.generation))
            | (~tap.settled & (tap_generation == write_head.generation)))
        take_write = (write_tap.entries.valid & (write_head.generation == log_generation)
                      & ~tap_holds_write_batch)
        take_tap = tap.entries.valid & (tap_head.generation == log_generation)
        with m.If(take_write):
            m.d.comb += [log.entries.valid.eq(1), log.entries.payload.eq(write_head),
                         write_tap.entries.ready.eq(log.entries.ready)]
        with m.Else():
            m.d.comb += [log.entries.valid.eq(take_tap), log.entries.payload.eq(tap_head),
                         tap.entries.ready.eq(log.entries.ready & take_tap)]
        # Entries of the log writer's batch remain (the write tap's stage holds one only while
        # its UPDATE runs, so that one is of the writer's batch).
        old_entries = (take_tap | (~tap.settled & (tap_generation == log_generation))
                       | (write_tap.entries.valid & (write_head.generation == log_generation))
                       | (~write_tap.empty & ~write_tap.entries.valid))
        entries_empty = tap.empty & write_tap.empty & ~switch_pending
        m.d.comb += [write_tap.w_fire.eq(join.engine_w_fire),
                     write_tap.w_line.eq(self.engine_axi.awaddr[6:]),
                     write_tap.w_data.eq(self.engine_axi.wdata),
                     tap.member_line.eq(write_tap.member_line),
                     write_tap.member_hit.eq(tap.member_hit),
                     join.engine_w_hold.eq(write_tap.w_hold)]

        # The engine's port into the join, except that while ``replay`` (LOOKUP replayed to
        # take the log) its writes are answered by a sink here and go nowhere (module
        # docstring). Writes are single beats (the join's rule); AW and W are taken
        # independently, one write at a time, and answered OKAY with the AW's ID.
        engine_axi = self.engine_axi
        replay = Signal()
        sink_aw = Signal()
        sink_w = Signal()
        sink_id = Signal(self._id_width)
        sink_bvalid = sink_aw & sink_w
        sunk = ("awvalid", "wvalid", "bready", "awready", "wready", "bvalid", "bid", "bresp")
        for name, member in self._axi_signature.members.items():
            if name in sunk:
                continue
            if member.flow == Out:   # driven by the manager (the embedding engine)
                m.d.comb += getattr(join.engine, name).eq(getattr(engine_axi, name))
            else:
                m.d.comb += getattr(engine_axi, name).eq(getattr(join.engine, name))
        m.d.comb += [
            join.engine.awvalid.eq(engine_axi.awvalid & ~replay),
            join.engine.wvalid.eq(engine_axi.wvalid & ~replay),
            join.engine.bready.eq(engine_axi.bready & ~replay),
            engine_axi.awready.eq(Mux(replay, ~sink_aw, join.engine.awready)),
            engine_axi.wready.eq(Mux(replay, ~sink_w, join.engine.wready)),
            engine_axi.bvalid.eq(Mux(replay, sink_bvalid, join.engine.bvalid)),
            engine_axi.bid.eq(Mux(replay, sink_id, join.engine.bid)),
            engine_axi.bresp.eq(Mux(replay, 0, join.engine.bresp)),
        ]
        with m.If(replay):
            with m.If(engine_axi.awvalid & ~sink_aw):
                m.d.sync += [sink_aw.eq(1), sink_id.eq(engine_axi.awid)]
            with m.If(engine_axi.wvalid & ~sink_w):
                m.d.sync += sink_w.eq(1)
            with m.If(sink_bvalid & engine_axi.bready):
                m.d.sync += [sink_aw.eq(0), sink_w.eq(0)]

        m.d.comb += [
            tap.tables.eq(self.tables),
            tap.arvalid.eq(engine_axi.arvalid), tap.arid.eq(engine_axi.arid),
            tap.araddr.eq(engine_axi.araddr), tap.arlen.eq(engine_axi.arlen),
            tap.ar_fire.eq(join.engine_ar_fire),
            tap.r_fire.eq(join.engine_r_fire), tap.rid.eq(engine_axi.rid),
            tap.rdata.eq(engine_axi.rdata), tap.rresp.eq(engine_axi.rresp),
            tap.rlast.eq(engine_axi.rlast),
            join.engine_ar_hold.eq(tap.ar_hold),
            join.engine_r_hold.eq(tap.r_hold),
        ]

        # --- configuration, as line addresses ------------------------------------------------
        meta = self.meta_region.base[6:]
        log_lines = self.log_region.size[6:]
        groups_per_area = log_lines[4:]          # (lines / 2) / 8
        area_lines = Cat(Const(0, 3), groups_per_area)
        capacity = Signal(32)
        m.d.comb += capacity.eq(groups_per_area * ENTRIES_PER_GROUP)

        def area_line(area):
            return (self.log_region.base[6:] + Mux(area, area_lines, 0))[:law]

        def start_log_writer(batch):
            m.d.comb += [log.start.eq(1), log.batch.eq(batch),
                         log.area.eq(area_line(batch[0])), log.capacity.eq(capacity)]

        def start_logging(batch):
            """The tap and the log writer begin ``batch`` in its area (LOOKUP, replay; no
            entry waits)."""
            start_log_writer(batch)
            m.d.comb += tap.start.eq(1)
            m.d.sync += [tap_generation.eq(~tap_generation), log_generation.eq(~tap_generation)]

        config_ok = ((self.meta_region.size[6:] >= META_LINES) & (groups_per_area != 0))

        # --- persistent state mirrored on chip ------------------------------------------------
        command = Signal(command_layout(aw))
        lookup_command = Signal(command_layout(aw))  # the last LOOKUP's (a replay repeats it)
        batch_log_mode = Signal(LogMode)  # log_mode as sampled when the open batch's LOOKUP came
        replay_pending = Signal()  # LOOKUP(N)'s status is out, its background replay is next
        replay_background = Signal()  # the running replay is a background one (no command waits)
        log_taken = Signal()       # the background replay logged the whole batch
        reply = Signal(status_layout())
        error = Signal(CheckpointError)
        attached = Signal()
        failed = Signal()          # an UPDATE failed after its flag: RECOVER must roll it back
        last_committed = Signal(32, init=NO_BATCH)
        log_open = Signal()
        log_batch = Signal(32)
        log_cut = Signal()         # GPF stopped the tap during this batch's LOOKUP
        lookup_ok = Signal()       # the open batch's LOOKUP ended OK (a relaxed one may follow)
        deferred_open = Signal()   # LOOKUP(log_batch + 1) is deferred in the engine
        deferred_command = Signal(command_layout(aw))
        # Log-ahead (module docstring): the tap holds batch N + 1's log, taken by the deferred
        # LOOKUP(N + 1); the log writer too once batch N's log is closed with these counts
        # (``switch_pending`` until then).
        ahead = Signal()
        ahead_cut = Signal()       # GPF stopped the tap during the deferred LOOKUP
        held_count = Signal(32)
        held_overflow = Signal()
        update_forwarded = Signal()  # the running UPDATE reached the engine
        snap_valid = Signal(2)
        snap_batch = Signal(data.ArrayLayout(unsigned(32), 2))
        protocol_error = Signal()
        own_bus_error = Signal()   # sticky within a command

        newest = Signal()
        m.d.comb += newest.eq(Mux(snap_valid == 0b11, later(snap_batch[1], snap_batch[0]),
                                  snap_valid[1]))
        next_slot = Signal()
        m.d.comb += next_slot.eq(Mux(snap_valid == 0, 1, ~newest))
        newest_batch = Signal(32)
        m.d.comb += newest_batch.eq(Mux(snap_valid == 0, NO_BATCH, snap_batch[newest]))

        own_count = join.own_outstanding
        other_persistent = own_count[OwnWrite.OTHER.value] == 0
        # With log-ahead, batch N's LOG writes were all issued when its log closed; those
        # still unanswered then are the first LOG B responses to come (one ID, in order), so
        # N's seal need not wait for batch N + 1's, which keep draining meanwhile.
        ahead_closed = ahead & ~switch_pending
        closed_log_writes = Signal.like(own_count[OwnWrite.LOG.value])
        log_completed = join.own_completed[OwnWrite.LOG.value]
        with m.If(log_completed & (closed_log_writes != 0)):
            m.d.sync += closed_log_writes.eq(closed_log_writes - 1)
        seal_counts = Signal.like(own_count)
        m.d.comb += seal_counts.eq(own_count)
        with m.If(ahead_closed):
            m.d.comb += seal_counts[OwnWrite.LOG.value].eq(closed_log_writes)
        log_drained = entries_empty & log.sealed
        # The open batch's (log_batch); until its log closes, the writer is still on it.
        open_count = Mux(ahead_closed, held_count, log.count)
        open_overflow = Mux(ahead_closed, held_overflow, log.overflow | log_cut)

        # Log-ahead: batch N's log closes once none of its entries waits and its last header
        # is issued; the log writer then moves on to N + 1's area, whose entries waited.
        with m.If(switch_pending & ~old_entries & log.sealed):
            start_log_writer((log_batch + 1)[:32])   # N + 1 (batch N is still the open one)
            m.d.sync += [switch_pending.eq(0), log_generation.eq(tap_generation),
                         held_count.eq(log.count), held_overflow.eq(log.overflow | log_cut),
                         closed_log_writes.eq(own_count[OwnWrite.LOG.value] - log_completed)]

        # --- UPDATE ordering (the formally checked part) ----------------------------------------
        m.submodules.sequencer = seq = UpdateSequencer(
            line_address_width=law, count_shape=own_count[0].shape())
        m.d.comb += [
            seq.batch.eq(self.cmd.payload.batch), seq.meta_line.eq(meta),
            # (With log-ahead every entry of N was issued when its log closed.)
            seq.log_drained.eq(Mux(ahead, ahead_closed, log_drained)),
            seq.log_count.eq(open_count),
            seq.log_overflow.eq(open_overflow),
            # Every entry of the open batch is counted (the tap has settled, or log-ahead closed
            # it) and within its area: UPDATE may go to the engine while the log drains.
            seq.log_fits.eq(~open_overflow & Mux(ahead, ahead_closed,
                                                 tap.settled & (tap.logged <= capacity))),
            seq.own_outstanding.eq(seal_counts),
            seq.engine_outstanding.eq(join.engine_outstanding),
            seq.own_error.eq(join.own_error),
            seq.engine_done.eq(self.engine_done.valid & self.engine_done.ready),
            seq.engine_failed.eq(self.engine_done.payload.error != ErrorCode.NONE),
            log.flush.eq(seq.flush | self.gpf | switch_pending),
        ]

        # --- own writes: the sequencer's, the controller's (records, restores), else the log's -
        ctl_w = stream.Signature(data.StructLayout({
            "line": unsigned(law), "data": unsigned(LINE_BITS), "kind": OwnWrite})).create()
        ctl_w_open = ~self.gpf  # during GPF only the log drains
        with m.If(seq.write.valid & ctl_w_open):
            wiring.connect(m, seq.write, join.own_w)
        with m.Elif(ctl_w.valid & ctl_w_open):
            m.d.comb += [join.own_w.valid.eq(1), join.own_w.payload.eq(ctl_w.payload),
                         ctl_w.ready.eq(join.own_w.ready)]
        with m.Else():
            wiring.connect(m, log.own_w, join.own_w)

        # --- records ------------------------------------------------------------------------
        # The records are assigned only here, unconditionally, from field signals that the
        # states drive (a record signal partly driven in states would have constant slices
        # in an `always @*` that reads nothing, which Verilator never runs).
        # (Flag and commit records of an UPDATE are the sequencer's; these are recovery's.)
        flag_record, flag_line = record_line(m, FLAG_LAYOUT, "flag_record")
        commit_record, commit_line = record_line(m, COMMIT_LAYOUT, "commit_record")
        snapshot_record, snapshot_line = record_line(m, SNAPSHOT_LAYOUT, "snapshot_record")
        superblock, superblock_line = record_line(m, SUPERBLOCK_LAYOUT, "superblock")
        flag_fields = Signal(data.StructLayout({
            "batch": unsigned(32), "entries": unsigned(32), "state": FlagState,
            "area": unsigned(1)}))
        commit_batch_field = Signal(32)
        snapshot_fields = Signal(data.StructLayout({"batch": unsigned(32), "slot": unsigned(1)}))
        m.d.comb += [
            flag_record.magic.eq(FLAG_MAGIC), flag_record.batch.eq(flag_fields.batch),
            flag_record.entries.eq(flag_fields.entries), flag_record.state.eq(flag_fields.state),
            flag_record.area.eq(flag_fields.area),
            commit_record.magic.eq(COMMIT_MAGIC), commit_record.batch.eq(commit_batch_field),
            snapshot_record.magic.eq(SNAPSHOT_MAGIC),
            snapshot_record.batch.eq(snapshot_fields.batch),
            snapshot_record.slot.eq(snapshot_fields.slot),
            superblock.magic.eq(SUPERBLOCK_MAGIC), superblock.version.eq(VERSION),
            superblock.entries_per_group.eq(ENTRIES_PER_GROUP),
            superblock.group_lines.eq(GROUP_LINES),
            superblock.snapshot_interval.eq(self.snapshot_interval),
            superblock.log_base.eq(self.log_region.base),
            superblock.log_lines.eq(log_lines),
            superblock.snapshot0_base.eq(self.snapshot_regions[0].base),
            superblock.snapshot0_lines.eq(self.snapshot_regions[0].size[6:]),
            superblock.snapshot1_base.eq(self.snapshot_regions[1].base),
            superblock.snapshot1_lines.eq(self.snapshot_regions[1].size[6:]),
        ]

        # --- recovery's view of the metadata ---------------------------------------------------
        rd = join.own_r
        beat = rd.payload.data
        sb_view = data.View(SUPERBLOCK_LAYOUT, beat)
        commit_view = data.View(COMMIT_LAYOUT, beat)
        flag_view = data.View(FLAG_LAYOUT, beat)
        snap_view = data.View(SNAPSHOT_LAYOUT, beat)
        header_view = data.View(GROUP_HEADER_LAYOUT, beat)
        sb_valid = Signal()
        sb_match = Signal()
        commit_valid = Signal()
        commit_batch = Signal(32)
        flag_valid = Signal(2)
        flag_batch = Signal(data.ArrayLayout(unsigned(32), 2))
        flag_entries = Signal(data.ArrayLayout(unsigned(32), 2))
        flag_state = Signal(data.ArrayLayout(FlagState, 2))
        read_valid = Signal(2)
        read_batch = Signal(data.ArrayLayout(unsigned(32), 2))
        meta_issued = Signal(range(META_LINES + 1))
        meta_received = Signal(range(META_LINES + 1))
        rollback_area = Signal()
        sealed_slot = Signal()     # the snapshot slot whose record is being written
        rollback_total = Signal(32)
        recovery_cycles = Signal(32)
        restored_entries = Signal(32)
        rolled_back = Signal()
        counting_recovery = Signal()
        with m.If(counting_recovery):
            m.d.sync += recovery_cycles.eq(recovery_cycles + 1)

        # Restore walk: an issue side (AR) and a receive side (R), each over groups of
        # 1 header + n data lines.
        issue_line = Signal(law)
        issue_group = Signal(law)
        issue_k = Signal(range(GROUP_LINES + 1))
        issue_n = Signal(range(GROUP_LINES))
        issue_left = Signal(32)
        recv_k = Signal(range(GROUP_LINES + 1))
        recv_n = Signal(range(GROUP_LINES))
        recv_left = Signal(32)
        header_lines = Signal(data.ArrayLayout(unsigned(64), ENTRIES_PER_GROUP))
        reads_in_flight = Signal(16)
        discard = Signal()
        format_step = Signal(range(8))

        # --- snapshot-batch check: (N + 1) % K, one bit per cycle ---------------------------
        dividend = Signal(33)
        remainder = Signal(33)
        divide_step = Signal(range(34))

        # --- engine command forwarding ---------------------------------------------------------
        forward = Signal()
        m.d.comb += [self.engine_cmd.valid.eq(forward),
                     self.engine_cmd.payload.eq(Mux(replay, lookup_command.as_value(),
                                                    command.as_value()))]
        with m.If(self.engine_cmd.ready):
            m.d.sync += forward.eq(0)

        write_gate = Signal()
        m.d.comb += [join.engine_write_open.eq(write_gate & ~self.gpf),
                     join.engine_read_open.eq(~self.gpf),
                     tap.table_count.eq(Mux(replay, lookup_command.tables, command.tables))]

        phase = Signal(CheckpointPhase)

        def refuse(reason):
            m.d.sync += [reply.error.eq(ErrorCode.BAD_OPCODE), error.eq(reason)]
            m.next = "Reply"

        def forward_once_tap_is_ready(in_phase, run_state):
            """After ``start_logging``: the command goes on to the engine once the tap has its
            table extents (and an empty filter)."""
            m.d.comb += phase.eq(in_phase)
            with m.If(tap.ready):
                m.d.sync += forward.eq(1)
                m.next = run_state

        batch = command.batch
        next_batch = (last_committed + 1)[:32]
        # The modes whose log is (also) taken by a replay right after LOOKUP's status.
        background_mode = ((batch_log_mode == LogMode.AFTER_LOOKUP)
                           | (batch_log_mode == LogMode.LOOKUP_THEN_REPLAY))
        lossy_mode = batch_log_mode == LogMode.LOOKUP_THEN_REPLAY
        # The open batch's log holds every line of its LOOKUP (it may be sealed at UPDATE).
        log_complete = (batch_log_mode == LogMode.ON_LOOKUP) | (background_mode & log_taken)

        with m.FSM(name="control"):
            with m.State("Idle"):
                m.d.comb += [self.cmd.ready.eq(~self.gpf & ~replay_pending),
                             phase.eq(Mux(attached, Mux(failed, CheckpointPhase.FAILED,
                                                        CheckpointPhase.IDLE),
                                          CheckpointPhase.DETACHED))]
                payload = self.cmd.payload
                with m.If(replay_pending):
                    with m.If(~self.gpf):
                        m.d.sync += [replay_pending.eq(0), replay_background.eq(1)]
                        m.next = "ReplayPrepare"
                with m.Elif(self.cmd.valid & ~self.gpf):
                    m.d.sync += [
                        command.eq(payload),
                        reply.eq(status_layout().const({})),
                        reply.opcode.eq(payload.opcode),
                        reply.batch.eq(payload.batch),
                        error.eq(CheckpointError.NONE),
                        own_bus_error.eq(0),
                    ]
                    n = payload.batch
                    ready = attached & ~failed
                    with m.Switch(payload.opcode):
                        with m.Case(Opcode.NOP):
                            m.next = "Reply"
                        with m.Case(Opcode.LOOKUP, Opcode.UPDATE):
                            with m.If(~self.logging_enable):
                                m.d.sync += forward.eq(1)
                                m.next = "Pass"
                            with m.Elif(~ready):
                                refuse(CheckpointError.NOT_RECOVERED)
                            with m.Elif((payload.opcode == Opcode.LOOKUP) & self.relaxed
                                        & log_open & lookup_ok & (log_batch == next_batch)
                                        & (n == (next_batch + 1)[:32]) & ~deferred_open):
                                with m.If((self.log_mode == LogMode.ON_LOOKUP) & log_complete
                                          & ~open_overflow):
                                    m.next = "AheadClose"
                                with m.Else():
                                    m.d.sync += forward.eq(1)
                                    m.next = "DeferredRun"
                            with m.Elif(n != next_batch):
                                refuse(CheckpointError.OUT_OF_ORDER)
                            with m.Elif(payload.opcode == Opcode.LOOKUP):
                                m.d.sync += [lookup_command.eq(payload),
                                             batch_log_mode.eq(self.log_mode),
                                             log_taken.eq(0)]
                                m.next = "LookupPrepare"
                            with m.Elif(~log_open | (log_batch != n)):
                                refuse(CheckpointError.OUT_OF_ORDER)
                            with m.Elif((batch_log_mode == LogMode.AT_UPDATE)
                                        | (background_mode & ~log_taken)):
                                # (The replay restarts the log: an earlier cut or overflow
                                # of this batch does not count.)
                                m.next = "ReplayPrepare"
                            with m.Elif(open_overflow):
                                refuse(CheckpointError.LOG_OVERFLOW)
                            with m.Else():
                                m.d.comb += seq.start.eq(1)
                                m.d.sync += update_forwarded.eq(0)
                                m.next = "Updating"
                        with m.Case(Opcode.SNAPSHOT):
                            with m.If(~ready):
                                refuse(CheckpointError.NOT_RECOVERED)
                            with m.Else():
                                m.d.sync += [dividend.eq(n + 1), remainder.eq(0),
                                             divide_step.eq(0)]
                                m.next = "SnapshotCheck"
                        with m.Case(Opcode.RECOVER):
                            m.d.comb += self.engine_forget.eq(1)
                            m.d.sync += [deferred_open.eq(0), ahead.eq(0)]
                            with m.If(~config_ok):
                                refuse(CheckpointError.BAD_CONFIG)
                            with m.Else():
                                m.d.sync += [
                                    attached.eq(0), meta_issued.eq(0), meta_received.eq(0),
                                    recovery_cycles.eq(0), counting_recovery.eq(1),
                                    sb_valid.eq(0), sb_match.eq(0), commit_valid.eq(0),
                                    flag_valid.eq(0), read_valid.eq(0), rolled_back.eq(0),
                                    restored_entries.eq(0), discard.eq(0),
                                ]
                                m.next = "RecoverMeta"
                        with m.Default():
                            m.d.sync += reply.error.eq(ErrorCode.BAD_OPCODE)
                            m.next = "Reply"

            # --- pass-through (logging disabled) -------------------------------------------
            with m.State("Pass"):
                m.d.comb += [phase.eq(CheckpointPhase.PASS), write_gate.eq(1),
                             self.engine_relaxed.eq(self.relaxed),
                             self.engine_done.ready.eq(1)]
                with m.If(self.engine_done.valid):
                    m.d.sync += reply.eq(self.engine_done.payload)
                    m.next = "Reply"

            # --- LOOKUP(N) with logging ------------------------------------------------------
            with m.State("LookupPrepare"):
                # Entries of an earlier attempt still in the buffer drain first.
                m.d.comb += phase.eq(CheckpointPhase.LOOKUP)
                with m.If(entries_empty):
                    start_logging(batch)
                    m.d.sync += [log_open.eq(0), log_cut.eq(0), ahead.eq(0)]
                    m.next = "LookupExtents"
            with m.State("LookupExtents"):
                forward_once_tap_is_ready(CheckpointPhase.LOOKUP, "LookupRun")
            with m.State("LookupRun"):
                # The engine writes only its output buffer during LOOKUP: those pass.
                m.d.comb += [phase.eq(CheckpointPhase.LOOKUP), write_gate.eq(1),
                             tap.enable.eq(~self.gpf & ((batch_log_mode == LogMode.ON_LOOKUP)
                                                        | lossy_mode)),
                             tap.lossy.eq(lossy_mode),
                             self.engine_done.ready.eq(1)]
                with m.If(self.gpf):
                    m.d.sync += log_cut.eq(1)
                with m.If(self.engine_done.valid):
                    m.d.sync += [reply.eq(self.engine_done.payload), log_open.eq(1),
                                 log_batch.eq(batch),
                                 lookup_ok.eq(self.engine_done.payload.error == ErrorCode.NONE),
                                 replay_pending.eq(
                                     background_mode
                                     & (self.engine_done.payload.error == ErrorCode.NONE))]
                    m.next = "LookupDrain"
            with m.State("LookupDrain"):
                # The engine's output writes are complete before the status goes back (so
                # none of them can still be on its way when UPDATE opens the gate again).
                m.d.comb += phase.eq(CheckpointPhase.LOOKUP)
                with m.If(join.engine_outstanding == 0):
                    m.next = "Reply"

            # --- LOOKUP(N + 1), relaxed: deferred in the engine, logged ahead or not -----------
            with m.State("AheadClose"):
                # The tap starts batch N + 1 at once; batch N's log closes behind it, when the
                # log writer has issued N's last entries and header (``switch_pending``): its
                # count is kept for UPDATE(N)'s flag, and N + 1's entries follow.
                m.d.comb += phase.eq(CheckpointPhase.LOOKUP)
                with m.If(~ahead):
                    # Every entry of LOOKUP(N) is in the buffer (and no earlier switch waits).
                    with m.If(tap.settled & ~switch_pending):
                        # The tap's previous filter is batch N's (its log's): the lines
                        # UPDATE(N) rewrites are logged by the write tap only.
                        m.d.comb += [tap.start.eq(1), tap.skip_previous.eq(1)]
                        m.d.sync += [tap_generation.eq(~tap_generation), switch_pending.eq(1),
                                     ahead.eq(1), ahead_cut.eq(0)]
                        m.next = "AheadExtents"
                with m.Elif(entries_empty & log.sealed):
                    # A failed deferred LOOKUP sent again: its log starts over (N's is
                    # closed), and its previous filter is its own, so nothing is skipped.
                    start_logging(batch)
                    m.d.sync += ahead_cut.eq(0)
                    m.next = "AheadExtents"
            with m.State("AheadExtents"):
                forward_once_tap_is_ready(CheckpointPhase.LOOKUP, "DeferredRun")
            with m.State("DeferredRun"):
                m.d.comb += [phase.eq(CheckpointPhase.LOOKUP), write_gate.eq(1),
                             tap.enable.eq(ahead & ~self.gpf),
                             self.engine_relaxed.eq(1), self.engine_done.ready.eq(1)]
                with m.If(self.gpf):
                    m.d.sync += ahead_cut.eq(1)
                with m.If(self.engine_done.valid):
                    m.d.sync += [reply.eq(self.engine_done.payload),
                                 deferred_open.eq(
                                     self.engine_done.payload.error == ErrorCode.NONE),
                                 deferred_command.eq(command)]
                    m.next = "LookupDrain"

            # --- LOOKUP(N) replayed, logging its table reads (AT_UPDATE, AFTER_LOOKUP) ----
            with m.State("ReplayPrepare"):
                # As LookupPrepare, except that log_open stays (a refused UPDATE may be sent
                # again); LOOKUP_THEN_REPLAY's background replay continues the log instead.
                m.d.comb += phase.eq(CheckpointPhase.REPLAY)
                with m.If(replay_background & lossy_mode):
                    with m.If(tap.settled):
                        with m.If(tap.dropped | log_cut):
                            m.d.sync += forward.eq(1)
                            m.next = "ReplayRun"
                        with m.Else():
                            # The tap missed nothing: no replay.
                            m.d.sync += [replay_background.eq(0), log_taken.eq(~self.gpf)]
                            m.next = "Idle"
                with m.Elif(entries_empty):
                    # (The replayed LOOKUP's batch: after a relaxed commit the last command
                    # was UPDATE(N), and the replay is LOOKUP(N + 1)'s.)
                    start_logging(lookup_command.batch)
                    m.d.sync += [log_cut.eq(0), ahead.eq(0)]
                    m.next = "ReplayExtents"
            with m.State("ReplayExtents"):
                forward_once_tap_is_ready(CheckpointPhase.REPLAY, "ReplayRun")
            with m.State("ReplayRun"):
                # The engine gets the latched LOOKUP; its output writes go to the sink.
                m.d.comb += [phase.eq(CheckpointPhase.REPLAY), replay.eq(1),
                             tap.enable.eq(~self.gpf), self.engine_done.ready.eq(1)]
                with m.If(self.gpf):
                    m.d.sync += log_cut.eq(1)
                with m.If(self.engine_done.valid):
                    status = self.engine_done.payload
                    with m.If(replay_background):
                        # No command waits for this one: a failed or cut replay is repeated
                        # by UPDATE(N).
                        m.d.sync += [replay_background.eq(0),
                                     log_taken.eq((status.error == ErrorCode.NONE)
                                                  & ~log_cut & ~self.gpf)]
                        m.next = "Idle"
                    with m.Elif(status.error != ErrorCode.NONE):
                        m.d.sync += [reply.table.eq(status.table), reply.bag.eq(status.bag),
                                     reply.position.eq(status.position)]
                        refuse(CheckpointError.REPLAY_FAILED)
                    with m.Else():
                        m.d.comb += [seq.start.eq(1), seq.batch.eq(batch)]
                        m.d.sync += update_forwarded.eq(0)
                        m.next = "Updating"

            # --- UPDATE(N): the sequencer seals, flags, gates, commits ---------------------
            with m.State("Updating"):
                m.d.comb += [phase.eq(seq.phase), write_gate.eq(seq.write_gate),
                             write_tap.enable.eq(ahead & deferred_open),
                             self.engine_done.ready.eq(1)]
                with m.If(seq.forward):
                    m.d.sync += [forward.eq(1), update_forwarded.eq(1)]
                with m.If(self.engine_done.valid):
                    m.d.sync += reply.eq(self.engine_done.payload)
                with m.If(seq.finished):
                    with m.If(update_forwarded):   # the engine's deferral ended with it
                        m.d.sync += deferred_open.eq(0)
                    m.d.sync += ahead.eq(0)
                    with m.Switch(seq.outcome):
                        with m.Case(UpdateOutcome.COMMITTED):
                            m.d.sync += [last_committed.eq(batch), log_open.eq(0)]
                            with m.If(deferred_open):
                                # Batch N + 1 opens with its lookup done.
                                m.d.sync += [log_open.eq(1),
                                             log_batch.eq(deferred_command.batch),
                                             lookup_command.eq(deferred_command),
                                             log_cut.eq(0), lookup_ok.eq(1)]
                                with m.If(ahead & ~ahead_cut & ~log.overflow):
                                    # Its log is taken (log-ahead), as after ON_LOOKUP.
                                    m.d.sync += [batch_log_mode.eq(LogMode.ON_LOOKUP),
                                                 log_taken.eq(1)]
                                with m.Else():
                                    # Its log is taken by the background replay (AFTER_LOOKUP).
                                    m.d.sync += [batch_log_mode.eq(LogMode.AFTER_LOOKUP),
                                                 log_taken.eq(0), replay_pending.eq(1)]
                        with m.Case(UpdateOutcome.LOG_OVERFLOW):
                            m.d.sync += [reply.error.eq(ErrorCode.BAD_OPCODE),
                                         error.eq(CheckpointError.LOG_OVERFLOW)]
                        with m.Case(UpdateOutcome.ENGINE_FAILED):
                            m.d.sync += [failed.eq(1), error.eq(CheckpointError.UPDATE_FAILED)]
                        with m.Case(UpdateOutcome.BUS_ERROR):
                            m.d.sync += [failed.eq(1), error.eq(CheckpointError.BUS_ERROR),
                                         reply.error.eq(ErrorCode.BUS_ERROR)]
                    m.next = "Reply"

            # --- SNAPSHOT(N) ----------------------------------------------------------------------
            with m.State("SnapshotCheck"):
                m.d.comb += phase.eq(CheckpointPhase.SNAPSHOT)
                shifted = Cat(dividend[32], remainder[:32])
                fits = shifted >= self.snapshot_interval
                m.d.sync += [remainder.eq(Mux(fits, shifted - self.snapshot_interval, shifted)),
                             dividend.eq(dividend << 1), divide_step.eq(divide_step + 1)]
                with m.If(divide_step == 33):
                    m.d.sync += [remainder.eq(remainder), dividend.eq(dividend)]
                    initial = batch == NO_BATCH
                    with m.If(initial & snap_valid.any()):
                        refuse(CheckpointError.SNAPSHOT_ORDER)
                    with m.Elif(~initial & (self.snapshot_interval != 0) & (remainder != 0)):
                        refuse(CheckpointError.NOT_SNAPSHOT_BATCH)
                    with m.Elif(~initial & (later(batch, last_committed)
                                            | (snap_valid.any()
                                               & ~later(batch, newest_batch)))):
                        refuse(CheckpointError.SNAPSHOT_ORDER)
                    with m.Else():
                        m.next = "SnapshotWrite"
            with m.State("SnapshotWrite"):
                m.d.comb += [
                    phase.eq(CheckpointPhase.SNAPSHOT),
                    snapshot_fields.batch.eq(batch), snapshot_fields.slot.eq(next_slot),
                    ctl_w.valid.eq(1),
                    ctl_w.payload.line.eq(meta + MetaLine.SNAPSHOT_0 + next_slot),
                    ctl_w.payload.data.eq(snapshot_line),
                    ctl_w.payload.kind.eq(OwnWrite.OTHER),
                ]
                with m.If(ctl_w.ready):
                    m.d.sync += sealed_slot.eq(next_slot)
                    m.next = "SnapshotWait"
            with m.State("SnapshotWait"):
                m.d.comb += phase.eq(CheckpointPhase.SNAPSHOT)
                with m.If(other_persistent):
                    with m.If(own_bus_error):
                        m.d.sync += [error.eq(CheckpointError.BUS_ERROR),
                                     reply.error.eq(ErrorCode.BUS_ERROR)]
                    with m.Else():
                        for slot in range(2):
                            with m.If(sealed_slot == slot):
                                m.d.sync += [snap_valid[slot].eq(1),
                                             snap_batch[slot].eq(batch)]
                    m.next = "Reply"

            # --- RECOVER --------------------------------------------------------------------------
            with m.State("RecoverMeta"):
                m.d.comb += [phase.eq(CheckpointPhase.RECOVER),
                             join.own_ar.valid.eq(meta_issued != MetaLine.SNAPSHOT_1 + 1),
                             join.own_ar.payload.eq(meta + meta_issued),
                             rd.ready.eq(1)]
                with m.If(join.own_ar.valid & join.own_ar.ready):
                    m.d.sync += meta_issued.eq(meta_issued + 1)
                with m.If(rd.valid):
                    m.d.sync += meta_received.eq(meta_received + 1)
                    with m.Switch(meta_received):
                        with m.Case(MetaLine.SUPERBLOCK):
                            ok = (record_valid(sb_view, beat, SUPERBLOCK_LAYOUT, SUPERBLOCK_MAGIC)
                                  & (sb_view.version == VERSION))
                            expected = superblock
                            match = ((sb_view.log_base == expected.log_base)
                                     & (sb_view.log_lines == expected.log_lines)
                                     & (sb_view.snapshot0_base == expected.snapshot0_base)
                                     & (sb_view.snapshot0_lines == expected.snapshot0_lines)
                                     & (sb_view.snapshot1_base == expected.snapshot1_base)
                                     & (sb_view.snapshot1_lines == expected.snapshot1_lines)
                                     & (sb_view.entries_per_group == ENTRIES_PER_GROUP)
                                     & (sb_view.group_lines == GROUP_LINES))
                            m.d.sync += [sb_valid.eq(ok), sb_match.eq(match)]
                        with m.Case(MetaLine.COMMIT):
                            m.d.sync += [
                                commit_valid.eq(record_valid(commit_view, beat, COMMIT_LAYOUT,
                                                       COMMIT_MAGIC)),
                                commit_batch.eq(commit_view.batch)]
                        for area, line in ((0, MetaLine.FLAG_0), (1, MetaLine.FLAG_1)):
                            with m.Case(line):
                                m.d.sync += [
                                    flag_valid[area].eq(record_valid(flag_view, beat, FLAG_LAYOUT,
                                                               FLAG_MAGIC)),
                                    flag_batch[area].eq(flag_view.batch),
                                    flag_entries[area].eq(flag_view.entries),
                                    flag_state[area].eq(flag_view.state)]
                        for slot, line in ((0, MetaLine.SNAPSHOT_0), (1, MetaLine.SNAPSHOT_1)):
                            with m.Case(line):
                                m.d.sync += [
                                    read_valid[slot].eq(
                                        record_valid(snap_view, beat, SNAPSHOT_LAYOUT,
                                               SNAPSHOT_MAGIC) & (snap_view.slot == slot)),
                                    read_batch[slot].eq(snap_view.batch)]
                    with m.If(meta_received == MetaLine.SNAPSHOT_1):
                        m.next = "RecoverDecide"
            with m.State("RecoverDecide"):
                m.d.comb += phase.eq(CheckpointPhase.RECOVER)
                c = commit_batch
                area = (c + 1)[0]
                to_roll = ((flag_valid.bit_select(area, 1))
                           & (flag_state[area] == FlagState.SET)
                           & (flag_batch[area] == (c + 1)[:32]))
                with m.If(own_bus_error):
                    m.d.sync += [counting_recovery.eq(0), error.eq(CheckpointError.BUS_ERROR),
                                 reply.error.eq(ErrorCode.BUS_ERROR)]
                    m.next = "Reply"
                with m.Elif(~sb_valid):
                    m.d.sync += [format_step.eq(0), commit_batch.eq(NO_BATCH),
                                 read_valid.eq(0)]
                    m.next = "Format"
                with m.Elif(~sb_match):
                    m.d.sync += counting_recovery.eq(0)
                    refuse(CheckpointError.CONFIG_MISMATCH)
                with m.Elif(~commit_valid):
                    m.d.sync += counting_recovery.eq(0)
                    refuse(CheckpointError.CORRUPT_METADATA)
                with m.Elif(to_roll):
                    total = flag_entries[area]
                    m.d.sync += [
                        rollback_area.eq(area), rollback_total.eq(total),
                        issue_line.eq(area_line(area)), issue_group.eq(area_line(area)),
                        issue_k.eq(0), issue_left.eq(total),
                        recv_k.eq(0), recv_left.eq(total), reads_in_flight.eq(0),
                    ]
                    m.next = "Restore"
                with m.Else():
                    m.next = "RecoverFinish"
            with m.State("Restore"):
                m.d.comb += phase.eq(CheckpointPhase.RECOVER)
                # Issue side: header, then its data lines, group after group.
                issuing = ~discard & ((issue_k != 0) | (issue_left != 0))
                m.d.comb += [join.own_ar.valid.eq(issuing), join.own_ar.payload.eq(issue_line)]
                issued = join.own_ar.valid & join.own_ar.ready
                with m.If(issued):
                    with m.If(issue_k == 0):
                        n_group = Mux(issue_left > ENTRIES_PER_GROUP, ENTRIES_PER_GROUP,
                                      issue_left)
                        m.d.sync += [issue_n.eq(n_group), issue_k.eq(1),
                                     issue_line.eq(issue_line + 1)]
                    with m.Elif(issue_k == issue_n):
                        m.d.sync += [issue_k.eq(0), issue_left.eq(issue_left - issue_n),
                                     issue_line.eq(issue_group + GROUP_LINES),
                                     issue_group.eq(issue_group + GROUP_LINES)]
                    with m.Else():
                        m.d.sync += [issue_k.eq(issue_k + 1), issue_line.eq(issue_line + 1)]
                # Receive side: check each header, write each data line back in place.
                received = Signal()
                with m.If(discard):
                    m.d.comb += rd.ready.eq(1)
                with m.Elif(recv_k == 0):
                    m.d.comb += rd.ready.eq(1)
                    with m.If(rd.valid):
                        n_group = Mux(recv_left > ENTRIES_PER_GROUP, ENTRIES_PER_GROUP,
                                      recv_left)
                        good = ((header_view.magic == GROUP_MAGIC)
                                & (header_view.batch == (commit_batch + 1)[:32])
                                & (header_view.count == n_group) & ~rd.payload.error)
                        m.d.sync += [recv_n.eq(n_group), recv_k.eq(1),
                                     header_lines.eq(header_view.lines)]
                        with m.If(~good):
                            m.d.sync += [discard.eq(1), error.eq(CheckpointError.CORRUPT_LOG)]
                with m.Else():
                    slot_line = Signal(64)
                    for k in range(ENTRIES_PER_GROUP):
                        with m.If(recv_k == k + 1):
                            m.d.comb += slot_line.eq(header_lines[k])
                    m.d.comb += [ctl_w.valid.eq(rd.valid),
                                 ctl_w.payload.line.eq(slot_line[:law]),
                                 ctl_w.payload.data.eq(beat),
                                 ctl_w.payload.kind.eq(OwnWrite.OTHER),
                                 rd.ready.eq(ctl_w.ready & ctl_w_open)]
                    with m.If(rd.valid & rd.ready):
                        with m.If(recv_k == recv_n):
                            m.d.sync += [recv_k.eq(0), recv_left.eq(recv_left - recv_n),
                                         restored_entries.eq(restored_entries + 1)]
                        with m.Else():
                            m.d.sync += [recv_k.eq(recv_k + 1),
                                         restored_entries.eq(restored_entries + 1)]
                m.d.comb += received.eq(rd.valid & rd.ready)
                m.d.sync += reads_in_flight.eq(reads_in_flight + issued - received)
                all_received = ((reads_in_flight == 0) & ~issued
                                & ((issue_k == 0) & (issue_left == 0) | discard))
                with m.If(all_received & (recv_k == 0) | discard & (reads_in_flight == 0)):
                    m.next = "RestoreWait"
            with m.State("RestoreWait"):
                m.d.comb += phase.eq(CheckpointPhase.RECOVER)
                with m.If(other_persistent):
                    with m.If(discard | own_bus_error):
                        m.d.sync += [counting_recovery.eq(0),
                                     reply.error.eq(Mux(discard, ErrorCode.BAD_OPCODE,
                                                        ErrorCode.BUS_ERROR)),
                                     error.eq(Mux(discard, CheckpointError.CORRUPT_LOG,
                                                  CheckpointError.BUS_ERROR))]
                        m.next = "Reply"
                    with m.Else():
                        m.next = "Unflag"
            with m.State("Unflag"):
                m.d.comb += [
                    phase.eq(CheckpointPhase.RECOVER),
                    flag_fields.batch.eq((commit_batch + 1)[:32]),
                    flag_fields.entries.eq(rollback_total),
                    flag_fields.state.eq(FlagState.ROLLED_BACK),
                    flag_fields.area.eq(rollback_area),
                    ctl_w.valid.eq(1),
                    ctl_w.payload.line.eq(meta + MetaLine.FLAG_0 + rollback_area),
                    ctl_w.payload.data.eq(flag_line),
                    ctl_w.payload.kind.eq(OwnWrite.OTHER),
                ]
                with m.If(ctl_w.ready):
                    m.d.sync += rolled_back.eq(1)
                    m.next = "UnflagWait"
            with m.State("UnflagWait"):
                m.d.comb += phase.eq(CheckpointPhase.RECOVER)
                with m.If(other_persistent):
                    m.next = "RecoverFinish"
            with m.State("Format"):
                # Everything else first, the superblock last: a format cut short is redone.
                m.d.comb += [phase.eq(CheckpointPhase.RECOVER),
                             ctl_w.payload.kind.eq(OwnWrite.OTHER),
                             commit_batch_field.eq(NO_BATCH),
                             flag_fields.batch.eq(NO_BATCH),
                             flag_fields.state.eq(FlagState.CLEAR)]
                with m.Switch(format_step):
                    with m.Case(0):
                        m.d.comb += [ctl_w.valid.eq(1),
                                     ctl_w.payload.line.eq(meta + MetaLine.COMMIT),
                                     ctl_w.payload.data.eq(commit_line)]
                    for step, line in ((1, MetaLine.FLAG_0), (2, MetaLine.FLAG_1)):
                        with m.Case(step):
                            m.d.comb += [flag_fields.area.eq(step - 1), ctl_w.valid.eq(1),
                                         ctl_w.payload.line.eq(meta + line),
                                         ctl_w.payload.data.eq(flag_line)]
                    for step, line in ((3, MetaLine.SNAPSHOT_0), (4, MetaLine.SNAPSHOT_1)):
                        with m.Case(step):
                            m.d.comb += [ctl_w.valid.eq(1),
                                         ctl_w.payload.line.eq(meta + line),
                                         ctl_w.payload.data.eq(0)]
                    with m.Case(5):
                        with m.If(other_persistent):
                            m.d.sync += format_step.eq(6)
                    with m.Case(6):
                        m.d.comb += [ctl_w.valid.eq(1),
                                     ctl_w.payload.line.eq(meta + MetaLine.SUPERBLOCK),
                                     ctl_w.payload.data.eq(superblock_line)]
                    with m.Case(7):
                        with m.If(other_persistent):
                            m.next = "RecoverFinish"
                with m.If(ctl_w.valid & ctl_w.ready):
                    m.d.sync += format_step.eq(format_step + 1)
            with m.State("RecoverFinish"):
                m.d.comb += phase.eq(CheckpointPhase.RECOVER)
                m.d.sync += [counting_recovery.eq(0), log_open.eq(0)]
                with m.If(own_bus_error):
                    m.d.sync += [error.eq(CheckpointError.BUS_ERROR),
                                 reply.error.eq(ErrorCode.BUS_ERROR)]
                with m.Else():
                    m.d.sync += [attached.eq(1), failed.eq(0),
                                 last_committed.eq(commit_batch),
                                 snap_valid.eq(read_valid), snap_batch.eq(read_batch)]
                m.next = "Reply"

            with m.State("Reply"):
                m.d.comb += [phase.eq(CheckpointPhase.REPLY), self.done.valid.eq(1),
                             self.done.payload.eq(reply)]
                with m.If(self.done.ready):
                    m.next = "Idle"

        # After the FSM, so that an error strobe in the cycle a command starts is not lost.
        with m.If(join.protocol_error):
            m.d.sync += protocol_error.eq(1)
        with m.If(join.own_error):
            m.d.sync += own_bus_error.eq(1)

        # --- GPF ---------------------------------------------------------------------------------
        gpf_seen = Signal()
        gpf_done = Signal()
        gpf_cycles = Signal(32)
        drained = log_drained & join.quiet & ~join.own_w.valid
        with m.If(self.gpf):
            m.d.sync += gpf_seen.eq(1)
            with m.If(~gpf_seen):
                m.d.sync += [gpf_cycles.eq(0), gpf_done.eq(0)]
            with m.Elif(~gpf_done):
                with m.If(drained):
                    m.d.sync += gpf_done.eq(1)
                with m.Else():
                    m.d.sync += gpf_cycles.eq(gpf_cycles + 1)
        with m.Else():
            m.d.sync += [gpf_seen.eq(0), gpf_done.eq(0)]

        # --- counters -----------------------------------------------------------------------------
        counters = self.counters

        def stepped(count):
            """The tap's ``count`` went up by one this cycle (steps of one, not any change:
            ``start`` resetting the tap's counts is no entry)."""
            before = Signal(32, name=f"tap_{count.name}_before")
            m.d.sync += before.eq(count)
            return count == (before + 1)[:32]

        write_tap_step = write_tap.entries.valid & write_tap.entries.ready
        m.d.sync += counters.log_entries.eq(counters.log_entries + stepped(tap.logged)
                                            + write_tap_step)
        with m.If(stepped(tap.duplicates)):
            m.d.sync += counters.log_duplicates.eq(counters.log_duplicates + 1)
        with m.If(stepped(tap.shared)):
            m.d.sync += counters.log_shared.eq(counters.log_shared + 1)
        with m.If(join.own_w.valid & join.own_w.ready):
            m.d.sync += counters.own_writes.eq(counters.own_writes + 1)
        with m.If(seq.interlock):
            m.d.sync += counters.interlock_cycles.eq(counters.interlock_cycles + 1)

        m.d.comb += [
            self.phase.eq(phase),
            self.error.eq(error),
            self.attached.eq(attached & ~failed),
            self.last_committed.eq(last_committed),
            self.snapshot_batch.eq(newest_batch),
            self.snapshot_valid.eq(snap_valid.any()),
            self.snapshot_slot.eq(newest),
            self.next_snapshot_slot.eq(next_slot),
            self.log_open.eq(log_open),
            self.log_batch.eq(log_batch),
            self.lookup_deferred.eq(deferred_open),
            self.log_entries.eq(open_count),
            self.log_pending.eq(~log_drained),
            self.recovery_cycles.eq(recovery_cycles),
            self.restored_entries.eq(restored_entries),
            self.rolled_back.eq(rolled_back),
            self.gpf_done.eq(gpf_done),
            self.gpf_drain_cycles.eq(gpf_cycles),
            self.engine_protocol_error.eq(protocol_error),
        ]
        return m
