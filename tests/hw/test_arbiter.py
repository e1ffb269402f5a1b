"""The AXI arbiter in Amaranth's simulator: routing over 1, 2 and 4 interleaved channels, data
integrity, per-ID response order restored across channels that answer out of order, no
starvation under a flooding manager, and its parameter checks with their exact messages."""

import random
from collections import defaultdict, deque
from functools import partial

import pytest

from hw.mem.arbiter import AxiArbiter
from hw.mem.interleave import join_address, split_address
from tb.pysim import simulate

LINE = 64
ALL_STROBES = (1 << LINE) - 1


async def _edge(ctx, *exprs):
    """The values of ``exprs`` at the next clock edge (as the registers see them)."""
    _, _, *values = await ctx.tick().sample(*exprs)
    return values


class ChannelModel:
    """One memory channel: random ready, each response after its own random latency, in any
    order across IDs (in order within an ID). Data lands when the W beat is accepted; a read
    samples memory when its AR is accepted."""

    def __init__(self, bus, seed, *, busy=0.3, latency=(1, 12)):
        self.bus = bus
        self.draw = random.Random(seed)
        self.busy = busy
        self.latency = latency
        self.lines: dict[int, int] = {}
        self.addresses: list[int] = []   # every local address requested (reads and writes)
        self.overtaken = 0               # responses sent before an older one

    def _ready(self):
        return int(self.draw.random() >= self.busy)

    async def run(self, ctx):
        bus, draw = self.bus, self.draw
        reads, writes = [], []   # [due, id, payload]
        r_current = b_current = None
        cycle = 0
        while True:
            ar_ready, aw_ready, w_ready = self._ready(), self._ready(), self._ready()
            ctx.set(bus.arready, ar_ready)
            ctx.set(bus.awready, aw_ready)
            ctx.set(bus.wready, w_ready)
            for queue, kind in ((reads, "r"), (writes, "b")):
                current = r_current if kind == "r" else b_current
                if current is None:
                    heads = {}
                    for entry in queue:
                        heads.setdefault(entry[1], entry)
                    due = [e for e in heads.values() if e[0] <= cycle]
                    if due and draw.random() < 0.8:
                        current = draw.choice(due)
                        self.overtaken += current is not queue[0]
                        queue.remove(current)
                if kind == "r":
                    r_current = current
                    ctx.set(bus.rvalid, current is not None)
                    if current is not None:
                        ctx.set(bus.rid, current[1])
                        ctx.set(bus.rdata, current[2])
                        ctx.set(bus.rresp, 0)
                        ctx.set(bus.rlast, 1)
                else:
                    b_current = current
                    ctx.set(bus.bvalid, current is not None)
                    if current is not None:
                        ctx.set(bus.bid, current[1])
                        ctx.set(bus.bresp, 0)
            (arvalid, araddr, arid, awvalid, awaddr, awid, wvalid, wdata, wstrb, rready,
             bready) = await _edge(ctx,
                bus.arvalid, bus.araddr, bus.arid, bus.awvalid, bus.awaddr, bus.awid,
                bus.wvalid, bus.wdata, bus.wstrb, bus.rready, bus.bready)
            if arvalid and ar_ready:
                self.addresses.append(araddr)
                reads.append([cycle + draw.randint(*self.latency), arid,
                              self.lines.get(araddr // LINE, 0)])
            # The arbiter offers AW and W together; this model takes them independently.
            if awvalid and aw_ready:
                self.addresses.append(awaddr)
                self._pending_aw = (awaddr, awid)
            if wvalid and w_ready:
                self._pending_w = (wdata, wstrb)
            aw, w = getattr(self, "_pending_aw", None), getattr(self, "_pending_w", None)
            if aw is not None and w is not None:
                old = self.lines.get(aw[0] // LINE, 0)
                mask = sum(0xFF << (8 * k) for k in range(LINE) if w[1] >> k & 1)
                self.lines[aw[0] // LINE] = (old & ~mask) | (w[0] & mask)
                writes.append([cycle + draw.randint(*self.latency), aw[1], None])
                self._pending_aw = self._pending_w = None
            if r_current is not None and rready:
                r_current = None
            if b_current is not None and bready:
                b_current = None
            cycle += 1


class ManagerModel:
    """Writes then reads back its own lines with random IDs (many in flight), checking that
    data and the order of responses per ID are right."""

    def __init__(self, port, lines, seed, *, id_width, busy=0.2):
        self.port = port
        self.lines = lines
        self.draw = random.Random(seed)
        self.id_width = id_width
        self.busy = busy
        self.values = {line: self.draw.getrandbits(512) for line in lines}
        self.expected_r = defaultdict(deque)   # id -> data in issue order
        self.expected_b = defaultdict(int)     # id -> writes awaiting B
        self.done_reads = self.done_writes = 0

    async def issue_writes(self, ctx):
        port = self.port
        for line in self.lines:
            while self.draw.random() < self.busy:
                await ctx.tick()
            ident = self.draw.randrange(1 << self.id_width)
            ctx.set(port.awvalid, 1)
            ctx.set(port.awaddr, line * LINE)
            ctx.set(port.awid, ident)
            ctx.set(port.awlen, 0)
            ctx.set(port.awsize, 6)
            ctx.set(port.awburst, 1)
            ctx.set(port.wvalid, 1)
            ctx.set(port.wdata, self.values[line])
            ctx.set(port.wstrb, ALL_STROBES)
            ctx.set(port.wlast, 1)
            self.expected_b[ident] += 1
            await ctx.tick().until(port.awready & port.wready)
            ctx.set(port.awvalid, 0)
            ctx.set(port.wvalid, 0)

    #: Cycles a collector waits before it declares the arbiter stuck.
    PATIENCE = 20000

    async def collect_b(self, ctx):
        ctx.set(self.port.bready, 1)
        for _ in range(self.PATIENCE):
            if self.done_writes == len(self.lines):
                return
            bvalid, bid = await _edge(ctx, self.port.bvalid, self.port.bid)
            if bvalid:
                assert self.expected_b[bid] > 0, f"B for ID {bid} that has no write in flight"
                self.expected_b[bid] -= 1
                self.done_writes += 1
        raise AssertionError(f"only {self.done_writes} of {len(self.lines)} writes completed")

    async def issue_reads(self, ctx, order):
        port = self.port
        while self.done_writes < len(self.lines):
            await ctx.tick()
        for line in order:
            while self.draw.random() < self.busy:
                await ctx.tick()
            ident = self.draw.randrange(1 << self.id_width)
            ctx.set(port.arvalid, 1)
            ctx.set(port.araddr, line * LINE)
            ctx.set(port.arid, ident)
            ctx.set(port.arlen, 0)
            ctx.set(port.arsize, 6)
            ctx.set(port.arburst, 1)
            self.expected_r[ident].append((line, self.values[line]))
            await ctx.tick().until(port.arready)
            ctx.set(port.arvalid, 0)

    async def collect_r(self, ctx, count):
        for _ in range(self.PATIENCE):
            if self.done_reads == count:
                return
            ready = int(self.draw.random() >= self.busy)
            ctx.set(self.port.rready, ready)
            rvalid, rid, rdata, rresp, rlast = await _edge(ctx,
                self.port.rvalid, self.port.rid, self.port.rdata, self.port.rresp,
                self.port.rlast)
            if rvalid and ready:
                assert self.expected_r[rid], f"R for ID {rid} that has no read in flight"
                line, value = self.expected_r[rid].popleft()
                assert rdata == value, f"line {line:#x} (ID {rid}): wrong data or order"
                assert (rresp, rlast) == (0, 1)
                self.done_reads += 1
        raise AssertionError(f"only {self.done_reads} of {count} reads completed")


# The deadline lies past the collectors' PATIENCE, so that they name what is missing before
# the run is called a hang.
_simulate = partial(simulate, deadline=3 * ManagerModel.PATIENCE, period=1e-8)


@pytest.mark.parametrize(("channels", "managers"), [(1, 2), (2, 3), (4, 2)])
def test_every_manager_reads_back_what_it_wrote(channels, managers):
    dut = AxiArbiter(num_managers=managers, channels=channels, addr_width=20, id_width=2,
                     reorder_depth=8)
    memories = [ChannelModel(dut.channels[c], seed=10 + c) for c in range(channels)]
    # Interleaved private lines per manager: every manager uses every channel.
    models = [ManagerModel(dut.managers[i], [i + managers * k for k in range(24)],
                           seed=100 + i, id_width=2) for i in range(managers)]
    finished = []

    def read_side(model):
        order = list(model.lines) * 2
        model.draw.shuffle(order)

        async def reader(ctx):
            await model.issue_reads(ctx, order)

        async def collector(ctx):
            await model.collect_b(ctx)
            await model.collect_r(ctx, len(order))
            finished.append(model)

        return reader, collector

    managers_side = []
    for model in models:
        managers_side += [model.issue_writes, *read_side(model)]
    _simulate(dut, *managers_side, background=[memory.run for memory in memories])
    assert len(finished) == managers, "some manager did not get all its responses"
    if channels > 1:   # the channels did answer out of order, so the rings had work to do
        assert all(memory.overtaken for memory in memories)
    # Each channel saw only its own lines, at their local addresses.
    for c, memory in enumerate(memories):
        for local in memory.addresses:
            assert split_address(join_address(c, local, channels), channels) == (c, local)
        assert memory.addresses, f"channel {c} was never used"
        for line in memory.lines:
            assert split_address(line * LINE, 1)[1] == line * LINE


def test_a_flooding_manager_does_not_starve_another():
    """Manager 0 offers a read every cycle, without end; manager 1's reads are each granted
    within two cycles, and the channel splits its grants evenly between them."""
    dut = AxiArbiter(num_managers=2, channels=1, addr_width=16, id_width=2)
    waits, granted = [], {0: 0, 1: 0}

    async def memory(ctx):
        bus = dut.channels[0]
        ctx.set(bus.arready, 1)
        while True:
            arvalid, arid = await _edge(ctx, bus.arvalid, bus.arid)
            if arvalid:
                granted[arid >> 2] += 1

    async def flood(ctx):
        port = dut.managers[0]
        ctx.set(port.arvalid, 1)
        ctx.set(port.araddr, 0x40)

    async def polite(ctx):
        port = dut.managers[1]
        for _ in range(50):
            ctx.set(port.arvalid, 1)
            ctx.set(port.araddr, 0x80)
            cycles = 0
            while True:
                (ready,) = await _edge(ctx, port.arready)
                cycles += 1
                if ready:
                    break
            waits.append(cycles)
            ctx.set(port.arvalid, 0)
            await ctx.tick()

    _simulate(dut, polite, background=[memory, flood])
    assert len(waits) == 50
    assert max(waits) <= 2, waits
    assert granted[1] == 50 and granted[0] >= 49   # the last grant may still be in the stage


def test_four_flooding_managers_share_a_channel_evenly():
    dut = AxiArbiter(num_managers=4, channels=1, addr_width=16, id_width=1)
    granted = defaultdict(int)

    async def memory(ctx):
        bus = dut.channels[0]
        ctx.set(bus.arready, 1)
        for _ in range(400):
            arvalid, arid = await _edge(ctx, bus.arvalid, bus.arid)
            if arvalid:
                granted[arid >> 1] += 1

    async def flood(ctx):
        for i in range(4):
            ctx.set(dut.managers[i].arvalid, 1)

    _simulate(dut, memory, background=[flood])
    assert sorted(granted) == [0, 1, 2, 3]
    assert max(granted.values()) - min(granted.values()) <= 1, dict(granted)


def test_a_long_burst_is_flagged_and_counted():
    dut = AxiArbiter(num_managers=1, channels=1, addr_width=16, id_width=1)
    seen = []

    async def testbench(ctx):
        ctx.set(dut.channels[0].arready, 1)
        port = dut.managers[0]
        for length in (0, 3):
            ctx.set(port.arvalid, 1)
            ctx.set(port.arlen, length)
            _, flag = await _edge(ctx, port.arready, dut.long_burst)
            seen.append(flag)
        ctx.set(port.arvalid, 0)
        await ctx.tick()
        assert ctx.get(dut.counters.long_bursts) == 1
        assert ctx.get(dut.counters.reads[0]) == 2

    _simulate(dut, testbench)
    assert seen == [0, 1]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"num_managers": 0}, r"Manager count must be an integer in 1\.\.8, not 0"),
    ({"num_managers": 9}, r"Manager count must be an integer in 1\.\.8, not 9"),
    ({"channels": 3}, r"Channel count must be one of 1, 2, 4, not 3"),
    ({"channels": 4, "addr_width": 13},
     r"Address width must be an integer in 14\.\.64 for 4 channel\(s\), not 13"),
    ({"id_width": 0}, r"ID width must be an integer in 1\.\.16, not 0"),
    ({"reorder_depth": 12}, r"Reorder depth must be a power of two in 2\.\.256, not 12"),
    ({"reorder_depth": 1}, r"Reorder depth must be a power of two in 2\.\.256, not 1"),
])
def test_parameter_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        AxiArbiter(**kwargs)


def test_channel_ports_lose_the_channel_bits():
    dut = AxiArbiter(num_managers=3, channels=4, addr_width=20, id_width=4, reorder_depth=16)
    assert dut.channel_addr_width == 18
    assert dut.channel_id_width == 4 + 2     # reorder slot + manager index
    one = AxiArbiter(num_managers=2, channels=1, addr_width=20, id_width=5)
    assert one.channel_id_width == 6         # manager ID + manager index
    assert one.channel_addr_width == 20
