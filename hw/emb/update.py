"""Near-memory sparse SGD: the embedding UPDATE command (DLRM backward pass).

The engine applies ``w = w - float32(lr) * g`` to every row a batch looked up, with exactly the
semantics of ``sw_model.sparse_sgd_update(..., max_unique_rows=M)``: gradient contributions
(``grad_out`` row block times 1.0, the per-sample weight, or ``float32(1)/float32(L)``) are summed
per distinct (table, row) in TBE occurrence order from +0.0, and each distinct row is updated
once per chunk, where a chunk closes just before the occurrence that would bring in its
(M+1)-th distinct row.

How a command runs
------------------
1. **Check** the descriptors and buffers (:mod:`.update_checks`): no memory access yet.
2. **Validate**: walk all offsets (:mod:`.update_walker`), noting where each table's indices
   start, then check the indices a line (16) per cycle
   (:class:`~.validate.IndexValidator`, the lookup engine's). Only if that finds a bad index
   does the walker walk the indices too, to name the bag as well as the position. Any bad
   offset or index ends the command here, so a bad command modifies no row.
3. **Accumulate** a chunk: walk again; each occurrence asks for its gradient lines and waits
   in a queue (as many occurrences as gradient reads may be in flight, so the requests run a
   read latency ahead and the memory's bandwidth, not its latency, sets the pace), then gets a
   slot in the unique-row CAM (:mod:`.update_rows`) and its lines are multiplied by the scale
   and added into the on-chip gradient buffer (:mod:`.update_datapath`).
4. When an occurrence finds the CAM full (or the walk ends): wait for the accumulations to
   settle, wait until every row write of the previous chunk has its B response (so a row
   updated then and needed again now is read back with its new value, whatever the memory's
   latency), then **apply**: read each slot's row, ``row - lr * sum``, write it back. The CAM
   is then cleared and the waiting occurrence starts the next chunk; the previous chunk's
   writes drain while the next chunk accumulates (that phase reads only gradients).
5. The status is reported once every write has completed (is persistent).

**Correcting a relaxed lookup** (``correct_enable``, ``sw_model.relaxed``; built only with
``relaxed_lookup``, the default): the deferred LOOKUP(N+1)'s command comes along with
UPDATE(N). Its descriptors are checked and its offsets and indices validated too, before any
row is written (by a second walker, alongside the command's own validation and first
accumulation, which write nothing). After each chunk's apply (which keeps
``new - old`` per line in the gradient buffer) the CAM keeps the chunk's rows while
:class:`~.update_correct.CorrectionSequencer` walks batch N+1 and adds the deltas of the rows
both touch to its pooled output, chunk by chunk as ``sw_model.relaxed`` defines it, and
scales a MEAN bag once its last correction is in. The walk is TBE-ordered, so chunk ``k``
holds rows of its tables only: its pass walks batch N+1's tables from the first one not yet
finished to the one where the chunk ended (which may get more corrections from the next
chunk, so up to ``correction_bags`` of its bags stay on chip). Each bag is read from and
written to memory once per UPDATE, and the passes together walk batch N+1 about once, not
once per chunk.

Bus errors (``rresp``/``bresp`` not OKAY) stop all new reads, drop the row writes not yet
offered and end the command with ``BUS_ERROR`` after the bus is quiet; rows already written
stay written. Every read and write is one 64-byte line with ID 0 (so AXI returns responses
in order; ``id_width`` only sizes the port). Gradient, index, offset and weight buffers must
not overlap the tables (they are read while rows are written).
"""

from amaranth.hdl import Array, Cat, Const, Module, Mux, ResetInserter, Shape, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.fp import FPAdd, FPMul, fp_lanes_signature
from hw.fp.lanes import check_fold, folded_latency
from hw.mem.axi import AXI4Signature
from hw.mem.write_queue import WriteQueue
from hw.skid import SkidBuffer

from .layouts import (
    LINE_BYTES,
    ErrorCode,
    Opcode,
    command_layout,
    counters_layout,
    region_layout,
    status_layout,
    table_layout,
)
from .lookup import LANES, check_bool
from .update_checks import CommandChecker
from .update_correct import CorrectionSequencer
from .update_datapath import UpdateDatapath
from .update_fetch import GradientFetch, RowFetch, chunk_occurrence_layout
from .update_reads import LineRequester, ReadRouter, WordReader
from .update_rows import UniqueRows
from .update_walker import OccurrenceWalker, WalkMode, error_layout
from .validate import IndexValidator

__all__ = ["UpdateEngine"]

_INCR = 1
_STREAM_DEPTH = 4        # response FIFO lines for offsets, indices and weights
_SHARED_SOURCES = ("indices", "weights", "offsets", "bag", "deferred_indices",
                   "deferred_weights", "deferred_offsets")
_MAX_OUTSTANDING_WRITES = 64
_DEFAULT_CORRECTION_BAGS = 64
_DEFAULT_CORRECTION_CONTEXTS = 4
_DEFAULT_CORRECTION_QUEUE_DEPTH = 16


def _check_int(value, low, high, message):
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ValueError(f"{message}, not {value!r}")


def _check_stages(value, unit, name):
    maximum = len(unit.CUTS) - 1
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                              or not 0 <= value <= maximum):
        raise ValueError(
            f"{name} stages must be None or an integer in 0..{maximum}, not {value!r}")
    return unit.DEFAULT_STAGES if value is None else value


def walk_span_layout() -> data.StructLayout:
    """The tables a correction pass walks: ``first_table .. end_table - 1``, the first one's
    index position and gradient column, and the index position where the last one ends."""
    return data.StructLayout({"first_table": 8, "first_position": 32, "first_column": 16,
                              "end_table": 8, "end_position": 32})


class UpdateEngine(wiring.Component):
    """Sparse SGD engine for UPDATE commands (module docstring for the algorithm).

    Parameters (keyword-only)
    -------------------------
    max_tables : int
        Table descriptors, 1..255.
    max_dim : int
        Largest ``dim``: a multiple of 16 in 16..65520 (sets the gradient buffer's slot size).
    num_regions : int
        Memory region descriptors, 1..64.
    addr_width : int
        Byte address width, 12..64.
    id_width : int
        AXI ID width, 1..16 (the engine always uses ID 0).
    max_unique_rows : int
        On-chip capacity M (distinct rows per chunk), 1..1024.
    mul_stages, add_stages : int or None
        Register stages of the FP multiplier and adder (``None``: their defaults).
    outstanding_reads : int
        Gradient and row lines in flight each (their response FIFO depth), 4..256.
    write_buffer_lines : int or None
        Updated row lines the engine holds for writing, so a chunk's apply (and a relaxed
        lookup's correction after it) need not wait for a slow memory's writes; at least the
        apply latency + 3 (``None``: that or 16, whichever is more).
    relaxed_lookup : bool
        Build the correction of a relaxed lookup (default True). Without it the engine has no
        ``correct`` and ``correct_enable`` ports, and leaves out the second walker, its three
        word streams, the correction sequencer and the datapath's correction path: what a
        device that always runs strict lookups (the board self-test) need not carry.
    correction_bags : int or None
        Bags of a deferred lookup kept on chip between the correction passes of a chunked
        UPDATE, 0..4096 (``max_dim / 16`` lines each): those of the table where a chunk ends
        (a batch's bags per table is enough); bags beyond go through memory. ``None``: 64
        with ``relaxed_lookup``, 0 without (which allows only 0).
    correction_contexts : int or None
        Bags whose corrections interleave on the adder, 1..``max_unique_rows``
        (:class:`~hw.emb.update_datapath.UpdateDatapath`): one bag's additions are a chain a
        full adder latency apart, so one at a time the correction runs at a few lines per
        adder latency. ``None``: 4 (or ``max_unique_rows`` if fewer) with ``relaxed_lookup``,
        1 without (which allows only 1).
    correction_queue_depth : int or None
        Occurrences each context's queue holds, 2..4096. The walk hands a bag's occurrences to
        its context in walk order and stalls while that queue is full, so the contexts run
        in parallel only as far as the queues let the walk reach the next bags: a queue that
        holds a whole bag (``max_bag`` occurrences) lets every context work at once.
        ``None``: 16 with ``relaxed_lookup``; without it only ``None`` is allowed.
    delta_lanes : bool or None
        Sixteen adder lanes of their own for the apply's ``new - old`` (the delta the
        correction adds), so that the apply still takes a row line per cycle while a relaxed
        lookup waits: sharing the adder, each line takes it twice and the apply runs at half
        rate. ``None`` or False: shared (the smaller design: the lanes are about 13,700 LUT4
        on an ECP5, ``fp_lanes16_add`` in the README); True needs ``relaxed_lookup``.
    correction_lanes : bool or None
        A multiplier and an adder of their own (sixteen lanes each) for the correction, so a
        chunk's correction pass runs beside its apply rather than after it: a bag's CORRECT
        line waits only for its row's delta (``UpdateDatapath(correction_lanes=)``).
        ``None`` or False: the correction takes the shared units after the apply. True needs
        ``delta_lanes``.
    fpga_pipelining : bool
        Registers that FPGA builds need: each multiplier and adder lane chooses its operands
        with its own copies of the registers that choose them (:mod:`hw.fanout`), the
        multiplier's operands pass a register of their own (a cycle more of latency), and the
        gradient buffer has a read port per reader (``UpdateDatapath(read_port_per_use=)``),
        and the per-command reset comes from a flip-flop, a cycle after a command is accepted
        (a cycle more per command); the walker hands its occurrences to the gradient fetch,
        and the unique rows theirs to the accumulation, through skid buffers
        (:class:`hw.skid.SkidBuffer`: a cycle of latency each, no loss of rate); the
        walkers' and the command checker's checks compare registers
        (``OccurrenceWalker(registered_checks=)``: 14 cycles more per MEAN bag and a cycle
        per walk; ``CommandChecker(registered_region_checks=)``: a cycle per extent checked);
        each walk and the index check start a cycle after the sequencer decides them, from
        flip-flops; and without ``relaxed_lookup`` each lane's part of the gradient buffer
        is written a cycle after its sum, from registers of its own
        (``UpdateDatapath(registered_writes=)``). Results are the same. Default False.
    lane_fold : int
        Cycles a line takes through the multiplier and adder: folded
        :class:`~hw.fp.FPLanes` of ``16 / lane_fold`` units each, for FPGA builds that trade
        the apply's and accumulation's rate (a line every ``lane_fold`` cycles) for area
        (``UpdateDatapath(lane_fold=)``). Only without ``relaxed_lookup``. Default 1; results
        are the same.

    Members
    -------
    cmd : ``In(stream.Signature(command_layout(addr_width)))``
        Commands; only UPDATE is accepted (others end with ``BAD_OPCODE``).
    done : ``Out(stream.Signature(status_layout()))``
        One status per command, after all its writes completed.
    tables : ``In(data.ArrayLayout(table_layout(addr_width), max_tables))``
    regions : ``In(data.ArrayLayout(region_layout(addr_width), num_regions))``
        Descriptors; must not change while a command runs.
    lr : ``In(32)``
        Learning rate, binary32 bits; must not change while a command runs.
    axi : ``Out(AXI4Signature(addr_width=addr_width, data_width=512, id_width=id_width))``
    counters : ``Out(counters_layout())``
        Free-running: ``busy_cycles`` (a command is in progress), ``rows_read`` (table rows
        fetched for updating), ``bytes_read``/``bytes_written`` (AXI data beats x 64),
        ``stall_cycles`` (busy, something waits on the bus, and no channel moved).
    correct : ``In(command_layout(addr_width))``, correct_enable : ``In(1)``
        Only with ``relaxed_lookup``. Sampled with each command: with ``correct_enable``,
        ``correct`` is a deferred relaxed LOOKUP of the next batch to correct (module
        docstring).
    mul_lanes, add_lanes : ``In(hw.fp.fp_lanes_signature(op=..., lanes=16, tag_width=...))``
        Only with ``shared_lanes=True``: the multiplier and adder are not built here but
        reached through these ports (:class:`~hw.emb.engine.EmbeddingEngine` shares one set
        with the lookup engine); they must have ``mul_stages``, ``add_stages``,
        ``lane_fold`` and the tag widths of :attr:`lanes_tag_widths`.

    Raises
    ------
    ValueError
        If a parameter is out of range.
    """

    def __init__(self, *, max_tables=8, max_dim=128, num_regions=4, addr_width=48, id_width=8,
                 max_unique_rows=64, mul_stages=None, add_stages=None, outstanding_reads=16,
                 shared_lanes=False, write_buffer_lines=None, relaxed_lookup=True,
                 correction_bags=None, correction_contexts=None, correction_queue_depth=None,
                 delta_lanes=None, correction_lanes=None, fpga_pipelining=False,
                 lane_fold=1):
        _check_int(max_tables, 1, 255, "Table count limit must be an integer in 1..255")
        if (not isinstance(max_dim, int) or isinstance(max_dim, bool)
                or not 16 <= max_dim <= 65520 or max_dim % 16):
            raise ValueError(
                f"Maximum dimension must be a multiple of 16 in 16..65520, not {max_dim!r}")
        _check_int(num_regions, 1, 64, "Region count must be an integer in 1..64")
        _check_int(addr_width, 12, 64, "Address width must be an integer in 12..64")
        _check_int(id_width, 1, 16, "ID width must be an integer in 1..16")
        _check_int(max_unique_rows, 1, 1024,
                   "Unique-row capacity must be an integer in 1..1024")
        self._mul_stages = _check_stages(mul_stages, FPMul, "Multiplier")
        self._add_stages = _check_stages(add_stages, FPAdd, "Adder")
        check_bool("FPGA pipelining", fpga_pipelining)
        self._fpga_pipelining = fpga_pipelining
        self._lane_fold = check_fold(lane_fold, lanes=LANES)
        if lane_fold > 1 and relaxed_lookup:
            raise ValueError(f"Folded lanes take no correction: lane_fold must be 1 with "
                             f"relaxed_lookup, not {lane_fold!r}")
        _check_int(outstanding_reads, 4, 256,
                   "Outstanding reads must be an integer in 4..256")
        if write_buffer_lines is not None:
            _check_int(write_buffer_lines, 1, 65536,
                       "Write buffer must be None or an integer in 1..65536")
            # (fpga_pipelining registers the multiplier's operands: a cycle of its latency.)
            least = UpdateDatapath.apply_latency_of(
                mul_latency=self.mul_latency + self._fpga_pipelining,
                add_latency=self.add_latency) + 3
            if write_buffer_lines < least:
                raise ValueError(f"Write buffer must be at least {least} lines (the apply "
                                 f"latency + 3), not {write_buffer_lines}")
        self._write_buffer_lines = write_buffer_lines
        check_bool("Relaxed lookup", relaxed_lookup)
        self._relaxed_lookup = relaxed_lookup
        if correction_bags is None:
            correction_bags = _DEFAULT_CORRECTION_BAGS if relaxed_lookup else 0
        _check_int(correction_bags, 0, 4096,
                   "Correction bag count must be None or an integer in 0..4096")
        if correction_bags and not relaxed_lookup:
            raise ValueError(f"Correction bags need the relaxed lookup: without it the count "
                             f"must be None or 0, not {correction_bags!r}")
        self._correction_bags = correction_bags
        if correction_contexts is None:
            correction_contexts = (min(_DEFAULT_CORRECTION_CONTEXTS, max_unique_rows)
                                   if relaxed_lookup else 1)
        _check_int(correction_contexts, 1, max_unique_rows,
                   f"Correction contexts must be None or an integer in 1..{max_unique_rows} "
                   f"(the unique-row capacity)")
        if correction_contexts != 1 and not relaxed_lookup:
            raise ValueError(f"Correction contexts need the relaxed lookup: without it the "
                             f"count must be None or 1, not {correction_contexts!r}")
        self._correction_contexts = correction_contexts
        if correction_queue_depth is not None and not relaxed_lookup:
            raise ValueError(f"Correction queue depth needs the relaxed lookup: without it the "
                             f"depth must be None, not {correction_queue_depth!r}")
        if correction_queue_depth is None:
            correction_queue_depth = _DEFAULT_CORRECTION_QUEUE_DEPTH
        _check_int(correction_queue_depth, 2, 4096,
                   "Correction queue depth must be None or an integer in 2..4096")
        self._correction_queue_depth = correction_queue_depth
        if delta_lanes is not None and not isinstance(delta_lanes, bool):
            raise TypeError(f"Delta lanes must be None or a bool, not {delta_lanes!r}")
        if delta_lanes and not relaxed_lookup:
            raise ValueError("Delta lanes need the relaxed lookup: without it delta_lanes must "
                             "be None or False, not True")
        self._delta_lanes = bool(delta_lanes)
        if correction_lanes is not None and not isinstance(correction_lanes, bool):
            raise TypeError(f"Correction lanes must be None or a bool, not {correction_lanes!r}")
        if correction_lanes and not delta_lanes:
            raise ValueError("Correction lanes need the delta lanes: without them "
                             "correction_lanes must be None or False, not True")
        self._correction_lanes = bool(correction_lanes)
        self._max_tables = max_tables
        self._max_dim = max_dim
        self._num_regions = num_regions
        self._addr_width = addr_width
        self._id_width = id_width
        self._max_unique_rows = max_unique_rows
        self._outstanding_reads = outstanding_reads
        check_bool("Shared lanes", shared_lanes)
        self._shared_lanes = shared_lanes
        lanes = {}
        if shared_lanes:
            mul_width, add_width = self.lanes_tag_widths
            lanes = {"mul_lanes": In(fp_lanes_signature(op="mul", lanes=16,
                                                        tag_width=mul_width)),
                     "add_lanes": In(fp_lanes_signature(op="add", lanes=16,
                                                        tag_width=add_width))}
        super().__init__({
            **lanes,
            "cmd": In(stream.Signature(command_layout(addr_width))),
            "done": Out(stream.Signature(status_layout())),
            "tables": In(data.ArrayLayout(table_layout(addr_width), max_tables)),
            "regions": In(data.ArrayLayout(region_layout(addr_width), num_regions)),
            "lr": In(32),
            "axi": Out(AXI4Signature(addr_width=addr_width, data_width=512,
                                     id_width=id_width)),
            "counters": Out(counters_layout()),
            **({"correct": In(command_layout(addr_width)), "correct_enable": In(1)}
               if relaxed_lookup else {}),
        })

    @property
    def lanes_tag_widths(self):
        """``(multiplier, adder)`` tag widths of the FP lanes this engine uses."""
        mul_tag, add_tag = UpdateDatapath.tag_layouts(
            capacity=self._max_unique_rows, lines_per_slot=self.lines_per_row,
            line_address_width=self._addr_width - 6)
        return mul_tag.size, add_tag.size

    @property
    def max_tables(self):
        return self._max_tables

    @property
    def max_dim(self):
        return self._max_dim

    @property
    def num_regions(self):
        return self._num_regions

    @property
    def addr_width(self):
        return self._addr_width

    @property
    def id_width(self):
        return self._id_width

    @property
    def max_unique_rows(self):
        """On-chip capacity M: distinct rows per chunk (``sparse_sgd_update``'s argument)."""
        return self._max_unique_rows

    @property
    def relaxed_lookup(self):
        """Whether the engine corrects relaxed lookups (has ``correct`` and
        ``correct_enable``)."""
        return self._relaxed_lookup

    @property
    def correction_bags(self):
        """Bags of a deferred lookup the correction keeps on chip between chunks."""
        return self._correction_bags

    @property
    def correction_queue_depth(self):
        """Occurrences each correction context's queue holds."""
        return self._correction_queue_depth

    @property
    def correction_contexts(self):
        """Bags whose corrections interleave on the adder."""
        return self._correction_contexts

    @property
    def delta_lanes(self):
        """Whether the apply's ``new - old`` has adder lanes of its own."""
        return self._delta_lanes

    @property
    def correction_lanes(self):
        """Whether the correction has FP lanes of its own and runs beside the apply."""
        return self._correction_lanes

    @property
    def lines_per_row(self):
        """Gradient buffer lines per slot (``max_dim / 16``)."""
        return self._max_dim // 16

    @property
    def gradient_buffer_lines(self):
        """64-byte lines of on-chip gradient buffer."""
        return self._max_unique_rows * self.lines_per_row

    @property
    def mul_latency(self):
        """The multiplier lanes' latency: their stages, plus ``lane_fold`` when folded."""
        return folded_latency(self._mul_stages, self._lane_fold)

    @property
    def add_latency(self):
        """The adder lanes' latency: their stages, plus ``lane_fold`` when folded."""
        return folded_latency(self._add_stages, self._lane_fold)

    @property
    def lane_fold(self):
        return self._lane_fold

    @property
    def hazard_window(self):
        """Cycles a gradient line waits before the same buffer line can be accumulated again."""
        return self.add_latency + 1

    @property
    def outstanding_reads(self):
        return self._outstanding_reads

    @property
    def max_outstanding_reads(self):
        return 2 * self._outstanding_reads + 3 * _STREAM_DEPTH

    @property
    def max_outstanding_writes(self):
        return _MAX_OUTSTANDING_WRITES

    def elaborate(self, platform):
        m = Module()
        aw = self._addr_width
        line_address_width = aw - 6
        capacity = self._max_unique_rows
        relaxed = self._relaxed_lookup

        # Per-command state is cleared when a command is accepted (the bus is quiet then). With
        # fpga_pipelining the pulse comes from a flip-flop, one cycle later (state Clear): it
        # fans out to every per-command block, and from the accept logic it was the longest
        # path of several ULX3S builds.
        clear = Signal()

        def per_command(name, component):
            m.submodules[name] = ResetInserter(clear)(component)
            return component

        checker = m.submodules.checker = CommandChecker(
            max_tables=self._max_tables, max_dim=self._max_dim,
            num_regions=self._num_regions, addr_width=aw,
            registered_region_checks=self._fpga_pipelining)
        # In priority order: the walks' word streams and a bag's few lines first. They take
        # a line per 16 occurrences (or per bag), so they cost the row and gradient streams
        # little; behind those, which ask for a line every cycle, they would wait for a gap,
        # and the relaxed lookup's correction walk, run during the apply, would starve.
        sources = [("indices", _STREAM_DEPTH),
                   ("weights", _STREAM_DEPTH),
                   ("offsets", _STREAM_DEPTH)]
        if relaxed:
            sources += [("bag", max(3, self.lines_per_row)),
                        ("deferred_indices", _STREAM_DEPTH),
                        ("deferred_weights", _STREAM_DEPTH),
                        ("deferred_offsets", _STREAM_DEPTH)]
        sources += [("rows", self._outstanding_reads),
                    ("gradient", self._outstanding_reads)]
        router = per_command("router", ReadRouter(
            line_address_width=line_address_width, sources=sources,
            # Rows and gradients stream at up to a line per cycle; the rest (word streams, a
            # bag's few lines) share one buffer.
            shared=[name for name, _ in sources if name in _SHARED_SOURCES],
            line_slices=LANES if self._fpga_pipelining else 1, ar_skid=self._fpga_pipelining))
        readers = {name: per_command(f"{name}_reader",
                                     WordReader(line_address_width=line_address_width,
                                                registered_output=self._fpga_pipelining))
                   for name in ("offsets", "indices", "weights")}
        walker = per_command("walker", OccurrenceWalker(
            max_tables=self._max_tables, max_dim=self._max_dim, addr_width=aw,
            registered_checks=self._fpga_pipelining, given_entries=self._fpga_pipelining))
        gradient_fetch = per_command("gradient_fetch", GradientFetch(
            table_width=walker.table_width, line_width=walker.line_width,
            line_address_width=line_address_width))
        unique = per_command("unique", UniqueRows(
            capacity=capacity, table_width=walker.table_width,
            payload_shape=chunk_occurrence_layout(line_width=walker.line_width),
            registered_accept=self._fpga_pipelining))
        row_fetch = per_command("row_fetch", RowFetch(
            capacity=capacity, max_tables=self._max_tables, table_width=walker.table_width,
            line_width=walker.line_width, addr_width=aw,
            context_depth=self._outstanding_reads + 2))
        datapath = per_command("datapath", UpdateDatapath(
            capacity=capacity, lines_per_slot=self.lines_per_row,
            line_address_width=line_address_width, mul_stages=self._mul_stages,
            add_stages=self._add_stages, shared_lanes=self._shared_lanes,
            write_depth=self._write_buffer_lines, cached_bags=self._correction_bags,
            corrections=relaxed, correction_contexts=self._correction_contexts,
            correction_queue_depth=self._correction_queue_depth,
            delta_lanes=self._delta_lanes, correction_lanes=self._correction_lanes,
            lane_replicas=self._fpga_pipelining,
            registered_operands=self._fpga_pipelining,
            read_port_per_use=self._fpga_pipelining, lane_fold=self._lane_fold,
            registered_writes=self._fpga_pipelining and not relaxed))
        if self._shared_lanes:
            wiring.connect(m, wiring.flipped(self.mul_lanes), datapath.mul_lanes)
            wiring.connect(m, wiring.flipped(self.add_lanes), datapath.add_lanes)
        # With fpga_pipelining and folded lanes the write beats leave from registers: the
        # apply writes a line every `lane_fold` cycles at most, the queue passes one every
        # second cycle.
        writes = per_command("writes", WriteQueue(
            line_address_width=line_address_width, max_outstanding=_MAX_OUTSTANDING_WRITES,
            registered_beats=self._fpga_pipelining and self._lane_fold > 1))
        # The fast index check reads the index lines through the rows' source: rows are
        # read only in a chunk's apply, after the validation.
        index_validator = per_command("index_validator", IndexValidator(
            max_tables=self._max_tables, addr_width=aw,
            replicated_rows=self._fpga_pipelining, registered_error=self._fpga_pipelining))
        index_lines = per_command("index_lines", LineRequester(
            line_address_width=line_address_width,
            registered_request=self._fpga_pipelining))
        # With fpga_pipelining the index check starts a cycle after the sequencer decides
        # it, from a flip-flop, as the walks do (`walk_of`): the walk's end, masked while a
        # walk starts, reached the index validator's and the index lines' registers (18 ns
        # in the netlist). Its result from the previous command does not count meanwhile.
        index_check_launching = Signal()
        index_check_error = Signal(ErrorCode)
        index_check_done = Signal()
        m.d.comb += [index_check_error.eq(index_validator.error.code),
                     index_check_done.eq(index_validator.done)]
        if self._fpga_pipelining:
            m.d.sync += index_check_launching.eq(0)
            m.d.comb += [index_validator.start.eq(index_check_launching),
                         index_lines.start.eq(index_check_launching)]
            with m.If(index_check_launching):
                m.d.comb += [index_check_error.eq(ErrorCode.NONE), index_check_done.eq(0)]

        def start_index_check():
            if self._fpga_pipelining:
                m.d.sync += index_check_launching.eq(1)
            else:
                m.d.comb += [index_validator.start.eq(1), index_lines.start.eq(1)]

        # The command, latched when accepted.
        command = Signal(command_layout(aw))
        m.d.comb += [
            checker.descriptors.eq(self.tables),
            checker.regions.eq(self.regions),
            walker.descriptors.eq(self.tables),
            row_fetch.descriptors.eq(self.tables),
            datapath.lr.eq(self.lr),
        ]

        def walk_of(readers, walker, command, row_lines, use_weights, prefix="", span=None):
            """Word streams (offsets, indices, weights) of ``command`` into ``walker``, through
            the router's ``{prefix}{name}`` sources; returns ``start(mode)`` and the walk's
            status. With ``span`` (a :func:`walk_span_layout` signal), an UPDATE walk covers
            only its tables."""
            for name, reader in readers.items():
                wiring.connect(m, reader.request, getattr(router, f"{prefix}{name}_request"))
                wiring.connect(m, getattr(router, f"{prefix}{name}_response"), reader.lines)
                wiring.connect(m, reader.o, getattr(walker, name))
            # Where the walk starts and ends: entry, index position, tables, gradient column.
            first_entry = Signal(24)
            first_position = Signal(32)
            end_table = Signal(8)
            end_position = Signal(32)
            first_table = Signal(8)
            first_column = Signal(16)
            end_entry = Signal(24)
            spanned = Signal()  # set by ``start`` for a walk of ``span``
            # The entries where the walk starts and ends, `table * bags`, are registered
            # every cycle, so no multiplier is in front of the readers' counts (nor, with
            # fpga_pipelining, of the walker's bag count and number): the command and the
            # span hold for cycles before a walk starts (the span changes as a pass ends, a
            # state or more before the next pass starts).
            whole_end_entry = Signal(24, name=f"{prefix}whole_end_entry")
            m.d.sync += whole_end_entry.eq(command.tables * command.bags)
            m.d.comb += [
                end_entry.eq(whole_end_entry),
                end_table.eq(command.tables),
                end_position.eq(command.num_indices),
            ]
            if span is not None:
                span_first_entry = Signal(24, name=f"{prefix}span_first_entry")
                span_end_entry = Signal(24, name=f"{prefix}span_end_entry")
                m.d.sync += [span_first_entry.eq(span.first_table * command.bags),
                             span_end_entry.eq(span.end_table * command.bags)]
                with m.If(spanned):
                    m.d.comb += [
                        first_entry.eq(span_first_entry),
                        end_entry.eq(span_end_entry),
                        first_table.eq(span.first_table),
                        first_position.eq(span.first_position),
                        first_column.eq(span.first_column),
                        end_table.eq(span.end_table),
                        end_position.eq(span.end_position),
                    ]

            def read(reader, array, first_word, words):
                m.d.comb += [reader.base.eq((array >> 6) + (first_word >> 4)),
                             reader.first.eq(first_word[:4]), reader.words.eq(words)]

            read(readers["offsets"], command.offsets, first_entry, end_entry + 1 - first_entry)
            read(readers["indices"], command.indices, first_position,
                 end_position - first_position)
            read(readers["weights"], command.weights, first_position,
                 end_position - first_position)
            m.d.comb += [
                walker.bags.eq(command.bags),
                walker.tables.eq(end_table),
                walker.num_indices.eq(end_position),
                walker.first_table.eq(first_table),
                walker.first_position.eq(first_position),
                walker.first_column.eq(first_column),
                walker.first_entry.eq(first_entry),
                walker.end_entry.eq(end_entry),
                walker.gradient.eq(command.output >> 6),
                walker.row_lines.eq(row_lines),
                walker.use_weights.eq(use_weights),
            ]

            # The walk's status, its `done` hidden while a registered start is on its way.
            status = Signal(error_layout(), name=f"{prefix}walk_status")
            m.d.comb += status.eq(walker.status)

            def launches(go, mode):
                """Whether the walk, its span and each reader start (``go`` in ``mode``)."""
                return {"walk": go, "spanned": go & (mode == WalkMode.UPDATE),
                        "offsets": go, "indices": go & (mode != WalkMode.OFFSETS),
                        "weights": go & (mode == WalkMode.UPDATE) & use_weights}

            def launch(starts, mode):
                m.d.comb += [
                    spanned.eq(starts["spanned"]),
                    walker.start.eq(starts["walk"]),
                    walker.mode.eq(mode),
                ]
                for name, reader in readers.items():
                    m.d.comb += reader.start.eq(starts[name])

            if not self._fpga_pipelining:
                return (lambda mode: launch(launches(1, mode), mode)), status
            # With fpga_pipelining the walk starts a cycle after the sequencer decides it,
            # from flip-flops: the readers' and walker's starts (the loads, resets and word
            # choices behind them) then no longer follow the state and the conditions that
            # end it (a ULX3S build's paths from the index check's error and the engine's
            # state, through the walker's mode and the offsets reader, 16-18 ns). What the
            # walk samples (the command, the checker's results, a correction's span) holds
            # until then; its previous walk's `done` does not count meanwhile.
            # Each start is a register of its own, loaded with its value for the mode (and
            # the weights'): not one `launching` behind a LUT of the mode, a net of 131 loads
            # in front of the indices reader's counts, skid buffers and word, and through
            # them of the walker's state (a ULX3S build's paths, 13.7-14.1 ns at seed 3).
            launching = {name: Signal(name=f"{prefix}{name}_launching")
                         for name in ("walk", "spanned", *readers)}
            launch_mode = Signal(WalkMode, name=f"{prefix}walk_launch_mode")
            m.d.sync += [start.eq(0) for start in launching.values()]
            launch(launching, launch_mode)
            m.d.comb += status.done.eq(walker.status.done & ~launching["walk"])

            def start(mode):
                m.d.sync += launch_mode.eq(mode)
                m.d.sync += [launching[name].eq(value)
                             for name, value in launches(1, mode).items()]
            return start, status

        start_walk, walk_status = walk_of(readers, walker, command, checker.row_lines,
                                          checker.use_weights)

        # The deferred lookup a command corrects (``correcting``): its own walk (validation,
        # then one correction pass per chunk) and the correction sequencer.
        correcting = Signal()
        if relaxed:
            deferred = Signal(command_layout(aw))
            checking_deferred = Signal()
            deferred_row_lines = Signal.like(checker.row_lines)
            deferred_use_weights = Signal()
            deferred_as_update = Signal(command_layout(aw))
            deferred_readers = {
                name: per_command(f"deferred_{name}_reader",
                                  WordReader(line_address_width=line_address_width,
                                             registered_output=self._fpga_pipelining))
                for name in ("offsets", "indices", "weights")}
            deferred_walker = per_command("deferred_walker", OccurrenceWalker(
                max_tables=self._max_tables, max_dim=self._max_dim, addr_width=aw,
                registered_checks=self._fpga_pipelining, given_entries=self._fpga_pipelining))
            corrector = per_command("corrector", CorrectionSequencer(
                max_tables=self._max_tables, addr_width=aw, table_width=walker.table_width,
                line_width=walker.line_width, slot_width=Shape.cast(range(capacity)).width,
                cached_bags=self._correction_bags, bag_width=datapath.bag_width,
                contexts=self._correction_contexts, context_width=datapath.context_width))
            span = Signal(walk_span_layout())   # of the next correction pass (driven below)
            start_deferred_walk, deferred_walk_status = walk_of(
                deferred_readers, deferred_walker, deferred, deferred_row_lines,
                deferred_use_weights, "deferred_", span)
            m.d.comb += [
                deferred_as_update.eq(deferred),
                deferred_as_update.opcode.eq(Opcode.UPDATE),
                checker.command.eq(Mux(checking_deferred, deferred_as_update, command)),
                deferred_walker.descriptors.eq(self.tables),
                corrector.descriptors.eq(self.tables),
                datapath.keep_deltas.eq(correcting),
                corrector.walk_done.eq(deferred_walk_status.done),
                unique.probe.eq(corrector.probe),
                unique.probe_key.eq(corrector.probe_key),
                corrector.probe_hit.eq(unique.probe_hit),
                corrector.probe_slot.eq(unique.probe_slot),
            ]
            wiring.connect(m, deferred_walker.o, corrector.occurrences)
            wiring.connect(m, corrector.bag_request, router.bag_request)
            wiring.connect(m, router.bag_response, datapath.bag_lines)
            wiring.connect(m, corrector.ops, datapath.correction)
        else:
            m.d.comb += checker.command.eq(command)

        def skidded(name, source):
            """``source``, with fpga_pipelining through a skid buffer (a cycle of latency):
            the stream to read, and whether nothing waits in between."""
            if not self._fpga_pipelining:
                return source, Const(1)
            skid = per_command(name, SkidBuffer(shape=source.payload.shape()))
            wiring.connect(m, source, skid.i)
            return skid.o, skid.empty

        def through_skid(name, source, sink):
            """Connect ``source`` to ``sink`` through :func:`skidded`; returns whether
            nothing waits in between."""
            stream_out, empty = skidded(name, source)
            wiring.connect(m, stream_out, sink)
            return empty

        # Occurrences: walker -> gradient fetch -> unique rows -> accumulation. With
        # fpga_pipelining a skid buffer between the walker and the fetch keeps the fetch's
        # ready (from the read router's arbitration) out of the walker's cycle, a cycle of
        # latency per occurrence; and one between the fetch and the router keeps the router's
        # arbitration out of the fetch's ready and occurrence register, a cycle of read
        # latency.
        occurrences_empty = through_skid("occurrences", walker.o, gradient_fetch.i)
        gradient_requests_empty = through_skid("gradient_requests", gradient_fetch.request,
                                               router.gradient_request)
        # Occurrences whose gradient lines are on their way: without this queue only the two
        # in the fetch and CAM registers would be, one read latency per two occurrences.
        waiting = per_command("waiting", fifo.SyncFIFOBuffered(
            width=Shape.cast(gradient_fetch.o.payload.shape()).width,
            depth=self._outstanding_reads))
        m.d.comb += [
            waiting.w_data.eq(gradient_fetch.o.payload),
            waiting.w_en.eq(gradient_fetch.o.valid),
            gradient_fetch.o.ready.eq(waiting.w_rdy),
            unique.i.payload.eq(waiting.r_data),
            unique.i.valid.eq(waiting.r_rdy),
            waiting.r_en.eq(unique.i.ready),
        ]
        # With fpga_pipelining through a skid buffer: the accumulation's decision to take an
        # occurrence (its hazard checks against the lines in the multiplier and adder) then
        # stops there, not at the unique rows' registers and the queue behind them (a ULX3S
        # build's update paths, 18 ns).
        # (`accumulate_idle` covers what waits there: the buffer's output is valid whenever
        # it holds one.)
        accumulations, _ = skidded("accumulations", unique.o)
        occurrence = accumulations.payload
        m.d.comb += [
            datapath.accumulate.valid.eq(accumulations.valid),
            datapath.accumulate.payload.slot.eq(occurrence.slot),
            datapath.accumulate.payload.fresh.eq(occurrence.fresh),
            datapath.accumulate.payload.scale.eq(occurrence.data.scale),
            datapath.accumulate.payload.lines.eq(occurrence.data.lines),
            accumulations.ready.eq(datapath.accumulate.ready),
        ]
        wiring.connect(m, router.gradient_response, datapath.gradient)

        # Rows of a chunk: row fetch -> router -> datapath -> write queue.
        m.d.comb += [
            unique.key_slot.eq(row_fetch.key_slot),
            row_fetch.key.eq(unique.key),
            row_fetch.count.eq(unique.count),
        ]
        # While `checking` the rows' source reads index lines (for the index check).
        checking = checking_index_lines = Signal()
        rows_request, rows_response = router.rows_request, router.rows_response
        requests = index_lines.request
        # With fpga_pipelining the row fetch's requests pass a skid buffer (a cycle of read
        # latency), so the router's arbitration stays out of the fetch's `current` and
        # `keyed` registers, which move on a request's acceptance (a ULX3S build's worst
        # path, 17.8 ns). A request waiting there keeps the fetch busy (its line is counted
        # as pending), so nothing else needs to wait for it.
        row_requests, _ = skidded("row_requests", row_fetch.request)
        m.d.comb += [
            rows_request.valid.eq(Mux(checking, requests.valid, row_requests.valid)),
            rows_request.payload.eq(Mux(checking, requests.payload, row_requests.payload)),
            requests.ready.eq(checking & rows_request.ready),
            row_requests.ready.eq(~checking & rows_request.ready),
            index_validator.lines.valid.eq(checking & rows_response.valid),
            datapath.rows.valid.eq(~checking & rows_response.valid),
            rows_response.ready.eq(Mux(checking, index_validator.lines.ready,
                                       datapath.rows.ready)),
            datapath.rows.payload.eq(rows_response.payload),
            index_validator.lines.payload.eq(rows_response.payload),
        ]

        # Where each of the command's tables starts in its indices (its offsets walk says), for
        # the index check; the tables after the last end where the indices do.
        index_starts = Array(Signal(32, name=f"index_start_{t}")
                             for t in range(self._max_tables))
        with m.If(walker.started):
            m.d.sync += index_starts[walker.started_table].eq(walker.started_position)
        m.d.comb += [
            index_validator.tables.eq(self.tables),
            index_validator.num_indices.eq(command.num_indices),
            index_lines.base.eq(command.indices >> 6),
            index_lines.lines.eq((command.num_indices + LANES - 1) >> 4),
        ]
        for t in range(self._max_tables + 1):
            table_start = command.num_indices
            if t < self._max_tables:
                table_start = Mux(t < command.tables, index_starts[t], command.num_indices)
            m.d.comb += index_validator.table_starts[t].eq(table_start)
        wiring.connect(m, row_fetch.context, datapath.row_context)
        wiring.connect(m, datapath.writes, writes.i)

        # AXI: single-line INCR bursts, ID 0.
        axi = self.axi
        size = LINE_BYTES.bit_length() - 1
        m.d.comb += [
            axi.arid.eq(0), axi.arlen.eq(0), axi.arsize.eq(size), axi.arburst.eq(_INCR),
            axi.araddr.eq(Cat(Const(0, 6), router.ar.payload)),
            axi.arvalid.eq(router.ar.valid), router.ar.ready.eq(axi.arready),
            router.r.valid.eq(axi.rvalid), router.r.payload.data.eq(axi.rdata),
            router.r.payload.resp.eq(axi.rresp), axi.rready.eq(router.r.ready),
            axi.awid.eq(0), axi.awlen.eq(0), axi.awsize.eq(size), axi.awburst.eq(_INCR),
            axi.awaddr.eq(Cat(Const(0, 6), writes.aw.payload)),
            axi.awvalid.eq(writes.aw.valid), writes.aw.ready.eq(axi.awready),
            axi.wdata.eq(writes.w.payload), axi.wstrb.eq(-1), axi.wlast.eq(1),
            axi.wvalid.eq(writes.w.valid), writes.w.ready.eq(axi.wready),
            writes.b.valid.eq(axi.bvalid), writes.b.payload.eq(axi.bresp),
            axi.bready.eq(writes.b.ready),
        ]

        # Status of the command in progress.
        error = Signal(ErrorCode)
        error_table = Signal(8)
        error_bag = Signal(16)
        error_position = Signal(32)
        bus_error = Signal()
        last_chunk = Signal()
        if relaxed:
            # A correction pass walks batch N+1's tables from the first one it has not
            # finished to the one where the chunk ended (the table of the occurrence that found
            # the CAM full: the chunk wrote no row of a later table), or to the last table after
            # the last chunk. Where each table's indices start, and its gradient column, come
            # from the deferred walker's earlier whole walks.
            table_starts = Array(Signal(32, name=f"table_start_{t}")
                                 for t in range(self._max_tables))
            table_columns = Array(Signal(16, name=f"table_column_{t}")
                                  for t in range(self._max_tables))
            with m.If(deferred_walker.started):
                m.d.sync += [
                    table_starts[deferred_walker.started_table].eq(
                        deferred_walker.started_position),
                    table_columns[deferred_walker.started_table].eq(
                        deferred_walker.started_column),
                ]
            pass_first_table = Signal(8)
            boundary_table = Signal(8)
            span_end = Signal(8)
            m.d.comb += [
                # (Batch N+1 may have fewer tables than batch N: its last one at most.)
                span_end.eq(Mux(last_chunk | (boundary_table >= deferred.tables),
                                deferred.tables, boundary_table + 1)),
                span.first_table.eq(pass_first_table),
                span.first_position.eq(table_starts[pass_first_table]),
                span.first_column.eq(table_columns[pass_first_table]),
                span.end_table.eq(span_end),
                span.end_position.eq(Mux(span_end == deferred.tables, deferred.num_indices,
                                         table_starts[span_end])),
                corrector.final.eq(last_chunk),
                corrector.boundary.eq(boundary_table),
            ]
        halted = Signal()  # after an error: no new read, no row write not yet offered
        # With correction lanes a chunk's correction pass runs during its apply (`overlapped`).
        overlap = relaxed and self._correction_lanes
        overlapped = Signal()
        # From the cycle after the error (`bus_error`, a register): the error's own response
        # then reaches neither the write queue's handshake nor the router's, whose FIFOs' read
        # pointers and copies follow them (a ULX3S build's paths from the memory's `bresp`).
        # A write the queue offers in the error's cycle still completes, as one offered
        # before it does.
        stop = halted | bus_error
        m.d.comb += [router.stop.eq(stop), writes.stop.eq(stop)]
        with m.If(router.error | writes.error):
            m.d.sync += bus_error.eq(1)

        def record(status):
            m.d.sync += [error.eq(status.error), error_table.eq(status.table)]
            if hasattr(status, "bag"):
                m.d.sync += [error_bag.eq(status.bag), error_position.eq(status.position)]

        def after_correction_pass():
            """The chunk's correction is done: the next chunk, or the flush after the last."""
            with m.If(last_chunk):
                m.next = "Flush"
            with m.Else():
                m.d.comb += unique.clear.eq(1)
                m.next = "Accumulate"

        walk_failed = walk_status.done & (walk_status.error != ErrorCode.NONE)
        if relaxed:
            deferred_walk_failed = (deferred_walk_status.done &
                                    (deferred_walk_status.error != ErrorCode.NONE))
        # (The queue's level counts an entry still moving to its output, unlike r_rdy.)
        walk_finished = (walk_status.done & ~walker.o.valid & occurrences_empty &
                         gradient_fetch.idle & gradient_requests_empty & (waiting.level == 0))
        writes_settled = writes.idle & datapath.apply_idle & ~datapath.writes_queued

        # The deferred lookup's offsets and indices are validated alongside the command's
        # own validation and its first accumulation (which write nothing); a row is written,
        # or a correction starts, only once they are known good. Its errors are reported
        # after the command's own validation errors, as if the two ran one after the other.
        validating_deferred = Signal()
        if relaxed:
            checking_deferred_indices = Signal()
            deferred_invalid = validating_deferred & deferred_walk_failed
            with m.If(validating_deferred & deferred_walk_status.done &
                      ~deferred_walk_failed):
                with m.If(checking_deferred_indices):
                    m.d.sync += validating_deferred.eq(0)
                with m.Else():
                    start_deferred_walk(WalkMode.INDICES)
                    m.d.sync += checking_deferred_indices.eq(1)

        with m.FSM():
            def begin():
                # In the cycle of `clear`: every status below is reset last, so nothing the
                # blocks still show of the previous command (its bus error, a walk's end)
                # carries over.
                m.d.comb += checker.start.eq(1)
                m.d.sync += [
                    error.eq(ErrorCode.NONE), error_table.eq(0), error_bag.eq(0),
                    error_position.eq(0), bus_error.eq(0), last_chunk.eq(0),
                    halted.eq(0), validating_deferred.eq(0), checking_index_lines.eq(0),
                    overlapped.eq(0),
                ]
                if relaxed:
                    m.d.sync += [checking_deferred_indices.eq(0), pass_first_table.eq(0)]

            def drain():
                # `halted` is set with the move, so `stop` comes from registers alone in
                # Drain's first cycle too, not from the state (a ULX3S build's path from the
                # state through the write queue's handshake to its FIFO's read pointers).
                m.next = "Drain"
                m.d.sync += halted.eq(1)

            with m.State("Idle"):
                m.d.comb += self.cmd.ready.eq(1)
                with m.If(self.cmd.valid):
                    m.d.sync += command.eq(self.cmd.payload)
                    if self._fpga_pipelining:
                        # `clear` comes from a register, in the next cycle (state Clear).
                        m.d.sync += clear.eq(1)
                        m.next = "Clear"
                    else:
                        m.d.comb += clear.eq(1)
                        begin()
                        m.next = "Check"
                    if relaxed:
                        m.d.sync += [deferred.eq(self.correct),
                                     correcting.eq(self.correct_enable),
                                     checking_deferred.eq(self.correct_enable)]
                        if not self._fpga_pipelining:
                            with m.If(self.correct_enable):
                                m.next = "Check-Deferred"

            if self._fpga_pipelining:
                with m.State("Clear"):
                    m.d.sync += clear.eq(0)
                    begin()
                    m.next = "Check"
                    if relaxed:
                        with m.If(correcting):
                            m.next = "Check-Deferred"

            if relaxed:
                with m.State("Check-Deferred"):
                    with m.If(checker.status.done):
                        with m.If(checker.status.error != ErrorCode.NONE):
                            record(checker.status)
                            m.next = "Done"
                        with m.Else():
                            m.d.sync += [deferred_row_lines.eq(checker.row_lines),
                                         deferred_use_weights.eq(checker.use_weights),
                                         checking_deferred.eq(0)]
                            m.d.comb += checker.start.eq(1)
                            m.next = "Check"

            with m.State("Check"):
                with m.If(checker.status.done):
                    with m.If(checker.status.error != ErrorCode.NONE):
                        record(checker.status)
                        m.next = "Done"
                    with m.Else():
                        start_walk(WalkMode.OFFSETS)
                        if relaxed:
                            with m.If(correcting):
                                start_deferred_walk(WalkMode.OFFSETS)
                                m.d.sync += validating_deferred.eq(1)
                        m.next = "Validate-Offsets"

            with m.State("Validate-Offsets"):
                with m.If(bus_error):
                    drain()
                with m.Elif(walk_failed):
                    record(walk_status)
                    drain()
                with m.Elif(walk_status.done):
                    start_index_check()
                    m.d.sync += checking_index_lines.eq(1)
                    m.next = "Validate-Indices"

            with m.State("Validate-Indices"):
                # (After a bad index the unread lines stay in the rows' source, which
                # `checking_index_lines` keeps from the datapath until the next command.)
                with m.If(bus_error):
                    drain()
                with m.Elif(index_check_error != ErrorCode.NONE):
                    start_walk(WalkMode.INDICES)
                    m.next = "Locate-Index"
                with m.Elif(index_check_done):
                    m.d.sync += checking_index_lines.eq(0)
                    start_walk(WalkMode.UPDATE)
                    m.next = "Accumulate"

            with m.State("Locate-Index"):
                # The walker finds the same first bad index and names its bag too.
                with m.If(bus_error):
                    drain()
                with m.Elif(walk_failed):
                    record(walk_status)
                    drain()
                with m.Elif(walk_status.done):
                    # (Only if the indices changed under the command since the check.)
                    found = index_validator.error
                    m.d.sync += [error.eq(found.code), error_table.eq(found.table),
                                 error_position.eq(found.position)]
                    drain()

            with m.State("Accumulate"):
                with m.If(bus_error):
                    drain()
                with m.Elif(walk_failed):  # only if memory changed since the validation
                    record(walk_status)
                    drain()
                if relaxed:
                    with m.Elif(deferred_invalid):
                        record(deferred_walk_status)
                        drain()
                with m.Elif(unique.full):
                    if relaxed:
                        m.d.sync += boundary_table.eq(unique.i.payload.table)
                    m.next = "Chunk-Settle"
                with m.Elif(walk_finished & ~unique.i.valid):
                    m.d.sync += last_chunk.eq(1)
                    m.next = "Chunk-Settle"

            with m.State("Chunk-Settle"):
                with m.If(bus_error):
                    drain()
                if relaxed:
                    with m.Elif(deferred_invalid):
                        record(deferred_walk_status)
                        drain()
                with m.Elif(~unique.o.valid & datapath.accumulate_idle):
                    with m.If((unique.count == 0) & correcting):
                        if relaxed:
                            m.next = "Correct-Start"
                    with m.Elif(unique.count == 0):
                        m.next = "Flush"
                    with m.Else():
                        m.next = "Chunk-Writes"

            with m.State("Chunk-Writes"):
                # Read-after-write: no row of this chunk is read before every write of the
                # previous chunk has completed.
                with m.If(bus_error):
                    drain()
                if relaxed:
                    with m.Elif(deferred_invalid):
                        record(deferred_walk_status)
                        drain()
                with m.Elif(writes_settled & ~validating_deferred):
                    m.d.comb += row_fetch.start.eq(1)
                    if overlap:
                        # The chunk's correction pass starts with its apply (Correct-Start's
                        # conditions hold: every write has completed, the deferred lookup is
                        # validated); its CORRECT lines wait for their deltas.
                        with m.If(correcting & (pass_first_table < deferred.tables)):
                            start_deferred_walk(WalkMode.UPDATE)
                            m.d.comb += corrector.start.eq(1)
                            m.d.sync += overlapped.eq(1)
                    m.next = "Apply"

            with m.State("Apply"):
                pass_over = ~overlapped
                if overlap:
                    pass_over = ~overlapped | (corrector.done & datapath.correction_idle)
                with m.If(bus_error):
                    drain()
                if overlap:
                    with m.Elif(overlapped & deferred_walk_failed):  # (as in Correct)
                        record(deferred_walk_status)
                        drain()
                with m.Elif(~row_fetch.busy & datapath.apply_idle & pass_over):
                    if overlap:
                        with m.If(overlapped):
                            m.d.sync += [overlapped.eq(0),
                                         pass_first_table.eq(boundary_table)]
                            after_correction_pass()
                    with (m.Elif if overlap else m.If)(correcting):
                        # The CAM keeps the chunk's rows for the correction's lookups.
                        if relaxed:
                            m.next = "Correct-Start"
                    with m.Elif(last_chunk):
                        m.d.comb += unique.clear.eq(1)
                        m.next = "Flush"
                    with m.Else():
                        m.d.comb += unique.clear.eq(1)
                        m.next = "Accumulate"

            if relaxed:
                with m.State("Correct-Start"):
                    # A bag the previous chunk's correction stored to memory is loaded again by
                    # this one: every write completes first.
                    with m.If(bus_error):
                        drain()
                    if relaxed:
                        with m.Elif(deferred_invalid):
                            record(deferred_walk_status)
                            drain()
                    with m.Elif((writes_settled | ~corrector.spilled) & ~validating_deferred):
                        with m.If(pass_first_table >= deferred.tables):
                            # Batch N+1 has fewer tables than batch N and an earlier pass
                            # finished its last one: nothing is left to correct.
                            after_correction_pass()
                        with m.Else():
                            start_deferred_walk(WalkMode.UPDATE)
                            m.d.comb += corrector.start.eq(1)
                            m.next = "Correct"

                with m.State("Correct"):
                    with m.If(bus_error):
                        drain()
                    with m.Elif(deferred_walk_failed):  # only if memory changed since validation
                        record(deferred_walk_status)
                        drain()
                    with m.Elif(corrector.done & datapath.correction_idle):
                        m.d.sync += pass_first_table.eq(boundary_table)
                        after_correction_pass()

            with m.State("Flush"):
                with m.If(bus_error):
                    drain()
                with m.Elif(writes_settled):
                    m.next = "Done"

            with m.State("Drain"):
                # (`halted`, set on the way in, stops the router and the write queue; it
                # stays set in Done: late results are dropped too.)
                with m.If((router.outstanding == 0) & writes_settled):
                    m.next = "Done"

            with m.State("Done"):
                m.d.comb += self.done.valid.eq(1)
                with m.If(self.done.ready):
                    m.next = "Idle"

        # The status is driven in every state (it counts only with `valid`, in Done): the
        # state's decode in front of every field reached the device's status skid buffer
        # (12.1 ns into its registers on a ULX3S build).
        m.d.comb += [
            self.done.payload.opcode.eq(command.opcode),
            self.done.payload.batch.eq(command.batch),
        ]
        with m.If(bus_error):
            m.d.comb += self.done.payload.error.eq(ErrorCode.BUS_ERROR)
        with m.Else():
            m.d.comb += [
                self.done.payload.error.eq(error),
                self.done.payload.table.eq(error_table),
                self.done.payload.bag.eq(error_bag),
                self.done.payload.position.eq(error_position),
            ]

        # Performance counters (free-running, reset only with the engine).
        busy = Signal()
        m.d.comb += busy.eq(~self.cmd.ready)
        counters = self.counters
        read_beat = axi.rvalid & axi.rready
        write_beat = axi.wvalid & axi.wready
        moved = (read_beat | write_beat | (axi.arvalid & axi.arready) |
                 (axi.awvalid & axi.awready) | (axi.bvalid & axi.bready))
        waiting = (axi.arvalid | axi.awvalid | axi.wvalid | (router.outstanding != 0) |
                   (writes.outstanding != 0))
        m.d.sync += [
            counters.busy_cycles.eq(counters.busy_cycles + busy),
            counters.rows_read.eq(counters.rows_read + row_fetch.row_started),
            counters.bytes_read.eq(counters.bytes_read + Cat(Const(0, 6), read_beat)),
            counters.bytes_written.eq(counters.bytes_written + Cat(Const(0, 6), write_beat)),
            counters.stall_cycles.eq(counters.stall_cycles + (busy & waiting & ~moved)),
        ]
        return m
