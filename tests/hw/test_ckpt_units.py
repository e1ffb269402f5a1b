# amaranth: UnusedElaboratable=no
"""Unit tests of the checkpoint engine's pieces in Amaranth's simulator: the record formats,
the log writer's groups, and the tap (tables only, bursts, exact duplicate filter, no entry
lost when the buffer is full)."""

import random
from functools import partial

import pytest
from amaranth.hdl import ResetInserter, Signal

from hw.ckpt.layouts import (
    COMMIT_LAYOUT,
    FLAG_LAYOUT,
    GROUP_HEADER_LAYOUT,
    GROUP_MAGIC,
    SUPERBLOCK_LAYOUT,
    FlagState,
    OwnWrite,
    pack,
    record_valid,
    unpack,
)
from hw.ckpt.log_writer import LogWriter
from hw.ckpt.tap import LookupTap
from hw.ckpt.write_tap import UpdateWriteTap
from hw.emb.layouts import table_layout
from tb import pysim

run = partial(pysim.simulate, deadline=50_000)


def test_records_round_trip_and_reject_torn_or_foreign_lines():
    line = pack(FLAG_LAYOUT, batch=7, entries=12, state=FlagState.SET, area=1)
    assert record_valid(FLAG_LAYOUT, line)
    view = unpack(FLAG_LAYOUT, line)
    assert (int(view.batch), int(view.entries), view.state) == (7, 12, FlagState.SET)
    assert not record_valid(FLAG_LAYOUT, bytes(64))
    assert not record_valid(COMMIT_LAYOUT, line)          # another kind's magic
    corrupted = bytearray(line)
    corrupted[5] ^= 1                                      # a flipped batch bit
    assert not record_valid(FLAG_LAYOUT, bytes(corrupted))
    superblock = pack(SUPERBLOCK_LAYOUT, version=1, log_base=0x1000, log_lines=64)
    assert record_valid(SUPERBLOCK_LAYOUT, superblock)
    assert unpack(SUPERBLOCK_LAYOUT, superblock).magic == int.from_bytes(b"TCXLCKPT", "little")


def test_log_writer_fills_groups_and_rewrites_a_flushed_header():
    dut = LogWriter(addr_width=20)
    area = 100
    written = []   # (line, data, kind)

    async def testbench(ctx):
        ctx.set(dut.own_w.ready, 1)
        ctx.set(dut.start, 1)
        ctx.set(dut.batch, 9)
        ctx.set(dut.area, area)
        ctx.set(dut.capacity, 10)
        await ctx.tick()
        ctx.set(dut.start, 0)

        async def entries(lines, flush_after=False):
            for line in lines:
                ctx.set(dut.entries.valid, 1)
                ctx.set(dut.entries.payload.line, line)
                ctx.set(dut.entries.payload.data, line * 3)
                while True:
                    _, _, ready, valid, payload = await ctx.tick().sample(
                        dut.entries.ready, dut.own_w.valid, dut.own_w.payload)
                    if valid:
                        written.append((payload.line, payload.data, payload.kind))
                    if ready:
                        break
            ctx.set(dut.entries.valid, 0)
            ctx.set(dut.flush, int(flush_after))
            for _ in range(4):
                _, _, valid, payload, _sealed = await ctx.tick().sample(
                    dut.own_w.valid, dut.own_w.payload, dut.sealed)
                if valid:
                    written.append((payload.line, payload.data, payload.kind))
            ctx.set(dut.flush, 0)

        await entries([50, 51, 52], flush_after=True)
        assert ctx.get(dut.sealed)
        await entries(list(range(60, 69)), flush_after=True)  # 9 more: 2 past capacity
        assert ctx.get(dut.count) == 10 and ctx.get(dut.overflow)

    run(dut, testbench)
    assert all(kind == OwnWrite.LOG for _, _, kind in written)
    data = {line: value for line, value, _ in written if (line - area) % 8}
    headers = [(line, GROUP_HEADER_LAYOUT.from_bits(value)) for line, value, _ in written
               if (line - area) % 8 == 0]
    logged = [50, 51, 52, *range(60, 67)]  # the first 10
    for i, line in enumerate(logged):
        assert data[area + 8 * (i // 7) + 1 + i % 7] == line * 3
    # Group 0: written partial (3), then full (7); group 1: partial (3) at the second flush.
    assert [(line, int(h.count)) for line, h in headers] == [(area, 3), (area, 7),
                                                            (area + 8, 3)]
    final = headers[1][1]
    assert int(final.magic) == GROUP_MAGIC and int(final.batch) == 9
    assert [int(final.lines[k]) for k in range(7)] == logged[:7]


async def start_tap(ctx, dut, tables):
    """Give the tap its tables (20-bit addresses), let it compute their extents (and empty its
    filter), enable it; returns the cycles from ``start`` to ``ready``."""
    for t, table in enumerate(tables):
        ctx.set(dut.tables[t], table_layout(20).const(table))
    ctx.set(dut.table_count, len(tables))
    ctx.set(dut.start, 1)
    await ctx.tick()
    ctx.set(dut.start, 0)
    cycles = 1
    while not ctx.get(dut.ready):
        await ctx.tick()
        cycles += 1
    ctx.set(dut.enable, 1)
    return cycles


async def members(ctx, dut, lines):
    """The tap's membership answer for each line (one question per cycle)."""
    answers = {}
    for line in lines:
        ctx.set(dut.member_line, line)
        await ctx.tick()
        answers[line] = ctx.get(dut.member_hit)   # (the question was registered at the edge)
    return answers


@pytest.mark.parametrize("dedup", [0, 16])
def test_tap_logs_table_lines_once_and_never_drops_an_entry(dedup):
    dut = LookupTap(addr_width=20, id_width=4, max_tables=2, buffer_depth=8,
                    dedup_entries=dedup)
    tables = [{"base": 0, "rows": 16, "dim": 32, "mode": 0},      # lines 0..31
              {"base": 64 * 64, "rows": 8, "dim": 16, "mode": 0}]  # lines 64..71
    draw = random.Random(dedup)
    reads = [draw.choice([*range(0, 32), *range(64, 72), 200, 201]) for _ in range(60)]
    entries = []

    async def testbench(ctx):
        await start_tap(ctx, dut, tables)
        # One read in flight per ID; the data comes back 3 cycles later; the consumer is
        # slow, so the buffer fills and the tap must hold the read data.
        pending = []   # (due cycle, id, line)
        queue = list(enumerate(reads))
        cycle = 0
        busy = set()
        while queue or pending or not ctx.get(dut.empty):
            cycle += 1
            ar = None
            if queue and queue[0][0] % 16 not in busy:
                ar = queue[0]
                ctx.set(dut.arvalid, 1)
                ctx.set(dut.arid, ar[0] % 16)
                ctx.set(dut.araddr, ar[1] * 64)
            else:
                ctx.set(dut.arvalid, 0)
            hold = ctx.get(dut.ar_hold)
            fire = ar is not None and not hold
            ctx.set(dut.ar_fire, int(fire))
            head = pending[0] if pending and pending[0][0] <= cycle else None
            r_fire = head is not None and not ctx.get(dut.r_hold)
            ctx.set(dut.r_fire, int(r_fire))
            if head:
                ctx.set(dut.rid, head[1])
                ctx.set(dut.rdata, head[2] + 1000)
                ctx.set(dut.rlast, 1)
                ctx.set(dut.rresp, 0)
            ctx.set(dut.entries.ready, int(cycle % 5 == 0))
            _, _, valid, ready, payload = await ctx.tick().sample(
                dut.entries.valid, dut.entries.ready, dut.entries.payload)
            if valid and ready:
                entries.append((int(payload.line), int(payload.data)))
            if fire:
                queue.pop(0)
                busy.add(ar[0] % 16)
                pending.append((cycle + 3, ar[0] % 16, ar[1]))
            if r_fire:
                pending.pop(0)
                busy.discard(head[1])
        answers.update(await members(ctx, dut, range(256)))

    answers = {}
    run(dut, testbench)
    table_reads = [line for line in reads if line < 100]
    # Membership: every line read from a table, no line outside the tables.
    assert [line for line in set(table_reads) if not answers[line]] == []
    assert [line for line in range(256) if answers[line]
            and not (line < 32 or 64 <= line < 72)] == []
    if not dedup:
        assert all(answers[line] for line in [*range(32), *range(64, 72)])
    assert [(line, value) for line, value in entries if value != line + 1000] == []
    if dedup:
        # Every table line at least once (no false hit), fewer entries than reads (a line is
        # logged again only after another line evicted it from the filter).
        logged = [line for line, _ in entries]
        assert set(logged) == set(table_reads)
        assert len(logged) < len(table_reads)
    else:
        assert [line for line, _ in entries] == table_reads


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_tap_follows_bursts_beat_by_beat(seed):
    """Bursts of 1-4 beats on 4 IDs, their beats interleaved across IDs and often back to back
    on one ID, some with an error response: every good beat of a table read is logged with
    its own line, and a bad beat is skipped without shifting the lines after it."""
    dut = LookupTap(addr_width=20, id_width=2, max_tables=1, buffer_depth=64, dedup_entries=0)
    table = {"base": 0, "rows": 64, "dim": 16, "mode": 0}   # lines 0..63
    draw = random.Random(seed)
    # (ID, first line, beats): table reads, and reads past the table (not logged).
    reads = [(n % 4, draw.choice([draw.randrange(0, 60), draw.randrange(100, 120)]),
              draw.randint(1, 4)) for n in range(120)]
    expected, entries = [], []

    async def testbench(ctx):
        await start_tap(ctx, dut, [table])
        ctx.set(dut.entries.ready, 1)
        queue = list(reads)
        in_flight = {}   # ID -> [next line, beats left, table read?]
        while queue or in_flight or not ctx.get(dut.empty):
            ar = queue[0] if queue and queue[0][0] not in in_flight else None
            ctx.set(dut.arvalid, int(ar is not None))
            if ar is not None:
                ctx.set(dut.arid, ar[0])
                ctx.set(dut.araddr, ar[1] * 64)
                ctx.set(dut.arlen, ar[2] - 1)
            fire = ar is not None and not ctx.get(dut.ar_hold) and draw.random() < 0.7
            ctx.set(dut.ar_fire, int(fire))
            beat = None
            if in_flight and draw.random() < 0.8:
                # Mostly the ID that sent its last beat, so beats come back to back on one ID.
                ids = sorted(in_flight)
                beat = ids[0] if draw.random() < 0.6 else draw.choice(ids)
            ctx.set(dut.r_fire, int(beat is not None))
            if beat is not None:
                line, left, logged = in_flight[beat]
                error = draw.random() < 0.1
                ctx.set(dut.rid, beat)
                ctx.set(dut.rdata, line + 1000)
                ctx.set(dut.rresp, 2 if error else 0)
                ctx.set(dut.rlast, int(left == 1))
                if logged and not error:
                    expected.append((line, line + 1000))
            _, _, valid, payload = await ctx.tick().sample(dut.entries.valid,
                                                            dut.entries.payload)
            if valid:
                entries.append((int(payload.line), int(payload.data)))
            if fire:
                queue.pop(0)
                in_flight[ar[0]] = [ar[1], ar[2], ar[1] < 64]
            if beat is not None:
                in_flight[beat][0] += 1
                in_flight[beat][1] -= 1
                if in_flight[beat][1] == 0:
                    del in_flight[beat]

    run(dut, testbench)
    assert len(expected) > 100, "the draw made too few table beats to test"
    assert entries == expected, f"seed {seed}"


@pytest.mark.parametrize("seed", [1, 2])
def test_tap_membership_has_no_false_negative_when_lines_evict_each_other(seed):
    """Table reads of 64 lines answered one beat per cycle through a 16-slot filter, so lines
    often evict each other, also on consecutive beats: every line read is a member after
    that, and a slot that never lost a line answers exactly."""
    dut = LookupTap(addr_width=20, id_width=4, max_tables=1, buffer_depth=64,
                    dedup_entries=16)
    draw = random.Random(seed)
    # Lines 1 and 16 share slot 1 (the XOR fold of nibbles) and come back to back, first
    # (the second is pushed while the first's push is not yet in the slot's valid bit); no
    # other line of slot 1 follows, so nothing else marks the slot as having lost a line.
    others = [line for line in range(64) if (line & 15) ^ (line >> 4) != 1]
    reads = [1, 16] + [draw.choice(others) for _ in range(40)]
    answers = {}

    async def testbench(ctx):
        await start_tap(ctx, dut, [{"base": 0, "rows": 64, "dim": 16, "mode": 0}])
        await read_beats(ctx, dut, reads)
        answers.update(await members(ctx, dut, range(80)))

    run(dut, testbench)
    assert [line for line in set(reads) if not answers[line]] == [], f"seed {seed}"
    assert not any(answers[line] for line in range(64, 80))
    # (Some line not read is not a member: the answer is not simply "every table line".)
    assert not all(answers[line] for line in range(64)), f"seed {seed}"


def test_tap_filter_is_exact_for_back_to_back_repeats():
    """Table reads answered one beat per cycle, many on the same line back to back or two
    apart: with no line evicting another (16 lines, 16 filter slots), each is logged once,
    at its first read, and every other read counts as a duplicate."""
    dut = LookupTap(addr_width=20, id_width=4, max_tables=1, buffer_depth=64,
                    dedup_entries=16)
    draw = random.Random(7)
    reads = []
    while len(reads) < 200:
        reads += [draw.randrange(16)] * draw.randint(1, 3)
    entries = []

    async def testbench(ctx):
        await start_tap(ctx, dut, [{"base": 0, "rows": 16, "dim": 16, "mode": 0}])
        entries.extend(await read_beats(ctx, dut, reads))
        assert ctx.get(dut.duplicates) == len(reads) - len(set(reads))

    run(dut, testbench)
    first_reads = list(dict.fromkeys(reads))
    assert entries == [(line, line + 1000) for line in first_reads]


@pytest.mark.parametrize("seed", [1, 2])
def test_write_tap_logs_the_member_writes_in_order_under_back_pressure(seed):
    """Writes taken whenever the tap does not hold them, its membership answered a cycle
    later (members: even lines), the log taking entries at random: every member write
    becomes one entry, in order, with the generation it was taken in, and none is lost while
    the buffer is full."""
    dut = UpdateWriteTap(addr_width=20)
    draw = random.Random(seed)
    writes = [(draw.randrange(1 << 14), draw.getrandbits(512), index // 50 % 2)
              for index in range(200)]
    entries = []

    async def testbench(ctx):
        queue = list(writes)
        asked = None
        idle = 0
        while queue or idle < 10:
            # The tap's answer, for the line asked on the cycle before.
            ctx.set(dut.member_hit, int(asked is not None and asked % 2 == 0))
            offer = bool(queue) and draw.random() < 0.8
            fire = offer and not ctx.get(dut.w_hold)
            ctx.set(dut.enable, 1)
            ctx.set(dut.w_fire, int(fire))
            if offer:
                ctx.set(dut.w_line, queue[0][0])
                ctx.set(dut.w_data, queue[0][1])
                ctx.set(dut.generation, queue[0][2])
            ctx.set(dut.entries.ready, int(draw.random() < 0.3))
            asked = ctx.get(dut.member_line) if fire else None
            _, _, valid, ready, payload = await ctx.tick().sample(
                dut.entries.valid, dut.entries.ready, dut.entries.payload)
            if valid and ready:
                entries.append((int(payload.line), int(payload.data),
                                int(payload.generation)))
            if fire:
                queue.pop(0)
            idle = idle + 1 if not queue and ctx.get(dut.empty) else 0

    run(dut, testbench)
    assert entries == [write for write in writes if write[0] % 2 == 0], f"seed {seed}"


def test_write_tap_checks_its_buffer_depth():
    with pytest.raises(ValueError, match=r"^Write tap buffer depth must be a power of two >= 4, "
                                         r"not 6$"):
        UpdateWriteTap(addr_width=20, buffer_depth=6)


async def read_beats(ctx, dut, lines):
    """Table reads of ``lines``, one beat per cycle (ID n % 16), data line + 1000, never held;
    returns the entries the tap produces until it is empty."""
    entries = []

    async def step():
        _, _, valid, payload = await ctx.tick().sample(dut.entries.valid, dut.entries.payload)
        if valid:
            entries.append((int(payload.line), int(payload.data)))

    ctx.set(dut.entries.ready, 1)
    ctx.set(dut.rlast, 1)
    ctx.set(dut.rresp, 0)
    answer = None
    for n in range(len(lines) + 1):
        ctx.set(dut.arvalid, int(n < len(lines)))
        ctx.set(dut.ar_fire, int(n < len(lines)))
        if n < len(lines):
            ctx.set(dut.arid, n % 16)
            ctx.set(dut.araddr, lines[n] * 64)
        ctx.set(dut.r_fire, int(answer is not None))
        if answer is not None:
            ctx.set(dut.rid, answer[0])
            ctx.set(dut.rdata, answer[1] + 1000)
        assert not ctx.get(dut.ar_hold) and not ctx.get(dut.r_hold)
        await step()
        answer = (n % 16, lines[n]) if n < len(lines) else None
    for signal in (dut.arvalid, dut.ar_fire, dut.r_fire):
        ctx.set(signal, 0)
    while not ctx.get(dut.empty):
        await step()
    return entries


def test_tap_skips_the_previous_batchs_lines_only_when_asked():
    """Batch A reads some of 16 lines (16 filter slots: no eviction); batch B, started with
    ``skip_previous``, logs only its lines A did not read, yet all of its lines are members
    and its repeats of a skipped line are duplicates; batch C (same reads, no skip) logs all."""
    dut = LookupTap(addr_width=20, id_width=4, max_tables=1, buffer_depth=64,
                    dedup_entries=16)
    draw = random.Random(11)
    reads_a = [draw.randrange(10) for _ in range(30)]
    reads_b = [draw.randrange(4, 16) for _ in range(40)]
    table = {"base": 0, "rows": 16, "dim": 16, "mode": 0}
    results = {}

    async def testbench(ctx):
        await start_tap(ctx, dut, [table])
        results["a"] = await read_beats(ctx, dut, reads_a)
        ctx.set(dut.skip_previous, 1)
        await start_tap(ctx, dut, [table])
        ctx.set(dut.skip_previous, 0)
        results["b"] = await read_beats(ctx, dut, reads_b)
        results["b_members"] = await members(ctx, dut, range(16))
        results["b_counts"] = (ctx.get(dut.shared), ctx.get(dut.duplicates))
        await start_tap(ctx, dut, [table])
        results["c"] = await read_beats(ctx, dut, reads_b)

    run(dut, testbench)
    first_b = list(dict.fromkeys(reads_b))
    assert results["a"] == [(line, line + 1000) for line in dict.fromkeys(reads_a)]
    assert results["b"] == [(line, line + 1000) for line in first_b if line not in reads_a]
    assert [line for line in range(16) if results["b_members"][line]] == sorted(first_b)
    shared = len([line for line in first_b if line in reads_a])
    assert shared > 0 and results["b_counts"] == (shared, len(reads_b) - len(first_b))
    assert results["c"] == [(line, line + 1000) for line in first_b]


def test_tap_filter_empties_across_epoch_wraps_and_resets():
    """Eight batches through a 16-slot filter whose words have 2-bit epochs (each bank wraps
    and is swept every third use), then a reset: every batch logs each of its lines once, its
    members are exactly its lines (a word of an earlier batch never counts), ``ready`` waits
    for a sweep exactly when a bank's epochs run out and after the reset, and the batch after
    the reset, which reads the lines the last one did, logs them again."""
    dut = LookupTap(addr_width=20, id_width=4, max_tables=1, buffer_depth=64,
                    dedup_entries=16, epoch_bits=2)
    draw = random.Random(5)
    batches = [[draw.randrange(16) for _ in range(20)] for _ in range(8)]
    batches.append(batches[-1])   # after the reset
    table = {"base": 0, "rows": 16, "dim": 16, "mode": 0}
    logged, member_sets, waits = [], [], []
    reset = Signal()   # (memory keeps its contents across it, as on the device)

    async def testbench(ctx):
        for n, reads in enumerate(batches):
            if n == len(batches) - 1:
                ctx.set(reset, 1)
                await ctx.tick()
                ctx.set(reset, 0)
            waits.append(await start_tap(ctx, dut, [table]))
            logged.append([line for line, _ in await read_beats(ctx, dut, reads)])
            answers = await members(ctx, dut, range(16))
            member_sets.append({line for line, hit in answers.items() if hit})

    run(ResetInserter(reset)(dut), testbench)
    for n, reads in enumerate(batches):
        assert logged[n] == list(dict.fromkeys(reads)), f"batch {n}"
        assert member_sets[n] == set(reads), f"batch {n}"
    # Bank 1 serves batches 0, 2, 4, 6 (epochs 2, 3, then swept: 1, 2), bank 0 batches 1, 3,
    # 5, 7 (epochs 2, 3, swept, 2); a reset sweeps both banks (batch 0 starts during the
    # power-on one); the extents take the rest.
    extents = min(waits)
    swept = [n for n, cycles in enumerate(waits) if cycles > extents]
    assert swept == [0, 4, 5, 8]
    assert all(waits[n] >= dut.sweep_cycles for n in swept)


def test_tap_checks_its_epoch_width():
    with pytest.raises(ValueError, match=r"^Filter epoch width must be an integer in 1\.\.16, "
                                         r"not 0$"):
        LookupTap(addr_width=20, id_width=4, max_tables=1, epoch_bits=0)
