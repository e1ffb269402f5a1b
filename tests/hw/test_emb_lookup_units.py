# amaranth: UnusedElaboratable=no
"""Unit tests (Amaranth simulator) of the lookup engine's pieces and its parameter checks."""

import itertools
import random
from functools import partial

import numpy as np
import pytest
from amaranth.hdl import ResetInserter, Signal
from amaranth.lib import data

from hw.emb.checks import CommandChecker
from hw.emb.gather import OpKind, op_layout
from hw.emb.layouts import ErrorCode, Opcode, PoolingMode, command_layout, table_layout
from hw.emb.lookup import LookupEngine
from hw.emb.pool import Pooler
from hw.emb.reciprocal import Reciprocal
from hw.emb.validate import IndexValidator, OffsetsMode, OffsetsValidator
from hw.fp import FPAdd, FPMul
from hw.mem.line_stream import LinePrefetch, LineStream
from hw.mem.line_writer import LineWriter
from hw.mem.reorder import ReadReorderBuffer
from tb import pysim

simulate = partial(pysim.simulate, deadline=50_000)


def pack_line(values):
    return sum(int(v) << (32 * k) for k, v in enumerate(values))


def lines_of(values):
    values = list(values) + [0] * (-len(values) % 16)
    return [pack_line(values[k:k + 16]) for k in range(0, len(values), 16)]


# ------------------------------------------------------------------------------ reciprocal

def test_reciprocal_matches_numpy():
    dut = Reciprocal(tag_width=8)
    draw = random.Random(1)
    values = [0, 1, 2, 3, 5, 7, 100, 2**24 - 1, 2**24, 2**24 + 1, 2**24 + 3, 2**25 + 5,
              0xFFFF_FF7F, 0xFFFF_FF80, 0xFFFF_FFFF, *range(8, 300),
              *(draw.randrange(1, 2**32) for _ in range(300))]
    got = []

    async def testbench(ctx):
        for k in range(len(values) + dut.latency):
            ctx.set(dut.i.valid, k < len(values))
            if k < len(values):
                ctx.set(dut.i.payload.n, values[k])
                ctx.set(dut.i.payload.tag, k & 0xFF)
            await ctx.tick()
            if ctx.get(dut.o.valid):
                got.append((ctx.get(dut.o.payload.result), ctx.get(dut.o.payload.tag)))

    simulate(dut, testbench)
    with np.errstate(divide="ignore"):  # 1/0 is +inf, as in the hardware
        expected = [(int((np.float32(1) / np.float32(v)).view(np.uint32)), k & 0xFF)
                    for k, v in enumerate(values)]
    assert got == expected


@pytest.mark.parametrize("value", [0, 27, "2"])
def test_reciprocal_rejects_bad_stage_width(value):
    with pytest.raises(ValueError, match=r"^Bits per stage must be an integer in 1\.\.26, not"):
        Reciprocal(bits_per_stage=value)


# ---------------------------------------------------------------------- reorder buffer

@pytest.mark.parametrize("line_slices", [None, 1, 4])
def test_reorder_buffer_returns_in_order_over_shuffled_responses(line_slices):
    depth = 8
    context = data.StructLayout({"tag": 16})
    dut = ReadReorderBuffer(depth=depth, addr_width=20, data_width=32, context=context,
                            line_slices=line_slices)
    draw = random.Random(3)
    requests = [(k, draw.random() < 0.75, draw.random() < 0.05) for k in range(300)]
    issued = {}        # id -> tag of the read it is serving
    popped = []
    reads = {}         # tag -> error

    async def requester(ctx):
        for tag, read, error in requests:
            ctx.set(dut.request.valid, 1)
            ctx.set(dut.request.payload, {"addr": tag, "read": read, "context": {"tag": tag}})
            await ctx.tick().until(dut.request.ready)
            if read:
                reads[tag] = error
        ctx.set(dut.request.valid, 0)

    async def memory(ctx):
        ctx.set(dut.ar.ready, 1)
        waiting = []
        while len(popped) < len(requests):
            _, _, ar_valid, ar_ready, ar_id, ar_addr = await ctx.tick().sample(
                dut.ar.valid, dut.ar.ready, dut.ar.payload.id, dut.ar.payload.addr)
            if ar_valid and ar_ready:
                assert ar_id not in waiting, "an ID was reused while its read was in flight"
                issued[ar_id] = ar_addr
                waiting.append(ar_id)
            ctx.set(dut.ar.ready, draw.random() < 0.8)
            ctx.set(dut.response.valid, 0)
            if waiting and draw.random() < 0.6:
                slot = waiting.pop(draw.randrange(len(waiting)))
                tag = issued[slot]
                ctx.set(dut.response.valid, 1)
                ctx.set(dut.response.payload, {"id": slot, "data": tag * 3,
                                               "error": requests[tag][2]})

    async def consumer(ctx):
        while len(popped) < len(requests):
            ctx.set(dut.pop.ready, draw.random() < 0.7)
            _, _, valid, ready, payload = await ctx.tick().sample(
                dut.pop.valid, dut.pop.ready, dut.pop.payload)
            if valid and ready:
                tag = payload.context.tag
                popped.append(tag)
                if tag in reads:
                    assert payload.data == tag * 3
                    assert payload.error == reads[tag]

    simulate(dut, requester, memory, consumer)
    assert popped == [tag for tag, _, _ in requests]


def test_reorder_buffer_rejects_bad_depth():
    with pytest.raises(ValueError, match=r"^Depth must be a power of two, at least 2, not 12$"):
        ReadReorderBuffer(depth=12, addr_width=20, data_width=32, context=1)
    with pytest.raises(ValueError, match=r"^Line slices must be None or an integer in 1..32 "
                                         r"\(the data width\), not 33$"):
        ReadReorderBuffer(depth=4, addr_width=20, data_width=32, context=1, line_slices=33)


# ------------------------------------------------------------- line stream and prefetch

@pytest.mark.parametrize(("pointer_copies", "registered_fetch", "landing_ahead"),
                         [(1, False, False), (4, False, False), (1, True, False),
                          (1, True, True), (4, False, True)])
def test_line_stream_respects_its_window_and_lands_in_order(pointer_copies, registered_fetch,
                                                            landing_ahead):
    from amaranth.hdl import Module

    capacity = 4
    m = Module()
    m.submodules.stream = window = LineStream(capacity=capacity, addr_width=20, line_width=32,
                                              registered_fetch=registered_fetch,
                                              landing_ahead=landing_ahead)
    m.submodules.prefetch = prefetch = LinePrefetch(line_width=32, pointer_copies=pointer_copies,
                                                    registered_issue=registered_fetch)
    m.d.comb += [window.check_addr.eq(prefetch.addr), prefetch.data.eq(window.check_data),
                 prefetch.limit.eq(window.written)]
    draw = random.Random(5)
    count = 23
    got = []
    in_flight = []

    async def control(ctx):
        ctx.set(window.base, 100)
        ctx.set(window.count, count)
        ctx.set(window.start, 1)
        ctx.set(prefetch.restart, 1)
        await ctx.tick()
        ctx.set(window.start, 0)
        ctx.set(prefetch.restart, 0)

    async def memory(ctx):
        await ctx.tick()
        landing = upcoming = False
        while len(got) < count:
            ctx.set(window.ar.ready, draw.random() < 0.7)
            _, _, valid, ready, address, issued, freed, idle = await ctx.tick().sample(
                window.ar.valid, window.ar.ready, window.ar.payload.addr, window.written,
                window.freed, window.idle)
            # (Sampled before the edge: the read taken then and the line landing then, the
            # one popped last time round, still count as in flight.)
            assert idle == (not in_flight and not landing), \
                f"idle {idle} with {len(in_flight) + landing} reads in flight"
            if valid and ready:
                in_flight.append(address)
            assert len(in_flight) + issued - freed <= capacity, "read beyond the window"
            # A landing is decided a cycle ahead, and told with `landing_ahead`.
            landing = upcoming
            ctx.set(window.response.valid, landing)
            if landing:
                ctx.set(window.response.payload.data, in_flight.pop(0) * 7)
            upcoming = bool(in_flight) and draw.random() < 0.5
            if landing_ahead:
                ctx.set(window.response_ahead, upcoming)

    async def consumer(ctx):
        while len(got) < count:
            ctx.set(prefetch.lines.ready, draw.random() < 0.5)
            _, _, valid, ready, line = await ctx.tick().sample(
                prefetch.lines.valid, prefetch.lines.ready, prefetch.lines.payload)
            if valid and ready:
                got.append(line)
                ctx.set(window.freed, len(got))

    simulate(m, control, memory, consumer)
    assert got == [(100 + k) * 7 for k in range(count)]


@pytest.mark.parametrize("registered_issue", [False, True])
def test_line_prefetch_reads_no_line_past_a_limit_lowered_by_a_restart(registered_issue):
    """The window restarts with the stream: its limit falls to 0 and grows again. A line at
    or past the limit of the cycle it is read in reads as poison and must never come out."""
    prefetch = LinePrefetch(line_width=32, registered_issue=registered_issue)
    limit = {"now": 100}

    async def window(ctx):  # a read port: the line at `addr`, a cycle later
        async for _, _, address in ctx.tick().sample(prefetch.addr):
            ctx.set(prefetch.data, address * 7 if address < limit["now"] else 0xDEAD)

    async def bench(ctx):
        got = []
        ctx.set(prefetch.lines.ready, 1)
        for first_limit, later_limits in ((100, []), (0, [0, 0, 2, 2, 2, 3, 6, 6, 6, 6, 6, 6])):
            limit["now"] = first_limit
            ctx.set(prefetch.limit, first_limit)
            ctx.set(prefetch.restart, 1)
            await ctx.tick()
            ctx.set(prefetch.restart, 0)
            for value in later_limits or [100] * 6:
                limit["now"] = value
                ctx.set(prefetch.limit, value)
                _, _, valid, line = await ctx.tick().sample(prefetch.lines.valid,
                                                            prefetch.lines.payload)
                if valid:
                    got.append(line)
        assert 0xDEAD not in got, got
        assert got[-6:] == [7 * k for k in range(6)], got

    simulate(prefetch, bench, processes=(window,), deadline=500)


@pytest.mark.parametrize("registered_issue", [False, True])
@pytest.mark.parametrize("pointer_copies", [1, 4])
@pytest.mark.parametrize("taken", [1, 2, 3])
@pytest.mark.parametrize("stalled", [0, 1, 2])
def test_line_prefetch_restarts_while_a_line_lands(pointer_copies, taken, stalled,
                                                   registered_issue):
    """A restart while slots are full and a read is in flight drops them: the lines after
    it come from the new first line, whichever slot the old stream had reached."""
    prefetch = LinePrefetch(line_width=32, pointer_copies=pointer_copies,
                            registered_issue=registered_issue)

    async def window(ctx):  # a read port: the line at `addr`, a cycle later
        async for _, _, address in ctx.tick().sample(prefetch.addr):
            ctx.set(prefetch.data, address * 7)

    async def bench(ctx):
        got = []
        ctx.set(prefetch.limit, 100)
        for first, lines in ((0, taken), (40, 6)):
            ctx.set(prefetch.first, first)
            ctx.set(prefetch.restart, 1)
            await ctx.tick()
            ctx.set(prefetch.restart, 0)
            ctx.set(prefetch.lines.ready, 1)
            wanted = len(got) + lines
            while len(got) < wanted:
                _, _, valid, line = await ctx.tick().sample(prefetch.lines.valid,
                                                            prefetch.lines.payload)
                if valid:
                    got.append(line)
            ctx.set(prefetch.lines.ready, 0)
            for _ in range(stalled):  # (lines land while none is taken)
                await ctx.tick()
        assert got == [7 * k for k in range(taken)] + [7 * (40 + k) for k in range(6)]

    simulate(prefetch, bench, processes=(window,), deadline=500)


@pytest.mark.parametrize("registered_fetch", [False, True])
def test_line_stream_reads_a_line_per_cycle_and_stops_at_its_count(registered_fetch):
    """With room to spare the window asks for a line every cycle from the cycle after
    ``start``, ``count`` lines and no more, and a second ``start`` begins again from 0."""
    window = LineStream(capacity=8, addr_width=20, line_width=32,
                        registered_fetch=registered_fetch)
    asked = []

    async def bench(ctx):
        ctx.set(window.ar.ready, 1)
        ctx.set(window.freed, 0)
        for base, count in ((40, 5), (200, 0), (7, 3)):
            await pysim.start(ctx, window, base=base, count=count)
            lines = []
            for cycle in range(count + 4):
                if ctx.get(window.ar.valid):
                    assert cycle == len(lines), f"line {len(lines)} asked in cycle {cycle}"
                    lines.append(ctx.get(window.ar.payload.addr))
                await ctx.tick()
            asked.append(lines)
            ctx.set(window.response.valid, 1)  # land them, so that the window is idle again
            for _ in range(count):
                await ctx.tick()
            ctx.set(window.response.valid, 0)

    simulate(window, bench)
    assert asked == [[40, 41, 42, 43, 44], [], [7, 8, 9]]


def test_line_stream_rejects_a_registered_fetch_that_is_not_a_bool():
    with pytest.raises(TypeError, match=r"^Registered fetch must be True or False, not 1$"):
        LineStream(capacity=4, addr_width=20, registered_fetch=1)
    with pytest.raises(TypeError, match=r"^Landing ahead must be True or False, not 1$"):
        LineStream(capacity=4, addr_width=20, landing_ahead=1)
    with pytest.raises(TypeError, match=r"^Registered issue must be True or False, not 1$"):
        LinePrefetch(registered_issue=1)


@pytest.mark.parametrize("copies", [0, 3, True, 2.0])
def test_line_prefetch_pointer_copies_must_divide_the_line(copies):
    with pytest.raises(ValueError, match=rf"^Pointer copies must be a positive integer that "
                                         rf"divides the line width 32, not {copies!r}$"):
        LinePrefetch(line_width=32, pointer_copies=copies)


# ------------------------------------------------------------------------ validators

def offsets_reference(offsets, bags, num_indices):
    last = len(offsets) - 1
    for i, value in enumerate(offsets):
        code = None
        if i == 0 and value != 0:
            code = ErrorCode.OFFSETS_NOT_FROM_ZERO
        elif i > 0 and value < offsets[i - 1]:
            code = ErrorCode.OFFSETS_DECREASING
        elif value > num_indices or (i == last and value != num_indices):
            code = ErrorCode.OFFSETS_PAST_END
        if code is not None:
            table, bag = divmod(i, bags) if bags else (0, 0)
            return {"code": code, "table": table, "bag": bag, "position": i}
    return {"code": ErrorCode.NONE, "table": 0, "bag": 0, "position": 0}


def random_offsets(draw, tables, bags):
    lengths = [draw.choice([0, 0, 1, 2, 5, 17]) for _ in range(tables * bags)]
    offsets = [0]
    for length in lengths:
        offsets.append(offsets[-1] + length)
    num_indices = offsets[-1]
    fault = draw.randrange(6)
    spot = draw.randrange(len(offsets))
    if fault == 1:
        offsets[spot] = max(0, offsets[spot] - 1 - draw.randrange(3))
    elif fault == 2:
        offsets[spot] = num_indices + 1 + draw.randrange(3)
    elif fault == 3:
        num_indices += draw.choice([-1, 1]) if num_indices else 1
    return offsets, num_indices


async def feed_until_done(ctx, dut, lines, draw, *, busy=0.3, watch=()):
    """After ``start``: offer ``lines`` with random gaps until the validator is done; return
    the values of ``watch`` in the first cycle ``done`` is high (what a consumer sees), the
    highest ``checked`` seen on the way and how many lines the validator took."""
    pending = list(lines)
    highest_checked = 0
    taken_lines = 0
    for _ in range(5000):   # (a walk that never ends fails, rather than hangs)
        offer = bool(pending) and draw.random() >= busy
        ctx.set(dut.lines.valid, offer)
        if offer:
            ctx.set(dut.lines.payload, pending[0])
        _, _, taken, done, checked, *watched = await ctx.tick().sample(
            dut.lines.ready, dut.done, dut.checked, *watch)
        highest_checked = max(highest_checked, checked)
        if offer and taken:
            pending.pop(0)
            taken_lines += 1
        if done:
            ctx.set(dut.lines.valid, 0)
            return watched, highest_checked, taken_lines
    raise AssertionError("the validator is never done")


def run_offsets_jobs(jobs, *, seed=0, registered_window=False, decide_ahead=False,
                     registered_start=False, registered_error=False, busy=0.3):
    """Run OffsetsValidator jobs one after the other in one simulation; return their results
    (the error as a consumer sees it in the first cycle ``done`` is high).

    A job is ``(offsets, settings)`` with settings bags, tables, num_indices and optionally
    mode, first, end, threshold."""
    dut = OffsetsValidator(max_tables=8, registered_window=registered_window,
                           decide_ahead=decide_ahead, registered_start=registered_start,
                           registered_error=registered_error)
    draw = random.Random(seed)
    results = []

    async def testbench(ctx):
        for offsets, settings in jobs:
            first = settings.get("first", 0)
            ctx.set(dut.mode, settings.get("mode", OffsetsMode.CHECK))
            ctx.set(dut.capture, 1)
            ctx.set(dut.first, first)
            ctx.set(dut.end, settings.get("end", len(offsets)))
            ctx.set(dut.bags, settings["bags"])
            ctx.set(dut.tables, settings["tables"])
            ctx.set(dut.num_indices, settings["num_indices"])
            ctx.set(dut.threshold, settings.get("threshold", 0))
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            (starts, error), highest_checked, taken_lines = await feed_until_done(
                ctx, dut, lines_of(offsets)[first // 16:], draw, busy=busy,
                watch=[dut.table_starts, dut.error])
            results.append({
                "error": {"code": error.code, "table": error.table, "bag": error.bag,
                          "position": error.position},
                "count": ctx.get(dut.count),
                "starts": [starts[t] for t in range(settings["tables"] + 1)],
                "highest_checked": highest_checked,
                "taken_lines": taken_lines, "lines_done": ctx.get(dut.lines_done),
            })

    simulate(dut, testbench)
    return results


# The last is the lookup's with fpga_pipelining.
REGISTERED_WINDOW = pytest.mark.parametrize(
    ("registered_window", "decide_ahead", "registered_start"),
    [(False, False, False), (True, False, False), (True, True, False), (False, False, True),
     (True, True, True)],
    ids=["window", "registered-window", "decided-ahead", "registered-start", "fpga"])


@REGISTERED_WINDOW
@pytest.mark.parametrize("registered_error", [False, True], ids=["error", "registered-error"])
def test_offsets_validator_finds_the_first_problem(registered_window, decide_ahead,
                                                   registered_start, registered_error):
    draw = random.Random(11)
    jobs = []
    for _ in range(40):
        tables, bags = draw.randint(1, 4), draw.choice([0, 1, 3, 16, 21])
        offsets, num_indices = random_offsets(draw, tables, bags)
        jobs.append((offsets, {"bags": bags, "tables": tables, "num_indices": num_indices}))
    results = run_offsets_jobs(jobs, registered_window=registered_window,
                               decide_ahead=decide_ahead, registered_start=registered_start,
                               registered_error=registered_error)
    for (offsets, settings), result in zip(jobs, results, strict=True):
        expected = offsets_reference(offsets, settings["bags"], settings["num_indices"])
        assert result["error"] == expected, (offsets, settings)
        # What the bag sequencer may take: every entry once all passed, never a bad one.
        if expected["code"] == ErrorCode.NONE:
            assert result["highest_checked"] == len(offsets), (offsets, settings)
            # Every line is taken, the last one too, so the next pass starts on a fresh line.
            lines = (len(offsets) + 15) // 16
            assert result["taken_lines"] == result["lines_done"] == lines, (offsets, settings)
            bags = settings["bags"]
            assert result["starts"] == [offsets[t * bags]
                                        for t in range(settings["tables"] + 1)]
        else:
            assert result["highest_checked"] <= expected["position"], (offsets, settings)


@REGISTERED_WINDOW
def test_offsets_validator_counts_bag_starts(registered_window, decide_ahead, registered_start):
    offsets = [0, 3, 3, 7, 9, 9, 9, 12, 20, 21, 30, 31, 32, 40, 41, 43, 44, 50, 51]
    windows = ((9, 2, 9), (0, 0, 5), (43, 5, 19), (100, 17, 18), (8, 5, 8), (9, 7, 7),
               (30, 13, 16))
    jobs = [(offsets, {"bags": 0, "tables": 1, "num_indices": 51, "mode": OffsetsMode.COUNT,
                       "first": first, "end": end, "threshold": threshold})
            for threshold, first, end in windows]
    results = run_offsets_jobs(jobs, registered_window=registered_window,
                               decide_ahead=decide_ahead, registered_start=registered_start)
    for (threshold, first, end), result in zip(windows, results, strict=True):
        assert result["count"] == sum(v <= threshold for v in offsets[first:end])
        assert result["highest_checked"] == end
        lines = (end + 15) // 16 - first // 16 if end > first else 0
        assert result["taken_lines"] == result["lines_done"] == lines


@REGISTERED_WINDOW
@pytest.mark.parametrize("registered_error", [False, True], ids=["error", "registered-error"])
def test_offsets_validator_stops_at_the_first_of_close_problems(registered_window, decide_ahead,
                                                                registered_start,
                                                                registered_error):
    """With lines always there the walk takes a segment every cycle, so the segments taken
    while a bad one is compared and judged (one, or two with ``registered_window``) must be
    dropped: the next problem, or the good entries after the first, must not count."""
    bags, tables = 13, 3
    jobs = [(list(range(bags * tables + 1)), {})]
    for first in (1, 4, 6, 7, 18):
        for gap in range(1, 10):
            offsets = list(range(bags * tables + 1))
            offsets[first] = offsets[first - 1] - 1 if first > 1 else 5
            offsets[first + gap] = 100   # past the end (and the entry after it falls)
            jobs.append((offsets, {}))
            good_after = list(range(bags * tables + 1))
            good_after[first] = 100
            jobs.append((good_after, {}))
    for _, settings in jobs:
        settings.update(bags=bags, tables=tables, num_indices=bags * tables)
    results = run_offsets_jobs(jobs, registered_window=registered_window,
                               decide_ahead=decide_ahead, registered_start=registered_start,
                               registered_error=registered_error, busy=0)
    for (offsets, settings), result in zip(jobs, results, strict=True):
        expected = offsets_reference(offsets, bags, settings["num_indices"])
        assert result["error"] == expected, offsets
        if expected["code"] == ErrorCode.NONE:
            assert result["highest_checked"] == len(offsets)
        else:
            assert result["highest_checked"] <= expected["position"], offsets


@REGISTERED_WINDOW
def test_offsets_validator_checked_follows_the_walk_by_its_latency(registered_window, decide_ahead,
                                                                   registered_start):
    dut = OffsetsValidator(max_tables=8, registered_window=registered_window,
                           decide_ahead=decide_ahead, registered_start=registered_start)
    assert dut.checked_latency == (2 if registered_window else 1)
    offsets = list(range(40))
    cycles = {}
    moves = []  # cycles in which `checked` moved

    async def testbench(ctx):
        ctx.set(dut.mode, OffsetsMode.CHECK)
        ctx.set(dut.end, len(offsets))
        ctx.set(dut.bags, 0)
        ctx.set(dut.tables, 1)
        ctx.set(dut.num_indices, offsets[-1])
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        pending = lines_of(offsets)
        previous_checked = 0
        for cycle in range(40):
            ctx.set(dut.lines.valid, bool(pending))
            if pending:
                ctx.set(dut.lines.payload, pending[0])
            _, _, taken, checked, done = await ctx.tick().sample(
                dut.lines.ready, dut.checked, dut.done)
            if pending and taken:
                pending.pop(0)
                if not pending:
                    cycles["last_step"] = cycle
            if checked != previous_checked:
                moves.append(cycle)
                previous_checked = checked
            if checked == len(offsets):
                cycles.setdefault("checked", cycle)
            if done:
                cycles.setdefault("done", cycle)
        assert ctx.get(dut.error.code) == ErrorCode.NONE

    simulate(dut, testbench)
    # The walk's last step moves the cursor to the end the cycle after it.
    assert cycles["checked"] - cycles["last_step"] == 1 + dut.checked_latency
    assert cycles["done"] == cycles["checked"]
    # Lines always there: a segment (of up to four entries) every cycle, or every other
    # cycle when each step is decided the cycle before.
    gaps = [b - a for a, b in itertools.pairwise(moves)]
    assert min(gaps) == (2 if decide_ahead else 1), moves


@REGISTERED_WINDOW
def test_offsets_validator_restarts_mid_walk(registered_window, decide_ahead, registered_start):
    """A ``start`` while the walk runs drops the segments in flight: the old walk's bad
    entries, compared or judged when the new one starts, do not count in the new. Last, an
    empty walk restarted the cycle after its start (with ``registered_start``, as it
    settles): the new walk's start wins, and it is not done before its entries."""
    dut = OffsetsValidator(max_tables=8, registered_window=registered_window,
                           decide_ahead=decide_ahead, registered_start=registered_start)
    bad = [0, 1, 2, 3] + [1000] * 36          # past the end from entry 4 on
    good = list(range(40))
    results = []

    def begin(ctx, offsets):
        ctx.set(dut.mode, OffsetsMode.CHECK)
        ctx.set(dut.end, len(offsets))
        ctx.set(dut.bags, 0)
        ctx.set(dut.tables, 1)
        ctx.set(dut.num_indices, max(len(offsets) - 1, 0))
        ctx.set(dut.start, 1)

    async def testbench(ctx):
        for delay in range(1, 8):
            begin(ctx, bad)
            await ctx.tick()
            ctx.set(dut.start, 0)
            ctx.set(dut.lines.valid, 1)
            ctx.set(dut.lines.payload, lines_of(bad)[0])
            await ctx.tick().repeat(delay)
            begin(ctx, good)
            await ctx.tick()
            ctx.set(dut.start, 0)
            _, highest_checked, _ = await feed_until_done(ctx, dut, lines_of(good),
                                                          random.Random(delay))
            results.append((ctx.get(dut.error.code), highest_checked))
        begin(ctx, [])
        await ctx.tick()
        begin(ctx, good)
        await ctx.tick()
        ctx.set(dut.start, 0)
        _, highest_checked, _ = await feed_until_done(ctx, dut, lines_of(good), random.Random(8))
        results.append((ctx.get(dut.error.code), highest_checked))

    simulate(dut, testbench)
    assert results == [(ErrorCode.NONE, len(good))] * 8


@pytest.mark.parametrize(("registered_window", "decide_ahead"), [(False, False), (True, True)],
                         ids=["window", "decided-ahead"])
def test_offsets_validator_registered_start_costs_one_cycle_a_walk(registered_window,
                                                                   decide_ahead):
    """With ``registered_start`` the walk's first step, its last, and ``done`` (an empty
    walk's too) each come one cycle later; the steps between keep their pace. The empty walk
    follows a full one, whose end leaves ``active`` low and the near values at 0."""
    timings = {}
    for registered_start in (False, True):
        dut = OffsetsValidator(max_tables=8, registered_window=registered_window,
                               decide_ahead=decide_ahead, registered_start=registered_start)
        offsets = list(range(40))
        seen = timings[registered_start] = {}

        async def testbench(ctx, dut=dut, offsets=offsets, seen=seen):
            for name, first, end in (("walk", 0, len(offsets)), ("empty", 7, 7),
                                     ("walk after", 0, len(offsets))):
                ctx.set(dut.mode, OffsetsMode.COUNT)
                ctx.set(dut.first, first)
                ctx.set(dut.end, end)
                ctx.set(dut.threshold, 1000)
                ctx.set(dut.start, 1)
                await ctx.tick()
                ctx.set(dut.start, 0)
                pending = lines_of(offsets)[first // 16:end // 16 + (end % 16 != 0)]
                steps = []
                for cycle in range(60):
                    ctx.set(dut.lines.valid, bool(pending))
                    if pending:
                        ctx.set(dut.lines.payload, pending[0])
                    _, _, taken, done = await ctx.tick().sample(dut.lines.ready, dut.done)
                    if pending and taken:
                        pending.pop(0)
                        steps.append(cycle)
                    if done:
                        break
                ctx.set(dut.lines.valid, 0)
                seen[name] = (steps, cycle, ctx.get(dut.count))

        simulate(dut, testbench)
    for name in ("walk", "empty", "walk after"):
        (steps, done, count), (late_steps, late_done, late_count) = (timings[False][name],
                                                                     timings[True][name])
        assert late_count == count == (0 if name == "empty" else 40), timings
        assert late_steps == [cycle + 1 for cycle in steps], timings
        assert late_done == done + 1, timings


def test_offsets_validator_rejects_non_bool_options():
    with pytest.raises(TypeError, match=r"^Registered window must be True or False, not 1$"):
        OffsetsValidator(max_tables=4, registered_window=1)
    with pytest.raises(TypeError, match=r"^Decide ahead must be True or False, not 'yes'$"):
        OffsetsValidator(max_tables=4, decide_ahead="yes")
    with pytest.raises(TypeError, match=r"^Registered error must be True or False, not 1$"):
        OffsetsValidator(max_tables=4, registered_error=1)
    with pytest.raises(TypeError, match=r"^Registered start must be True or False, not 1$"):
        OffsetsValidator(max_tables=4, registered_start=1)


def index_reference(indices, starts, rows):
    for position, index in enumerate(indices):
        table = max(t for t in range(len(starts) - 1) if starts[t] <= position)
        if index >= rows[table]:
            return {"code": ErrorCode.INDEX_OUT_OF_RANGE, "table": table, "position": position}
    return {"code": ErrorCode.NONE, "table": 0, "position": 0}


def _set_index_job(ctx, dut, indices, starts, rows):
    """An index validator's (at most 4) tables, their starts and the index count."""
    tables = len(rows)
    ctx.set(dut.tables, data.ArrayLayout(table_layout(32), 4).const(
        [{"rows": r, "dim": 16} for r in rows] + [{}] * (4 - tables)))
    for t in range(5):
        ctx.set(dut.table_starts[t], starts[min(t, tables)])
    ctx.set(dut.num_indices, len(indices))


@pytest.mark.parametrize(("replicated_rows", "registered_error"),
                         [(False, False), (True, False), (True, True)])
def test_index_validator_names_position_and_table(replicated_rows, registered_error):
    draw = random.Random(100)
    jobs = []
    for _ in range(30):
        tables = draw.randint(1, 4)
        counts = [draw.choice([0, 1, 5, 16, 40]) for _ in range(tables)]
        rows = [draw.randint(1, 50) for _ in range(tables)]
        indices = [draw.randrange(r) for r, c in zip(rows, counts, strict=True)
                   for _ in range(c)]
        starts = [sum(counts[:t]) for t in range(tables + 1)]
        if indices and draw.random() < 0.7:
            spot = draw.randrange(len(indices))
            table = max(t for t in range(tables) if starts[t] <= spot)
            indices[spot] = rows[table] + draw.randrange(3)
        jobs.append((indices, starts, rows))
    dut = IndexValidator(max_tables=4, addr_width=32, replicated_rows=replicated_rows,
                         registered_error=registered_error)
    results = []

    async def testbench(ctx):
        for indices, starts, rows in jobs:
            _set_index_job(ctx, dut, indices, starts, rows)
            await ctx.tick()  # (with replicated_rows they are read as of a cycle before start)
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            # (The error as a consumer sees it in the first cycle `done` is high.)
            (error,), highest_checked, taken_lines = await feed_until_done(
                ctx, dut, lines_of(indices), draw, watch=[dut.error])
            results.append({"code": error.code, "table": error.table,
                            "position": error.position, "highest_checked": highest_checked,
                            "taken_lines": taken_lines, "lines_done": ctx.get(dut.lines_done)})

    simulate(dut, testbench)
    for (indices, starts, rows), result in zip(jobs, results, strict=True):
        expected = index_reference(indices, starts, rows)
        highest_checked = result.pop("highest_checked")
        taken_lines, lines_done = result.pop("taken_lines"), result.pop("lines_done")
        assert result == expected, (indices, starts, rows)
        # `checked` (what the gather issuer may use) never passes a bad index, and covers
        # every index once all pass.
        if expected["code"] == ErrorCode.NONE:
            assert highest_checked == len(indices), (indices, starts, rows)
            lines = (len(indices) + 15) // 16
            assert taken_lines == lines_done == lines, (indices, starts, rows)
        else:
            assert highest_checked <= expected["position"], (indices, starts, rows)


def test_index_validator_reset_mid_walk_then_a_new_command():
    """Under the update engine's per-command reset (a ``ResetInserter``) at any cycle of a
    walk, the validator is idle with no error from the cycle after, and the next command is
    judged as by a fresh one (its row copies and judged lanes have no reset of their own)."""
    draw = random.Random(7)
    dut = IndexValidator(max_tables=4, addr_width=32, replicated_rows=True,
                         registered_error=True)
    reset = Signal()
    top = ResetInserter(reset)(dut)
    jobs = []
    for number in range(24):
        tables = draw.randint(1, 4)
        counts = [draw.choice([0, 3, 16, 40]) for _ in range(tables)]
        # Alternately many rows (what the copies hold when the reset comes) and few.
        rows = [draw.randint(30, 60) if number % 2 else draw.randint(1, 4)
                for _ in range(tables)]
        indices = [draw.randrange(r) for r, c in zip(rows, counts, strict=True)
                   for _ in range(c)]
        starts = [sum(counts[:t]) for t in range(tables + 1)]
        if indices and number % 4 == 2:
            # Just past its table's rows: copies still holding the many rows miss it.
            spot = draw.randrange(len(indices))
            table = max(t for t in range(tables) if starts[t] <= spot)
            indices[spot] = rows[table] + draw.randrange(2)
        jobs.append((indices, starts, rows, number % 2 == 1 and len(indices) > 16))
    results = []

    async def testbench(ctx):
        for indices, starts, rows, interrupted in jobs:
            _set_index_job(ctx, dut, indices, starts, rows)
            await ctx.tick()
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            if interrupted:
                # Lines offered every cycle, the reset a few cycles into the walk (a line
                # still offered with it).
                lines = lines_of(indices)
                ctx.set(dut.lines.valid, 1)
                for _ in range(draw.randint(0, 3)):
                    ctx.set(dut.lines.payload, lines[0])
                    _, _, taken = await ctx.tick().sample(dut.lines.ready)
                    if taken:
                        lines.pop(0)
                ctx.set(dut.lines.payload, lines[0])
                ctx.set(reset, 1)
                await ctx.tick()
                ctx.set(reset, 0)
                ctx.set(dut.lines.valid, 0)
                for _ in range(3):
                    assert ctx.get(dut.done) and ctx.get(dut.error.code) == ErrorCode.NONE
                    assert ctx.get(dut.checked) == 0
                    await ctx.tick()
                continue
            (error,), _, _ = await feed_until_done(ctx, dut, lines_of(indices), draw,
                                                   watch=[dut.error])
            results.append(({"code": error.code, "table": error.table,
                             "position": error.position},
                            index_reference(indices, starts, rows)))

    simulate(top, testbench)
    assert len(results) == sum(not interrupted for *_, interrupted in jobs)
    for got, expected in results:
        assert got == expected


def test_index_validator_rejects_non_bool_replicated_rows():
    with pytest.raises(TypeError, match=r"^Replicated rows must be True or False, not 1$"):
        IndexValidator(max_tables=4, addr_width=32, replicated_rows=1)
    with pytest.raises(TypeError, match=r"^Registered error must be True or False, not 1$"):
        IndexValidator(max_tables=4, addr_width=32, registered_error=1)

# ------------------------------------------------------------------------- checker

def run_checker(jobs, *, registered_verdicts=False, cycles=None):
    """Check each (command, tables, regions) in one simulation; return (error, table) each
    (and append each check's cycles from ``start`` to ``done`` to ``cycles``)."""
    from hw.emb.layouts import region_layout

    dut = CommandChecker(max_tables=4, max_dim=128, num_regions=2, addr_width=32,
                         registered_verdicts=registered_verdicts)
    results = []

    async def testbench(ctx):
        for command, tables, regions in jobs:
            ctx.set(dut.command, command_layout(32).const(command))
            ctx.set(dut.tables, data.ArrayLayout(table_layout(32), 4).const(
                tables + [{}] * (4 - len(tables))))
            ctx.set(dut.regions, data.ArrayLayout(region_layout(32), 2).const(regions))
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            taken = 1
            while not ctx.get(dut.done):
                await ctx.tick()
                taken += 1
            results.append((ctx.get(dut.error), ctx.get(dut.table)))
            if cycles is not None:
                cycles.append(taken)

    simulate(dut, testbench)
    return results


VERDICTS = pytest.mark.parametrize("registered_verdicts", [False, True],
                                   ids=["judged", "registered-verdicts"])


@VERDICTS
def test_checker_order_and_zero_length_buffers(registered_verdicts):
    regions = [{"base": 0x1000, "size": 0x10000, "enable": 1}, {}]
    tables = [{"base": 0x1000, "rows": 4, "dim": 16, "mode": PoolingMode.SUM},
              {"base": 0x2000, "rows": 4, "dim": 32, "mode": PoolingMode.SUM}]
    command = {"opcode": Opcode.LOOKUP, "bags": 2, "tables": 2, "num_indices": 0,
               "indices": 0x9999, "offsets": 0x4000, "weights": 0x5555, "output": 0x5000}
    weighted = [dict(tables[0], mode=PoolingMode.WEIGHTED), tables[1]]
    cases = [
        # No indices and no WEIGHTED table: those two buffers are not checked at all.
        (command, tables, (ErrorCode.NONE, 0)),
        (command, [dict(tables[0]), dict(tables[1], dim=20, base=0x2004)],
         (ErrorCode.BAD_DIMENSION, 1)),
        (command, [dict(tables[0], base=0x1004), dict(tables[1], dim=20)],
         (ErrorCode.MISALIGNED_ADDRESS, 0)),
        (command, [dict(tables[0]), dict(tables[1], rows=0x10000)],
         (ErrorCode.ADDRESS_OUT_OF_REGION, 1)),
        (dict(command, num_indices=3), weighted,
         (ErrorCode.MISALIGNED_ADDRESS, 0)),  # indices at 0x9999
        (dict(command, num_indices=3, indices=0x3000), weighted,
         (ErrorCode.MISALIGNED_ADDRESS, 0)),  # weights at 0x5555
        (dict(command, output=0x10FC0), tables,
         (ErrorCode.ADDRESS_OUT_OF_REGION, 0)),  # 2 bags x 192 bytes cross the region end
        (dict(command, output=0x11000 - 384), tables, (ErrorCode.NONE, 0)),  # ends at its end
        (dict(command, output=0x11000 - 320), tables,
         (ErrorCode.ADDRESS_OUT_OF_REGION, 0)),  # one line past it
        (dict(command, tables=0), tables, (ErrorCode.BAD_TABLE_COUNT, 0)),
        (dict(command, tables=5), tables, (ErrorCode.BAD_TABLE_COUNT, 0)),
        # 17 offsets (8 bags x 2 tables + 1) and 17 indices take two lines each.
        (dict(command, bags=8, offsets=0x11000 - 128), tables, (ErrorCode.NONE, 0)),
        (dict(command, bags=8, offsets=0x11000 - 64), tables,
         (ErrorCode.ADDRESS_OUT_OF_REGION, 0)),
        (dict(command, num_indices=17, indices=0x11000 - 128), tables, (ErrorCode.NONE, 0)),
        (dict(command, num_indices=17, indices=0x11000 - 64), tables,
         (ErrorCode.ADDRESS_OUT_OF_REGION, 0)),
    ]
    results = run_checker([(c, t, regions) for c, t, _ in cases],
                          registered_verdicts=registered_verdicts)
    assert results == [expected for _, _, expected in cases]



@VERDICTS
@pytest.mark.parametrize("dim", [32, 128])
def test_checker_table_extent_counts_dim_over_16_lines_a_row(dim, registered_verdicts):
    """A table of ``dim / 16`` lines a row that ends exactly at its region's end is inside;
    one line further and it is out."""
    regions = [{"base": 0x1000, "size": 0x10000, "enable": 1}, {}]
    command = {"opcode": Opcode.LOOKUP, "bags": 1, "tables": 2, "num_indices": 0,
               "indices": 0, "offsets": 0x4000, "weights": 0, "output": 0x5000}
    table_bytes = 5 * dim * 4
    first = {"base": 0x1000, "rows": 4, "dim": 16, "mode": PoolingMode.SUM}
    cases = [
        ([first, {"base": 0x11000 - table_bytes, "rows": 5, "dim": dim,
                  "mode": PoolingMode.SUM}], (ErrorCode.NONE, 0)),
        ([first, {"base": 0x11000 - table_bytes + 64, "rows": 5, "dim": dim,
                  "mode": PoolingMode.SUM}], (ErrorCode.ADDRESS_OUT_OF_REGION, 1)),
    ]
    results = run_checker([(command, tables, regions) for tables, _ in cases],
                          registered_verdicts=registered_verdicts)
    assert results == [expected for _, expected in cases]


@VERDICTS
def test_checker_judges_the_first_table_as_it_is_at_start(registered_verdicts):
    """The tables may change with ``start``: the first table's extent (registered, from
    registered factors) is the one the command came with, not the previous command's."""
    regions = [{"base": 0x1000, "size": 0x10000, "enable": 1}, {}]
    command = {"opcode": Opcode.LOOKUP, "bags": 1, "tables": 1, "num_indices": 0,
               "indices": 0, "offsets": 0x4000, "weights": 0, "output": 0x5000}
    small = [{"base": 0x1000, "rows": 4, "dim": 16, "mode": PoolingMode.SUM}]
    huge = [dict(small[0], rows=0x10000)]
    cases = [(small, (ErrorCode.NONE, 0)), (huge, (ErrorCode.ADDRESS_OUT_OF_REGION, 0)),
             (small, (ErrorCode.NONE, 0))]
    results = run_checker([(command, tables, regions) for tables, _ in cases],
                          registered_verdicts=registered_verdicts)
    assert results == [expected for _, expected in cases]


def test_checker_registered_verdicts_cost_one_cycle_a_command():
    """A registered verdict is acted on as the next item is selected: the same errors, each
    check a cycle longer, whether it passes or stops at the first or the last item."""
    regions = [{"base": 0x1000, "size": 0x10000, "enable": 1}, {}]
    tables = [{"base": 0x1000, "rows": 4, "dim": 16, "mode": PoolingMode.SUM},
              {"base": 0x2000, "rows": 4, "dim": 32, "mode": PoolingMode.SUM}]
    command = {"opcode": Opcode.LOOKUP, "bags": 2, "tables": 2, "num_indices": 3,
               "indices": 0x3000, "offsets": 0x4000, "weights": 0, "output": 0x5000}
    jobs = [(command, tables, regions),
            (command, [dict(tables[0], dim=20), tables[1]], regions),
            (dict(command, output=0x10FC0), tables, regions),
            (dict(command, tables=0), tables, regions)]
    cycles = {}
    results = {}
    for registered in (False, True):
        cycles[registered] = []
        results[registered] = run_checker(jobs, registered_verdicts=registered,
                                          cycles=cycles[registered])
    assert results[True] == results[False] == [
        (ErrorCode.NONE, 0), (ErrorCode.BAD_DIMENSION, 0),
        (ErrorCode.ADDRESS_OUT_OF_REGION, 0), (ErrorCode.BAD_TABLE_COUNT, 0)]
    # (The table count is checked before any item: no verdict to register.)
    assert [r - j for r, j in zip(cycles[True], cycles[False], strict=True)] == [1, 1, 1, 0]


def test_checker_rejects_non_bool_registered_verdicts():
    with pytest.raises(TypeError, match=r"^Registered verdicts must be True or False, not 1$"):
        CommandChecker(max_tables=4, max_dim=128, num_regions=2, addr_width=32,
                       registered_verdicts=1)


# ---------------------------------------------------------------------------- writer

@pytest.mark.parametrize("registered_beats", [False, True], ids=["from-queue", "registered"])
def test_line_writer_waits_for_enable_and_flushes_unstarted_lines(registered_beats):
    dut = LineWriter(depth=4, addr_width=32, line_width=32, registered_beats=registered_beats)
    written = []

    async def testbench(ctx):
        ctx.set(dut.aw.ready, 1)
        ctx.set(dut.w.ready, 1)
        for k in range(3):
            ctx.set(dut.lines.valid, 1)
            ctx.set(dut.lines.payload, {"line": k, "data": k + 10})
            await ctx.tick()
        ctx.set(dut.lines.valid, 0)
        for _ in range(4):
            assert not ctx.get(dut.aw.valid)
            await ctx.tick()
        ctx.set(dut.enable, 1)
        # A cycle later with registered beats (the line moves into their registers first).
        for _ in range(1 + registered_beats):
            _, _, aw_valid, address = await ctx.tick().sample(dut.aw.valid, dut.aw.payload.addr)
        assert aw_valid
        written.append(address)
        ctx.set(dut.enable, 0)
        ctx.set(dut.flush, 1)
        await ctx.tick().repeat(4)
        assert ctx.get(dut.level) == 0
        assert not ctx.get(dut.idle)  # one write awaits its B response
        ctx.set(dut.b.valid, 1)
        await ctx.tick()
        ctx.set(dut.b.valid, 0)
        await ctx.tick()
        assert ctx.get(dut.idle)

    simulate(dut, testbench)
    assert written == [0]


@pytest.mark.parametrize("registered_beats", [False, True], ids=["from-queue", "registered"])
def test_line_writer_completes_an_offered_line_and_holds_the_rest_without_enable(
        registered_beats):
    """A line whose beats are offered stays offered once ``enable`` falls (AXI's rule); the
    lines behind it wait for ``enable`` again."""
    dut = LineWriter(depth=4, addr_width=32, line_width=32, registered_beats=registered_beats)

    async def testbench(ctx):
        for k in range(2):
            ctx.set(dut.lines.valid, 1)
            ctx.set(dut.lines.payload, {"line": k, "data": k + 10})
            await ctx.tick()
        ctx.set(dut.lines.valid, 0)
        ctx.set(dut.enable, 1)
        while not ctx.get(dut.aw.valid):
            await ctx.tick()
        await ctx.tick()  # offered at a clock edge
        ctx.set(dut.enable, 0)
        for _ in range(3):  # nobody takes the beats: they stay offered
            await ctx.tick()
            assert ctx.get(dut.aw.valid) and ctx.get(dut.w.valid)
            assert ctx.get(dut.aw.payload.addr) == 0 and ctx.get(dut.w.payload.data) == 10
        ctx.set(dut.aw.ready, 1)
        ctx.set(dut.w.ready, 1)
        await ctx.tick()
        for _ in range(4):  # the second line waits for enable
            await ctx.tick()
            assert not ctx.get(dut.aw.valid) and not ctx.get(dut.w.valid)
        assert ctx.get(dut.level) == 1

    simulate(dut, testbench)


@pytest.mark.parametrize("registered_beats", [False, True], ids=["from-queue", "registered"])
def test_line_writer_writes_every_line_in_order_under_back_pressure(registered_beats):
    seed = 17 + registered_beats
    draw = random.Random(seed)
    dut = LineWriter(depth=4, addr_width=32, line_width=32, slices=2,
                     registered_beats=registered_beats)
    lines = [(draw.randrange(1 << 20), draw.randrange(1 << 32)) for _ in range(24)]
    memory = pysim.WriteMemory(draw, aw=dut.aw, w=dut.w, b=dut.b,
                               address=lambda payload: payload.addr,
                               data=lambda payload: payload.data, answer_chance=0.4)

    async def producer(ctx):
        ctx.set(dut.enable, 1)
        for line, value in lines:
            while ctx.get(dut.level) == dut.depth or draw.random() < 0.3:
                ctx.set(dut.lines.valid, 0)
                await ctx.tick()
            ctx.set(dut.lines.valid, 1)
            ctx.set(dut.lines.payload, {"line": line, "data": value})
            await ctx.tick()
        ctx.set(dut.lines.valid, 0)

    async def checker(ctx):
        while len(memory.addresses) < len(lines) or memory.awaiting or not ctx.get(dut.idle):
            await ctx.tick()
        assert memory.addresses == [line << 6 for line, _ in lines], f"seed {seed}"
        assert memory.data == [value for _, value in lines], f"seed {seed}"

    simulate(dut, producer, checker, processes=(memory.serve,), deadline=5_000)


def test_line_writer_rejects_a_non_boolean_registered_beats():
    with pytest.raises(TypeError, match=r"^Registered beats must be True or False, not 1$"):
        LineWriter(depth=4, addr_width=32, registered_beats=1)


# ---------------------------------------------------------------------------- pooler
def pooler_ops(draw, *, slots, lines, bags):
    """Op contexts of ``bags`` bags (ROW lines; MEAN bags end with SCALE lines, empty bags are
    ZERO) on ``slots`` bag slots, interleaved the way the issuer interleaves them, and the
    line data each ROW carries."""
    pending = []
    for bag in range(bags):
        rows = draw.randrange(0, 4)
        mean = rows > 0 and draw.random() < 0.5
        slot, out_line = bag % slots, bag * lines
        ops = []
        if rows == 0:
            ops.append(dict(kind=OpKind.ZERO, slot=slot, line=0, first=0, last=0,
                            factor=float(draw.choice([1.0, -1.0])), out_line=out_line))
        for row in range(rows):
            factor = float(np.float32(draw.uniform(-2, 2)))
            for line in range(lines):
                ops.append(dict(kind=OpKind.ROW, slot=slot, line=line, first=int(row == 0),
                                last=int(row == rows - 1 and not mean), factor=factor,
                                out_line=out_line + line))
        if mean:
            for line in range(lines):
                ops.append(dict(kind=OpKind.SCALE, slot=slot, line=line, first=0, last=0,
                                factor=float(np.float32(1 / rows)), out_line=out_line + line))
        pending.append(ops)
    # Bags in flight together use distinct slots: run them in groups of ``slots``, each
    # group's ops interleaved at random (a bag's own ops stay in order).
    ops = []
    for group in range(0, bags, slots):
        queues = [list(q) for q in pending[group:group + slots]]
        while any(queues):
            queue = draw.choice([q for q in queues if q])
            ops.append(queue.pop(0))
    return [(op, [float(np.float32(draw.uniform(-4, 4))) for _ in range(16)]) for op in ops]


def pool_expected(ops):
    """(out_line, 16 float32) of each output, the ops applied in order with float32
    rounding after the multiply and after the add (as the FP lanes do)."""
    accumulators, outputs = {}, []
    for op, row in ops:
        factor, key = np.float32(op["factor"]), (op["slot"], op["line"])
        if op["kind"] == OpKind.ROW:
            acc = np.zeros(16, np.float32) if op["first"] else accumulators[key]
            result = acc + np.float32(row) * factor
        elif op["kind"] == OpKind.SCALE:
            result = accumulators[key] * factor + np.float32(-0.0)
        else:
            result = np.zeros(16, np.float32) * factor + np.float32(0.0)
        if op["kind"] == OpKind.ROW and not op["last"]:
            accumulators[key] = result
        else:
            outputs.append((op["out_line"], result.view(np.uint32).tolist()))
    return outputs


@pytest.mark.parametrize(("fpga", "fold", "registered_hazard"), [
    (False, 1, False), (True, 1, False), (True, 1, True), (True, 2, True)],
    ids=["plain", "fpga_pipelining", "registered_hazard", "folded_registered_hazard"])
def test_pooler_matches_float32_with_ops_back_to_back(fpga, fold, registered_hazard):
    """Ops offered every cycle (SCALEs of one bag's lines one after another, ROWs of other
    bags between a bag's rows), so the accumulator reads must follow every op's address,
    and ops must wait for the accumulator lines they read."""
    slots, lines = 4, 2
    layout = op_layout(slot_bits=2, line_bits=1, line_addr_width=16)
    dut = Pooler(op_layout=layout, slot_bits=2, line_bits=1, line_addr_width=16,
                 out_depth=8, mul_stages=2, add_stages=2,
                 registered_accumulator_read=fpga, lane_replicas=fpga, lane_fold=fold,
                 registered_hazard=registered_hazard)
    draw = random.Random(7)
    ops = pooler_ops(draw, slots=slots, lines=lines, bags=40)
    expected = pool_expected(ops)
    got, popped = [], []  # popped: the cycle each op was taken

    async def feed(ctx):
        cycle = 0
        for op, row in ops:
            context = dict(op, factor=int(np.float32(op["factor"]).view(np.uint32)))
            ctx.set(dut.ops.valid, 1)
            ctx.set(dut.ops.payload, {"context": context, "error": 0,
                                      "data": pack_line(np.float32(row).view(np.uint32))})
            ready = False
            while not ready:
                _, _, ready = await ctx.tick().sample(dut.ops.ready)
                cycle += 1
            popped.append(cycle)
        ctx.set(dut.ops.valid, 0)

    async def collect(ctx):
        while len(got) < len(expected):
            _, _, valid, line, value = await ctx.tick().sample(
                dut.out.valid, dut.out.payload.line, dut.out.payload.data)
            if valid:
                got.append((line, [(value >> (32 * k)) & 0xFFFF_FFFF for k in range(16)]))

    simulate(dut, feed, collect)
    assert got == expected
    # Ops taken as often as the lanes allow: a cycle apart, or with a registered hazard
    # check two (an op's first cycle is its check's); folded lanes lose nothing to it.
    spacing = max(fold, 1 + registered_hazard)
    gaps = [b - a for a, b in itertools.pairwise(popped)]
    assert min(gaps) == spacing
    # The case a late accumulator read gets wrong: two SCALEs of different lines taken
    # back to back.
    assert any(a["kind"] == b["kind"] == OpKind.SCALE and a["line"] != b["line"] and
               gaps[k] == spacing
               for k, ((a, _), (b, _)) in enumerate(itertools.pairwise(ops)))
    # And ops that waited for an accumulator line: a longer gap before a ROW after its
    # bag's first, or before a SCALE, on a line popped within the adder's latency.
    assert any(gap > spacing and op["kind"] != OpKind.ZERO and not op["first"]
               for gap, (op, _) in zip(gaps, ops[1:], strict=True))


@pytest.mark.parametrize(("fold", "registered_hazard"), [(1, False), (1, True), (2, True)],
                         ids=["plain", "registered_hazard", "folded_registered_hazard"])
def test_pooler_never_overfills_a_slow_output_buffer(fold, registered_hazard):
    """The output buffer drains slowly (seeded): a line is pushed only while the buffer has
    room for it (a line pushed into a full buffer would be lost), and every result arrives."""
    seed = 23 + fold
    draw = random.Random(seed)
    depth = 3
    layout = op_layout(slot_bits=2, line_bits=1, line_addr_width=16)
    dut = Pooler(op_layout=layout, slot_bits=2, line_bits=1, line_addr_width=16,
                 out_depth=depth, mul_stages=2, add_stages=2, registered_accumulator_read=True,
                 lane_replicas=True, lane_fold=fold, registered_hazard=registered_hazard)
    ops = pooler_ops(draw, slots=4, lines=2, bags=24)
    expected = pool_expected(ops)
    got = []

    async def feed(ctx):
        for op, row in ops:
            context = dict(op, factor=int(np.float32(op["factor"]).view(np.uint32)))
            ctx.set(dut.ops.valid, 1)
            ctx.set(dut.ops.payload, {"context": context, "error": 0,
                                      "data": pack_line(np.float32(row).view(np.uint32))})
            await ctx.tick().until(dut.ops.ready)
        ctx.set(dut.ops.valid, 0)

    async def output_buffer(ctx):
        level = 0  # as a SlicedFIFO counts it: a line pushed counts from the next cycle
        while len(got) < len(expected):
            ctx.set(dut.out_level, level)
            _, _, valid, line, value = await ctx.tick().sample(
                dut.out.valid, dut.out.payload.line, dut.out.payload.data)
            if valid:
                assert level < depth, f"a line pushed into a full buffer (seed {seed})"
                got.append((line, [(value >> (32 * k)) & 0xFFFF_FFFF for k in range(16)]))
            if level and draw.random() < 0.15:
                level -= 1
            level += valid

    simulate(dut, feed, output_buffer)
    assert got == expected, f"seed {seed}"


def test_pooler_rejects_a_registered_hazard_that_is_not_a_bool():
    layout = op_layout(slot_bits=2, line_bits=1, line_addr_width=16)
    with pytest.raises(TypeError, match=r"^Registered hazard must be True or False, not 1$"):
        Pooler(op_layout=layout, slot_bits=2, line_bits=1, line_addr_width=16, out_depth=8,
               registered_hazard=1)


# --------------------------------------------------------------- engine parameters

GOOD = dict(max_tables=4, max_dim=64, num_regions=2, addr_width=32, id_width=6,
            outstanding_reads=32, index_buffer_depth=64, offset_buffer_depth=64,
            output_buffer_depth=8, bag_slots=8)


@pytest.mark.parametrize(("change", "error", "message"), [
    ({"max_tables": 0}, ValueError, r"^Maximum table count must be in 1\.\.255, not 0$"),
    ({"max_tables": "4"}, TypeError, r"^Maximum table count must be an integer, not '4'$"),
    ({"max_dim": 40}, ValueError, r"^Maximum dimension must be a multiple of 16, not 40$"),
    ({"max_dim": 8}, ValueError, r"^Maximum dimension must be in 16\.\.4096, not 8$"),
    ({"num_regions": 0}, ValueError, r"^Region count must be in 1\.\.16, not 0$"),
    ({"addr_width": 70}, ValueError, r"^Address width must be in 12\.\.64, not 70$"),
    ({"id_width": 0}, ValueError, r"^ID width must be in 1\.\.16, not 0$"),
    ({"outstanding_reads": 48}, ValueError,
     r"^Outstanding reads must be a power of two, not 48$"),
    ({"outstanding_reads": 64}, ValueError,
     r"^Outstanding reads \(64\) plus 3 stream IDs need more than 6 ID bits$"),
    ({"index_buffer_depth": 16}, ValueError, r"^Index buffer depth must be at least 32, not 16$"),
    ({"offset_buffer_depth": 96}, ValueError,
     r"^Offset buffer depth must be a power of two, not 96$"),
    ({"output_buffer_depth": 1}, ValueError, r"^Output buffer depth must be at least 2, not 1$"),
    ({"bag_slots": 6}, ValueError, r"^Bag slots must be a power of two, not 6$"),
    ({"bag_slots": 128}, ValueError, r"^Bag slots must be in 2\.\.64, not 128$"),
    ({"mul_stages": 0}, ValueError,
     rf"^Multiplier stages must be None or an integer in 1\.\.{len(FPMul.CUTS) - 1}, not 0$"),
    ({"add_stages": 9}, ValueError,
     rf"^Adder stages must be None or an integer in 0\.\.{len(FPAdd.CUTS) - 1}, not 9$"),
    ({"fpga_pipelining": 1}, TypeError, r"^FPGA pipelining must be True or False, not 1$"),
    ({"fpga_pipelining": True, "mul_stages": 1}, ValueError,
     r"^FPGA pipelining needs at least 2 multiplier stages, not 1$"),
    ({"mean_reciprocal": "iterative"}, ValueError,
     r"^MEAN reciprocal must be one of pipelined, sequential, not 'iterative'$"),
])
def test_engine_parameters_are_checked(change, error, message):
    with pytest.raises(error, match=message):
        LookupEngine(**{**GOOD, **change})


def test_engine_properties():
    engine = LookupEngine(**GOOD)
    assert engine.outstanding_reads == 32
    assert engine.bag_slots == 8
    assert engine.pooling_latency == 1 + FPMul.DEFAULT_STAGES + FPAdd.DEFAULT_STAGES
