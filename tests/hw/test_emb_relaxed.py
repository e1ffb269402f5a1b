# amaranth: UnusedElaboratable=no
"""Relaxed lookup in the embedding engine, in Amaranth's simulator, against ``sw_model.relaxed``.

LOOKUP(N) runs strict; LOOKUP(N+1) is issued before UPDATE(N) with ``relaxed`` set, so it is
deferred; UPDATE(N) writes batch N's rows and corrects batch N+1's pooled output. The tables
must equal the golden update and the output the golden relaxed lookup, bit for bit."""

from dataclasses import dataclass

import numpy as np
import pytest
from amaranth.hdl import Fragment

from hw.emb.engine import EmbeddingEngine
from hw.emb.layouts import (
    ErrorCode,
    Opcode,
    PoolingMode,
    command_layout,
    region_layout,
    status_layout,
    table_layout,
)
from hw.emb.update_correct import CorrectionSequencer
from hw.emb.update_walker import OccurrenceWalker
from sw_model import embedding_bag_tbe, relaxed_lookup, sparse_sgd_update, update_deltas
from tb import pysim
from tb.emb.cases import same_bits
from tb.emb.update_pysim import AxiMemoryModel

AW = 20
MAX_TABLES = 2
PARAMS = dict(max_tables=MAX_TABLES, max_dim=32, num_regions=1, addr_width=AW, id_width=5,
              outstanding_reads=8, index_buffer_depth=32, offset_buffer_depth=32,
              output_buffer_depth=4, bag_slots=4, update_outstanding_reads=4)
LR = np.float32(0.375)
_MODE_NAMES = {PoolingMode.SUM: "sum", PoolingMode.MEAN: "mean", PoolingMode.WEIGHTED: "sum"}


@dataclass
class Batch:
    indices: np.ndarray   # uint32, TBE order
    offsets: np.ndarray   # uint32, tables * bags + 1
    weights: np.ndarray   # float32, one per index
    base: int             # where its buffers start

    def table_part(self, t, bags):
        start, end = int(self.offsets[t * bags]), int(self.offsets[(t + 1) * bags])
        offsets = self.offsets[t * bags:(t + 1) * bags + 1].astype(np.int64) - start
        return self.indices[start:end].astype(np.int64), offsets, self.weights[start:end]

    @property
    def addresses(self):
        return {"indices": self.base, "offsets": self.base + 0x400,
                "weights": self.base + 0x800, "output": self.base + 0xC00,
                "gradient": self.base + 0x1400}


def draw_batch(rng, rows, bags, base, max_bag):
    lengths = rng.integers(1, max_bag + 1, size=len(rows) * bags)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.uint32)
    indices = np.concatenate([rng.integers(0, rows[t], size=lengths[t * bags:(t + 1) * bags]
                                           .sum()) for t in range(len(rows))]).astype(np.uint32)
    weights = rng.uniform(-2, 2, size=indices.size).astype(np.float32)
    return Batch(indices, offsets, weights, base)


@dataclass
class TwoBatches:
    """Two tables (6 x 16 and 5 x 32 floats), two batches of 3 bags and batch 0's gradient,
    laid out in one memory image."""
    rows: list
    dims: list
    bags: int
    tables: list
    table_base: list
    batches: list
    image: bytearray
    gradient: np.ndarray
    descriptors: object

    @classmethod
    def draw(cls, rng, modes, *, bags=3, max_bag=4):
        from amaranth.lib import data
        rows, dims, table_base = [6, 5], [16, 32], [0x1000, 0x2000]
        tables = [rng.uniform(-4, 4, size=(r, d)).astype(np.float32)
                  for r, d in zip(rows, dims, strict=True)]
        batches = [draw_batch(rng, rows, bags, 0x4000 + k * 0x2000, max_bag=max_bag)
                   for k in range(2)]
        image = bytearray(1 << AW)
        for table, base in zip(tables, table_base, strict=True):
            image[base:base + table.nbytes] = table.tobytes()
        gradient = rng.uniform(-1, 1, size=(bags, sum(dims))).astype(np.float32)
        for batch in batches:
            a = batch.addresses
            for name, array in (("indices", batch.indices), ("offsets", batch.offsets),
                                ("weights", batch.weights)):
                image[a[name]:a[name] + array.nbytes] = array.tobytes()
        a0 = batches[0].addresses
        image[a0["gradient"]:a0["gradient"] + gradient.nbytes] = gradient.tobytes()
        descriptors = data.ArrayLayout(table_layout(AW), MAX_TABLES).const(
            [{"base": base, "rows": r, "dim": d, "mode": mode}
             for base, r, d, mode in zip(table_base, rows, dims, modes, strict=True)])
        return cls(rows, dims, bags, tables, table_base, batches, image, gradient, descriptors)


def run(engine, image, steps, *, descriptors, deadline=100_000, patches=None):
    """Run ``(command, relaxed)`` steps in order on one memory image; return the statuses and
    the memory model. ``patches`` maps a step's number to a function that changes the image
    just before that step's command."""
    memory = AxiMemoryModel(engine.axi, seed=5, busy=0.25)
    memory.image = image
    statuses = []

    async def testbench(ctx):
        ctx.set(engine.done.ready, 1)
        ctx.set(engine.tables, descriptors)
        ctx.set(engine.regions, data_regions())
        ctx.set(engine.lr, int(LR.view(np.uint32)))
        for number, (command, relaxed) in enumerate(steps):
            if patches and number in patches:
                patches[number](image)
            if engine.relaxed_lookup:
                ctx.set(engine.relaxed, relaxed)
            else:
                assert not relaxed, "this engine has no relaxed lookup"
            ctx.set(engine.cmd.payload, command_layout(AW).const(command))
            ctx.set(engine.cmd.valid, 1)
            await ctx.tick().until(engine.cmd.ready)
            ctx.set(engine.cmd.valid, 0)
            while not ctx.get(engine.done.valid):
                await ctx.tick()
            statuses.append(status_layout().from_bits(ctx.get(engine.done.payload.as_value())))
            await ctx.tick()

    pysim.simulate(engine, testbench, processes=[memory.serve], deadline=deadline, check=False)
    assert len(statuses) == len(steps), f"{len(statuses)} of {len(steps)} commands finished"
    return statuses, memory


def data_regions():
    from amaranth.lib import data
    return data.ArrayLayout(region_layout(AW), 1).const(
        [{"base": 0, "size": (1 << AW) - 64, "enable": 1}])


def command(opcode, batch_number, batch, bags, tables, output):
    a = batch.addresses
    return {"opcode": opcode, "batch": batch_number, "bags": bags, "tables": tables,
            "num_indices": batch.indices.size, "indices": a["indices"],
            "offsets": a["offsets"], "weights": a["weights"], "output": a[output]}


def read_floats(image, address, count):
    return np.frombuffer(bytes(image[address:address + 4 * count]), dtype=np.float32).copy()


@pytest.mark.parametrize(("modes", "changes"), [
    ((PoolingMode.SUM, PoolingMode.MEAN), {}),
    ((PoolingMode.WEIGHTED, PoolingMode.MEAN), {}),
    # The FPGA registers, the per-lane copies among them (hw/fanout.py): the same results.
    ((PoolingMode.WEIGHTED, PoolingMode.MEAN), {"fpga_pipelining": True}),
    # The correction on lanes of its own, beside the apply: the same results.
    ((PoolingMode.WEIGHTED, PoolingMode.MEAN), {"delta_lanes": True, "correction_lanes": True}),
], ids=["sum-mean", "weighted-mean", "weighted-mean-fpga-pipelining",
        "weighted-mean-correction-lanes"])
def test_deferred_lookup_is_corrected_by_the_update(modes, changes):
    rng = np.random.default_rng(7 + modes[0].value)
    case = TwoBatches.draw(rng, modes)
    rows, dims, bags, tables, table_base = (case.rows, case.dims, case.bags, case.tables,
                                            case.table_base)
    batches, image, gradient, descriptors = (case.batches, case.image, case.gradient,
                                             case.descriptors)
    row_floats = sum(dims)
    engine = EmbeddingEngine(**PARAMS, max_unique_rows=16, **changes)
    steps = [
        (command(Opcode.LOOKUP, 0, batches[0], bags, 2, "output"), 1),  # nothing owed: strict
        (command(Opcode.LOOKUP, 1, batches[1], bags, 2, "output"), 1),  # deferred
        (command(Opcode.LOOKUP, 1, batches[1], bags, 2, "output"), 1),  # refused
        (command(Opcode.UPDATE, 0, batches[0], bags, 2, "gradient"), 1),
    ]
    statuses, _ = run(engine, image, steps, descriptors=descriptors)
    assert [s.error for s in statuses] == [ErrorCode.NONE, ErrorCode.NONE,
                                           ErrorCode.LOOKUP_ALREADY_DEFERRED, ErrorCode.NONE]

    # Golden, table by table (each table has its own mode; one chunk holds every row).
    new_tables, pooled = [], [[], []]
    column = 0
    for t in range(2):
        mode = _MODE_NAMES[modes[t]]
        weighted = modes[t] == PoolingMode.WEIGHTED
        parts = [batch.table_part(t, bags) for batch in batches]
        (idx0, off0, w0), (idx1, off1, w1) = parts
        pooled[0].append(embedding_bag_tbe([tables[t]], idx0, off0, mode,
                                           w0 if weighted else None))
        update = sparse_sgd_update([tables[t]], gradient[:, column:column + dims[t]], idx0,
                                   off0, mode, LR, w0 if weighted else None)
        new_tables.append(update.tables[0])
        relaxed = relaxed_lookup([tables[t]], update.tables, update.updated_rows(), idx1, off1,
                                 mode, w1 if weighted else None)
        assert relaxed.corrections > 0  # the case exercises the correction
        pooled[1].append(relaxed.pooled)
        column += dims[t]
    for t in range(2):
        got = read_floats(image, table_base[t], rows[t] * dims[t]).reshape(rows[t], dims[t])
        assert same_bits(got, new_tables[t]).all(), f"table {t}"
    for k, batch in enumerate(batches):
        got = read_floats(image, batch.addresses["output"], bags * row_floats)
        expected = np.concatenate(pooled[k], axis=1)
        assert same_bits(got.reshape(bags, row_floats), expected).all(), f"batch {k} output"


def _index_position(batch, bags, table, bag, k):
    return int(batch.offsets[table * bags + bag]) + k


@pytest.mark.parametrize(("broken", "changes"), [
    ("deferred_index", {}), ("deferred_offsets", {}), ("both_indices", {}),
    # With the FPGA registers, the per-command reset comes a cycle after the command.
    ("deferred_index", {"fpga_pipelining": True}),
], ids=["deferred_index", "deferred_offsets", "both_indices", "deferred_index-fpga-pipelining"])
def test_update_refuses_a_deferred_lookup_changed_in_memory(broken, changes):
    """The deferred LOOKUP(N+1)'s indices or offsets change in memory before UPDATE(N) (they
    were good when it ran): UPDATE(N) validates them, alongside its own validation and first
    accumulation, and ends with their error before writing any row. Its own errors come
    first, as if the two validations ran one after the other."""
    rng = np.random.default_rng(40)
    case = TwoBatches.draw(rng, (PoolingMode.SUM, PoolingMode.MEAN), bags=3, max_bag=4)
    batches, image, bags = case.batches, case.image, case.bags
    tables_before = bytes(image[0x1000:0x4000])
    own = _index_position(batches[0], bags, 1, 2, 0)
    deferred = _index_position(batches[1], bags, 1, 1, 0)

    def break_index(batch, position):
        def patch(memory):
            at = batch.addresses["indices"] + 4 * position
            memory[at:at + 4] = np.uint32(case.rows[1]).tobytes()   # one past the last row
        return patch

    def break_offsets(memory):
        at = batches[1].addresses["offsets"] + 4 * 2        # entry 2 below entry 1
        memory[at:at + 4] = np.uint32(0).tobytes()

    patch = {"deferred_index": break_index(batches[1], deferred),
             "deferred_offsets": break_offsets,
             "both_indices": lambda memory: (break_index(batches[1], deferred)(memory),
                                             break_index(batches[0], own)(memory))}[broken]
    expected = {
        "deferred_index": (ErrorCode.INDEX_OUT_OF_RANGE, 1, 1, deferred),
        "deferred_offsets": (ErrorCode.OFFSETS_DECREASING, 0, 2, 2),
        "both_indices": (ErrorCode.INDEX_OUT_OF_RANGE, 1, 2, own),
    }[broken]
    steps = [(command(Opcode.LOOKUP, 0, batches[0], bags, 2, "output"), 1),
             (command(Opcode.LOOKUP, 1, batches[1], bags, 2, "output"), 1),
             (command(Opcode.UPDATE, 0, batches[0], bags, 2, "gradient"), 1)]
    statuses, _ = run(EmbeddingEngine(**PARAMS, max_unique_rows=4, **changes), image, steps,
                      descriptors=case.descriptors, patches={2: patch})
    assert [s.error for s in statuses[:2]] == [ErrorCode.NONE, ErrorCode.NONE]
    status = statuses[2]
    assert (status.error, status.table, status.bag, status.position) == expected
    assert bytes(image[0x1000:0x4000]) == tables_before   # no row written


_CHUNKED_CONFIGS = [
    # (correction_bags, contexts, bags, max_bag, queue_depth, correction_lanes)
    (0, 4, 3, 4, None, False), (2, 4, 3, 4, None, False), (16, 4, 3, 4, None, False),
    # One bag at a time; and bags of 1 to 12 occurrences interleaved two and three at a
    # time, so a short bag's context comes round while a long one's chain still runs.
    (2, 1, 3, 4, None, False), (2, 2, 5, 12, None, False), (3, 3, 5, 12, None, False),
    # Queues of 2 (the walk stalls on a full queue in nearly every bag) and of 64 (every
    # bag's occurrences queued at once).
    (2, 3, 5, 12, 2, False), (2, 3, 5, 12, 64, False),
    # The correction on lanes of its own, each pass beside its chunk's apply: bags through
    # memory (their stores share the write queue with the apply), on chip, and both.
    (0, 4, 3, 4, None, True), (16, 4, 3, 4, None, True), (2, 3, 5, 12, 2, True),
]


def _chunked_cases():
    """Every configuration with both modes; CI runs each configuration in one of them,
    MEAN and WEIGHTED in turn (the other is ``slow``: each case simulates for 10-40 s)."""
    modes = (PoolingMode.MEAN, PoolingMode.WEIGHTED)
    cases = []
    for number, config in enumerate(_CHUNKED_CONFIGS):
        for mode in modes:
            marks = () if mode == modes[number % 2] else pytest.mark.slow
            cases.append(pytest.param(mode, *config, marks=marks,
                                      id="-".join(str(value) for value in (mode, *config))))
    return cases


@pytest.mark.parametrize(
    ("mode", "correction_bags", "contexts", "bags", "max_bag", "queue_depth",
     "correction_lanes"), _chunked_cases())
def test_chunked_update_corrects_chunk_by_chunk(mode, correction_bags, contexts, bags,
                                                max_bag, queue_depth, correction_lanes):
    """Batch N has more distinct rows than the CAM holds: UPDATE(N) corrects the deferred
    LOOKUP(N+1) after each chunk it writes (``sw_model.relaxed``, chunked), and scales MEAN
    bags after the last. Between chunks the bags wait on chip (16: all of them), in memory
    (0), or both (2 and 3: the first ones on chip); ``contexts`` bags are corrected at
    once, each from a queue of ``queue_depth`` occurrences; with ``correction_lanes`` each
    chunk's correction runs beside its apply."""
    rng = np.random.default_rng(21 + mode.value + 100 * (contexts - 1) + (queue_depth or 0))
    capacity = 4
    case = TwoBatches.draw(rng, (mode, mode), bags=bags, max_bag=max_bag)
    rows, dims, bags, tables, table_base = (case.rows, case.dims, case.bags, case.tables,
                                            case.table_base)
    batches, image, gradient, descriptors = (case.batches, case.image, case.gradient,
                                             case.descriptors)
    row_floats = sum(dims)
    steps = [(command(Opcode.LOOKUP, 0, batches[0], bags, 2, "output"), 1),
             (command(Opcode.LOOKUP, 1, batches[1], bags, 2, "output"), 1),
             (command(Opcode.UPDATE, 0, batches[0], bags, 2, "gradient"), 1)]
    statuses, memory = run(EmbeddingEngine(**PARAMS, max_unique_rows=capacity,
                                           correction_bags=correction_bags,
                                           correction_contexts=contexts,
                                           correction_queue_depth=queue_depth,
                                           delta_lanes=correction_lanes,
                                           correction_lanes=correction_lanes), image, steps,
                           descriptors=descriptors, deadline=200_000)
    assert [s.error for s in statuses] == [ErrorCode.NONE] * 3

    name = _MODE_NAMES[mode]
    weighted = mode == PoolingMode.WEIGHTED

    def tbe(batch):
        return (batch.indices.astype(np.int64), batch.offsets.astype(np.int64), name,
                batch.weights if weighted else None)

    indices, offsets, _, weights = tbe(batches[0])
    update, deltas = update_deltas(tables, gradient, indices, offsets, name, LR, weights,
                                   max_unique_rows=capacity)
    assert len(deltas) >= 2   # the case is chunked
    relaxed = relaxed_lookup(tables, update.tables, update.updated_rows(), *tbe(batches[1]),
                             chunk_deltas=deltas)
    assert relaxed.corrections > 0
    for t in range(2):
        got = read_floats(image, table_base[t], rows[t] * dims[t]).reshape(rows[t], dims[t])
        assert same_bits(got, update.tables[t]).all(), f"table {t}"
    got = read_floats(image, batches[1].addresses["output"], bags * row_floats)
    assert same_bits(got.reshape(bags, row_floats), relaxed.pooled).all(), "batch 1 output"

    # The bags kept on chip are written twice at most: by LOOKUP(1), then once by UPDATE(0).
    # (Bags are numbered in walk order, table by table; all of them are non-empty here.)
    output = batches[1].addresses["output"]
    writes = []   # per bag in walk order: the most any of its lines was written
    for t, dim in enumerate(dims):
        for bag in range(bags):
            first = output + (bag * row_floats + sum(dims[:t])) * 4
            writes.append(max(memory.writes[first + 64 * k] for k in range(dim // 16)))
    assert max(writes[:correction_bags], default=2) <= 2, writes
    if correction_bags == 0:
        assert max(writes) > 2, writes   # some bag went through memory after several chunks


def _four_chunk_batches(case, *, tables_after):
    """Batch 0 (six rows of table 0, then one of table 1: four chunks of two rows, ending in
    tables 0, 0, 1 and 1) and batch 1 (20 occurrences a bag, ``tables_after`` tables), written
    into ``case``'s image in place of its batches (3 bags)."""
    first = Batch(np.array([0, 1, 2, 3, 4, 5, 0, 0, 0, 0], dtype=np.uint32),
                  np.array([0, 3, 5, 6, 7, 9, 10], dtype=np.uint32),
                  np.ones(10, dtype=np.float32), case.batches[0].base)
    draw = np.random.default_rng(42)
    second = Batch(np.concatenate([draw.integers(0, rows, 60)
                                   for rows in case.rows[:tables_after]]).astype(np.uint32),
                   (np.arange(3 * tables_after + 1) * 20).astype(np.uint32),
                   np.ones(60 * tables_after, dtype=np.float32), case.batches[1].base)
    for batch in (first, second):
        for name in ("indices", "offsets", "weights"):
            array, address = getattr(batch, name), batch.addresses[name]
            case.image[address:address + array.nbytes] = array.tobytes()
    return first, second


@pytest.mark.parametrize("correction_bags", [16, 0])
def test_each_correction_pass_walks_only_its_chunks_tables(correction_bags):
    """Batch 0 writes six rows of table 0 and one of table 1 in chunks of two: the chunks
    end in table 0, table 0, table 1 and table 1. The passes walk batch 1's tables 0, 0,
    0 to 1 and 1, so a line of batch 1's indices that only table 1 uses is read twice by the
    passes and one of table 0 three times (not four times each); table 0's MEAN bags are
    finished, scaled and written in the third pass. The output is the golden one."""
    mode = PoolingMode.MEAN
    capacity = 2
    case = TwoBatches.draw(np.random.default_rng(41), (mode, mode), bags=3)
    first, second = _four_chunk_batches(case, tables_after=2)
    batches, bags = [first, second], case.bags
    lookups = [(command(Opcode.LOOKUP, 0, batches[0], bags, 2, "output"), 1),
               (command(Opcode.LOOKUP, 1, batches[1], bags, 2, "output"), 1)]
    update = [(command(Opcode.UPDATE, 0, batches[0], bags, 2, "gradient"), 1)]

    def engine():
        return EmbeddingEngine(**PARAMS, max_unique_rows=capacity,
                               correction_bags=correction_bags)

    # The lookups' own reads, measured on a copy, are taken off the whole run's.
    _, lookup_memory = run(engine(), bytearray(case.image), lookups,
                           descriptors=case.descriptors)
    statuses, memory = run(engine(), case.image, lookups + update,
                           descriptors=case.descriptors, deadline=200_000)
    assert [s.error for s in statuses] == [ErrorCode.NONE] * 3

    indices, offsets = batches[1].indices, batches[1].offsets
    table_1_starts = int(offsets[bags])
    assert table_1_starts >= 32 and indices.size - table_1_starts >= 32  # whole lines each
    base = batches[1].addresses["indices"]
    update_reads = [memory.line_reads[base + 64 * line] -
                    lookup_memory.line_reads[base + 64 * line]
                    for line in range((indices.size + 15) // 16)]
    # One read by the validation, then one per pass that walks the line's table.
    assert update_reads[0] == 1 + 3, update_reads
    assert update_reads[-1] == 1 + 2, update_reads

    def tbe(batch):
        return batch.indices.astype(np.int64), batch.offsets.astype(np.int64), "mean"

    golden, deltas = update_deltas(case.tables, case.gradient, *tbe(batches[0]), LR,
                                   max_unique_rows=capacity)
    assert len(deltas) == 4
    relaxed = relaxed_lookup(case.tables, golden.tables, golden.updated_rows(),
                             *tbe(batches[1]), chunk_deltas=deltas)
    for t in range(2):
        got = read_floats(case.image, case.table_base[t],
                          case.rows[t] * case.dims[t]).reshape(case.rows[t], case.dims[t])
        assert same_bits(got, golden.tables[t]).all(), f"table {t}"
    got = read_floats(case.image, batches[1].addresses["output"], bags * sum(case.dims))
    assert same_bits(got.reshape(bags, -1), relaxed.pooled).all(), "batch 1 output"


def test_next_batch_with_fewer_tables_is_corrected_within_its_own():
    """LOOKUP(1) pools table 0 only while UPDATE(0)'s chunks end in tables 0, 0, 1 and 1: the
    third pass walks batch 1's one table and finishes it, the fourth has nothing left to walk.
    Nothing is read or written past batch 1's buffers; the output is the golden one."""
    mode = PoolingMode.MEAN
    case = TwoBatches.draw(np.random.default_rng(43), (mode, mode), bags=3)
    first, second = _four_chunk_batches(case, tables_after=1)
    bags = case.bags
    output = second.addresses["output"]
    guard = bytes(case.image[output:output + 0x400])   # past batch 1's one-table output
    steps = [(command(Opcode.LOOKUP, 0, first, bags, 2, "output"), 1),
             (command(Opcode.LOOKUP, 1, second, bags, 1, "output"), 1),
             (command(Opcode.UPDATE, 0, first, bags, 2, "gradient"), 1)]
    statuses, memory = run(EmbeddingEngine(**PARAMS, max_unique_rows=2), case.image, steps,
                           descriptors=case.descriptors, deadline=200_000)
    assert [s.error for s in statuses] == [ErrorCode.NONE] * 3

    def tbe(batch):
        return batch.indices.astype(np.int64), batch.offsets.astype(np.int64), "mean"

    golden, deltas = update_deltas(case.tables, case.gradient, *tbe(first), LR,
                                   max_unique_rows=2)
    assert len(deltas) == 4
    relaxed = relaxed_lookup(case.tables[:1], golden.tables[:1], golden.updated_rows()[:1],
                             *tbe(second), chunk_deltas=[chunk[:1] for chunk in deltas])
    dim = case.dims[0]
    got = read_floats(case.image, output, bags * dim)
    assert same_bits(got.reshape(bags, dim), relaxed.pooled).all(), "batch 1 output"
    after = output + bags * dim * 4
    assert bytes(case.image[after:output + 0x400]) == guard[after - output:]
    assert not [line for line in memory.writes if after <= line < output + 0x400]


def units_of(design, kind):
    """How many ``kind`` components the elaborated design holds."""
    def walk(fragment):
        found = sum(isinstance(origin, kind) for origin in fragment.origins or ())
        return found + sum(walk(sub) for sub, _, _ in fragment.subfragments)
    return walk(Fragment.get(design, None))


def test_engine_without_relaxed_lookup_runs_strict_and_builds_no_correction():
    """``relaxed_lookup=False`` (the board's configuration): no relaxed ports, one walker, no
    correction sequencer; LOOKUP(0), a chunked UPDATE(0) and LOOKUP(1) still match the golden
    model bit for bit."""
    mode = PoolingMode.MEAN
    capacity = 4
    engine = EmbeddingEngine(**PARAMS, max_unique_rows=capacity, relaxed_lookup=False)
    assert not engine.relaxed_lookup
    assert not {"relaxed", "deferred", "forget_deferred"} & set(engine.signature.members)
    assert units_of(engine, CorrectionSequencer) == 0
    assert units_of(engine, OccurrenceWalker) == 1
    relaxed_engine = EmbeddingEngine(**PARAMS, max_unique_rows=capacity)
    assert (units_of(relaxed_engine, CorrectionSequencer),
            units_of(relaxed_engine, OccurrenceWalker)) == (1, 2)

    case = TwoBatches.draw(np.random.default_rng(33), (mode, mode))
    bags, batches = case.bags, case.batches
    steps = [(command(Opcode.LOOKUP, 0, batches[0], bags, 2, "output"), 0),
             (command(Opcode.UPDATE, 0, batches[0], bags, 2, "gradient"), 0),
             (command(Opcode.LOOKUP, 1, batches[1], bags, 2, "output"), 0)]
    statuses, _ = run(engine, case.image, steps, descriptors=case.descriptors)
    assert [s.error for s in statuses] == [ErrorCode.NONE] * 3

    def tbe(batch):
        return batch.indices.astype(np.int64), batch.offsets.astype(np.int64), "mean"

    update = sparse_sgd_update(case.tables, case.gradient, *tbe(batches[0]), LR,
                               max_unique_rows=capacity)
    assert len(update.chunks) >= 2   # the update is chunked
    for t in range(2):
        got = read_floats(case.image, case.table_base[t],
                          case.rows[t] * case.dims[t]).reshape(case.rows[t], case.dims[t])
        assert same_bits(got, update.tables[t]).all(), f"table {t}"
    for k, tables in enumerate([case.tables, update.tables]):
        expected = embedding_bag_tbe(tables, *tbe(batches[k]))
        got = read_floats(case.image, batches[k].addresses["output"], bags * sum(case.dims))
        assert same_bits(got.reshape(bags, -1), expected).all(), f"batch {k} output"
