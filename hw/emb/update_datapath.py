"""The update engine's arithmetic: gradient accumulation and the SGD step, on shared FP lanes.

Both jobs are "multiply, then add" on 16-float lines, so one :class:`~hw.fp.FPLanes` multiplier
and one adder serve both, one job at a time (the engine never overlaps them):

* accumulate (per gradient line of an occurrence):
  ``acc[slot, line] = (fresh ? +0.0 : acc[slot, line]) + grad_line * scale``;
* apply (per line of a row of the chunk): ``row_line - lr * acc[slot, line]``, to be written;
  with ``keep_deltas`` the new line minus the old one then replaces ``acc[slot, line]``
  (``sw_model.relaxed``, step 1: what the row changed by), on the shared adder or, with
  ``delta_lanes``, on sixteen adder lanes of its own;
* correct (a relaxed lookup's bags, each held in ``lines_per_slot`` accumulator registers of
  one of ``correction_contexts`` contexts; on the shared units or, with ``correction_lanes``,
  on a multiplier and an adder of their own, so a chunk's correction runs beside its apply):
  ``bag[line] = bag[line] + delta[slot, line] * factor``; ``bag[line] = bag[line] * (1/L)``
  for MEAN (as ``product + (-0.0)``, exact); load and store a bag, from and to memory or
  the bag store (``cached_bags`` bags kept on chip between the correction passes of one
  UPDATE, so a bag corrected after every chunk goes through memory once).

A bag's corrections form a chain (each adds to the previous sum, ``add latency + 1`` cycles
apart), so one bag at a time would keep the adder idle most of the time. Each context has its
own queue of ops, run in order; the contexts take the adder in turn, so up to
``correction_contexts`` bags' chains interleave while each bag keeps the order of its own
additions (the bit-exact contract of ``sw_model.relaxed``).

The gradient buffer holds ``capacity`` slots of ``max_dim / 16`` lines. An accumulation reads
its slot's line when the product leaves the multiplier and writes the sum when it leaves the
adder, so a second contribution to the same line must not enter within ``add latency + 1`` cycles
of the first (it would read the sum before it is written): a short window of recent addresses
stalls it.
"""

from types import SimpleNamespace

from amaranth.hdl import Array, Cat, Const, Module, Mux, Shape, Signal, unsigned
from amaranth.lib import data, enum, fifo, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from hw.fanout import LANE_GROUPS, lane_copies, replicated_register, staged_copies
from hw.fp import FPAdd, FPLanes, FPMul, fp_lanes_signature
from hw.fp.common import check_stages
from hw.fp.lanes import check_fold, folded_latency
from hw.mem.sliced_fifo import SlicedFIFO
from hw.params import check_bool

from .update_fetch import row_context_layout
from .update_reads import LINE_BITS

__all__ = ["CorrectionKind", "UpdateDatapath", "correction_op_layout"]

_LANES = 16
#: Up to this many buffer lines, whether a line is still being summed is a register per line.
_BUSY_MAP_LINES = 16
_NEGATIVE_ZERO_LINE = Const(int("80000000" * _LANES, 16), 32 * _LANES)


class CorrectionKind(enum.Enum, shape=2):
    """What one correction op does to the bag registers, over the op's ``lines``."""
    # LOAD and STORE run after every earlier op of their context has finished; with ``cached``
    # they read and write the bag store's entry ``bag`` instead of memory.
    LOAD = 0     # take the lines from ``bag_lines`` (or the bag store)
    CORRECT = 1  # bag[l] = bag[l] + delta[slot, l] * factor
    SCALE = 2    # bag[l] = bag[l] * factor (after every CORRECT has finished)
    STORE = 3    # write bag[l] to line ``address + l`` (or to the bag store)


class _Job(enum.Enum, shape=3):
    """What an operation in the shared multiplier and adder is for (carried in the tags)."""
    ACCUMULATE = 0
    APPLY = 1
    DELTA = 2
    CORRECT = 3
    SCALE = 4


def correction_op_layout(*, slot_width, line_width, line_address_width, bag_width,
                         context_width=1):
    return data.StructLayout({
        "kind": CorrectionKind,
        "context": unsigned(context_width),
        "cached": 1,
        "bag": unsigned(bag_width),
        "slot": unsigned(slot_width),
        "lines": unsigned(line_width),
        "factor": 32,
        "address": unsigned(line_address_width),
    })


class UpdateDatapath(wiring.Component):
    """Gradient buffer plus the shared multiplier and adder (module docstring).

    Parameters
    ----------
    capacity : int
        Slots (distinct rows per chunk).
    lines_per_slot : int
        ``max_dim / 16``.
    line_address_width : int
        Width of a row line address.
    mul_stages, add_stages : int or None
        Register stages of the FP units (``None``: their defaults).
    write_depth : int or None
        Depth of the output queue of finished row lines; apply work is admitted only while
        the queue has room for everything in flight. At least ``apply_latency + 3`` (the
        default, or 16 if more).
    shared_lanes : bool
        The multiplier and adder are built elsewhere and reached through ``mul_lanes`` and
        ``add_lanes`` (with ``mul_stages`` and ``add_stages`` and the tag widths
        :meth:`tag_layouts` gives); default False (built here).
    cached_bags : int
        Entries of the bag store (``lines_per_slot`` lines each) for LOAD and STORE ops with
        ``cached``; 0 (the default): none, every bag goes through memory.
    corrections : bool
        Build the correction of a relaxed lookup (default True). Without it there are no
        ``keep_deltas``, ``correction``, ``bag_lines`` and ``correction_idle`` ports, no bag
        registers and no ``new - old`` path, and ``cached_bags`` must be 0.
    correction_contexts : int
        Bags corrected at once, 1..``capacity`` (default 1): each has ``lines_per_slot`` bag
        registers and a queue of ``correction_queue_depth`` ops (module docstring).
    correction_queue_depth : int
        Ops each context's queue holds, 2..4096 (default 16).
    delta_lanes : bool
        Apply's ``new - old`` runs on sixteen adder lanes of its own, so apply takes a row line
        every cycle with ``keep_deltas`` too (default False: it takes the shared adder a
        second time, one line every other cycle). Needs ``corrections``.
    correction_lanes : bool
        The correction's ``delta * factor`` and ``bag + product`` run on a multiplier and an
        adder of their own (sixteen lanes each), so correction ops may run while apply does: a
        CORRECT line waits only until apply has written its delta (apply writes the deltas in
        slot order), and a STORE to memory takes the write queue in a cycle apply leaves free
        (default False: the correction takes the shared units, after apply). Needs
        ``delta_lanes``.
    lane_replicas : bool
        Each multiplier and adder lane chooses its operands with its own copies of the
        registers that choose them (:func:`hw.fanout.lane_copies`), and each lane's part of the
        write queue has its own write enable and pointers
        (:class:`~hw.mem.sliced_fifo.SlicedFIFO`), for FPGA builds (default False).
    lane_fold : int
        The multiplier and adder are folded :class:`~hw.fp.FPLanes` (``16 / lane_fold``
        units each, a line over ``lane_fold`` cycles; built here or, with ``shared_lanes``,
        elsewhere with the same fold): accumulation and apply issue a line at most once in
        ``lane_fold`` cycles, and :attr:`mul_latency` and :attr:`add_latency` count the
        lanes' ``lane_fold`` cycles more (:func:`~hw.fp.lanes.folded_latency`). An FPGA
        build's trade of rate for area; only without ``corrections`` (default 1, a unit per
        lane).
    registered_operands : bool
        The multiplier's operands (chosen lane by lane) pass a register before the
        multiplier, so that a choice's inputs from across the engine reach the lanes in a
        cycle of their own (default False). :attr:`mul_latency` counts it.
    registered_writes : bool
        Each lane's part of the gradient buffer is written a cycle after its sum, from
        registers of its own (enable, address and data), so the adder's result valid and tag
        reach no LUT-RAM write port across the die (default False). Needs ``lane_replicas``
        and ``read_port_per_use`` (the buffer a memory per lane, whose reads see a write of
        the cycle before: the :attr:`hazard_window` covers the later write), and no
        ``corrections`` (their deltas are read as soon as written).
    read_port_per_use : bool
        The gradient buffer has a read port for each of its readers (accumulation, apply,
        correction), each addressed by its own source, instead of one port whose address is
        chosen by which of them reads: the multiplier's result valid then steers no address
        across the whole buffer (default False). An FPGA stores the buffer once per port;
        timing and results are the same.

    Members
    -------
    accumulate : ``In(stream.Signature({"slot", "fresh": 1, "scale": 32, "lines"}))``
        Occurrences with their slot; each takes ``lines`` lines from ``gradient``.
    gradient : ``In(stream.Signature(512))``
        Gradient lines in occurrence order.
    rows : ``In(stream.Signature(512))``, row_context : ``In(stream.Signature(...))``
        Row lines of the chunk and, in step, their slot, line and write-back address.
    lr : ``In(32)``
        The learning rate (binary32).
    writes : ``Out(stream.Signature({"address", "data": 512}))``
        Updated row lines.
    accumulate_idle, apply_idle : ``Out(1)``
        No work of that kind is in flight (the buffer is settled).
    writes_queued : ``Out(1)``
        Finished row lines wait in the write queue (counted by level: the queue's ``valid``
        lags a write by a cycle or two).
    keep_deltas : ``In(1)`` (with ``corrections``)
        Apply also stores ``new - old`` per line in the gradient buffer (hold it for the whole
        command). Without ``delta_lanes`` a line then takes the adder twice, so apply admits
        one only when both of its adder cycles are free: at least one line every other
        cycle.
    correction : ``In(stream.Signature(correction_op_layout(...)))`` (with ``corrections``)
        Correction ops (:class:`CorrectionKind`), each queued for its ``context``; a context
        runs its ops in order, one line per cycle. LOAD ops must go to the contexts in turn
        (0, 1, ..., ``correction_contexts - 1``, 0, ...): their lines arrive in that order.
    bag_lines : ``In(stream.Signature(512))``
        Lines for LOAD ops not from the bag store, in LOAD order.
    correction_idle : ``Out(1)``
        No correction op waits or is in flight.
    """

    def __init__(self, *, capacity, lines_per_slot, line_address_width, mul_stages=None,
                 add_stages=None, write_depth=None, shared_lanes=False, cached_bags=0,
                 corrections=True, correction_contexts=1, correction_queue_depth=16,
                 delta_lanes=False, correction_lanes=False, lane_replicas=False,
                 registered_operands=False, read_port_per_use=False, lane_fold=1,
                 registered_writes=False):
        if cached_bags and not corrections:
            raise ValueError(f"A bag store needs the corrections: cached_bags must be 0 "
                             f"without them, not {cached_bags!r}")
        if (not isinstance(correction_contexts, int) or isinstance(correction_contexts, bool)
                or not 1 <= correction_contexts <= capacity):
            raise ValueError(f"Correction contexts must be an integer in 1..{capacity} (the "
                             f"capacity), not {correction_contexts!r}")
        if (not isinstance(correction_queue_depth, int)
                or isinstance(correction_queue_depth, bool)
                or not 2 <= correction_queue_depth <= 4096):
            raise ValueError(f"Correction queue depth must be an integer in 2..4096, not "
                             f"{correction_queue_depth!r}")
        if not isinstance(delta_lanes, bool):
            raise TypeError(f"Delta lanes must be a bool, not {delta_lanes!r}")
        if delta_lanes and not corrections:
            raise ValueError("Delta lanes need the corrections: delta_lanes must be False "
                             "without them")
        self._delta_lanes = delta_lanes
        if not isinstance(correction_lanes, bool):
            raise TypeError(f"Correction lanes must be a bool, not {correction_lanes!r}")
        if correction_lanes and not delta_lanes:
            raise ValueError("Correction lanes need the delta lanes: delta_lanes must be True "
                             "with correction_lanes")
        self._correction_lanes = correction_lanes
        self._fold = check_fold(lane_fold, lanes=_LANES)
        if self._fold > 1 and corrections:
            raise ValueError(f"Folded lanes take no correction: lane_fold must be 1 with "
                             f"corrections, not {lane_fold!r}")
        self._lane_replicas = bool(lane_replicas)
        self._registered_operands = bool(registered_operands)
        self._read_port_per_use = bool(read_port_per_use)
        self._registered_writes = check_bool("Registered writes", registered_writes)
        if registered_writes and not (lane_replicas and read_port_per_use and not corrections):
            raise ValueError("Registered writes need lane_replicas and read_port_per_use, "
                             "and no corrections")
        self._contexts = correction_contexts
        self._queue_depth = correction_queue_depth
        self._corrections = bool(corrections)
        self._capacity = capacity
        self._cached_bags = cached_bags
        self._lines_per_slot = lines_per_slot
        self._line_address_width = line_address_width
        self._mul_stages = check_stages(mul_stages, default=FPMul.DEFAULT_STAGES,
                                        maximum=len(FPMul.CUTS) - 1)
        self._add_stages = check_stages(add_stages, default=FPAdd.DEFAULT_STAGES,
                                        maximum=len(FPAdd.CUTS) - 1)
        if write_depth is None:
            write_depth = max(16, self.apply_latency + 3)
        if write_depth < self.apply_latency + 3:
            raise ValueError(f"Write queue depth must be at least {self.apply_latency + 3}, "
                             f"not {write_depth!r}")
        self._write_depth = write_depth
        self._slot_width = Shape.cast(range(capacity)).width
        self._line_width = unsigned(lines_per_slot).width
        self._mul_tag, self._add_tag = self.tag_layouts(
            capacity=capacity, lines_per_slot=lines_per_slot,
            line_address_width=line_address_width)
        self._shared_lanes = bool(shared_lanes)
        lanes = {}
        if self._shared_lanes:
            lanes = {"mul_lanes": In(fp_lanes_signature(op="mul", lanes=_LANES,
                                                        tag_width=self._mul_tag.size)),
                     "add_lanes": In(fp_lanes_signature(op="add", lanes=_LANES,
                                                        tag_width=self._add_tag.size))}
        correction_ports = {}
        if self._corrections:
            correction_ports = {
                "keep_deltas": In(1),
                "correction": In(stream.Signature(correction_op_layout(
                    slot_width=self._slot_width, line_width=self._line_width,
                    line_address_width=line_address_width, bag_width=self.bag_width,
                    context_width=self.context_width))),
                "bag_lines": In(stream.Signature(LINE_BITS)),
                "correction_idle": Out(1),
            }
        super().__init__({
            **lanes,
            **correction_ports,
            "accumulate": In(stream.Signature(data.StructLayout({
                "slot": unsigned(self._slot_width), "fresh": 1, "scale": 32,
                "lines": unsigned(self._line_width)}))),
            "gradient": In(stream.Signature(LINE_BITS)),
            "rows": In(stream.Signature(LINE_BITS)),
            "row_context": In(stream.Signature(row_context_layout(
                slot_width=self._slot_width, line_width=self._line_width,
                line_address_width=line_address_width))),
            "lr": In(32),
            "writes": Out(stream.Signature(data.StructLayout({
                "address": line_address_width, "data": LINE_BITS}))),
            "accumulate_idle": Out(1),
            "apply_idle": Out(1),
            "writes_queued": Out(1),
        })

    @staticmethod
    def tag_layouts(*, capacity, lines_per_slot, line_address_width):
        """The tags the multiplier and the adder carry (what shared lanes must be built
        with): ``(mul_tag, add_tag)``."""
        buffer_address = Shape.cast(range(capacity * lines_per_slot))
        mul_tag = data.StructLayout({
            "job": _Job, "fresh": 1, "buffer": buffer_address,
            "row": LINE_BITS, "address": line_address_width,
        })
        # ``row`` (the old line) rides through the adder too, for apply's ``new - old``.
        add_tag = data.StructLayout({
            "job": _Job, "buffer": buffer_address, "row": LINE_BITS,
            "address": line_address_width,
        })
        return mul_tag, add_tag

    @property
    def buffer_lines(self):
        return self._capacity * self._lines_per_slot

    @property
    def cached_bags(self):
        return self._cached_bags

    @property
    def corrections(self):
        """Whether the correction of a relaxed lookup is built."""
        return self._corrections

    @property
    def correction_contexts(self):
        """Bags whose corrections interleave."""
        return self._contexts

    @property
    def correction_queue_depth(self):
        return self._queue_depth

    @property
    def delta_lanes(self):
        """Whether apply's ``new - old`` has adder lanes of its own."""
        return self._delta_lanes

    @property
    def correction_lanes(self):
        """Whether the correction has a multiplier and an adder of its own."""
        return self._correction_lanes

    @property
    def context_width(self):
        """Width of an op's ``context``."""
        return Shape.cast(range(max(2, self._contexts))).width

    @property
    def bag_width(self):
        """Width of an op's ``bag`` (a bag store entry)."""
        return Shape.cast(range(max(1, self._cached_bags))).width

    @property
    def mul_latency(self):
        """Cycles from choosing the multiplier's operands to its product: the multiplier's
        stages, plus the operand register with ``registered_operands``."""
        return folded_latency(self._mul_stages, self._fold) + self._registered_operands

    @property
    def add_latency(self):
        """Cycles from the adder's operands to its sum: its stages, plus ``lane_fold`` when
        folded."""
        return folded_latency(self._add_stages, self._fold)

    @property
    def lane_fold(self):
        return self._fold

    @property
    def hazard_window(self):
        """Cycles after an accumulation during which the same line cannot enter again."""
        return self.add_latency + 1

    @property
    def accumulate_latency(self):
        """Cycles from an accumulation entering to its sum being written."""
        return self.mul_latency + 1 + self.add_latency + self._registered_writes

    @property
    def apply_latency(self):
        """Cycles from taking a row line to its result entering the write queue."""
        return self.apply_latency_of(mul_latency=self.mul_latency, add_latency=self.add_latency)

    @staticmethod
    def apply_latency_of(*, mul_latency, add_latency):
        """:attr:`apply_latency` for these latencies, before a datapath is made (the least
        write queue depth is this + 3)."""
        return 1 + mul_latency + 1 + add_latency

    def elaborate(self, platform):
        m = Module()
        buffer_address = Shape.cast(range(self.buffer_lines))
        mul_tag, add_tag = self._mul_tag, self._add_tag
        lps = self._lines_per_slot
        if self._shared_lanes:
            multiplier, adder = self.mul_lanes, self.add_lanes  # (used as a unit's ports)
        else:
            multiplier = m.submodules.multiplier = FPLanes(
                op="mul", lanes=_LANES, stages=self._mul_stages, tag_width=mul_tag.size,
                fold=self._fold)
            adder = m.submodules.adder = FPLanes(
                op="add", lanes=_LANES, stages=self._add_stages, tag_width=add_tag.size,
                fold=self._fold)
        # With lane_replicas (and a port per use) apply and accumulate read their own copy of
        # the buffer, a memory per lane read asynchronously at copies of the registered
        # address: one read address for the whole line reaches every LUT-RAM cell of it, a
        # net over the die (20 ns of routing in a ULX3S build). The line-wide buffer is then
        # only there for the corrections' reads.
        apply_per_lane = self._read_port_per_use and self._lane_replicas
        if apply_per_lane and not self._corrections:
            buffer_write = SimpleNamespace(en=Signal(name="buffer_write_en"),
                                           addr=Signal(buffer_address, name="buffer_write_addr"),
                                           data=Signal(LINE_BITS, name="buffer_write_data"))
        else:
            buffer = m.submodules.buffer = Memory(shape=LINE_BITS, depth=self.buffer_lines,
                                                  init=[])
            buffer_write = buffer.write_port()
        # Not transparent: a sum is read at least one cycle after it was written (the hazard
        # window covers the write cycle too).
        # (With correction lanes the correction reads while apply does: a port of its own.)
        if apply_per_lane:
            accumulate_read = apply_read = None
            correct_read = buffer.read_port() if self._corrections else None
        elif self._read_port_per_use:
            accumulate_read, apply_read = buffer.read_port(), buffer.read_port()
            correct_read = buffer.read_port() if self._corrections else None
        else:
            accumulate_read = apply_read = correct_read = buffer.read_port()
            if self._correction_lanes:
                correct_read = buffer.read_port()
        # With lane_replicas each FP lane's part of the queue has its own write enable and
        # pointers (hw.mem.sliced_fifo).
        writes = m.submodules.writes = SlicedFIFO(
            width=self.writes.payload.shape().size, depth=self._write_depth,
            slices=_LANES if self._lane_replicas else 1)
        m.d.comb += [
            self.writes.valid.eq(writes.r_rdy),
            self.writes.payload.eq(writes.r_data),
            writes.r_en.eq(self.writes.ready),
        ]
        accumulating = Signal(range(self.accumulate_latency + 2))
        applying = Signal(range(self._write_depth + 1))
        # applying == 0, kept as a register beside the count: the accumulation's decision
        # (which drives the gradient lines' ready) then starts at a flip-flop.
        apply_empty = Signal(init=1)
        m.d.comb += [
            self.accumulate_idle.eq((accumulating == 0) & ~self.accumulate.valid),
            self.writes_queued.eq(writes.level != 0),
        ]
        # Without corrections nothing keeps deltas, so apply's adder has no second pass.
        keep_deltas = self.keep_deltas if self._corrections else Const(0)
        if self._corrections:
            contexts = self._contexts
            # The bags being corrected: context c holds its bag in lines c * lps .. c * lps +
            # lps - 1 (an op's "bag line", also what the lanes' ``buffer`` tag carries).
            bag_line_width = Shape.cast(range(contexts * lps)).width

            def of_context(bag_line, c):
                """Whether ``bag_line`` is one of context ``c``'s bag lines."""
                return (bag_line >= c * lps) & (bag_line < (c + 1) * lps)

            bag = Array(Signal(LINE_BITS, name=f"bag_{index}") for index in range(contexts * lps))
            # The bag store: a read answers the cycle after, into ``bag`` (``store_loading``).
            store_loading = Signal(data.StructLayout({"valid": 1, "line": bag_line_width}))
            if self._cached_bags:
                bag_store = m.submodules.bag_store = Memory(
                    shape=LINE_BITS, depth=self._cached_bags * lps, init=[])
                store_write = bag_store.write_port()
                store_read = bag_store.read_port()
            subtracting = Signal(range(self._write_depth + 2))  # ``new - old`` in flight
            # Per context: CORRECT/SCALE ops in flight, and SCALE ops in flight.
            in_flight = range(self.accumulate_latency + 4)
            correcting = [Signal(in_flight, name=f"correcting_{c}") for c in range(contexts)]
            scaling = [Signal(in_flight, name=f"scaling_{c}") for c in range(contexts)]
            op_layout = self.correction.payload.shape()
            queues = []
            for c in range(contexts):
                queue = fifo.SyncFIFOBuffered(width=op_layout.size, depth=self._queue_depth)
                m.submodules[f"correction_queue_{c}"] = queue
                queues.append(queue)
            feedback_valid = Signal()
            correction_staged = Signal()
            m.d.comb += [
                self.apply_idle.eq((applying == 0) & (subtracting == 0) & ~feedback_valid),
                self.correction_idle.eq(
                    Cat(*(counter == 0 for counter in correcting)).all() & ~correction_staged &
                    ~store_loading.valid & ~self.correction.valid &
                    ~Cat(*(queue.r_rdy | (queue.level != 0) for queue in queues)).any()),
            ]
        else:
            m.d.comb += self.apply_idle.eq(applying == 0)

        # Accumulate: one gradient line per cycle, unless the line is still being summed.
        occurrence = self.accumulate.payload
        line = Signal(self._line_width)
        target = Signal(buffer_address)
        if lps & (lps - 1) == 0:
            # line < lps (a row has at most lps lines), so with lps a power of two the sum is
            # the two fields side by side: no adder (a LUT level the netlist kept, a carry
            # into the slot bits) in front of the busy map's choice and the gradient lines'
            # ready.
            m.d.comb += target.eq(Cat(line[:exact_log2(lps)], occurrence.slot))
        else:
            m.d.comb += target.eq(occurrence.slot * lps + line)
        recent = [Signal(data.StructLayout({"valid": 1, "buffer": buffer_address}),
                         name=f"recent_{age}") for age in range(self.hazard_window)]
        accumulate_go = Signal()
        if self.buffer_lines <= _BUSY_MAP_LINES:
            # Which lines were accumulated within the window, as a register per line, loaded
            # from the entries that stay in it and this cycle's accumulation: the decision
            # (which drives the gradient lines' ready) then picks a flip-flop by `target`,
            # not an OR over the window's comparisons (ten with seven-stage folded adders).
            busy_lines = Signal(self.buffer_lines)
            for number in range(self.buffer_lines):
                staying = Cat(*(entry.valid & (entry.buffer == number) for entry in recent[:-1]))
                m.d.sync += busy_lines[number].eq((accumulate_go & (target == number))
                                                  | staying.any())
            busy_line = busy_lines.bit_select(target, 1)
        else:
            busy_line = Cat(*(entry.valid & (entry.buffer == target) for entry in recent)).any()
        wants_accumulate = self.accumulate.valid & self.gradient.valid
        # (Deltas still in flight would write the buffer in the same cycle as a sum.)
        deltas_busy = ((subtracting != 0) | feedback_valid) if self._corrections else Const(0)
        # Folded lanes take a line at most once in lane_fold cycles: mul_recent[k], a line
        # entered the multiplier k + 1 cycles ago (an accumulation enters with its go, an
        # apply's line the cycle after).
        mul_recent = [Signal(name=f"mul_recent_{k}") for k in range(self._fold - 1)]
        apply_ready = Signal()
        # (Apply's spacing, apply_spaced = ~Cat(apply_ready, *mul_recent[:-1]).any(), is a
        # term of the `apply_allowed` register.)
        accumulate_spaced = Const(1)
        if mul_recent:
            accumulate_spaced = ~Cat(*mul_recent).any()
        m.d.comb += accumulate_go.eq(wants_accumulate & ~busy_line & apply_empty &
                                     ~deltas_busy & accumulate_spaced)
        for newer, older in zip([None, *recent], recent, strict=False):
            if newer is None:
                m.d.sync += [older.valid.eq(accumulate_go), older.buffer.eq(target)]
            else:
                m.d.sync += older.eq(newer)
        with m.If(accumulate_go):
            m.d.comb += self.gradient.ready.eq(1)
            with m.If(line + 1 == occurrence.lines):
                m.d.comb += self.accumulate.ready.eq(1)
                m.d.sync += line.eq(0)
            with m.Else():
                m.d.sync += line.eq(line + 1)

        # Apply, stage A: take a row line while the write queue has room for all in flight,
        # and read its gradient sum. Stage B: multiply lr by the sum.
        context = self.row_context.payload
        apply_go = Signal()
        # With keep_deltas and a shared adder a line takes the adder twice: its product
        # ``product_slot`` cycles after it is taken, its ``new - old`` at ``delta_slot``. A
        # line is taken only if both cycles are free (``adder_booked``, bit k: the adder's
        # input k cycles from now). Delta lanes of its own leave the adder to the products.
        adder_free = Const(1)
        if not self._delta_lanes:
            product_slot = 2 + self.mul_latency
            delta_slot = product_slot + self.add_latency + 1
            adder_booked = Signal(delta_slot + 1)
            adder_free = ~keep_deltas | (~adder_booked[product_slot] & ~adder_booked[delta_slot])
            m.d.sync += adder_booked.eq(
                (adder_booked >> 1) |
                Mux(apply_go & keep_deltas,
                    (1 << (product_slot - 1)) | (1 << (delta_slot - 1)), 0))
        # Whether the sums are final, the write queue has room for one more line in flight
        # (`write_room`) and the folded lanes are free for it (`apply_spaced`): one register,
        # loaded below with what they will say next cycle (exactly what comparing the counts
        # would say), because `apply_go` is the row FIFO's read enable and starts from
        # flip-flops, not from adders. As three terms they were a LUT level of their own in
        # front of the FIFO's 16 read address copies spread over the die (hw.mem.sliced_fifo;
        # 13.4-14.2 ns in a ULX3S build).
        write_room = Signal(init=1)
        apply_allowed = Signal(init=1)
        # All but the row's valid, in a LUT of its own (`keep`), so that the row FIFO's read
        # enable is one LUT of it, the row's valid and the engine's choice of reader.
        # Synthesis otherwise spread the terms over three LUT levels.
        wants_row = Signal(attrs={"keep": 1})
        m.d.comb += [
            wants_row.eq(self.row_context.valid & ~wants_accumulate & apply_allowed &
                         adder_free),
            apply_go.eq(self.rows.valid & wants_row),
        ]
        # (Data registers are reset_less here and below: qualified by a valid that is reset,
        # they need no reset, and the engine's per-command `clear` then reaches some 5,000
        # fewer flip-flops; with every one it was a ULX3S build's widest net.)
        apply_row = Signal(LINE_BITS, reset_less=True)
        apply_address = Signal(self._line_address_width, reset_less=True)
        apply_buffer = Signal(buffer_address, reset_less=True)
        stage_a_buffer = Signal(buffer_address)
        m.d.comb += [
            self.rows.ready.eq(apply_go), self.row_context.ready.eq(apply_go),
            stage_a_buffer.eq(context.slot * lps + context.line),
        ]
        # Loaded every cycle (stage B only looks at them after `apply_go`), so the 512-bit
        # register needs no enable.
        m.d.sync += [apply_ready.eq(apply_go), apply_row.eq(self.rows.payload),
                     apply_address.eq(context.address), apply_buffer.eq(stage_a_buffer)]
        # The sum apply multiplies in stage B: what a read port addressed in stage A returns.
        # The per-lane copies see a write of the cycle before stage B, a port would not; apply
        # reads a line only once its sums are final and before its delta is written, so no
        # write meets it there.
        apply_sum = Signal(LINE_BITS)
        # The running sum for a product leaving the multiplier, a cycle later (held_*).
        running_sum = Signal(LINE_BITS)
        product_tag = Signal(mul_tag)
        m.d.comb += product_tag.eq(multiplier.o.payload.tag)
        if apply_per_lane:
            # Accumulate reads the lane memories too, each lane at its own copy of the
            # product's buffer address, registered as the product is (the same cycle as a
            # port addressed by the product's tag): that one tag reached every LUT-RAM cell
            # of the line (16.3 ns in a ULX3S build). Unlike a port, the copies see a write of
            # the cycle before; the hazard window keeps every write to a line a cycle away
            # from its next read.
            # (Addresses take no reset, an enable's copies do: under the per-command clear a
            # kept copy's reset is a LUT of its own in front of it, shared by all sixteen.)
            addresses = lane_copies(m, stage_a_buffer, apply_buffer, name="apply_buffer",
                                    copies=_LANES, replicate=True, reset_less=True)
            accumulate_addresses = replicated_register(m, product_tag.buffer, copies=_LANES,
                                                       name="held_buffer", reset_less=True)
            write_enables = [buffer_write.en] * _LANES
            write_addresses = [buffer_write.addr] * _LANES
            if self._registered_writes:
                # (A cycle later: the per-lane reads, which see a write of the cycle before a
                # port would, leave room for it in the hazard window.)
                write_enables = replicated_register(m, buffer_write.en, copies=_LANES,
                                                    name="buffer_write_en")
                write_addresses = replicated_register(m, buffer_write.addr, copies=_LANES,
                                                      name="buffer_write_addr", reset_less=True)
                written_data = Signal(LINE_BITS, reset_less=True)
                m.d.sync += written_data.eq(buffer_write.data)
            else:
                written_data = buffer_write.data
            for k, address in enumerate(addresses):
                lane = slice(32 * k, 32 * (k + 1))
                lane_memory = m.submodules[f"apply_buffer_{k}"] = Memory(
                    shape=32, depth=self.buffer_lines, init=[])
                write = lane_memory.write_port()
                read = lane_memory.read_port(domain="comb")
                accumulate = lane_memory.read_port(domain="comb")
                m.d.comb += [write.en.eq(write_enables[k]), write.addr.eq(write_addresses[k]),
                             write.data.eq(written_data[lane]), read.addr.eq(address),
                             apply_sum[lane].eq(read.data),
                             accumulate.addr.eq(accumulate_addresses[k]),
                             running_sum[lane].eq(accumulate.data)]
        else:
            m.d.comb += [apply_sum.eq(apply_read.data), running_sum.eq(accumulate_read.data)]

        if self._corrections:
            # Correction ops: queued per context; stage 0 takes one line per cycle from one
            # context (reading its delta for CORRECT); stage 1 feeds the multiplier.
            incoming = self.correction.payload
            for c, queue in enumerate(queues):
                mine = incoming.context == c
                m.d.comb += [queue.w_data.eq(incoming),
                             queue.w_en.eq(self.correction.valid & mine)]
                with m.If(mine):
                    m.d.comb += self.correction.ready.eq(queue.w_rdy)
            heads = [data.View(op_layout, queue.r_data) for queue in queues]
            op_lines = [Signal(self._line_width, name=f"op_line_{c}") for c in range(contexts)]
            load_turn = Signal(range(contexts))   # the context whose LOAD comes next
            bag_recent = [Signal(data.StructLayout({"valid": 1, "line": bag_line_width}),
                                 name=f"bag_recent_{age}") for age in range(self.hazard_window)]

            def from_store_of(op):
                return op.cached if self._cached_bags else Const(0)

            # With correction lanes, apply may run beside the correction: a CORRECT line reads
            # its delta only once written (``deltas_below``: apply writes the deltas in buffer
            # order, a chunk's slots one after the other; reset when a chunk accumulates), and
            # a STORE to memory takes the write queue only in a cycle apply's result leaves
            # free, with room kept for it (``write_room`` keeps one entry spare).
            delta_written = Signal(data.StructLayout({"valid": 1, "buffer": buffer_address}))
            apply_result = Signal()   # an applied row line enters the write queue now
            if self._correction_lanes:
                deltas_below = Signal(range(self.buffer_lines + 1))
                with m.If(accumulate_go):
                    m.d.sync += deltas_below.eq(0)
                with m.Elif(delta_written.valid):
                    m.d.sync += deltas_below.eq(delta_written.buffer + 1)

            ready = Signal(contexts)   # context c's head op can take its next line now
            for c, (queue, head, line) in enumerate(zip(queues, heads, op_lines, strict=True)):
                own_line = c * lps + line
                busy = Cat(*(entry.valid & (entry.line == own_line)
                             for entry in bag_recent)).any()
                quiet = (correcting[c] == 0) & ~(store_loading.valid &
                                                 of_context(store_loading.line, c))
                can = Signal(name=f"can_{c}")
                with m.Switch(head.kind):
                    with m.Case(CorrectionKind.LOAD):
                        m.d.comb += can.eq(quiet & (load_turn == c) &
                                           (from_store_of(head) | self.bag_lines.valid))
                    with m.Case(CorrectionKind.CORRECT):
                        if self._correction_lanes:
                            m.d.comb += can.eq(~busy & (head.slot * lps + line < deltas_below))
                        else:
                            m.d.comb += can.eq(~busy)
                    with m.Case(CorrectionKind.SCALE):
                        # (Every op of c in flight is a SCALE: no CORRECT left.)
                        m.d.comb += can.eq(correcting[c] == scaling[c])
                    with m.Case(CorrectionKind.STORE):
                        to_memory = writes.w_rdy
                        if self._correction_lanes:
                            to_memory = writes.w_rdy & write_room & ~apply_result
                        m.d.comb += can.eq(quiet & (from_store_of(head) | to_memory))
                m.d.comb += ready[c].eq(queue.r_rdy & can)
            # The contexts take turns: the first ready one after the last to go.
            last = Signal(range(contexts))
            chosen = Signal(range(contexts))
            op_go = Signal()
            with m.Switch(last):
                for previous in range(contexts):
                    with m.Case(previous):
                        for offset in reversed(range(1, contexts + 1)):  # (the last If wins)
                            c = (previous + offset) % contexts
                            with m.If(ready[c]):
                                m.d.comb += [chosen.eq(c), op_go.eq(1)]
            op = data.View(op_layout, Array(queue.r_data for queue in queues)[chosen])
            op_line = Array(op_lines)[chosen]
            from_store = from_store_of(op)
            chosen_line = Signal(bag_line_width)
            m.d.comb += chosen_line.eq(chosen * lps + op_line)
            correct_go = Signal()
            scale_go = Signal()
            load_go = Signal()
            store_go = Signal()
            m.d.comb += [
                load_go.eq(op_go & (op.kind == CorrectionKind.LOAD)),
                correct_go.eq(op_go & (op.kind == CorrectionKind.CORRECT)),
                scale_go.eq(op_go & (op.kind == CorrectionKind.SCALE)),
                store_go.eq(op_go & (op.kind == CorrectionKind.STORE)),
            ]
            with m.If(op_go):
                m.d.sync += last.eq(chosen)
            for c, (queue, line) in enumerate(zip(queues, op_lines, strict=True)):
                with m.If(op_go & (chosen == c)):
                    with m.If(line + 1 == heads[c].lines):
                        m.d.comb += queue.r_en.eq(1)
                        m.d.sync += line.eq(0)
                        with m.If(heads[c].kind == CorrectionKind.LOAD):
                            m.d.sync += load_turn.eq(0 if c == contexts - 1 else c + 1)
                    with m.Else():
                        m.d.sync += line.eq(line + 1)
            m.d.comb += self.bag_lines.ready.eq(load_go & ~from_store)
            m.d.sync += [store_loading.valid.eq(load_go & from_store),
                         store_loading.line.eq(chosen_line)]
            with m.If(load_go & ~from_store):
                m.d.sync += bag[chosen_line].eq(self.bag_lines.payload)
            if self._cached_bags:
                store_line = op.bag * lps + op_line
                m.d.comb += [
                    store_read.addr.eq(store_line),
                    store_write.addr.eq(store_line),
                    store_write.data.eq(bag[chosen_line]),
                    store_write.en.eq(store_go & from_store),
                ]
                with m.If(store_loading.valid):
                    m.d.sync += bag[store_loading.line].eq(store_read.data)
            for newer, older in zip([None, *bag_recent], bag_recent, strict=False):
                if newer is None:
                    m.d.sync += [older.valid.eq(correct_go), older.line.eq(chosen_line)]
                else:
                    m.d.sync += older.eq(newer)
            staged_job = Signal(_Job)
            staged_line = Signal(bag_line_width)
            staged_factor = Signal(32)
            m.d.sync += correction_staged.eq(correct_go | scale_go)
            with m.If(correct_go | scale_go):
                m.d.sync += [staged_job.eq(Mux(correct_go, _Job.CORRECT, _Job.SCALE)),
                             staged_line.eq(chosen_line), staged_factor.eq(op.factor)]

        # Multiplier input: an accumulation, an apply stage B or (unless it has lanes of its
        # own) a correction stage 1, never two at once (the engine runs one phase at a time).
        shared_correction = self._corrections and not self._correction_lanes
        mul_valid = Signal()
        mul_in = Signal(multiplier.i.payload.shape())
        mul_in_tag = Signal(mul_tag)
        m.d.comb += [
            mul_valid.eq(accumulate_go | apply_ready |
                         (correction_staged if shared_correction else 0)),
            mul_in.tag.eq(mul_in_tag),
        ]
        for k, recent_mul in enumerate(mul_recent):
            m.d.sync += recent_mul.eq(mul_recent[k - 1] if k else mul_valid)
        if self._registered_operands:
            operands = Signal.like(mul_in, reset_less=True, name="mul_operands")
            m.d.sync += [multiplier.i.valid.eq(mul_valid), operands.eq(mul_in)]
            m.d.comb += multiplier.i.payload.eq(operands)
        else:
            m.d.comb += [multiplier.i.valid.eq(mul_valid), multiplier.i.payload.eq(mul_in)]
        # A field only some jobs read is not zeroed for the others (`row` and `address` are
        # read by APPLY, `fresh` by ACCUMULATE): zeroed, the choice of job was the reset of
        # every `row` bit in the multiplier's tag registers (351 of them on a ULX3S build,
        # 13.9 ns, most of it routing).
        m.d.comb += [
            mul_in_tag.row.eq(apply_row),
            mul_in_tag.address.eq(apply_address),
            mul_in_tag.fresh.eq(occurrence.fresh),
        ]
        with m.If(apply_ready):
            m.d.comb += [mul_in_tag.job.eq(_Job.APPLY), mul_in_tag.buffer.eq(apply_buffer)]
        if shared_correction:
            with m.Elif(correction_staged):
                m.d.comb += [mul_in_tag.job.eq(staged_job), mul_in_tag.buffer.eq(staged_line)]
        with m.Else():
            m.d.comb += [mul_in_tag.job.eq(_Job.ACCUMULATE), mul_in_tag.buffer.eq(target)]
        # The operands, lane by lane: with lane_replicas each lane has its own copy of the
        # registers that choose them.
        copies = {"copies": _LANES, "replicate": self._lane_replicas}
        applies = lane_copies(m, apply_go, apply_ready, name="apply_ready", **copies)
        if self._corrections:
            staged_correction = bag[staged_line]
        if shared_correction:
            corrections = lane_copies(m, correct_go | scale_go, correction_staged,
                                      name="correction_staged", **copies)
        # With lane_replicas each lane reads its own copy of `lr`, through four group copies
        # (:func:`hw.fanout.staged_copies`: two cycles late; `lr` holds for a command, and
        # apply reads it long after the command starts): one register per bit reached all
        # 16 lanes (a ULX3S build's 18.3 ns net, where synthesis had merged a constant `lr`
        # bit's register with another that holds a 1), and copies loaded straight from
        # `lr`'s logic moved that net in front of them (19.1 ns).
        # (No reset for them either: `lr` holds for the command, and the per-command clear
        # was a LUT in front of each stage.)
        lrs = (staged_copies(m, self.lr, copies=_LANES, groups=LANE_GROUPS, name="lr",
                             reset_less=True)
               if self._lane_replicas else [self.lr] * _LANES)
        for k in range(_LANES):
            lane = slice(32 * k, 32 * (k + 1))
            a = self.gradient.payload[lane]
            b = occurrence.scale
            if shared_correction:
                a = Mux(corrections[k], Mux(staged_job == _Job.CORRECT, correct_read.data[lane],
                                            staged_correction[lane]), a)
                b = Mux(corrections[k], staged_factor, b)
            m.d.comb += [mul_in.a[k].eq(Mux(applies[k], lrs[k], a)),
                         mul_in.b[k].eq(Mux(applies[k], apply_sum[lane], b))]

        # The gradient buffer's reads: the running sum for a product leaving the multiplier
        # (accumulate), a correction's delta, the sum for the row line taken in stage A
        # (apply). The engine never has two of them in one cycle, so one port serves all
        # three, its address chosen by which one reads; or each has a port of its own.
        correct_address = op.slot * lps + op_line if self._corrections else None
        if self._read_port_per_use:
            if not apply_per_lane:
                m.d.comb += [accumulate_read.addr.eq(product_tag.buffer),
                             apply_read.addr.eq(stage_a_buffer)]
            if self._corrections:
                m.d.comb += correct_read.addr.eq(correct_address)
        else:
            with m.If(multiplier.o.valid & (product_tag.job == _Job.ACCUMULATE)):
                m.d.comb += accumulate_read.addr.eq(product_tag.buffer)
            if shared_correction:
                with m.Elif(correct_go):
                    m.d.comb += correct_read.addr.eq(correct_address)
            with m.Else():
                m.d.comb += apply_read.addr.eq(stage_a_buffer)
            if self._correction_lanes:
                m.d.comb += correct_read.addr.eq(correct_address)

        # One register stage while the buffer read completes, then the adder.
        held_valid = Signal()
        held_product = Signal(LINE_BITS, reset_less=True)
        held_tag = Signal(mul_tag, reset_less=True)
        m.d.sync += [
            held_valid.eq(multiplier.o.valid),
            held_product.eq(multiplier.o.payload.result),
            held_tag.eq(product_tag),
        ]
        add_in = adder.i.payload
        add_in_tag = Signal(add_tag)
        m.d.comb += add_in.tag.eq(add_in_tag)
        shared_delta = self._corrections and not self._delta_lanes
        if self._corrections:
            # Apply's new line and its old one, the cycle after, into the adder or the delta
            # lanes (``new - old``).
            feedback = Signal(data.StructLayout({"new": LINE_BITS, "old": LINE_BITS,
                                                 "buffer": buffer_address}))
        if self._delta_lanes:
            subtractor = m.submodules.delta_subtractor = FPLanes(
                op="add", lanes=_LANES, stages=self.add_latency,
                tag_width=buffer_address.width)
            m.d.comb += [
                subtractor.i.valid.eq(feedback_valid),
                subtractor.i.payload.a.eq(feedback.new),
                subtractor.i.payload.b.eq(feedback.old),
                subtractor.i.payload.sub.eq(1),
                subtractor.i.payload.tag.eq(feedback.buffer),
            ]
        elif self._corrections:
            # (A subtraction is an addition of b with its sign bit flipped, as the adder
            # does it: the adder's `sub` stays 0, see below.)
            with m.If(feedback_valid):
                m.d.comb += [
                    adder.i.valid.eq(1),
                    add_in.a.eq(feedback.new),
                    add_in.b.eq(feedback.old ^ _NEGATIVE_ZERO_LINE),
                    add_in_tag.job.eq(_Job.DELTA),
                    add_in_tag.buffer.eq(feedback.buffer),
                ]
        # What held_tag.job and .fresh hold, per adder lane.
        held_jobs = lane_copies(m, product_tag.job, held_tag.job, name="held_job", **copies)
        held_fresh = lane_copies(m, product_tag.fresh, held_tag.fresh, name="held_fresh",
                                 **copies)
        with m.If(~feedback_valid if shared_delta else 1):
            correction_line = bag[held_tag.buffer] if shared_correction else None
            for k in range(_LANES):
                lane = slice(32 * k, 32 * (k + 1))
                operand = Mux(held_fresh[k], 0, running_sum[lane])
                if shared_correction:
                    operand = Mux(held_jobs[k] == _Job.CORRECT, correction_line[lane],
                                  Mux(held_jobs[k] == _Job.SCALE,
                                      _NEGATIVE_ZERO_LINE[lane], operand))
                # Apply subtracts: the product's sign bit is flipped in its lane (the adder
                # flips b's sign for `sub`, so the result is the same bit for bit), not by
                # the adder's one `sub` bit, which reached every unit (the folded adders'
                # entry registers, 15.1 ns on a ULX3S build).
                product = held_product[lane]
                m.d.comb += [
                    add_in.a[k].eq(Mux(held_jobs[k] == _Job.APPLY, held_tag.row[lane],
                                       operand)),
                    add_in.b[k].eq(Cat(product[:31],
                                       product[31] ^ (held_jobs[k] == _Job.APPLY))),
                ]
            m.d.comb += [
                add_in.sub.eq(0),  # (a subtraction flips b's sign in its lanes, above)
                adder.i.valid.eq(held_valid),
                add_in_tag.job.eq(held_tag.job),
                add_in_tag.buffer.eq(held_tag.buffer),
                add_in_tag.row.eq(held_tag.row),
                add_in_tag.address.eq(held_tag.address),
            ]

        # Results: sums and deltas go back to the buffer, updated rows to the write queue,
        # corrected and scaled lines to the bag.
        result_tag = Signal(add_tag)
        m.d.comb += result_tag.eq(adder.o.payload.tag)
        result = adder.o.payload.result
        job_done = {job: adder.o.valid & (result_tag.job == job) for job in _Job}
        if self._delta_lanes:
            job_done[_Job.DELTA] = subtractor.o.valid
        finished_apply = job_done[_Job.APPLY]
        m.d.comb += [
            buffer_write.en.eq(job_done[_Job.ACCUMULATE] |
                               (job_done[_Job.DELTA] if self._corrections else 0)),
            buffer_write.addr.eq(result_tag.buffer),
            buffer_write.data.eq(result),
            writes.w_en.eq(finished_apply),
            writes.w_data.eq(Cat(result_tag.address, result)),
        ]
        if self._delta_lanes:
            with m.If(subtractor.o.valid):
                m.d.comb += [buffer_write.addr.eq(subtractor.o.payload.tag),
                             buffer_write.data.eq(subtractor.o.payload.result)]
        accumulating_next = accumulating + accumulate_go - job_done[_Job.ACCUMULATE]
        applying_next = applying + apply_go - finished_apply
        # With correction lanes a bag's STORE may enter the queue beside apply's lines: it
        # counts, and one entry stays spare for it (both may take room in one cycle).
        entered, spare = finished_apply, 0
        if self._correction_lanes:
            entered, spare = writes.w_en, 1
        # With lane_replicas this cycle's pop is left out: a level a pop too high is a safe
        # bound (room a cycle later at most when the queue is full), and the writer's ready,
        # which decides the pop, is then not in front of the room's adders and comparison.
        popped = 0 if self._lane_replicas else writes.r_en & writes.r_rdy
        # The queue's entries and the lines in flight next cycle, but for a line taken now. A
        # finished line leaves the lines in flight as it enters the queue: without correction
        # lanes it is counted in neither, so the adder's valid (behind the engine's choice of
        # owner) reaches no adder of the room (two carry chains in front of `apply_allowed`,
        # 13.06 ns in a ULX3S build).
        if self._correction_lanes:
            held_next = writes.level + entered - popped + (applying - finished_apply)
        else:
            held_next = writes.level - popped + applying
        # (accumulating_next == 0, with the accumulation at the last gate: a line taken leaves
        # at least one in flight. Its wish stands for its go: one wanted and not taken is still
        # wanted next cycle, its streams holding their valid, and keeps the row from apply
        # there anyway (`wants_row`). So the hazard checks behind `accumulate_go`, the busy
        # line's choice by the slot's line, are not in front of `apply_allowed`.)
        sums_final_next = ~wants_accumulate & Mux(job_done[_Job.ACCUMULATE], accumulating == 1,
                                                  accumulating == 0)
        write_room_next = held_next + apply_go < self._write_depth - spare
        if mul_recent:
            # apply_spaced's next value: apply_ready and mul_recent[k] load apply_go and
            # mul_recent[k - 1] (mul_recent[0] loads mul_valid). A line taken this cycle
            # spaces the next, so write_room's next value is only needed without one.
            spaced_next = ~Cat(mul_valid, *mul_recent[:-2]).any() if self._fold > 2 else 1
            write_room_held = held_next < self._write_depth - spare
            apply_allowed_next = ~apply_go & sums_final_next & write_room_held & spaced_next
        else:
            apply_allowed_next = sums_final_next & write_room_next
        m.d.sync += [
            accumulating.eq(accumulating_next),
            applying.eq(applying_next),
            # (applying_next == 0, with apply_go at the last gate, as sums_final_next.)
            apply_empty.eq(~apply_go & Mux(finished_apply, applying == 1, applying == 0)),
            write_room.eq(write_room_next),
            apply_allowed.eq(apply_allowed_next),
        ]
        if not self._corrections:
            return m

        m.d.comb += [apply_result.eq(finished_apply),
                     delta_written.valid.eq(job_done[_Job.DELTA]),
                     delta_written.buffer.eq(buffer_write.addr)]
        if self._correction_lanes:
            # Stage 1 (``correction_staged``) -> multiplier -> one register stage (as on the
            # shared units, so the bag's hazard window is the same) -> adder -> the bag.
            correction_tag = data.StructLayout({"job": _Job, "line": bag_line_width})
            correction_mul = m.submodules.correction_multiplier = FPLanes(
                op="mul", lanes=_LANES, stages=self._mul_stages, tag_width=correction_tag.size)
            correction_add = m.submodules.correction_adder = FPLanes(
                op="add", lanes=_LANES, stages=self.add_latency,
                tag_width=correction_tag.size)
            staged_tag = Signal(correction_tag)
            m.d.comb += [staged_tag.job.eq(staged_job), staged_tag.line.eq(staged_line),
                         correction_mul.i.valid.eq(correction_staged),
                         correction_mul.i.payload.tag.eq(staged_tag)]
            for k in range(_LANES):
                lane = slice(32 * k, 32 * (k + 1))
                m.d.comb += [
                    correction_mul.i.payload.a[k].eq(
                        Mux(staged_job == _Job.CORRECT, correct_read.data[lane],
                            staged_correction[lane])),
                    correction_mul.i.payload.b[k].eq(staged_factor),
                ]
            product_valid = Signal()
            product = Signal(LINE_BITS)
            product_of = Signal(correction_tag)
            m.d.sync += [product_valid.eq(correction_mul.o.valid),
                         product.eq(correction_mul.o.payload.result),
                         product_of.eq(correction_mul.o.payload.tag)]
            addend = bag[product_of.line]
            for k in range(_LANES):
                lane = slice(32 * k, 32 * (k + 1))
                m.d.comb += correction_add.i.payload.a[k].eq(
                    Mux(product_of.job == _Job.CORRECT, addend[lane],
                        _NEGATIVE_ZERO_LINE[lane]))
            m.d.comb += [correction_add.i.valid.eq(product_valid),
                         correction_add.i.payload.b.eq(product),
                         correction_add.i.payload.tag.eq(product_of)]
            sum_of = Signal(correction_tag)
            m.d.comb += sum_of.eq(correction_add.o.payload.tag)
            finished_line = sum_of.line
            finished_correct = correction_add.o.valid
            finished_scale = correction_add.o.valid & (sum_of.job == _Job.SCALE)
            corrected = correction_add.o.payload.result
        else:
            finished_line = result_tag.buffer[:bag_line_width]
            finished_correct = job_done[_Job.CORRECT] | job_done[_Job.SCALE]
            finished_scale = job_done[_Job.SCALE]
            corrected = result

        m.d.sync += feedback_valid.eq(finished_apply & keep_deltas)
        with m.If(finished_apply):
            m.d.sync += [feedback.new.eq(result), feedback.old.eq(result_tag.row),
                         feedback.buffer.eq(result_tag.buffer)]
        with m.If(finished_correct):
            m.d.sync += bag[finished_line].eq(corrected)
        # (Without correction lanes the engine never applies while it corrects; with them a
        # STORE waits for a cycle without an applied line.)
        with m.If(store_go & ~from_store):
            m.d.comb += [writes.w_en.eq(1),
                         writes.w_data.eq(Cat((op.address + op_line)[:self._line_address_width],
                                             bag[chosen_line]))]
        m.d.sync += subtracting.eq(subtracting + (finished_apply & keep_deltas)
                                   - job_done[_Job.DELTA])
        for c in range(contexts):
            went = chosen == c
            came = of_context(finished_line, c)
            m.d.sync += [
                correcting[c].eq(correcting[c] + ((correct_go | scale_go) & went)
                                 - (finished_correct & came)),
                scaling[c].eq(scaling[c] + (scale_go & went) - (finished_scale & came)),
            ]
        return m
