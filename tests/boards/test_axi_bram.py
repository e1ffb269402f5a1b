"""The block-RAM AXI4 subordinate the board self-test uses as its memory."""

import random

import pytest

from boards.bist.axi_bram import AxiBram
from tb.pysim import simulate

ONES = (1 << 512) - 1


def line(k):
    return int.from_bytes(bytes((7 * k + n) % 256 for n in range(64)), "little")


def run(bram, *testbenches):
    simulate(bram, *testbenches, deadline=1_000)


async def write_burst(ctx, axi, address, beats, *, ident=1, strobes=None):
    ctx.set(axi.awid, ident)
    ctx.set(axi.awaddr, address)
    ctx.set(axi.awlen, len(beats) - 1)
    ctx.set(axi.awvalid, 1)
    await ctx.tick().until(axi.awready)
    ctx.set(axi.awvalid, 0)
    for k, beat in enumerate(beats):
        ctx.set(axi.wdata, beat)
        ctx.set(axi.wstrb, (1 << 64) - 1 if strobes is None else strobes[k])
        ctx.set(axi.wlast, k == len(beats) - 1)
        ctx.set(axi.wvalid, 1)
        await ctx.tick().until(axi.wready)
    ctx.set(axi.wvalid, 0)
    ctx.set(axi.bready, 1)
    bid, bresp = await ctx.tick().sample(axi.bid, axi.bresp).until(axi.bvalid)
    ctx.set(axi.bready, 0)
    return bid, bresp


async def read_burst(ctx, axi, address, length, *, ident=2):
    ctx.set(axi.arid, ident)
    ctx.set(axi.araddr, address)
    ctx.set(axi.arlen, length - 1)
    ctx.set(axi.arvalid, 1)
    await ctx.tick().until(axi.arready)
    ctx.set(axi.arvalid, 0)
    ctx.set(axi.rready, 1)
    beats = []
    while True:
        _, _, valid, rid, data, resp, last = await ctx.tick().sample(
            axi.rvalid, axi.rid, axi.rdata, axi.rresp, axi.rlast)
        if valid:
            beats.append((rid, data, resp))
            if last:
                break
    ctx.set(axi.rready, 0)
    return beats


def issue_reads(bram, bursts):
    """A testbench that hands ``bursts`` (first line, length, ID) to AR, one after another."""
    async def addresses(ctx):
        axi = bram.axi
        for first, length, ident in bursts:
            ctx.set(axi.arid, ident)
            ctx.set(axi.araddr, first * 64)
            ctx.set(axi.arlen, length - 1)
            ctx.set(axi.arvalid, 1)
            await ctx.tick().until(axi.arready)
        ctx.set(axi.arvalid, 0)
    return addresses


def test_initial_contents_bursts_and_byte_strobes():
    init = [line(k) for k in range(6)]
    bram = AxiBram(depth=8, init=init, addr_width=12, id_width=3)
    seen = {}

    async def testbench(ctx):
        axi = bram.axi
        seen["initial"] = await read_burst(ctx, axi, 0, 6)
        # Line 2 whole, line 3 only in its low 8 bytes and byte 63.
        seen["b"] = await write_burst(ctx, axi, 2 * 64, [ONES, 0], ident=5,
                                      strobes=[(1 << 64) - 1, 0xFF | 1 << 63])
        seen["after"] = await read_burst(ctx, axi, 2 * 64, 2, ident=6)

    run(bram, testbench)
    assert seen["initial"] == [(2, init[k], 0) for k in range(6)]
    assert seen["b"] == (5, 0)
    partial = init[3] & ~((1 << 64) - 1) & ~(0xFF << 504)
    assert seen["after"] == [(6, ONES, 0), (6, partial, 0)]


def test_a_read_right_after_the_b_response_sees_the_write():
    """The write lands a cycle after its W beat (from registers), but never after its B
    response: a read whose AR follows the B handshake at once returns the new data."""
    init = [line(k) for k in range(4)]
    bram = AxiBram(depth=4, init=init, addr_width=12, id_width=2)
    seen = []

    async def testbench(ctx):
        axi = bram.axi
        for k in range(4):
            ctx.set(axi.awid, 1)
            ctx.set(axi.awaddr, k * 64)
            ctx.set(axi.awlen, 0)
            ctx.set(axi.awvalid, 1)
            ctx.set(axi.wdata, ONES ^ k)
            ctx.set(axi.wstrb, (1 << 64) - 1)
            ctx.set(axi.wlast, 1)
            ctx.set(axi.wvalid, 1)
            ctx.set(axi.bready, 1)
            aw_done = w_done = False
            while True:
                _, _, awready, wready, bvalid = await ctx.tick().sample(
                    axi.awready, axi.wready, axi.bvalid)
                aw_done |= awready
                w_done |= wready
                if aw_done:
                    ctx.set(axi.awvalid, 0)
                if w_done:
                    ctx.set(axi.wvalid, 0)
                if bvalid:
                    break
            ctx.set(axi.bready, 0)
            seen.append(await read_burst(ctx, axi, k * 64, 1, ident=k))

    run(bram, testbench)
    assert seen == [[(k, ONES ^ k, 0)] for k in range(4)]


def test_beats_outside_the_memory_are_decode_errors():
    bram = AxiBram(depth=3, init=[line(0), line(1), line(2)], addr_width=12, id_width=1)
    seen = {}

    async def testbench(ctx):
        axi = bram.axi
        seen["read"] = await read_burst(ctx, axi, 64, 3, ident=1)
        seen["write"] = await write_burst(ctx, axi, 2 * 64, [0, 0], ident=0)
        seen["kept"] = await read_burst(ctx, axi, 2 * 64, 1, ident=0)

    run(bram, testbench)
    assert [(rid, resp) for rid, _, resp in seen["read"]] == [(1, 0), (1, 0), (1, 3)]
    assert seen["read"][0][1] == line(1)
    # The burst's first beat is inside and lands; the response reports the bad second one.
    assert seen["write"] == (0, 3)
    assert seen["kept"] == [(0, 0, 0)]


def test_parameters_are_validated():
    with pytest.raises(ValueError, match=r"^Depth must be an integer of at least 2, not 1$"):
        AxiBram(depth=1)
    with pytest.raises(ValueError, match=r"^128 lines do not fit a 12-bit address space$"):
        AxiBram(depth=128, addr_width=12)
    with pytest.raises(ValueError, match=r"^Initial contents have 3 lines, more than the "
                                         r"depth 2$"):
        AxiBram(depth=2, init=[0, 0, 0])
    with pytest.raises(ValueError, match=r"^Initial line 1 must be an unsigned integer of 512 "
                                         r"bits$"):
        AxiBram(depth=2, init=[0, -1])


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_reads_under_random_back_pressure_keep_every_beat_in_order(seed):
    """Bursts queue up behind each other while the manager takes beats at random: the beats
    read ahead wait in their slots, none is lost, repeated or reordered, and with `rready`
    held high the queue gives a beat every cycle."""
    rng = random.Random(seed)
    init = [line(k) for k in range(16)]
    bram = AxiBram(depth=16, init=init, addr_width=12, id_width=2)
    bursts = [(rng.randrange(16), rng.randrange(1, 5), k % 4) for k in range(12)]
    expected = [(ident, init[(first + n) % 16] if first + n < 16 else 0,
                 0 if first + n < 16 else 3, n == length - 1)
                for first, length, ident in bursts for n in range(length)]
    seen = []
    print(f"seed {seed}")

    async def beats(ctx):
        axi = bram.axi
        while len(seen) < len(expected):
            ready = rng.random() < 0.5
            ctx.set(axi.rready, ready)
            _, _, valid, rid, data, resp, last = await ctx.tick().sample(
                axi.rvalid, axi.rid, axi.rdata, axi.rresp, axi.rlast)
            if valid and ready:
                seen.append((rid, data if resp == 0 else 0, resp, last))
        ctx.set(axi.rready, 0)

    run(bram, issue_reads(bram, bursts), beats)
    assert seen == expected


def test_a_streaming_read_gives_a_beat_every_cycle():
    init = [line(k) for k in range(16)]
    bram = AxiBram(depth=16, init=init, addr_width=12, id_width=1)
    cycles = {}

    async def testbench(ctx):
        axi = bram.axi
        ctx.set(axi.araddr, 0)
        ctx.set(axi.arlen, 15)
        ctx.set(axi.arvalid, 1)
        ctx.set(axi.rready, 1)
        await ctx.tick().until(axi.arready)
        ctx.set(axi.arvalid, 0)
        count = 0
        cycle = 0
        while count < 16:
            _, _, valid, data = await ctx.tick().sample(axi.rvalid, axi.rdata)
            cycle += 1
            if valid:
                assert data == init[count]
                count += 1
                cycles.setdefault("first", cycle)
                cycles["last"] = cycle
        assert cycles["last"] - cycles["first"] == 15

    run(bram, testbench)
    # `first` counts from the clock edge of the AR handshake to the edge that takes the beat.
    assert cycles["first"] == bram.read_latency + 1, cycles


def test_queued_bursts_follow_each_other_without_a_gap():
    """With `rready` held high, a burst waiting behind the head moves up as the head's last beat
    issues: the beats of back-to-back bursts come one a cycle, the second burst's first beat
    right after the first's last."""
    init = [line(k) for k in range(16)]
    bram = AxiBram(depth=16, init=init, addr_width=12, id_width=2)
    bursts = [(3, 2, 1), (9, 2, 2), (14, 3, 3)]  # the last runs past the end
    seen = []

    async def beats(ctx):
        axi = bram.axi
        ctx.set(axi.rready, 1)
        cycle = 0
        while len(seen) < 7:
            _, _, valid, rid, data, resp, last = await ctx.tick().sample(
                axi.rvalid, axi.rid, axi.rdata, axi.rresp, axi.rlast)
            cycle += 1
            if valid:
                seen.append((cycle, rid, data if resp == 0 else 0, resp, last))

    run(bram, issue_reads(bram, bursts), beats)
    first = seen[0][0]
    assert [c - first for c, *_ in seen] == list(range(7))
    assert [tuple(beat) for _, *beat in seen] == [
        (1, init[3], 0, 0), (1, init[4], 0, 1), (2, init[9], 0, 0), (2, init[10], 0, 1),
        (3, init[14], 0, 0), (3, init[15], 0, 0), (3, 0, 3, 1)]


def test_a_burst_past_the_end_of_the_address_space_does_not_wrap():
    """The beat after the address space's last line is outside the memory, not line 0."""
    init = [line(k) for k in range(64)]
    bram = AxiBram(depth=64, init=init, addr_width=12, id_width=1)
    seen = {}

    async def testbench(ctx):
        seen["read"] = await read_burst(ctx, bram.axi, 63 * 64, 2, ident=1)

    run(bram, testbench)
    assert [(rid, resp) for rid, _, resp in seen["read"]] == [(1, 0), (1, 3)]
    assert seen["read"][0][1] == init[63]
