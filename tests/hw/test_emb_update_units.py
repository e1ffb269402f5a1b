# amaranth: UnusedElaboratable=no
"""Unit tests (Amaranth simulator) of the update engine's small pieces."""

import random
from functools import partial

import numpy as np
import pytest
from amaranth.hdl import Module
from amaranth.lib import data, wiring

from hw.emb.layouts import table_layout
from hw.emb.update_datapath import CorrectionKind, UpdateDatapath
from hw.emb.update_fetch import GradientFetch, RowFetch
from hw.emb.update_reads import LineRequester, ReadRouter, WordReader
from hw.emb.update_reciprocal import Reciprocal, reciprocal_bits
from hw.emb.update_rows import UniqueRows
from hw.fp import FPMul
from hw.mem.write_queue import WriteQueue
from tb import pysim

simulate = partial(pysim.simulate, deadline=100_000)


async def send(ctx, port, payloads):
    """Offer ``payloads`` on stream ``port`` back to back, each until it is taken."""
    for payload in payloads:
        ctx.set(port.payload, payload)
        ctx.set(port.valid, 1)
        await ctx.tick().until(port.ready)
    ctx.set(port.valid, 0)


def numpy_reciprocal(length):
    return int((np.float32(1) / np.float32(length)).view(np.uint32))


# ---------------------------------------------------------------------------- reciprocal


def test_reciprocal_model_matches_numpy_division():
    draw = random.Random(1)
    lengths = [*range(1, 5000), 2**24 - 1, 2**24, 2**24 + 1, 2**24 + 3, 2**25 - 1,
               0xFFFF_FF7F, 0xFFFF_FF80, 0xFFFF_FFFF,
               *(draw.randrange(1, 2**32) for _ in range(20000))]
    for length in lengths:
        assert reciprocal_bits(length) == numpy_reciprocal(length), length


def test_reciprocal_of_zero_is_infinity():
    assert reciprocal_bits(0) == 0x7F80_0000


@pytest.mark.parametrize(("steps", "registered_leading"),
                         [(1, False), (2, False), (3, False), (1, True)])
def test_reciprocal_hardware(steps, registered_leading):
    dut = Reciprocal(steps_per_cycle=steps, registered_leading=registered_leading)
    draw = random.Random(steps)
    lengths = [1, 2, 3, 5, 7, 10, 80, 120, 255, 1000, 2**24 + 1, 0xFFFF_FFFF, 0,
               *(draw.randrange(1, 2**12) for _ in range(15)),
               *(draw.randrange(1, 2**32) for _ in range(10))]

    async def testbench(ctx):
        for length in lengths:
            ctx.set(dut.i.payload, length)
            ctx.set(dut.i.valid, 1)
            await ctx.tick().until(dut.i.ready)
            ctx.set(dut.i.valid, 0)
            ctx.set(dut.o.ready, 1)
            cycles = 0
            while not ctx.get(dut.o.valid):
                await ctx.tick()
                cycles += 1
            assert cycles <= dut.latency
            if 0 < length < 2**24 and length & (length - 1):  # not a power of two: divided
                assert cycles == dut.latency
            assert ctx.get(dut.o.payload) == reciprocal_bits(length), length
            await ctx.tick()
            ctx.set(dut.o.ready, 0)

    simulate(dut, testbench)


@pytest.mark.parametrize("steps", [0, 5, 25, True, "2"])
def test_reciprocal_rejects_bad_steps(steps):
    with pytest.raises(ValueError, match=r"^Steps per cycle must be a divisor of 24, not "):
        Reciprocal(steps_per_cycle=steps)


def test_reciprocal_rejects_a_non_bool_registered_leading():
    with pytest.raises(TypeError, match=r"^Registered leading must be True or False, not 1$"):
        Reciprocal(registered_leading=1)


# ---------------------------------------------------------------------------- unique rows


def unique_rows_reference(keys, capacity):
    """Slots and fresh flags for a stream of keys, plus where chunks start (golden rule)."""
    slots, chunk, out, starts = {}, 0, [], []
    for position, key in enumerate(keys):
        if key not in slots and len(slots) == capacity:
            slots, chunk = {}, chunk + 1
            starts.append(position)
        fresh = key not in slots
        slots.setdefault(key, len(slots))
        out.append((slots[key], fresh, chunk))
    return out, starts


@pytest.mark.parametrize("registered_accept", [False, True], ids=["compared", "registered"])
@pytest.mark.parametrize("capacity", [1, 3, 8, 1024])  # 1024: the engine's largest
def test_unique_rows_slots_and_chunks(capacity, registered_accept):
    dut = UniqueRows(capacity=capacity, table_width=2, payload_shape=16,
                     registered_accept=registered_accept)
    draw = random.Random(capacity)
    keys = [(draw.randrange(3), draw.randrange(6)) for _ in range(120)]
    expected, _starts = unique_rows_reference(keys, capacity)
    seen = []
    chunk_keys = {}

    async def producer(ctx):
        for number, (table, row) in enumerate(keys):
            ctx.set(dut.i.payload.table, table)
            ctx.set(dut.i.payload.row, row)
            ctx.set(dut.i.payload.data, number)
            ctx.set(dut.i.valid, 1)
            await ctx.tick().until(dut.i.ready)
            if draw.random() < 0.3:
                ctx.set(dut.i.valid, 0)
                await ctx.tick()
        ctx.set(dut.i.valid, 0)

    async def consumer(ctx):
        chunk = 0
        while len(seen) < len(keys):
            if ctx.get(dut.full) and not ctx.get(dut.o.valid):
                # The chunk is complete and drained: read its keys back, then clear.
                count = ctx.get(dut.count)
                assert count == capacity
                for slot in range(count):
                    ctx.set(dut.key_slot, slot)
                    key = ctx.get(dut.key)
                    chunk_keys[(chunk, slot)] = (key.table, key.row)
                ctx.set(dut.clear, 1)
                await ctx.tick()
                ctx.set(dut.clear, 0)
                chunk += 1
                continue
            ctx.set(dut.o.ready, int(draw.random() < 0.7))
            _, _, ready, valid, payload = await ctx.tick().sample(
                dut.o.ready, dut.o.valid, dut.o.payload)
            if ready and valid:
                seen.append((payload.slot, bool(payload.fresh), chunk, payload.data))

    simulate(dut, producer, consumer, deadline=5_000)
    assert [(slot, fresh, chunk) for slot, fresh, chunk, _ in seen] == expected
    assert [number for *_, number in seen] == list(range(len(keys)))
    for (chunk, slot), key in chunk_keys.items():
        first = next(k for k, (s, _, c) in zip(keys, expected, strict=True)
                     if c == chunk and s == slot)
        assert key == first


@pytest.mark.parametrize("capacity", [0, -1, True, 2.0])
def test_unique_rows_rejects_bad_capacity(capacity):
    with pytest.raises(ValueError, match=r"^Capacity must be a positive integer, not "):
        UniqueRows(capacity=capacity, table_width=1, payload_shape=1)


@pytest.mark.parametrize("registered_accept", [False, True], ids=["compared", "registered"])
def test_unique_rows_key_reads_back_the_cycle_after_it_is_taken(registered_accept):
    """The row fetch reads a slot's key as soon as ``count`` holds the slot (it fetches a
    chunk's rows while the chunk fills), and probes see every key taken."""
    dut = UniqueRows(capacity=4, table_width=2, payload_shape=1,
                     registered_accept=registered_accept)
    keys = [(1, 10), (2, 20), (1, 10), (3, 30)]
    seen = []

    async def testbench(ctx):
        ctx.set(dut.o.ready, 1)
        for table, row in keys:
            ctx.set(dut.i.payload.table, table)
            ctx.set(dut.i.payload.row, row)
            ctx.set(dut.i.valid, 1)
            await ctx.tick().until(dut.i.ready)
            ctx.set(dut.i.valid, 0)
            # This cycle: the slot just taken, as the row fetch reads it.
            count = ctx.get(dut.count)
            ctx.set(dut.key_slot, count - 1)
            key = ctx.get(dut.key)
            seen.append((count, key.table, key.row))
            ctx.set(dut.probe, 1)
            ctx.set(dut.probe_key, {"table": table, "row": row})
            assert ctx.get(dut.probe_hit), (table, row)
            ctx.set(dut.probe, 0)

    simulate(dut, testbench, deadline=200)
    assert seen == [(1, 1, 10), (2, 2, 20), (2, 2, 20), (3, 3, 30)]


@pytest.mark.parametrize("registered_request", [False, True], ids=["direct", "skid"])
def test_line_requester_asks_for_each_line_once(registered_request):
    """Each run asks for its ``lines`` addresses from ``base`` under random back-pressure, none
    for an empty run, and a start mid-run abandons the old one."""
    dut = LineRequester(line_address_width=20, registered_request=registered_request)
    draw = random.Random(3)
    runs = [(100, 5, None), (7, 0, None), (500, 9, 3), (40, 1, None), (900, 4, None)]
    asked = []

    async def testbench(ctx):
        for base, lines, abandon_after in runs:
            await pysim.start(ctx, dut, base=base, lines=lines)
            got = []
            for _ in range(40):
                if abandon_after is not None and len(got) == abandon_after:
                    break
                ctx.set(dut.request.ready, draw.random() < 0.6)
                _, _, valid, ready, line = await ctx.tick().sample(
                    dut.request.valid, dut.request.ready, dut.request.payload)
                if valid and ready:
                    got.append(line)
            asked.append(got)
        ctx.set(dut.request.ready, 0)

    pysim.simulate(dut, testbench, deadline=1_000)
    assert asked == [[100 + k for k in range(5)], [], [500, 501, 502], [40],
                     [900 + k for k in range(4)]]


@pytest.mark.parametrize("registered_accept", [False, True], ids=["compared", "registered"])
def test_unique_rows_full_waits_for_a_probe(registered_accept):
    """A full chunk says so while an unknown key waits, except while a probe has the
    comparators (the correction's), and again after it."""
    dut = UniqueRows(capacity=2, table_width=2, payload_shape=1,
                     registered_accept=registered_accept)

    async def testbench(ctx):
        ctx.set(dut.o.ready, 1)
        for row in (10, 20):
            ctx.set(dut.i.payload.row, row)
            ctx.set(dut.i.valid, 1)
            await ctx.tick().until(dut.i.ready)
        ctx.set(dut.i.payload.row, 30)   # no slot left for it
        flags = []
        for probing in (0, 0, 0, 1, 1, 0, 0):
            ctx.set(dut.probe, probing)
            ctx.set(dut.probe_key, {"table": 0, "row": 20})
            await ctx.delay(0)
            flags.append((probing, ctx.get(dut.full), ctx.get(dut.i.ready)))
            await ctx.tick()
        assert all(not ready for *_, ready in flags), flags
        assert [full for probing, full, _ in flags if probing] == [0, 0], flags
        # (With registered_accept the comparison of the cycle before says it.)
        assert [full for _, full, _ in flags[-2:]] == [1 if not registered_accept else 0, 1], \
            flags

    simulate(dut, testbench, deadline=200)


def test_unique_rows_registered_accept_is_a_bool():
    with pytest.raises(TypeError, match=r"^Registered accept must be True or False, not 1$"):
        UniqueRows(capacity=4, table_width=1, payload_shape=1, registered_accept=1)


# ---------------------------------------------------------------------------- reads


class LineMemory:
    """A read channel model: accepts AR with random stalls, answers in order after a random
    delay; each line's data is derived from its address."""

    def __init__(self, router, seed, *, error_lines=()):
        self.router = router
        self.draw = random.Random(seed)
        self.error_lines = set(error_lines)
        self.pending = []
        self.refused = 0   # responses the router did not take at once (its credits failed)

    @staticmethod
    def line(address):
        return sum(((address * 16 + word) & 0xFFFF_FFFF) << (32 * word) for word in range(16))

    async def serve(self, ctx):
        router = self.router
        while True:
            ctx.set(router.ar.ready, int(self.draw.random() < 0.6))
            respond = bool(self.pending) and self.draw.random() < 0.5
            if respond:
                address = self.pending[0]
                ctx.set(router.r.valid, 1)
                ctx.set(router.r.payload.data, self.line(address))
                ctx.set(router.r.payload.resp, 2 if address in self.error_lines else 0)
            else:
                ctx.set(router.r.valid, 0)
            _, _, ar_ready, ar_valid, ar_address, r_ready = await ctx.tick().sample(
                router.ar.ready, router.ar.valid, router.ar.payload, router.r.ready)
            if ar_ready and ar_valid:
                self.pending.append(ar_address)
            if respond and r_ready:
                self.pending.pop(0)
            elif respond:
                self.refused += 1


@pytest.mark.parametrize("registered_output", [False, True], ids=["word-choice", "register"])
@pytest.mark.parametrize("shared", [(), ("b",), ("a", "b")])
def test_word_readers_share_a_router_with_back_pressure(shared, registered_output):
    m = Module()
    router = m.submodules.router = ReadRouter(line_address_width=20,
                                              sources=[("a", 4), ("b", 3)], shared=shared)
    reader_a = m.submodules.reader_a = WordReader(line_address_width=20,
                                                  registered_output=registered_output)
    reader_b = m.submodules.reader_b = WordReader(line_address_width=20,
                                                  registered_output=registered_output)
    for name, reader in (("a", reader_a), ("b", reader_b)):
        wiring.connect(m, reader.request, getattr(router, f"{name}_request"))
        wiring.connect(m, getattr(router, f"{name}_response"), reader.lines)
    memory = LineMemory(router, seed=5)
    draw = random.Random(9)
    jobs = {"a": (100, 37), "b": (400, 50)}
    results = {"a": [], "b": []}

    def consumer(name, reader):
        base, words = jobs[name]

        async def run(ctx):
            if name == "a":
                ctx.set(reader_a.base, base)
                ctx.set(reader_a.words, words)
                ctx.set(reader_a.start, 1)
                ctx.set(reader_b.base, jobs["b"][0])
                ctx.set(reader_b.words, jobs["b"][1])
                ctx.set(reader_b.start, 1)
                await ctx.tick()
                ctx.set(reader_a.start, 0)
                ctx.set(reader_b.start, 0)
            else:
                await ctx.tick()
            while len(results[name]) < words:
                ctx.set(reader.o.ready, int(draw.random() < 0.5))
                _, _, ready, valid, word = await ctx.tick().sample(
                    reader.o.ready, reader.o.valid, reader.o.payload)
                if ready and valid:
                    results[name].append(word)
            ctx.set(reader.o.ready, 0)
            for _ in range(60):  # nothing more is asked for or delivered
                await ctx.tick()
                assert not ctx.get(reader.o.valid)
            assert ctx.get(router.outstanding) == 0
            # Both reads end inside a line, which is released with its last word.
            assert not ctx.get(getattr(router, f"{name}_response").valid)
        return run

    simulate(m, consumer("a", reader_a), consumer("b", reader_b),
             processes=(memory.serve,), deadline=20_000)
    for name, (base, words) in jobs.items():
        assert results[name] == [(base * 16 + k) & 0xFFFF_FFFF for k in range(words)]


def line_server(reader):
    """A process that answers ``reader``'s line reads at once, in order: line ``a`` holds the
    words ``16 a + k``. A ``start`` drops the reads of the old job, as the router does."""
    async def serve_lines(ctx):
        asked = []
        async for _, _, valid, address, taken, start in ctx.tick().sample(
                reader.request.valid, reader.request.payload, reader.lines.ready,
                reader.start):
            if start:
                asked = []
            elif taken:
                asked.pop(0)
            if valid and not start:
                asked.append(address)
            ctx.set(reader.lines.valid, bool(asked))
            if asked:
                ctx.set(reader.lines.payload, sum(((asked[0] * 16 + k) & 0xFFFF_FFFF) << (32 * k)
                                                  for k in range(16)))
    return serve_lines


@pytest.mark.parametrize("registered_output", [False, True], ids=["word-choice", "register"])
def test_word_reader_delivers_a_word_per_cycle(registered_output):
    """With its lines at hand and a consumer always ready, a reader's words leave on
    consecutive cycles, across its lines (its output register refills as it is taken)."""
    reader = WordReader(line_address_width=20, registered_output=registered_output)
    base, words = 300, 45
    cycles = []
    serve_lines = line_server(reader)

    async def consume(ctx):
        ctx.set(reader.request.ready, 1)
        ctx.set(reader.o.ready, 1)
        await pysim.start(ctx, reader, base=base, words=words)
        received = []
        cycle = 0
        while len(received) < words:
            _, _, valid, word = await ctx.tick().sample(reader.o.valid, reader.o.payload)
            cycle += 1
            if valid:
                received.append(word)
                cycles.append(cycle)
        assert received == [(base * 16 + k) & 0xFFFF_FFFF for k in range(words)]

    simulate(reader, consume, processes=(serve_lines,), deadline=1_000)
    assert cycles[-1] - cycles[0] == words - 1, cycles
    # The first word two cycles after start; with a registered output three more: the line
    # request's skid buffer, the chosen word's register and the output's skid buffer.
    assert cycles[0] == (5 if registered_output else 2), cycles


@pytest.mark.parametrize("registered_output", [False, True], ids=["word-choice", "register"])
def test_word_reader_starts_at_a_word_inside_a_line(registered_output):
    """A read from word ``first`` of its first line asks for the lines it needs and no more
    (none for no words) and delivers the words from there."""
    reader = WordReader(line_address_width=20, registered_output=registered_output)
    serve_lines = line_server(reader)
    jobs = [(300, 5, 40, 3), (400, 15, 1, 1), (500, 15, 2, 2), (600, 9, 0, 0), (700, 0, 16, 1)]

    async def consume(ctx):
        ctx.set(reader.request.ready, 1)
        ctx.set(reader.o.ready, 1)
        for base, first, words, lines in jobs:
            ctx.set(reader.base, base)
            ctx.set(reader.first, first)
            ctx.set(reader.words, words)
            ctx.set(reader.start, 1)
            await ctx.tick()
            ctx.set(reader.start, 0)
            received, requests = [], 0
            for _ in range(words + 20):
                _, _, valid, word, asked = await ctx.tick().sample(
                    reader.o.valid, reader.o.payload, reader.request.valid)
                requests += asked
                if valid:
                    received.append(word)
            assert received == [base * 16 + first + k for k in range(words)], (base, first)
            assert requests == lines, (base, first, words)

    simulate(reader, consume, processes=(serve_lines,), deadline=2_000)


@pytest.mark.parametrize("registered_output", [False, True], ids=["word-choice", "register"])
def test_word_reader_restart_forgets_a_word_not_taken(registered_output):
    """A reader started again (a new command after an aborted one) while a word waits on its
    output delivers only the new job's words."""
    reader = WordReader(line_address_width=20, registered_output=registered_output)
    jobs = [(300, 5), (700, 20)]
    serve_lines = line_server(reader)

    async def consume(ctx):
        ctx.set(reader.request.ready, 1)
        for number, (base, words) in enumerate(jobs):
            ctx.set(reader.base, base)
            ctx.set(reader.words, words)
            ctx.set(reader.start, 1)
            await ctx.tick()
            ctx.set(reader.start, 0)
            if number == 0:
                # Take two words, then let one wait until the restart.
                received = []
                while len(received) < 2:
                    ctx.set(reader.o.ready, 1)
                    _, _, valid, word = await ctx.tick().sample(reader.o.valid,
                                                                reader.o.payload)
                    if valid:
                        received.append(word)
                ctx.set(reader.o.ready, 0)
                await ctx.tick().repeat(5)
                assert ctx.get(reader.o.valid), "no word waits on the output"
                continue
            ctx.set(reader.o.ready, 1)
            received = []
            for _ in range(200):
                _, _, valid, word = await ctx.tick().sample(reader.o.valid, reader.o.payload)
                if valid:
                    received.append(word)
            assert received == [(base * 16 + k) & 0xFFFF_FFFF for k in range(words)]

    simulate(reader, consume, processes=(serve_lines,), deadline=2_000)


@pytest.mark.parametrize("ar_skid", [False, True], ids=["ar-register", "ar-skid"])
@pytest.mark.parametrize("line_slices", [1, 16])
@pytest.mark.parametrize("shared", [("b", "c"), ("a", "b", "c")])
def test_router_shared_buffer_keeps_each_source_in_order(shared, line_slices, ar_skid):
    """Three sources take whole lines with random back-pressure; ``c`` stops taking for a
    long while, and the others must still get every line (their credits, not ``c``'s); no
    response ever waits for room.
    With ``line_slices`` the FIFOs are cut per FP lane; with ``ar_skid`` the requests leave
    through a skid buffer (the memory stalls AR at random)."""
    sources = [("a", 4), ("b", 3), ("c", 5)]
    router = ReadRouter(line_address_width=20, sources=sources, shared=shared,
                        line_slices=line_slices, ar_skid=ar_skid)
    memory = LineMemory(router, seed=11)
    draw = random.Random(12)
    count = 60
    bases = {"a": 1000, "b": 3000, "c": 5000}
    got = {name: [] for name, _ in sources}
    finished = {}

    def requester(name):
        async def run(ctx):
            request = getattr(router, f"{name}_request")
            for k in range(count):
                ctx.set(request.payload, bases[name] + k)
                ctx.set(request.valid, 1)
                await ctx.tick().until(request.ready)
            ctx.set(request.valid, 0)
        return run

    def consumer(name):
        async def run(ctx):
            response = getattr(router, f"{name}_response")
            cycle = 0
            while len(got[name]) < count:
                # `a` stalls briefly too: its FIFO then fills to its credits.
                stalled = ((name == "c" and 50 <= cycle < 1500)
                           or (name == "a" and 40 <= cycle < 140))
                ctx.set(response.ready, int(not stalled and draw.random() < 0.8))
                _, _, ready, valid, line = await ctx.tick().sample(
                    response.ready, response.valid, response.payload)
                cycle += 1
                if ready and valid:
                    got[name].append(line)
            ctx.set(response.ready, 0)
            finished[name] = cycle
        return run

    simulate(router, *(requester(name) for name, _ in sources),
             *(consumer(name) for name, _ in sources), processes=(memory.serve,),
             deadline=20_000)
    for name, _ in sources:
        assert got[name] == [LineMemory.line(bases[name] + k) for k in range(count)], name
    assert finished["a"] < 1500 and finished["b"] < 1500 < finished["c"], finished
    assert router.shared == frozenset(shared)
    # Every source's credits leave a place for each line it asked for.
    assert memory.refused == 0


def test_router_rejects_unknown_shared_source():
    with pytest.raises(ValueError, match=r"^Shared source 'z' is not one of the sources 'x'$"):
        ReadRouter(line_address_width=16, sources=[("x", 3)], shared=["z"])


def test_router_flags_error_responses():
    router = ReadRouter(line_address_width=16, sources=[("only", 4)])
    memory = LineMemory(router, seed=2, error_lines={7})
    errors, got = [], []

    async def requests(ctx):
        await send(ctx, router.only_request, range(5, 10))

    async def responses(ctx):
        ctx.set(router.only_response.ready, 1)
        while len(got) < 5:
            _, _, valid, data = await ctx.tick().sample(
                router.only_response.valid, router.only_response.payload)
            if valid:
                got.append(data)

    async def watch(ctx):
        async for _, _, error in ctx.tick().sample(router.error):
            if error:
                errors.append(1)

    simulate(router, requests, responses, processes=(memory.serve, watch), deadline=5_000)
    assert got == [LineMemory.line(a) for a in range(5, 10)]
    assert errors == [1]


def test_router_rejects_a_non_boolean_ar_skid():
    with pytest.raises(TypeError, match=r"^AR skid must be True or False, not 1$"):
        ReadRouter(line_address_width=16, sources=[("x", 3)], ar_skid=1)


def test_router_rejects_shallow_fifos():
    with pytest.raises(ValueError, match=r"^Source 'x' needs a response FIFO depth of at least"):
        ReadRouter(line_address_width=16, sources=[("x", 2)])


# ---------------------------------------------------------------------------- writes


@pytest.mark.parametrize("registered_beats", [False, True], ids=["from-input", "registered"])
def test_write_queue_orders_channels_and_counts_completions(registered_beats):
    dut = WriteQueue(line_address_width=16, max_outstanding=3, registered_beats=registered_beats)
    draw = random.Random(4)
    entries = [(address, address * 3 + 1) for address in range(20)]
    memory = pysim.WriteMemory(draw, aw=dut.aw, w=dut.w, b=dut.b)

    async def producer(ctx):
        await send(ctx, dut.i, [{"address": address, "data": value}
                                for address, value in entries])

    async def checker(ctx):
        while len(memory.addresses) < len(entries) or memory.awaiting or not ctx.get(dut.idle):
            assert ctx.get(dut.outstanding) <= 3
            await ctx.tick()
        assert memory.addresses == [address for address, _ in entries]
        assert memory.data == [value for _, value in entries]

    simulate(dut, producer, checker, processes=(memory.serve,), deadline=5_000)


@pytest.mark.parametrize("registered_beats", [False, True], ids=["from-input", "registered"])
def test_write_queue_drops_unoffered_writes_after_stop(registered_beats):
    dut = WriteQueue(line_address_width=16, registered_beats=registered_beats)

    async def testbench(ctx):
        ctx.set(dut.stop, 1)
        ctx.set(dut.i.payload.address, 5)
        ctx.set(dut.i.valid, 1)
        ctx.set(dut.aw.ready, 1)
        ctx.set(dut.w.ready, 1)
        for _ in range(3):
            _, _, taken, aw_valid, w_valid = await ctx.tick().sample(
                dut.i.ready, dut.aw.valid, dut.w.valid)
            assert taken and not aw_valid and not w_valid

    simulate(dut, testbench, deadline=100)


def test_write_queue_registered_beats_complete_a_taken_entry_and_pass_one_per_two_cycles():
    dut = WriteQueue(line_address_width=16, registered_beats=True)

    async def testbench(ctx):
        # An entry in the registers is not idle, with nothing in `i` and nothing outstanding.
        ctx.set(dut.i.valid, 1)
        _, _, taken = await ctx.tick().sample(dut.i.ready)
        ctx.set(dut.i.valid, 0)
        _, _, idle, outstanding = await ctx.tick().sample(dut.idle, dut.outstanding)
        assert taken and not idle and outstanding == 0
        ctx.set(dut.aw.ready, 1)
        ctx.set(dut.w.ready, 1)
        await ctx.tick()
        ctx.set(dut.i.valid, 1)
        beats = []
        for cycle in range(8):
            ctx.set(dut.i.payload.address, 100 + cycle)
            _, _, taken, aw_valid, aw, w_valid = await ctx.tick().sample(
                dut.i.ready, dut.aw.valid, dut.aw.payload, dut.w.valid)
            assert taken == (cycle % 2 == 0), cycle  # the registers empty every second cycle
            assert aw_valid == w_valid == (cycle % 2 == 1), cycle
            if aw_valid:
                beats.append(aw)
        assert beats == [100, 102, 104, 106]
        # An entry taken before `stop` still leaves; the next one is dropped.
        ctx.set(dut.aw.ready, 0)
        ctx.set(dut.w.ready, 0)
        ctx.set(dut.i.payload.address, 200)
        await ctx.tick()
        ctx.set(dut.stop, 1)
        ctx.set(dut.i.payload.address, 201)
        for _ in range(3):
            _, _, taken, aw_valid, aw, idle = await ctx.tick().sample(
                dut.i.ready, dut.aw.valid, dut.aw.payload, dut.idle)
            assert taken and aw_valid and aw == 200 and not idle
        ctx.set(dut.i.valid, 0)
        ctx.set(dut.aw.ready, 1)
        ctx.set(dut.w.ready, 1)
        await ctx.tick()
        ctx.set(dut.aw.ready, 0)
        ctx.set(dut.w.ready, 0)
        _, _, aw_valid, w_valid, outstanding = await ctx.tick().sample(
            dut.aw.valid, dut.w.valid, dut.outstanding)
        assert not aw_valid and not w_valid and outstanding == 6  # (no B came back)

    simulate(dut, testbench, deadline=100)


def test_write_queue_rejects_a_non_bool_registered_beats():
    with pytest.raises(TypeError, match=r"^Registered beats must be True or False, not 1$"):
        WriteQueue(line_address_width=16, registered_beats=1)


def test_datapath_without_corrections_has_no_correction_ports():
    kwargs = dict(capacity=4, lines_per_slot=2, line_address_width=10)
    strict = UpdateDatapath(**kwargs, corrections=False)
    assert not strict.corrections
    correction_ports = {"keep_deltas", "correction", "bag_lines", "correction_idle"}
    assert not correction_ports & set(strict.signature.members)
    assert correction_ports <= set(UpdateDatapath(**kwargs).signature.members)
    with pytest.raises(ValueError, match=r"^A bag store needs the corrections: cached_bags "
                                         r"must be 0 without them, not 2$"):
        UpdateDatapath(**kwargs, corrections=False, cached_bags=2)


@pytest.mark.parametrize(("name", "value", "message"), [
    ("correction_contexts", 0, r"Correction contexts must be an integer in 1\.\.4 \(the "
                               r"capacity\), not 0"),
    ("correction_contexts", 5, r"Correction contexts must be an integer in 1\.\.4 \(the "
                               r"capacity\), not 5"),
    ("correction_queue_depth", 1,
     r"Correction queue depth must be an integer in 2\.\.4096, not 1"),
    ("correction_queue_depth", 2.0,
     r"Correction queue depth must be an integer in 2\.\.4096, not 2\.0"),
])
def test_datapath_rejects_bad_correction_parameters(name, value, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        UpdateDatapath(capacity=4, lines_per_slot=2, line_address_width=10, **{name: value})


def test_datapath_delta_lanes_need_the_corrections_and_a_bool():
    kwargs = dict(capacity=4, lines_per_slot=2, line_address_width=10)
    assert UpdateDatapath(**kwargs, delta_lanes=True).delta_lanes
    assert not UpdateDatapath(**kwargs).delta_lanes
    with pytest.raises(ValueError, match=r"^Delta lanes need the corrections: delta_lanes must "
                                         r"be False without them$"):
        UpdateDatapath(**kwargs, corrections=False, delta_lanes=True)
    with pytest.raises(TypeError, match=r"^Delta lanes must be a bool, not 1$"):
        UpdateDatapath(**kwargs, delta_lanes=1)


def test_datapath_registered_writes_need_a_buffer_per_lane_without_corrections():
    kwargs = dict(capacity=4, lines_per_slot=2, line_address_width=10, corrections=False,
                  lane_replicas=True, read_port_per_use=True)
    UpdateDatapath(**kwargs, registered_writes=True)
    message = (r"^Registered writes need lane_replicas and read_port_per_use, and no "
               r"corrections$")
    for change in ({"corrections": True}, {"lane_replicas": False},
                   {"read_port_per_use": False}):
        with pytest.raises(ValueError, match=message):
            UpdateDatapath(**{**kwargs, **change}, registered_writes=True)
    with pytest.raises(TypeError, match=r"^Registered writes must be True or False, not 1$"):
        UpdateDatapath(**kwargs, registered_writes=1)


def test_datapath_correction_lanes_need_the_delta_lanes_and_a_bool():
    kwargs = dict(capacity=4, lines_per_slot=2, line_address_width=10)
    assert UpdateDatapath(**kwargs, delta_lanes=True, correction_lanes=True).correction_lanes
    assert not UpdateDatapath(**kwargs, delta_lanes=True).correction_lanes
    with pytest.raises(ValueError, match=r"^Correction lanes need the delta lanes: delta_lanes "
                                         r"must be True with correction_lanes$"):
        UpdateDatapath(**kwargs, correction_lanes=True)
    with pytest.raises(TypeError, match=r"^Correction lanes must be a bool, not 1$"):
        UpdateDatapath(**kwargs, delta_lanes=True, correction_lanes=1)


def _f32(values):
    return np.asarray(values, dtype=np.float32)


def _line_int(floats):
    return int.from_bytes(_f32(floats).tobytes(), "little")


def _line_floats(value):
    return np.frombuffer(value.to_bytes(64, "little"), dtype=np.float32)


async def _accumulate_each_slot_once(ctx, dut, capacity, lps):
    """One fresh accumulation per slot, scale 1.0, then wait until the sums are written."""
    await send(ctx, dut.accumulate, [
        {"slot": slot, "fresh": 1, "lines": lps, "scale": int(np.float32(1).view(np.uint32))}
        for slot in range(capacity)])
    await ctx.tick().until(dut.accumulate_idle)


def _offer_row_line(ctx, dut, rows, line, lps):
    """Row line ``line`` (slot ``line // lps``), written back to address ``line``."""
    ctx.set(dut.rows.payload, _line_int(rows[line]))
    ctx.set(dut.row_context.payload, {"slot": line // lps, "line": line % lps, "address": line})
    ctx.set(dut.rows.valid, 1)
    ctx.set(dut.row_context.valid, 1)


@pytest.mark.parametrize(("delta_lanes", "fpga"), [(False, False), (True, False),
                                                   (False, True)])
def test_datapath_apply_keeps_deltas_at_its_rate(delta_lanes, fpga):
    """Accumulate a gradient per slot, apply the SGD step with ``keep_deltas``, then add each
    slot's ``new - old`` to a bag (CORRECT, factor 1) and store it: the rows and the corrected
    bags are bit-exact, and the apply takes a row line every other cycle on the shared adder
    (in bursts of an adder latency + 1: the lines whose two adder cycles interleave) but
    every cycle with delta lanes of its own. ``fpga``: the FPGA build's lane copies,
    operand register and read port per reader change neither."""
    capacity, lps = 16, 2
    lines = capacity * lps
    dut = UpdateDatapath(capacity=capacity, lines_per_slot=lps, line_address_width=10,
                         delta_lanes=delta_lanes, lane_replicas=fpga, registered_operands=fpga,
                         read_port_per_use=fpga)
    assert dut.mul_latency == FPMul.DEFAULT_STAGES + fpga
    draw = np.random.default_rng(8)
    gradient = draw.standard_normal((lines, 16)).astype(np.float32)
    rows = draw.standard_normal((lines, 16)).astype(np.float32)
    bags = draw.standard_normal((lines, 16)).astype(np.float32)
    lr = np.float32(0.375)
    taken_at = []
    written = {}

    async def gradients(ctx):
        await send(ctx, dut.gradient, [_line_int(line) for line in gradient])

    async def collect(ctx):
        ctx.set(dut.writes.ready, 1)
        while True:
            _, _, valid, payload = await ctx.tick().sample(dut.writes.valid, dut.writes.payload)
            if valid:
                written[payload.address] = _line_floats(payload.data)

    async def testbench(ctx):
        ctx.set(dut.lr, int(lr.view(np.uint32)))
        ctx.set(dut.keep_deltas, 1)
        await _accumulate_each_slot_once(ctx, dut, capacity, lps)
        cycle = 0
        for line in range(lines):
            _offer_row_line(ctx, dut, rows, line, lps)
            while True:
                cycle += 1
                _, _, taken = await ctx.tick().sample(dut.rows.ready)
                if taken:
                    break
            taken_at.append(cycle)
        ctx.set(dut.rows.valid, 0)
        ctx.set(dut.row_context.valid, 0)
        await ctx.tick().until(dut.apply_idle)
        # Each slot's deltas into bag lines loaded from ``bag_lines``, stored at 512 + line.
        ops = []
        for slot in range(capacity):
            base = {"context": 0, "cached": 0, "bag": 0, "slot": slot, "lines": lps,
                    "factor": int(np.float32(1).view(np.uint32)), "address": 512 + slot * lps}
            ops += [{**base, "kind": kind} for kind in
                    (CorrectionKind.LOAD, CorrectionKind.CORRECT, CorrectionKind.STORE)]
        bag_line = 0
        for op in ops:
            ctx.set(dut.correction.payload, op)
            ctx.set(dut.correction.valid, 1)
            await ctx.tick().until(dut.correction.ready)
            ctx.set(dut.correction.valid, 0)
            if op["kind"] == CorrectionKind.LOAD:
                for _ in range(lps):
                    ctx.set(dut.bag_lines.payload, _line_int(bags[bag_line]))
                    ctx.set(dut.bag_lines.valid, 1)
                    await ctx.tick().until(dut.bag_lines.ready)
                    bag_line += 1
                ctx.set(dut.bag_lines.valid, 0)
        await ctx.tick().until(dut.correction_idle)
        await ctx.tick().repeat(4)

    simulate(dut, gradients, testbench, processes=(collect,), deadline=5_000)
    new_rows = rows - lr * gradient          # float32: one rounding each, no FMA
    expected_bags = bags + (new_rows - rows)
    for line in range(lines):
        assert np.array_equal(written[line].view(np.uint32), new_rows[line].view(np.uint32))
        assert np.array_equal(written[512 + line].view(np.uint32),
                              expected_bags[line].view(np.uint32))
    span = taken_at[-1] - taken_at[0]
    assert span == (lines - 1 if delta_lanes else 2 * lines - dut.add_latency - 2), taken_at


@pytest.mark.parametrize(("fpga", "fold", "seed"), [(False, 1, 1), (True, 1, 2), (True, 2, 3)])
def test_datapath_apply_waits_for_room_in_a_full_write_queue(fpga, fold, seed):
    """The memory takes no write for a long while, then takes them at random: rows are
    offered every cycle, so the write queue fills and the apply must stop with a line in
    flight for each free entry (``write_room``). Every row comes out once, in order and
    bit-exact; none is dropped at a full queue. (Folded lanes take a line every other cycle
    at most, and take no corrections: their ``apply_allowed`` register looks at the room
    left without a line taken.)"""
    capacity, lps = 16, 2
    lines = capacity * lps
    dut = UpdateDatapath(capacity=capacity, lines_per_slot=lps, line_address_width=10,
                         lane_replicas=fpga, registered_operands=fpga, read_port_per_use=fpga,
                         lane_fold=fold, corrections=fold == 1)
    draw = np.random.default_rng(seed)
    gradient = draw.standard_normal((lines, 16)).astype(np.float32)
    rows = draw.standard_normal((lines, 16)).astype(np.float32)
    lr = np.float32(0.625)
    written = []
    stall = 4 * dut.apply_latency + 64      # long enough to fill the queue several times over

    async def gradients(ctx):
        await send(ctx, dut.gradient, [_line_int(line) for line in gradient])

    async def collect(ctx):
        pace = random.Random(seed)
        cycle = 0
        while True:
            ready = cycle >= stall and pace.random() < 0.3
            ctx.set(dut.writes.ready, ready)
            _, _, valid, payload = await ctx.tick().sample(dut.writes.valid, dut.writes.payload)
            if valid and ready:
                written.append((payload.address, _line_floats(payload.data)))
            cycle += 1

    async def testbench(ctx):
        ctx.set(dut.lr, int(lr.view(np.uint32)))
        await _accumulate_each_slot_once(ctx, dut, capacity, lps)
        for line in range(lines):
            _offer_row_line(ctx, dut, rows, line, lps)
            await ctx.tick().until(dut.rows.ready)
        ctx.set(dut.rows.valid, 0)
        ctx.set(dut.row_context.valid, 0)
        await ctx.tick().until(dut.apply_idle & ~dut.writes_queued)

    simulate(dut, gradients, testbench, processes=(collect,), deadline=20_000)
    _assert_rows_updated_in_order(written, rows - lr * gradient)


def _take_every_write(dut, written):
    """A process that takes every write the datapath offers, as ``(address, floats)``."""
    async def collect(ctx):
        ctx.set(dut.writes.ready, 1)
        while True:
            _, _, valid, payload = await ctx.tick().sample(dut.writes.valid, dut.writes.payload)
            if valid:
                written.append((payload.address, _line_floats(payload.data)))
    return collect


def _assert_rows_updated_in_order(written, new_rows):
    """``written`` holds every row line once, in address order, each bit-exact."""
    assert [address for address, _ in written] == list(range(len(new_rows)))
    for line, (_, floats) in enumerate(written):
        assert np.array_equal(floats.view(np.uint32), new_rows[line].view(np.uint32)), line


@pytest.mark.parametrize(("capacity", "lps"), [(4, 2), (1, 1)], ids=["many", "lone"])
@pytest.mark.parametrize(("fpga", "fold"), [(False, 1), (True, 2)])
def test_datapath_apply_waits_for_the_final_sums(fpga, fold, capacity, lps):
    """Row lines are offered from the first cycle, while the gradients are still being
    summed: the apply must wait until no sum is in flight (`sums_final`, a term of the
    `apply_allowed` register), or it would read a sum not yet written. Every row comes out
    bit-exact. With one line alone the accumulation goes first (apply yields to one wanted)
    with nothing in flight before it and nothing wanted after it, so only the go's own term
    keeps the apply from reading the sum the cycle after, before it is written."""
    lines = capacity * lps
    dut = UpdateDatapath(capacity=capacity, lines_per_slot=lps, line_address_width=10,
                         lane_replicas=fpga, registered_operands=fpga, read_port_per_use=fpga,
                         lane_fold=fold, corrections=False)
    draw = np.random.default_rng(fold)
    gradient = draw.standard_normal((lines, 16)).astype(np.float32)
    rows = draw.standard_normal((lines, 16)).astype(np.float32)
    lr = np.float32(0.625)
    written = []

    async def gradients(ctx):
        await send(ctx, dut.gradient, [_line_int(line) for line in gradient])

    async def accumulations(ctx):
        await _accumulate_each_slot_once(ctx, dut, capacity, lps)

    async def testbench(ctx):
        ctx.set(dut.lr, int(lr.view(np.uint32)))
        for line in range(lines):
            _offer_row_line(ctx, dut, rows, line, lps)
            await ctx.tick().until(dut.rows.ready)
        ctx.set(dut.rows.valid, 0)
        ctx.set(dut.row_context.valid, 0)
        await ctx.tick().until(dut.apply_idle & ~dut.writes_queued)

    simulate(dut, gradients, accumulations, testbench,
             processes=(_take_every_write(dut, written),), deadline=20_000)
    _assert_rows_updated_in_order(written, rows - lr * gradient)



def test_datapath_correction_lanes_correct_beside_the_apply():
    """With lanes of its own the correction runs while apply does: every slot's LOAD, CORRECT
    and STORE are queued before the first row line, each CORRECT line waits for its slot's
    ``new - old`` (reading earlier would add the gradient sum instead: the bags would not be
    bit-exact), a bag's STORE takes the write queue in cycles apply leaves free, and the
    first bags are stored before the last row line is written."""
    capacity, lps = 12, 2
    lines = capacity * lps
    dut = UpdateDatapath(capacity=capacity, lines_per_slot=lps, line_address_width=10,
                         correction_contexts=3, delta_lanes=True, correction_lanes=True)
    draw = np.random.default_rng(9)
    gradient = draw.standard_normal((lines, 16)).astype(np.float32)
    rows = draw.standard_normal((lines, 16)).astype(np.float32)
    bags = draw.standard_normal((lines, 16)).astype(np.float32)
    factors = draw.standard_normal(capacity).astype(np.float32)
    lr = np.float32(0.375)
    written, written_at = {}, {}
    ops_queued = []

    async def gradients(ctx):
        await send(ctx, dut.gradient, [_line_int(line) for line in gradient])

    async def collect(ctx):
        ctx.set(dut.writes.ready, 1)
        cycle = 0
        while True:
            _, _, valid, payload = await ctx.tick().sample(dut.writes.valid, dut.writes.payload)
            cycle += 1
            if valid:
                written[payload.address] = _line_floats(payload.data)
                written_at[payload.address] = cycle

    async def corrections(ctx):
        await ctx.tick().until(dut.accumulate_idle)
        for slot in range(capacity):
            base = {"context": slot % 3, "cached": 0, "bag": 0, "slot": slot, "lines": lps,
                    "factor": int(factors[slot].view(np.uint32)),
                    "address": 512 + slot * lps}
            for kind in (CorrectionKind.LOAD, CorrectionKind.CORRECT, CorrectionKind.STORE):
                ctx.set(dut.correction.payload, {**base, "kind": kind})
                ctx.set(dut.correction.valid, 1)
                await ctx.tick().until(dut.correction.ready)
                ctx.set(dut.correction.valid, 0)
        ops_queued.append(True)

    async def bag_lines(ctx):
        for line in range(lines):
            ctx.set(dut.bag_lines.payload, _line_int(bags[line]))
            ctx.set(dut.bag_lines.valid, 1)
            await ctx.tick().until(dut.bag_lines.ready)
        ctx.set(dut.bag_lines.valid, 0)

    async def testbench(ctx):
        ctx.set(dut.lr, int(lr.view(np.uint32)))
        ctx.set(dut.keep_deltas, 1)
        await _accumulate_each_slot_once(ctx, dut, capacity, lps)
        await ctx.tick().repeat(3 * capacity + 10)
        assert ops_queued   # (each context's queue holds its slots' ops)
        for line in range(lines):
            # A row line every other cycle, as PMEM's read port delivers them.
            _offer_row_line(ctx, dut, rows, line, lps)
            await ctx.tick().until(dut.rows.ready)
            ctx.set(dut.rows.valid, 0)
            ctx.set(dut.row_context.valid, 0)
            await ctx.tick()
        await ctx.tick().until(dut.apply_idle & dut.correction_idle)
        await ctx.tick().repeat(4)

    simulate(dut, gradients, testbench, processes=(collect, corrections, bag_lines),
             deadline=5_000)
    new_rows = rows - lr * gradient          # float32: one rounding each, no FMA
    expected_bags = bags + (new_rows - rows) * np.repeat(factors, lps)[:, None]
    for line in range(lines):
        assert np.array_equal(written[line].view(np.uint32), new_rows[line].view(np.uint32))
        assert np.array_equal(written[512 + line].view(np.uint32),
                              expected_bags[line].view(np.uint32)), line
    assert written_at[512] < written_at[lines - 1], written_at


# ---------------------------------------------------------------------------- fetch


def test_gradient_fetch_asks_a_line_per_cycle_across_occurrences():
    """Back to back occurrences of two lines: a gradient read every cycle (the next occurrence
    comes in with the last read of the one before), and the occurrences handed on in order."""
    dut = GradientFetch(table_width=2, line_width=3, line_address_width=16)
    occurrences = [{"table": k % 3, "row": 100 + k, "scale": 7 * k, "lines": 2,
                    "gradient": 40 * k} for k in range(12)]
    asked, handed = [], []

    async def feed(ctx):
        await send(ctx, dut.i, occurrences)

    async def watch(ctx):
        ctx.set(dut.request.ready, 1)
        ctx.set(dut.o.ready, 1)
        cycle = 0
        while len(handed) < len(occurrences):
            _, _, request_valid, request, o_valid, o = await ctx.tick().sample(
                dut.request.valid, dut.request.payload, dut.o.valid, dut.o.payload)
            cycle += 1
            if request_valid:
                asked.append((cycle, request))
            if o_valid:
                handed.append((o.table, o.row, o.data.scale, o.data.lines))

    simulate(dut, feed, watch, deadline=500)
    assert [address for _, address in asked] == [40 * k + line for k in range(12)
                                                 for line in range(2)]
    cycles = [cycle for cycle, _ in asked]
    assert cycles[-1] - cycles[0] == len(cycles) - 1, cycles
    assert handed == [(o["table"], o["row"], o["scale"], 2) for o in occurrences]


def _row_fetch_over_keys(fetch, keys):
    """A module holding ``fetch``, whose key slots read ``keys`` ((table, row) per slot)."""
    m = Module()
    m.submodules.fetch = fetch
    with m.Switch(fetch.key_slot):
        for slot, (table, row) in enumerate(keys):
            with m.Case(slot):
                m.d.comb += [fetch.key.table.eq(table), fetch.key.row.eq(row)]
    return m


async def _start_row_fetch(ctx, fetch, descriptors, count):
    """Start ``fetch`` over ``count`` keys with every request and context taken at once."""
    ctx.set(fetch.descriptors, descriptors)
    ctx.set(fetch.request.ready, 1)
    ctx.set(fetch.context.ready, 1)
    ctx.set(fetch.count, count)
    ctx.set(fetch.start, 1)
    await ctx.tick()
    ctx.set(fetch.start, 0)


def test_row_fetch_asks_a_line_per_cycle_across_rows():
    """The next row's key and address are ready while this row's lines go out: one read per
    cycle over rows of two and four lines, with each read's slot, line and address in order."""
    capacity = 8
    keys = [(0, 3), (1, 2), (0, 9), (1, 0), (1, 5), (0, 1)]
    tables = [{"base": 0x1000, "rows": 16, "dim": 32, "mode": 0},
              {"base": 0x8000, "rows": 16, "dim": 64, "mode": 0}]
    fetch = RowFetch(capacity=capacity, max_tables=2, table_width=1, line_width=3,
                     addr_width=20, context_depth=16)
    m = _row_fetch_over_keys(fetch, keys)
    descriptors = data.ArrayLayout(table_layout(20), 2).const(tables)
    expected = [(slot, line, (tables[table]["base"] >> 6) + row * (tables[table]["dim"] >> 4)
                 + line)
                for slot, (table, row) in enumerate(keys)
                for line in range(tables[table]["dim"] >> 4)]
    asked, contexts = [], []

    async def bench(ctx):
        await _start_row_fetch(ctx, fetch, descriptors, len(keys))
        cycle = 0
        while len(contexts) < len(expected) or ctx.get(fetch.busy):
            _, _, request_valid, request, context_valid, context = await ctx.tick().sample(
                fetch.request.valid, fetch.request.payload, fetch.context.valid,
                fetch.context.payload)
            cycle += 1
            if request_valid:
                asked.append((cycle, request))
            if context_valid:
                contexts.append((context.slot, context.line, context.address))

    simulate(m, bench, deadline=500)
    assert contexts == expected
    assert [address for _, address in asked] == [address for *_, address in expected]
    cycles = [cycle for cycle, _ in asked]
    assert cycles[-1] - cycles[0] == len(cycles) - 1, cycles


@pytest.mark.parametrize("line_width", [2, 3])
def test_row_fetch_first_line_wraps_as_the_product_does(line_width):
    """A row's first line is ``(base >> 6) + row * lines`` in the line address's width, for every
    line count a table may have and rows far past it (the sum wraps): the shifted copies of the
    row (one term per bit of the line count, an odd or an even number of terms with the base)
    add up to the product."""
    addr_width = 14
    line_mask = (1 << (addr_width - 6)) - 1
    rng = random.Random(line_width)
    line_counts = range(1, 1 << line_width)
    tables = [{"base": rng.randrange(1 << addr_width) & ~63, "rows": 1 << 20, "dim": 16 * lines,
               "mode": 0} for lines in line_counts]
    keys = [(table, rng.choice([0, 1, rng.randrange(1 << 32), (1 << 32) - 1]))
            for table in range(len(tables)) for _ in range(3)]
    fetch = RowFetch(capacity=len(keys), max_tables=len(tables),
                     table_width=(len(tables) - 1).bit_length(), line_width=line_width,
                     addr_width=addr_width, context_depth=8)
    m = _row_fetch_over_keys(fetch, keys)
    descriptors = data.ArrayLayout(table_layout(addr_width), len(tables)).const(tables)
    expected = [((tables[table]["base"] >> 6) + row * (tables[table]["dim"] >> 4) + line)
                & line_mask
                for table, row in keys for line in range(tables[table]["dim"] >> 4)]
    asked = []

    async def bench(ctx):
        await _start_row_fetch(ctx, fetch, descriptors, len(keys))
        while len(asked) < len(expected) or ctx.get(fetch.busy):
            _, _, request_valid, request = await ctx.tick().sample(
                fetch.request.valid, fetch.request.payload)
            if request_valid:
                asked.append(request)

    simulate(m, bench, deadline=2000)
    assert asked == expected
