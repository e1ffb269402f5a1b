"""Table-batched embedding lookup with pooling (FBGEMM TBE forward), near memory.

Architecture (one command at a time)::

    cmd -> CommandChecker (table count, dims, alignment, regions)
        -> pass 1: stream offsets, indices (and weights) into on-chip line windows;
                   OffsetsValidator (4 entries per cycle), then IndexValidator (16)
        -> gather: BagSequencer (a descriptor per bag) -> GatherIssuer (bag slots, round
                   robin) -> ReadReorderBuffer (AXI IDs = slots; responses in any order) ->
                   Pooler (mul + add, 16 lanes) -> LineWriter (AXI writes)
        -> done (status)

Nothing is written before every offset and index has been validated. When the command's
offsets and indices fit in the windows (``offset_buffer_depth``, ``index_buffer_depth``), the
gather runs *during* pass 1 on the indices validated so far and only the writes wait (in the
output buffer), so the indices are read once. When they do not fit, pass 1 only validates and
a pass 2 streams offsets, indices and weights again through the same windows (now as sliding
windows) while gathering: correct for any size, at the cost of reading them twice. Pass 2
re-checks everything it uses; only a buffer changed by the host during the command can make
it fail, and then part of the output may have been written. The same holds for a bus error
after the writes have begun.

On an index error the engine stops, drains its reads, and re-reads the table's offsets to name
the bag holding the index (a cold path, so the fast path needs no per-index bag tracking).

AXI use: every read and write is one 64-byte line (``arlen = awlen = 0``; CXL.mem moves lines
too, and no burst can cross a 4 KiB boundary). Row reads take IDs ``0 .. outstanding_reads-1``
from the reorder buffer (an ID is reused only after its data is back); the offsets, indices and
weights streams use IDs ``outstanding_reads + 0/1/2``, one each, so each stream's data returns
in order. R is always ready: every read has buffer space reserved before it is issued. Writes
use ID 0. Stream reads have priority over row reads on AR (validation must never wait).

Bandwidth (``python -m bench lookup``, fixed read latency, one beat per cycle): 0.92 of the
bus at dim 16 (the indices themselves cost 1/16 of the row traffic there) rising to 0.99 at
dim 128, at read latencies of 30 and 100 cycles.
"""

from amaranth.hdl import Cat, Const, Module, Mux, ResetInserter, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from hw.fp import FPAdd, FPMul, fp_lanes_signature
from hw.fp.lanes import check_fold, folded_latency
from hw.mem.axi import AXI4Signature
from hw.mem.line_stream import LinePrefetch, LineStream
from hw.mem.line_writer import LineWriter
from hw.mem.reorder import ReadReorderBuffer
from hw.skid import SkidBuffer

from ..params import check_bool
from .bags import BagSequencer, check_mean_reciprocal
from .checks import CommandChecker
from .gather import GatherIssuer
from .layouts import (
    ErrorCode,
    Opcode,
    command_layout,
    counters_layout,
    region_layout,
    status_layout,
    table_layout,
)
from .pool import Pooler
from .validate import ERROR_LAYOUT, IndexValidator, OffsetsMode, OffsetsValidator

__all__ = ["LookupEngine", "check_bool", "check_int", "check_stages"]

LANES = 16
_STREAMS = ("offsets", "indices", "weights")
_FLOAT32_ONE = 0x3F80_0000


def check_int(name, value, *, minimum, maximum=None, power_of_two=False, multiple_of=None):
    """Validate an integer parameter with a message naming it (shared by the engine tops)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, not {value!r}")
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"in {minimum}..{maximum}" if maximum is not None else f"at least {minimum}"
        raise ValueError(f"{name} must be {bound}, not {value!r}")
    if power_of_two and value & (value - 1):
        raise ValueError(f"{name} must be a power of two, not {value!r}")
    if multiple_of and value % multiple_of:
        raise ValueError(f"{name} must be a multiple of {multiple_of}, not {value!r}")
    return value


def check_stages(name, value, unit, *, minimum=0):
    """Validate a pipeline-depth parameter of a float32 unit (None picks its default)."""
    maximum = len(unit.CUTS) - 1
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                              or not minimum <= value <= maximum):
        raise ValueError(f"{name} stages must be None or an integer in {minimum}..{maximum}, "
                         f"not {value!r}")
    return value


class LookupEngine(wiring.Component):
    """Pooled embedding lookup over up to ``max_tables`` tables per command.

    Parameters (keyword-only)
    -------------------------
    max_tables : int (1..255)
    max_dim : int (16..4096, a multiple of 16)
        Largest ``dim`` a table may have.
    num_regions : int (1..16)
        Memory windows the engine may touch.
    addr_width : int (12..64)
    id_width : int (1..16)
        AXI ID width; ``outstanding_reads + 3 <= 2**id_width`` (three IDs for the streams).
    outstanding_reads : int (power of two, >= 2)
        Row-line reads in flight: bandwidth x latency. At one line per cycle and a read
        latency of ``L`` cycles, ``L + 8`` keep the bus busy.
    index_buffer_depth, offset_buffer_depth : int (powers of two, >= 32)
        Indices (and as many weights) and offsets held on chip. A command that fits is read
        once; a bigger one takes two passes (module docstring).
    output_buffer_depth : int (>= 2)
        Pooled lines that may wait for the writes to be enabled.
    bag_slots : int (power of two, 2..64)
        Bags pooled at once; at least the adder latency + 1 for full speed at dim 16, and
        the adder + multiplier latency + 1 to hide MEAN's final scaling.
    add_stages, mul_stages : int or None
        Pipeline depth of the float32 units (None: their defaults; the multiplier needs >= 1).
    mean_reciprocal : ``"pipelined"`` or ``"sequential"``
        How MEAN bags get ``1 / L``: a pipelined divider that takes a bag per cycle (the
        default), or a sequential one that takes about 15 cycles per MEAN bag, for FPGA
        builds where bags are long or MEAN is rare (:class:`~hw.emb.bags.BagSequencer`). In
        the ECP5 board synthesis the divider is 569 LUT4 and 178 FF instead of 2,927 and
        2,683.
    fpga_pipelining : bool
        Registers that FPGA builds need in the control paths, at the price of a cycle in some
        waits (results are the same): the pooler reads its accumulator operand a cycle early
        into a register (:mod:`hw.emb.pool`; the accumulators are LUT RAM there), and the
        issuer compares with the index and weight limits of the cycle before and forms each
        row op from registers (:class:`~hw.emb.gather.GatherIssuer`), as the bag sequencer
        does each bag's descriptor (:class:`~hw.emb.bags.BagSequencer`); each FP lane gets
        its own copy of the pooler's operand choice and factor registers, and each 32-bit
        lane of the offset and index line streams its own copy of their read pointer
        (:mod:`hw.fanout`); and the offset, index and weight windows ask for lines from
        registers (:class:`~hw.mem.line_stream.LineStream`, ``registered_fetch``) and land
        their lines under enables decided a cycle ahead (``landing_ahead``), as do the
        prefetches that read lines out of them (``LinePrefetch(registered_issue=)``); a
        sequential MEAN divider finds one quotient bit a cycle, not two; and the issuer's read
        requests pass a skid buffer (:class:`~hw.skid.SkidBuffer`) on their way to the
        reorder buffer, so the memory's ``ready`` no longer reaches the issuer's row queue in
        the same cycle (a cycle more per read), and the memory's read requests leave through
        one (the register they left from before, so no cycle more); and the offsets
        validator compares a registered window and decides each step of its walk a cycle
        ahead, a step every other cycle, still twice the bag sequencer's rate
        (:class:`~hw.emb.validate.OffsetsValidator`, ``registered_window``,
        ``decide_ahead``); with folded lanes the pooler's hazard check is a register
        (:mod:`hw.emb.pool`, ``registered_hazard``); and the command checker's verdict on
        each item is a register (:class:`~hw.emb.checks.CommandChecker`,
        ``registered_verdicts``, a cycle per command). Needs a multiplier of at least two
        stages. Default False.
    lane_fold : int
        Cycles a line takes through the pooler's multiplier and adder, folded
        :class:`~hw.fp.FPLanes` of ``16 / lane_fold`` units each (1, 2, 4, 8 or 16): an FPGA
        build's trade of pooling rate (a line every ``lane_fold`` cycles) for area. Default
        1, a unit per lane; results are the same.

    Members
    -------
    cmd : ``In(stream.Signature(command_layout(addr_width)))``
        Opcodes other than LOOKUP end with BAD_OPCODE.
    done : ``Out(stream.Signature(status_layout()))``
    tables : ``In(data.ArrayLayout(table_layout(addr_width), max_tables))``
    regions : ``In(data.ArrayLayout(region_layout(addr_width), num_regions))``
        Both must hold still while a command runs.
    axi : ``Out(AXI4Signature(addr_width=addr_width, data_width=512, id_width=id_width))``
    counters : ``Out(counters_layout())``
        ``busy_cycles`` (a command in progress), ``rows_read`` (rows gathered),
        ``bytes_read``/``bytes_written`` (R and W beats x 64), ``stall_cycles`` (busy cycles
        with neither an R nor a W beat).
    defer_mean : ``In(1)``
        Sampled with each command: MEAN bags are written as their unscaled sums. A relaxed
        lookup whose correction is still to come (``sw_model.relaxed``, step 4) uses it; the
        update engine scales those bags once their corrections are in.
    mul_lanes, add_lanes : ``In(hw.fp.fp_lanes_signature(op=..., lanes=16))``
        Only with ``shared_lanes=True``: the pooling multiplier and adder are not built here
        but reached through these ports (:class:`~hw.emb.engine.EmbeddingEngine` shares one
        set with the update engine); they must have ``mul_stages``, ``add_stages`` and
        ``lane_fold``.
    """

    def __init__(self, *, max_tables=8, max_dim=128, num_regions=4, addr_width=48, id_width=8,
                 outstanding_reads=128, index_buffer_depth=8192, offset_buffer_depth=2048,
                 output_buffer_depth=128, bag_slots=16, add_stages=None, mul_stages=None,
                 mean_reciprocal="pipelined", fpga_pipelining=False,
                 shared_lanes=False, lane_fold=1):
        self.check_parameters(
            max_tables=max_tables, max_dim=max_dim, num_regions=num_regions,
            addr_width=addr_width, id_width=id_width, outstanding_reads=outstanding_reads,
            index_buffer_depth=index_buffer_depth, offset_buffer_depth=offset_buffer_depth,
            output_buffer_depth=output_buffer_depth, bag_slots=bag_slots,
            add_stages=add_stages, mul_stages=mul_stages, mean_reciprocal=mean_reciprocal,
            fpga_pipelining=fpga_pipelining, lane_fold=lane_fold)
        self._lane_fold = lane_fold
        self._mean_reciprocal = mean_reciprocal
        self._fpga_pipelining = fpga_pipelining
        self._max_tables, self._max_dim, self._num_regions = max_tables, max_dim, num_regions
        self._addr_width, self._id_width, self._outstanding = addr_width, id_width, \
            outstanding_reads
        self._index_depth, self._offset_depth = index_buffer_depth, offset_buffer_depth
        self._output_depth, self._bag_slots = output_buffer_depth, bag_slots
        self._line_bits = max(1, ceil_log2(max_dim // LANES))
        self._add_stages, self._mul_stages = add_stages, mul_stages
        check_bool("Shared lanes", shared_lanes)
        self._shared_lanes = shared_lanes
        lanes = {}
        if shared_lanes:
            lanes = {"mul_lanes": In(fp_lanes_signature(op="mul", lanes=LANES)),
                     "add_lanes": In(fp_lanes_signature(op="add", lanes=LANES))}
        super().__init__({
            **lanes,
            "cmd": In(stream.Signature(command_layout(addr_width))),
            "done": Out(stream.Signature(status_layout())),
            "tables": In(data.ArrayLayout(table_layout(addr_width), max_tables)),
            "regions": In(data.ArrayLayout(region_layout(addr_width), num_regions)),
            "axi": Out(AXI4Signature(addr_width=addr_width, data_width=512, id_width=id_width)),
            "counters": Out(counters_layout()),
            "defer_mean": In(1),
        })

    @staticmethod
    def check_parameters(*, max_tables, max_dim, num_regions, addr_width, id_width,
                         outstanding_reads, index_buffer_depth, offset_buffer_depth,
                         output_buffer_depth, bag_slots, add_stages, mul_stages,
                         mean_reciprocal="pipelined", fpga_pipelining=False, lane_fold=1):
        """Raise ``TypeError``/``ValueError`` naming the first bad parameter (used by the
        constructor and by :class:`~hw.emb.engine.EmbeddingEngine`)."""
        check_int("Maximum table count", max_tables, minimum=1, maximum=255)
        check_int("Maximum dimension", max_dim, minimum=16, maximum=4096, multiple_of=16)
        check_int("Region count", num_regions, minimum=1, maximum=16)
        check_int("Address width", addr_width, minimum=12, maximum=64)
        check_int("ID width", id_width, minimum=1, maximum=16)
        check_int("Outstanding reads", outstanding_reads, minimum=2, power_of_two=True)
        if outstanding_reads + len(_STREAMS) > 2 ** id_width:
            raise ValueError(
                f"Outstanding reads ({outstanding_reads}) plus {len(_STREAMS)} stream IDs need "
                f"more than {id_width} ID bits")
        check_int("Index buffer depth", index_buffer_depth, minimum=32, power_of_two=True)
        check_int("Offset buffer depth", offset_buffer_depth, minimum=32, power_of_two=True)
        check_int("Output buffer depth", output_buffer_depth, minimum=2)
        check_int("Bag slots", bag_slots, minimum=2, maximum=64, power_of_two=True)
        check_stages("Adder", add_stages, FPAdd)
        check_stages("Multiplier", mul_stages, FPMul, minimum=1)
        check_mean_reciprocal(mean_reciprocal)
        check_bool("FPGA pipelining", fpga_pipelining)
        if fpga_pipelining and mul_stages is not None and mul_stages < 2:
            raise ValueError(f"FPGA pipelining needs at least 2 multiplier stages, not "
                             f"{mul_stages}")
        check_fold(lane_fold, lanes=LANES)

    @property
    def max_tables(self):
        return self._max_tables

    @property
    def max_dim(self):
        return self._max_dim

    @property
    def outstanding_reads(self):
        return self._outstanding

    @property
    def index_buffer_depth(self):
        return self._index_depth

    @property
    def offset_buffer_depth(self):
        return self._offset_depth

    @property
    def output_buffer_depth(self):
        return self._output_depth

    @property
    def bag_slots(self):
        return self._bag_slots

    @property
    def pooling_latency(self):
        """Cycles from a line leaving the reorder buffer to its pooled result."""
        mul = FPMul.DEFAULT_STAGES if self._mul_stages is None else self._mul_stages
        add = FPAdd.DEFAULT_STAGES if self._add_stages is None else self._add_stages
        return 1 + folded_latency(mul, self._lane_fold) + folded_latency(add, self._lane_fold)

    @property
    def lane_fold(self):
        return self._lane_fold

    def elaborate(self, platform):
        m = Module()
        aw = self._addr_width
        law = aw - 6
        n_ids = self._outstanding

        m.submodules.checker = checker = CommandChecker(
            max_tables=self._max_tables, max_dim=self._max_dim,
            num_regions=self._num_regions, addr_width=aw,
            registered_verdicts=self._fpga_pipelining)
        # With fpga_pipelining each window's read request comes from flip-flops: its room
        # check was in front of the read-address priority, the reorder buffer's `ready` and
        # the issuer's row queue (the lookup's longest path on the ULX3S).
        windows = {name: LineStream(capacity=depth // LANES, addr_width=law,
                                    registered_fetch=self._fpga_pipelining,
                                    landing_ahead=self._fpga_pipelining)
                   for name, depth in (("offsets", self._offset_depth),
                                       ("indices", self._index_depth),
                                       ("weights", self._index_depth))}
        for name, window in windows.items():
            m.submodules[f"{name}_window"] = window
        # With fpga_pipelining each 32-bit lane of a line is picked by its own pointer copy,
        # and each lane's part of the reorder buffer's lines and of the writer's queue is
        # addressed by its own registers.
        pointer_copies = LANES if self._fpga_pipelining else 1
        prefetch = dict(pointer_copies=pointer_copies, registered_issue=self._fpga_pipelining)
        m.submodules.offsets_check = offsets_check = LinePrefetch(**prefetch)
        m.submodules.offsets_use = offsets_use = LinePrefetch(**prefetch)
        m.submodules.indices_check = indices_check = LinePrefetch(**prefetch)
        m.submodules.offsets_validator = offsets_validator = OffsetsValidator(
            max_tables=self._max_tables, registered_window=self._fpga_pipelining,
            decide_ahead=self._fpga_pipelining, registered_error=self._fpga_pipelining,
            registered_start=self._fpga_pipelining)
        m.submodules.index_validator = index_validator = IndexValidator(
            max_tables=self._max_tables, addr_width=aw,
            replicated_rows=self._fpga_pipelining, registered_error=self._fpga_pipelining)
        m.submodules.bags = bags = BagSequencer(
            max_tables=self._max_tables, addr_width=aw, mean_reciprocal=self._mean_reciprocal,
            registered_descriptor=self._fpga_pipelining,
            reciprocal_steps_per_cycle=1 if self._fpga_pipelining else 2,
            given_entries=True)
        m.submodules.issuer = issuer = GatherIssuer(
            max_tables=self._max_tables, max_dim=self._max_dim, addr_width=aw,
            bag_slots=self._bag_slots, registered_ready=self._fpga_pipelining,
            registered_row_op=self._fpga_pipelining,
            registered_index_address=self._fpga_pipelining)
        m.submodules.reorder = reorder = ReadReorderBuffer(
            depth=n_ids, addr_width=law, data_width=512, context=issuer.op_layout,
            line_slices=LANES if self._fpga_pipelining else None)
        m.submodules.pooler = pooler = Pooler(
            op_layout=issuer.op_layout, slot_bits=exact_log2(self._bag_slots),
            line_bits=self._line_bits, line_addr_width=law, out_depth=self._output_depth,
            add_stages=self._add_stages, mul_stages=self._mul_stages,
            shared_lanes=self._shared_lanes,
            registered_accumulator_read=self._fpga_pipelining,
            lane_replicas=self._fpga_pipelining, lane_fold=self._lane_fold,
            # Free with folded lanes (see Pooler); unfolded it would halve the rate.
            registered_hazard=self._fpga_pipelining and self._lane_fold > 1)
        if self._shared_lanes:
            wiring.connect(m, wiring.flipped(self.mul_lanes), pooler.mul_lanes)
            wiring.connect(m, wiring.flipped(self.add_lanes), pooler.add_lanes)
        # Registered beats, free with folded lanes (a pooled line every second cycle at most).
        m.submodules.writer = writer = LineWriter(
            depth=self._output_depth, addr_width=aw, slices=pointer_copies,
            registered_beats=self._fpga_pipelining and self._lane_fold > 1)

        command = Signal(command_layout(aw))
        defer_mean = Signal()
        # Offsets entries, bags * tables + 1: registered, so the multiplier is in front of no
        # other logic (the fit check, the offsets window and validator, the bag sequencer's
        # count, which synthesis otherwise shares with this one). The product is a register
        # of its own too, loaded every cycle as the count is: the multiplier block then runs
        # from flip-flops into flip-flops, not on into the count's carry chain (12.8 ns in a
        # ULX3S build). The count is first used as the checker passes the command, at least
        # 2 * (max_tables + 5) cycles after the command register loads.
        entries_product = Signal(24)
        entries = Signal(33)
        m.d.sync += [entries_product.eq(command.bags * command.tables),
                     entries.eq(entries_product + 1)]
        offset_lines = (entries + 15) >> 4
        index_lines = (command.num_indices + 15) >> 4
        fits = Signal()
        weighted = Signal()
        keep = Signal()          # the windows feed the gather (else pass 1 only validates)
        index_started = Signal()
        status = Signal(status_layout())
        locate = Signal()        # the error is an index error whose bag is still unknown
        locate_first = Signal(32)  # and the offsets entries of its table (first, end)
        locate_end = Signal(32)
        # Locate's table (an index validator's, below `tables`) and the one after it, in as
        # many bits as max_tables needs: each end is then one multiplier from flip-flops, the
        # end's without an adder of `bags` behind it (13.1 ns in a ULX3S build).
        table_bits = max(1, (self._max_tables - 1).bit_length())
        locate_table_after = Signal(range(self._max_tables + 1))

        # --- static wiring of the data path ---------------------------------------------------
        for table_port in (checker.tables, index_validator.tables, bags.table_config,
                           issuer.table_config):
            m.d.comb += table_port.eq(self.tables)
        m.d.comb += [
            checker.command.eq(command),
            checker.regions.eq(self.regions),
            windows["offsets"].check_addr.eq(offsets_check.addr),
            offsets_check.data.eq(windows["offsets"].check_data),
            offsets_check.limit.eq(windows["offsets"].written),
            windows["offsets"].use_addr.eq(offsets_use.addr),
            offsets_use.data.eq(windows["offsets"].use_data),
            offsets_use.limit.eq(windows["offsets"].written),
            windows["indices"].check_addr.eq(indices_check.addr),
            indices_check.data.eq(windows["indices"].check_data),
            indices_check.limit.eq(windows["indices"].written),
            windows["indices"].use_addr.eq(issuer.index_addr),
            issuer.index_data.eq(windows["indices"].use_data),
            windows["weights"].use_addr.eq(issuer.weight_addr),
            issuer.weight_data.eq(windows["weights"].use_data),
            issuer.weight_limit.eq(windows["weights"].written << 4),
            issuer.index_limit.eq(Mux(keep & index_started, index_validator.checked, 0)),
            bags.limit.eq(Mux(keep, offsets_validator.checked, 0)),
            windows["offsets"].freed.eq(Mux(keep, bags.freed, offsets_validator.lines_done)),
            windows["indices"].freed.eq(Mux(keep, issuer.freed, index_validator.lines_done)),
            windows["weights"].freed.eq(issuer.freed),
            index_validator.table_starts.eq(offsets_validator.table_starts),
            index_validator.num_indices.eq(command.num_indices),
            bags.bags.eq(command.bags),
            bags.tables.eq(command.tables),
            bags.entries.eq(entries),
            bags.output_line.eq(command.output >> 6),
            bags.row_lines.eq(checker.row_floats >> 4),
            offsets_validator.bags.eq(command.bags),
            offsets_validator.tables.eq(command.tables),
            offsets_validator.num_indices.eq(command.num_indices),
            pooler.out_level.eq(writer.level),
        ]
        wiring.connect(m, offsets_check.lines, offsets_validator.lines)
        wiring.connect(m, offsets_use.lines, bags.lines)
        wiring.connect(m, indices_check.lines, index_validator.lines)
        # A deferred lookup (relaxed mode, its correction still to come) leaves MEAN bags
        # unscaled: sum * 1.0 + (-0.0) is the sum bit for bit, so only the factor changes.
        m.d.comb += [
            issuer.descriptors.valid.eq(bags.descriptors.valid),
            issuer.descriptors.payload.eq(bags.descriptors.payload),
            bags.descriptors.ready.eq(issuer.descriptors.ready),
        ]
        with m.If(defer_mean):
            m.d.comb += issuer.descriptors.payload.scale.eq(_FLOAT32_ONE)
        if self._fpga_pipelining:
            # The reorder buffer's `ready` (its room and the memory's `arready`) would
            # otherwise decide, in the same cycle, whether the issuer's row queue advances
            # (its 153 read-port enables led a ULX3S build's lookup paths). A stopped command's
            # request is dropped like the issuer's own: `stop` gates it and clears the buffer.
            request_skid = m.submodules.request_skid = ResetInserter(issuer.start | issuer.stop)(
                SkidBuffer(shape=issuer.requests.payload.shape()))
            wiring.connect(m, issuer.requests, request_skid.i)
            m.d.comb += [
                reorder.request.valid.eq(request_skid.o.valid & ~issuer.stop),
                reorder.request.payload.eq(request_skid.o.payload),
                request_skid.o.ready.eq(reorder.request.ready),
            ]
            requests_idle = request_skid.empty
        else:
            wiring.connect(m, issuer.requests, reorder.request)
            requests_idle = Const(1)
        wiring.connect(m, reorder.pop, pooler.ops)
        wiring.connect(m, pooler.out, writer.lines)

        # --- AXI read address: streams first (validation must never wait), then rows ---------
        axi = self.axi
        ar_layout = data.StructLayout({"id": self._id_width, "line": law})
        sources = [(windows[name].ar, n_ids + k) for k, name in enumerate(_STREAMS)]
        if self._fpga_pipelining:
            # The rows' reads wait in a skid buffer of their own before the choice of source:
            # the reorder buffer's `ready` (and the request skid buffer behind it) then
            # starts at its flip-flop, not at the streams' requests and `stop` ahead of it in
            # the choice (a ULX3S build's worst path, 15.8 ns). A read taken there has its
            # slot and goes out even after `stop`, as one in the register would; Abort waits
            # for the reorder buffer to empty, which it does once the read is answered.
            row_reads = m.submodules.row_reads = SkidBuffer(shape=reorder.ar.payload.shape())
            wiring.connect(m, reorder.ar, row_reads.i)
            sources.append((row_reads.o, None))
        else:
            sources.append((reorder.ar, None))
        if self._fpga_pipelining:
            # The request leaves through a skid buffer in place of the register: the memory's
            # `arready` then stops there, and the choice of source (the windows' and the
            # reorder buffer's handshakes, the windows' counts behind them) starts from its
            # flip-flops, not from the memory's port (a ULX3S build's paths from the port's
            # owner into the windows' counts, 15.1 ns). Same latency; a request more may
            # wait while the memory stalls.
            ar_skid = m.submodules.ar_skid = SkidBuffer(shape=ar_layout)
            ar_request, load = ar_skid.i.payload, ar_skid.i.ready
            m.d.comb += ar_skid.o.ready.eq(axi.arready)
        else:
            ar_valid = Signal()
            ar_request = Signal(ar_layout)
            load = ~ar_valid | axi.arready
        higher = Const(0, 1)
        for source, fixed_id in sources:
            m.d.comb += source.ready.eq(load & ~higher)
            chosen = [ar_request.id.eq(fixed_id if fixed_id is not None else source.payload.id),
                      ar_request.line.eq(source.payload.addr)]
            if self._fpga_pipelining:  # (the skid buffer takes it only when ready)
                with m.If(source.valid & ~higher):
                    m.d.comb += chosen
            else:
                with m.If(load & source.valid & ~higher):
                    m.d.sync += chosen
            higher = higher | source.valid
        if self._fpga_pipelining:
            m.d.comb += ar_skid.i.valid.eq(higher)
            ar_valid, ar_request = ar_skid.o.valid, ar_skid.o.payload
        else:
            with m.If(load):
                m.d.sync += ar_valid.eq(higher)
        m.d.comb += [
            axi.arvalid.eq(ar_valid),
            axi.arid.eq(ar_request.id),
            axi.araddr.eq(ar_request.line << 6),
            axi.arlen.eq(0),
            axi.arsize.eq(6),
            axi.arburst.eq(1),  # INCR
        ]

        # --- AXI read data: always accepted (every read has room reserved), then routed -------
        r_id = Signal(self._id_width)
        r_data = Signal(512)
        r_error = Signal()
        # Who a response is for is decided as it is registered: the reorder buffer's and the
        # windows' write enables then come straight from flip-flops.
        r_for_reorder = Signal()
        r_for_stream = Signal(len(_STREAMS))
        for_stream = Signal(len(_STREAMS))  # what `r_for_stream` is loaded with
        m.d.comb += [axi.rready.eq(1),
                     for_stream.eq(Cat(axi.rvalid & (axi.rid == n_ids + k)
                                       for k in range(len(_STREAMS))))]
        m.d.sync += [r_id.eq(axi.rid), r_data.eq(axi.rdata),
                     r_error.eq(axi.rresp != 0),
                     r_for_reorder.eq(axi.rvalid & (axi.rid < n_ids)),
                     r_for_stream.eq(for_stream)]
        m.d.comb += [
            reorder.response.valid.eq(r_for_reorder),
            reorder.response.payload.id.eq(r_id),
            reorder.response.payload.data.eq(r_data),
            reorder.response.payload.error.eq(r_error),
        ]
        for k, name in enumerate(_STREAMS):
            if self._fpga_pipelining:
                m.d.comb += windows[name].response_ahead.eq(for_stream[k])
            m.d.comb += [
                windows[name].response.valid.eq(r_for_stream[k]),
                windows[name].response.payload.data.eq(r_data),
                windows[name].response.payload.error.eq(r_error),
            ]

        # --- AXI writes ----------------------------------------------------------------------
        m.d.comb += [
            axi.awvalid.eq(writer.aw.valid),
            writer.aw.ready.eq(axi.awready),
            axi.awaddr.eq(writer.aw.payload.addr),
            axi.awid.eq(0),
            axi.awlen.eq(0),
            axi.awsize.eq(6),
            axi.awburst.eq(1),
            axi.wvalid.eq(writer.w.valid),
            writer.w.ready.eq(axi.wready),
            axi.wdata.eq(writer.w.payload.data),
            axi.wstrb.eq(-1),
            axi.wlast.eq(1),
            writer.b.valid.eq(axi.bvalid),
            writer.b.payload.resp.eq(axi.bresp),
            axi.bready.eq(writer.b.ready),
        ]

        # --- errors, in the order they are reported when several appear together -------------
        bus_error = (windows["offsets"].error | windows["indices"].error
                     | windows["weights"].error | pooler.error | writer.error)
        found = Signal(ERROR_LAYOUT)
        with m.If(bus_error):
            m.d.comb += found.code.eq(ErrorCode.BUS_ERROR)
        with m.Elif(offsets_validator.error.code != ErrorCode.NONE):
            m.d.comb += found.eq(offsets_validator.error)
        with m.Elif(index_started & (index_validator.error.code != ErrorCode.NONE)):
            m.d.comb += found.eq(index_validator.error)
        with m.Elif(issuer.error.code != ErrorCode.NONE):
            m.d.comb += found.eq(issuer.error)
        # Whether any source failed, as an OR of their flags rather than the code the
        # priority chose: the state's next value and its enables then wait for one OR, not
        # for the priority's multiplexers (a ULX3S build's path into the control state).
        failed = (bus_error | (offsets_validator.error.code != ErrorCode.NONE)
                  | (index_started & (index_validator.error.code != ErrorCode.NONE))
                  | (issuer.error.code != ErrorCode.NONE))
        # The error is recorded a cycle after it stops the pass, in Abort's first cycle, from
        # a register loaded every cycle: the priority then reaches the state and two
        # flip-flops, not the enables of the status fields behind it (19 ns in the netlist).
        # Abort lasts that cycle at least, so Locate reads the recorded table.
        found_then = Signal(ERROR_LAYOUT)
        recording = Signal()             # Abort's first cycle: record `found_then`
        locate_then = Signal()           # the error stops the validation (Locate may follow)
        m.d.sync += found_then.eq(found)

        def start_window(name, first_line, lines):
            m.d.comb += [windows[name].start.eq(1),
                         windows[name].base.eq((getattr(command, name) >> 6) + first_line),
                         windows[name].count.eq(lines)]

        def start_offsets_validator(mode, *, capture, first, end, threshold=0):
            m.d.comb += [offsets_validator.mode.eq(mode),
                         offsets_validator.capture.eq(capture),
                         offsets_validator.first.eq(first), offsets_validator.end.eq(end),
                         offsets_validator.threshold.eq(threshold),
                         offsets_check.first.eq(0)]

        def start_pass(*, keep_data, capture):
            start_window("offsets", 0, offset_lines)
            start_window("indices", 0, index_lines)
            start_window("weights", 0, Mux(keep_data & weighted, index_lines, 0))
            start_offsets_validator(OffsetsMode.CHECK, capture=capture, first=0, end=entries)
            m.d.comb += [indices_check.restart.eq(1), indices_check.first.eq(0),
                         offsets_use.restart.eq(1), offsets_use.first.eq(0),
                         bags.start.eq(1), issuer.start.eq(1)]

        streams_idle = (windows["offsets"].idle & windows["indices"].idle
                        & windows["weights"].idle)
        all_quiet = (streams_idle & reorder.empty & pooler.idle & writer.idle
                     & (axi.arvalid == 0))
        # Pass 2 starts from a register: the streams' 32-bit idle comparisons would otherwise
        # sit in front of every start input (the validators', windows', bag sequencer's and
        # issuer's registers). Idle with no read requested stays so until a start, so the
        # value sampled in Rewind a cycle earlier still holds.
        streams_quiet = streams_idle & ~Cat(window.ar.valid for window in windows.values()).any()
        # Each pass, and Locate's count, starts from a flip-flop set the cycle before, not
        # from the state's decode: the start reaches hundreds of enables in the validators,
        # windows, bag sequencer and issuer (the state decode, the OR of the start conditions
        # and the offsets validator's table enable were the netlist's longest lookup path).
        pass_begins = Signal()   # a pass starts this cycle ...
        first_pass = Signal()    # ... the first (it captures the table starts)
        locate_begins = Signal()  # Locate's count starts this cycle
        # Either of them, a register of its own (set with them): the offsets validator's and
        # its prefetch's start, which reach the validator's every register and the prefetch's
        # `lines_left`, then leave a flip-flop, not a LUT of the two (a ULX3S build's paths into
        # the prefetch's `lines_left` and the validator's `active` and cursor).
        offsets_begins = Signal()
        m.d.sync += [pass_begins.eq(0), locate_begins.eq(0), offsets_begins.eq(0)]
        m.d.comb += [offsets_validator.start.eq(offsets_begins),
                     offsets_check.restart.eq(offsets_begins)]
        with m.If(pass_begins):
            start_pass(keep_data=fits | ~first_pass, capture=first_pass)
        with m.If(locate_begins):
            # Count the table's bag starts at or below the index position: that is the bag.
            first_line = locate_first >> 4
            last_line = (locate_end + 15) >> 4
            start_window("offsets", first_line, last_line - first_line)
            start_offsets_validator(OffsetsMode.COUNT, capture=0, first=locate_first,
                                    end=locate_end, threshold=status.position)
        # In state Abort, from a flip-flop of its own rather than the state's decode: the
        # windows' `stop` is in front of the read-address priority, the reorder buffer's
        # `ready` and what it allocates (a ULX3S build's lookup paths, 15 ns).
        aborting = Signal()
        m.d.comb += [issuer.stop.eq(aborting), pooler.discard.eq(aborting),
                     writer.flush.eq(aborting)]
        for window in windows.values():
            m.d.comb += window.stop.eq(aborting)

        units_done = (offsets_validator.done & index_validator.done & bags.done
                      & issuer.idle & requests_idle)
        finished = units_done & all_quiet
        quiet = all_quiet
        if self._fpga_pipelining:
            # Gather's end and Abort's wait for quiet follow registers: `finished` and
            # `all_quiet` as they were a cycle before, in the same state (nothing starts in
            # either, so what was done stays done; Gather's first cycle does not look at the
            # state before it). The control state's enables then wait for flip-flops, not for
            # every unit's idle and done (a ULX3S build's paths into the state register). A
            # cycle more per command. `finished` is the AND of two of them, the units' done
            # (in Gather) and `quiet_then`, so the quiet test's wide AND is in front of one
            # register only (both into one were a 12.6 ns path in a ULX3S build).
            units_done_then = Signal()
            quiet_then = Signal()
            finished, quiet = units_done_then & quiet_then, quiet_then
        with m.FSM(name="control") as fsm:
            with m.State("Idle"):
                m.d.comb += self.cmd.ready.eq(1)
                # The command's registers load every cycle in Idle, so the last load is the
                # command taken as Idle ends: their 200-odd enables (and the status's
                # reset) then follow the state alone, not the dispatcher's `valid` and
                # opcode decode behind it (a ULX3S build's netlist path).
                payload = self.cmd.payload
                m.d.sync += [
                    command.eq(payload),
                    defer_mean.eq(self.defer_mean),
                    status.eq(status_layout().const({})),
                    status.opcode.eq(payload.opcode),
                    status.batch.eq(payload.batch),
                    locate.eq(0),
                ]
                with m.If(self.cmd.valid):
                    with m.If(payload.opcode == Opcode.LOOKUP):
                        m.next = "Check"
                    with m.Else():
                        m.d.sync += status.error.eq(ErrorCode.BAD_OPCODE)
                        m.next = "Done"
            with m.State("Check"):
                # First cycle: the command register is loaded; start the checker.
                m.d.comb += checker.start.eq(1)
                m.next = "Checking"
            with m.State("Checking"):
                with m.If(checker.done):
                    with m.If(checker.error != ErrorCode.NONE):
                        m.d.sync += [status.error.eq(checker.error),
                                     status.table.eq(checker.table)]
                        m.next = "Done"
                    with m.Else():
                        fits_now = ((entries <= self._offset_depth)
                                    & (command.num_indices <= self._index_depth))
                        m.d.sync += [fits.eq(fits_now), weighted.eq(checker.weighted),
                                     keep.eq(fits_now), index_started.eq(0)]
                        m.d.comb += [pooler.start.eq(1), writer.start.eq(1)]
                        m.d.sync += [pass_begins.eq(1), first_pass.eq(1),
                                     offsets_begins.eq(1)]
                        m.next = "Start"
            with m.State("Start"):
                m.next = "Validate"  # (the first pass starts: pass_begins)
            with m.State("Validate"):
                # The index validator starts whatever `failed` says: its start (which loads
                # its table registers and their per-lane copies) then comes from flip-flops,
                # not from the error priority above (the lookup's longest path on a ULX3S).
                # Starting it as the command fails is harmless: its errors count only once
                # index_started is set, which the next command clears, and Abort waits for
                # nothing it does.
                with m.If(offsets_validator.done & ~index_started):
                    m.d.comb += index_validator.start.eq(1)
                    m.d.sync += index_started.eq(1)
                with m.If(failed):
                    m.d.sync += [recording.eq(1), locate_then.eq(1), aborting.eq(1)]
                    m.next = "Abort"
                with m.Elif(offsets_validator.done & index_started & index_validator.done):
                    with m.If(fits):
                        m.next = "Gather"
                    with m.Else():
                        m.next = "Rewind"
            with m.State("Rewind"):
                # Pass 2: stream everything again, now into the gather.
                with m.If(pass_begins):
                    m.d.comb += index_validator.start.eq(1)
                    m.d.sync += keep.eq(1)
                    m.next = "Gather"
                with m.Else():
                    m.d.sync += [pass_begins.eq(streams_quiet), first_pass.eq(0),
                                 offsets_begins.eq(streams_quiet)]
            with m.State("Gather"):
                m.d.comb += writer.enable.eq(1)
                with m.If(failed):
                    m.d.sync += [recording.eq(1), locate_then.eq(0), aborting.eq(1)]
                    m.next = "Abort"
                with m.Elif(finished):
                    m.next = "Done"
            with m.State("Abort"):
                m.d.sync += recording.eq(0)
                with m.If(recording):
                    m.d.sync += [
                        status.error.eq(found_then.code), status.table.eq(found_then.table),
                        status.bag.eq(found_then.bag), status.position.eq(found_then.position),
                        locate.eq(locate_then & (found_then.code == ErrorCode.INDEX_OUT_OF_RANGE)),
                    ]
                with m.Elif(quiet):
                    m.d.sync += aborting.eq(0)
                    with m.If(locate):
                        m.d.sync += [locate_begins.eq(1), offsets_begins.eq(1)]
                        m.next = "Locate"
                    with m.Else():
                        m.next = "Done"
            with m.State("Locate"):
                m.d.sync += keep.eq(0)  # (the count starts: locate_begins)
                m.next = "Counting"
            with m.State("Counting"):
                with m.If(offsets_validator.done & windows["offsets"].idle):
                    with m.If(windows["offsets"].error):
                        m.d.sync += [status.error.eq(ErrorCode.BUS_ERROR), status.table.eq(0),
                                     status.position.eq(0)]
                    with m.Else():
                        m.d.sync += status.bag.eq(offsets_validator.count - 1)
                    m.next = "Done"
            with m.State("Done"):
                m.d.comb += self.done.valid.eq(1)
                with m.If(self.done.ready):
                    m.next = "Idle"
        # The failing table's offsets entries, for Locate, into registers: the multiplier is
        # then not in front of the window's and the validator's start arithmetic (a ULX3S
        # build's longest path). The error is recorded in Abort's first cycle (`recording`,
        # set only as Abort begins), which never leaves, so they are final by Locate. Loaded
        # every cycle, not in Abort alone: their 64 enables are not the state's decode.
        m.d.sync += [locate_first.eq(status.table[:table_bits] * command.bags),
                     locate_end.eq(locate_table_after * command.bags)]
        with m.If(recording):
            m.d.sync += locate_table_after.eq(found_then.table[:table_bits] + 1)
        # The status register in every state (it counts only with `valid`, in Done), not
        # behind the state's decode into the device's status skid buffer.
        m.d.comb += self.done.payload.eq(status)

        if self._fpga_pipelining:
            m.d.sync += [
                units_done_then.eq(fsm.ongoing("Gather") & units_done),
                quiet_then.eq(all_quiet),  # (read after Abort's first cycle, which records)
            ]

        # --- performance counters --------------------------------------------------------------
        busy = ~fsm.ongoing("Idle")
        read_beat = axi.rvalid & axi.rready
        write_beat = writer.beat_written
        counters = self.counters
        with m.If(busy):
            m.d.sync += counters.busy_cycles.eq(counters.busy_cycles + 1)
            with m.If(~read_beat & ~write_beat):
                m.d.sync += counters.stall_cycles.eq(counters.stall_cycles + 1)
        with m.If(issuer.row_issued):
            m.d.sync += counters.rows_read.eq(counters.rows_read + 1)
        with m.If(read_beat):
            m.d.sync += counters.bytes_read.eq(counters.bytes_read + 64)
        with m.If(write_beat):
            m.d.sync += counters.bytes_written.eq(counters.bytes_written + 64)
        return m

