# amaranth: UnusedElaboratable=no
"""The gather issuer alone: every row op it issues, in each bag's order, with limits that grow
a position at a time, so that an index or weight read before it has landed shows up."""

import itertools
import random

import pytest
from amaranth.hdl import Module, Signal
from amaranth.lib import data
from amaranth.sim import Simulator

from hw.emb.bags import descriptor_layout
from hw.emb.gather import ONE, GatherIssuer, OpKind, _first_minimum
from hw.emb.layouts import ErrorCode, PoolingMode, table_layout
from tb import pysim

LANES = 16
ADDR_WIDTH = 32
LINE_ADDR_WIDTH = ADDR_WIDTH - 6
#: What the windows return for a position not yet below its limit: an index past every table
#: (the issuer would report INDEX_OUT_OF_RANGE) and a NaN weight no test draws.
INDEX_POISON = 0xFFFF_FFF0
WEIGHT_POISON = 0x7FC0_DEAD
TABLES = [
    {"base": 0x1_0000, "rows": 9, "dim": 16, "mode": PoolingMode.SUM},
    {"base": 0x2_0000, "rows": 5, "dim": 32, "mode": PoolingMode.WEIGHTED},
    {"base": 0x4_0000, "rows": 7, "dim": 48, "mode": PoolingMode.MEAN},
]


def draw_bags(draw, count):
    """Bags over consecutive index positions, each with its own output lines."""
    bags, position, out_line = [], 0, 0x100
    for number in range(count):
        table = draw.randrange(len(TABLES))
        length = draw.choice([0, 1, 1, 2, 3, 5])
        bags.append({"table": table, "bag": number, "start": position, "length": length,
                     "out_line": out_line, "scale": draw.randrange(1, 2**31)})
        position += length
        out_line += TABLES[table]["dim"] // LANES
    indices = [draw.randrange(TABLES[b["table"]]["rows"]) for b in bags
               for _ in range(b["length"])]
    weights = [draw.randrange(1, 2**31) for _ in indices]
    return bags, indices, weights


def expected_ops(bag, indices, weights):
    """The (addr, read, kind, line, first, last, factor, out_line) ops of one bag, in order
    (``addr`` and ``first`` only mean something for ROW ops)."""
    table = TABLES[bag["table"]]
    lines = table["dim"] // LANES
    mode = table["mode"]
    ops = []
    for k in range(bag["length"]):
        position = bag["start"] + k
        row_line = (table["base"] >> 6) + indices[position] * lines
        factor = weights[position] if mode == PoolingMode.WEIGHTED else ONE
        last = k == bag["length"] - 1 and mode != PoolingMode.MEAN
        ops += [(row_line + line, 1, OpKind.ROW, line, int(k == 0), int(last), factor,
                 bag["out_line"] + line) for line in range(lines)]
    if bag["length"] == 0:
        ops += [(None, 0, OpKind.ZERO, line, None, 0, 0, bag["out_line"] + line)
                for line in range(lines)]
    elif mode == PoolingMode.MEAN:
        ops += [(None, 0, OpKind.SCALE, line, None, 0, bag["scale"], bag["out_line"] + line)
                for line in range(lines)]
    return ops


def landed_line(values, line, limit, poison):
    """Line ``line`` of ``values`` as a window holds it: positions at or above ``limit`` are
    not there yet."""
    entries = []
    for lane in range(LANES):
        position = line * LANES + lane
        landed = position < limit and position < len(values)
        entries.append(values[position] if landed else poison)
    return sum(value << (32 * lane) for lane, value in enumerate(entries))


# The issuer's optional register stages: Q before the row op is formed, A before the windows
# are read (the board's configuration has both).
STAGES = {"op-in-P": {},
          "stage-Q": {"registered_row_op": True},
          "stages-A-Q": {"registered_row_op": True, "registered_index_address": True}}


TABLE_CONFIG = data.ArrayLayout(table_layout(ADDR_WIDTH), len(TABLES)).const(TABLES)


def _issuer(*, stages, registered_ready=True):
    """A four-slot issuer over :data:`TABLES` with the register stages ``stages`` names."""
    return GatherIssuer(max_tables=len(TABLES), max_dim=64, addr_width=ADDR_WIDTH,
                        bag_slots=4, registered_ready=registered_ready, **STAGES[stages])


def run_issuer(draw, bags, indices, weights, *, registered_ready, stages):
    """Feed ``bags`` to an issuer whose index and weight limits grow a position at a time;
    return the (addr, read, context) ops it issued, its error and whether it took every bag."""
    dut = _issuer(stages=stages, registered_ready=registered_ready)
    descriptor = descriptor_layout(LINE_ADDR_WIDTH)
    issued = []
    state = {"fed": False, "error": None}

    async def feed_descriptors(ctx):
        ctx.set(dut.table_config, TABLE_CONFIG)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        for bag in bags:
            while draw.random() < 0.3:
                await ctx.tick()
            ctx.set(dut.descriptors.payload, descriptor.const(bag))
            ctx.set(dut.descriptors.valid, 1)
            while True:
                _, _, taken, code = await ctx.tick().sample(dut.descriptors.ready,
                                                            dut.error.code)
                if taken or code != ErrorCode.NONE:
                    break
            ctx.set(dut.descriptors.valid, 0)
            if not taken:
                return   # an error: the issuer takes no more bags
        state["fed"] = True

    async def grow_limits(ctx):
        # Each limit grows by at most one position a cycle, so a slot often asks for the
        # position just at its limit.
        limits = {"index": 0, "weight": 0}
        while min(limits.values()) < len(indices):
            for name in limits:
                if draw.random() < 0.4:
                    limits[name] = min(limits[name] + 1, len(indices))
            ctx.set(dut.index_limit, limits["index"])
            ctx.set(dut.weight_limit, limits["weight"])
            await ctx.tick()

    async def serve_windows(ctx):
        # The windows' read ports: data a cycle after the address, as landed at that cycle.
        async for _, _, index_addr, weight_addr, index_limit, weight_limit in ctx.tick().sample(
                dut.index_addr, dut.weight_addr, dut.index_limit, dut.weight_limit):
            ctx.set(dut.index_data, landed_line(indices, index_addr, index_limit, INDEX_POISON))
            ctx.set(dut.weight_data,
                    landed_line(weights, weight_addr, weight_limit, WEIGHT_POISON))

    async def take_requests(ctx):
        quiet = 0
        while quiet < 20:
            ready = draw.random() < 0.7
            ctx.set(dut.requests.ready, ready)
            _, _, valid, request = await ctx.tick().sample(dut.requests.valid,
                                                          dut.requests.payload)
            if ready and valid:
                issued.append((request.addr, request.read, request.context))
            # After an error the issuer holds its bags until the engine stops it.
            failed = ctx.get(dut.error.code) != ErrorCode.NONE
            finished = (state["fed"] and ctx.get(dut.idle)) or failed
            quiet = quiet + 1 if finished else 0
        state["error"] = ctx.get(dut.error)

    pysim.simulate(dut, feed_descriptors, grow_limits, take_requests,
                   processes=[serve_windows], deadline=20_000, check=False)
    return issued, state["error"], state["fed"]


@pytest.mark.parametrize("stages", list(STAGES))
@pytest.mark.parametrize("registered_ready", [False, True], ids=["combinational", "registered"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_issuer_waits_for_landed_indices_and_keeps_bag_order(registered_ready, stages, seed):
    draw = random.Random(seed)
    bags, indices, weights = draw_bags(draw, 24)
    issued, error, fed = run_issuer(draw, bags, indices, weights,
                                    registered_ready=registered_ready, stages=stages)
    assert fed, f"seed {seed}: the issuer stopped taking descriptors"
    assert error.code == ErrorCode.NONE, f"seed {seed}: an index was read before it landed"

    by_bag = {bag["out_line"]: [] for bag in bags}
    for addr, read, context in issued:
        row = context.kind == OpKind.ROW
        op = (addr if row else None, read, context.kind, context.line,
              context.first if row else None,
              context.last, context.factor, context.out_line)
        by_bag[context.out_line - context.line].append(op)
    for bag in bags:
        assert by_bag[bag["out_line"]] == expected_ops(bag, indices, weights), \
            f"seed {seed}, bag {bag}"


@pytest.mark.parametrize("stages", list(STAGES))
@pytest.mark.parametrize("seed", [4, 5])
def test_issuer_reports_an_index_past_its_table_and_issues_no_row_for_it(stages, seed):
    """An index that changed under a running command (past its table's rows) is named by
    table, bag and position, and no line of that row is read."""
    draw = random.Random(seed)
    bags, indices, weights = draw_bags(draw, 24)
    bad_bag = draw.choice([b for b in bags if b["length"]])
    position = bad_bag["start"] + draw.randrange(bad_bag["length"])
    table = TABLES[bad_bag["table"]]
    indices[position] = table["rows"] + draw.randrange(3)
    issued, error, _ = run_issuer(draw, bags, indices, weights, registered_ready=True,
                                  stages=stages)
    assert (error.code, error.table, error.bag, error.position) == \
        (ErrorCode.INDEX_OUT_OF_RANGE, bad_bag["table"], bad_bag["bag"], position), \
        f"seed {seed}"
    bad_line = (table["base"] >> 6) + indices[position] * (table["dim"] // LANES)
    assert all(addr != bad_line for addr, read, _ in issued if read), f"seed {seed}"


@pytest.mark.parametrize("stages", list(STAGES))
def test_issuer_issues_a_line_per_cycle(stages):
    """Rows of one line each, every index landed, requests always taken: after the first,
    the issuer puts out an op every cycle (its pipeline and row queue never starve), taking
    the slots in turn."""
    bags = [{"table": 0, "bag": number, "start": 4 * number, "length": 4,
             "out_line": 0x100 + number, "scale": 0} for number in range(32)]
    indices = [k % TABLES[0]["rows"] for k in range(4 * len(bags))]
    dut = _issuer(stages=stages)
    descriptor = descriptor_layout(LINE_ADDR_WIDTH)
    cycles = []

    async def feed_descriptors(ctx):
        ctx.set(dut.table_config, TABLE_CONFIG)
        ctx.set(dut.index_limit, len(indices))
        ctx.set(dut.weight_limit, len(indices))
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        for bag in bags:
            ctx.set(dut.descriptors.payload, descriptor.const(bag))
            ctx.set(dut.descriptors.valid, 1)
            await ctx.tick().until(dut.descriptors.ready)
        ctx.set(dut.descriptors.valid, 0)

    async def serve_windows(ctx):
        async for _, _, index_addr in ctx.tick().sample(dut.index_addr):
            ctx.set(dut.index_data, landed_line(indices, index_addr, len(indices), 0))

    async def take_requests(ctx):
        ctx.set(dut.requests.ready, 1)
        cycle = 0
        while len(cycles) < len(indices):
            _, _, valid, request = await ctx.tick().sample(dut.requests.valid,
                                                          dut.requests.payload)
            cycle += 1
            if valid:
                cycles.append(cycle)
                slots.append(request.context.slot)

    slots = []
    pysim.simulate(dut, feed_descriptors, take_requests, processes=[serve_windows],
                   deadline=2_000, check=False)
    assert len(cycles) == len(indices), "the issuer stopped"
    assert cycles[-1] - cycles[0] == len(indices) - 1, cycles
    # Round robin: with every slot ready each op comes from the slot after the last one's.
    assert all(b == (a + 1) % 4 for a, b in itertools.pairwise(slots)), slots


@pytest.mark.parametrize("stages", list(STAGES))
def test_issuer_reads_no_index_past_a_limit_that_falls_the_cycle_after_start(stages):
    """The lookup's index limit may fall in the cycle after ``start`` (its choice of kept data
    changes with the pass). A bag offered from ``start`` on, loaded the cycle after, must
    wait for the new limit: a row read at the old one reads poison, an index error."""
    bag = {"table": 0, "bag": 0, "start": 0, "length": 3, "out_line": 0x100, "scale": 0}
    indices = [2, 7, 4]
    dut = _issuer(stages=stages)
    descriptor = descriptor_layout(LINE_ADDR_WIDTH)
    issued = []

    async def run_command(ctx):
        ctx.set(dut.table_config, TABLE_CONFIG)
        ctx.set(dut.index_limit, len(indices))   # what the command before left
        ctx.set(dut.weight_limit, len(indices))
        ctx.set(dut.requests.ready, 1)
        ctx.set(dut.descriptors.payload, descriptor.const(bag))
        ctx.set(dut.descriptors.valid, 1)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        ctx.set(dut.index_limit, 0)
        await ctx.tick().until(dut.descriptors.ready)
        ctx.set(dut.descriptors.valid, 0)
        await ctx.tick().repeat(6)
        assert not issued, "a row was read before its index was validated"
        ctx.set(dut.index_limit, len(indices))
        await ctx.tick().until(dut.idle | (dut.error.code != ErrorCode.NONE))
        assert ctx.get(dut.error.code) == ErrorCode.NONE

    async def serve_windows(ctx):
        async for _, _, index_addr, index_limit, valid, request in ctx.tick().sample(
                dut.index_addr, dut.index_limit, dut.requests.valid, dut.requests.payload):
            ctx.set(dut.index_data, landed_line(indices, index_addr, index_limit, INDEX_POISON))
            if valid and request.context.kind == OpKind.ROW:
                issued.append(request.addr)

    pysim.simulate(dut, run_command, processes=[serve_windows], deadline=2_000, check=False)
    assert issued == [(TABLES[0]["base"] >> 6) + index for index in indices]


@pytest.mark.parametrize("stages", list(STAGES))
def test_issuer_frees_only_lines_it_has_read_and_restarts_from_zero(stages):
    """``freed`` lets the index window overwrite lines: a line below it reads as poison here,
    so a ``freed`` ahead of the reads shows up as an index error. A second command (all its
    positions in line 0) must see ``freed`` 0 from its start on, whatever the first left."""
    draw = random.Random(6)
    first_bags = [{"table": 0, "bag": number, "start": 3 * number, "length": 3,
                   "out_line": 0x100 + number, "scale": 0} for number in range(40)]
    second_bags = [{"table": 0, "bag": number, "start": 2 * number, "length": 2,
                    "out_line": 0x200 + number, "scale": 0} for number in range(5)]
    indices = [draw.randrange(TABLES[0]["rows"]) for _ in range(3 * len(first_bags))]
    dut = _issuer(stages=stages)
    descriptor = descriptor_layout(LINE_ADDR_WIDTH)
    seen = {"restarted": False, "freed_before_restart": 0, "freed_after_restart": [],
            "errors": []}

    async def run_commands(ctx):
        ctx.set(dut.table_config, TABLE_CONFIG)
        ctx.set(dut.index_limit, len(indices))
        ctx.set(dut.weight_limit, len(indices))
        ctx.set(dut.requests.ready, 1)
        for number, bags in enumerate([first_bags, second_bags]):
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            seen["restarted"] = number == 1
            for bag in bags:
                ctx.set(dut.descriptors.payload, descriptor.const(bag))
                ctx.set(dut.descriptors.valid, 1)
                await ctx.tick().until(dut.descriptors.ready | (dut.error.code != ErrorCode.NONE))
            ctx.set(dut.descriptors.valid, 0)
            await ctx.tick().until(dut.idle | (dut.error.code != ErrorCode.NONE))
            seen["errors"].append(ctx.get(dut.error.code))
            if seen["errors"][-1] != ErrorCode.NONE:
                return
            if number == 0:
                seen["freed_before_restart"] = ctx.get(dut.freed)

    async def serve_windows(ctx):
        async for _, _, index_addr, freed in ctx.tick().sample(dut.index_addr, dut.freed):
            line = index_addr if index_addr >= freed else None
            ctx.set(dut.index_data,
                    landed_line(indices, line, len(indices), 0) if line is not None
                    else landed_line([INDEX_POISON] * LANES, 0, LANES, 0))
            if seen["restarted"]:
                seen["freed_after_restart"].append(freed)

    pysim.simulate(dut, run_commands, processes=[serve_windows], deadline=5_000, check=False)
    assert seen["errors"] == [ErrorCode.NONE, ErrorCode.NONE], \
        f"a line was read after it was freed: {seen['errors']}"
    assert seen["freed_before_restart"] == len(indices) // LANES
    assert seen["freed_after_restart"] and set(seen["freed_after_restart"]) == {0}, \
        seen["freed_after_restart"][:8]


@pytest.mark.parametrize("count", [2, 3, 4])
def test_first_minimum_is_the_least(count):
    """The issuer's oldest position from its staged minima (``_first_minimum``): every pair
    compared at once, the first of the least chosen, with ties (the all-ones of slots not in
    use among them) and values that differ in one bit."""
    values = [Signal(32, name=f"value_{k}") for k in range(count)]
    least = Signal(32)
    m = Module()
    m.d.comb += least.eq(_first_minimum(values))
    draw = random.Random(count)

    async def testbench(ctx):
        for _ in range(400):
            base = draw.getrandbits(32)
            drawn = [draw.choice([0, 0xFFFF_FFFF, base, base ^ (1 << draw.randrange(32)),
                                  draw.getrandbits(32)]) for _ in values]
            for signal, value in zip(values, drawn, strict=True):
                ctx.set(signal, value)
            assert ctx.get(least) == min(drawn), drawn

    sim = Simulator(m)
    sim.add_testbench(testbench)
    sim.run()
