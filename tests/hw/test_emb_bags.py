# amaranth: UnusedElaboratable=no
"""The bag sequencer alone: every descriptor, in TBE order, with both MEAN dividers and with
and without its registered descriptor stage, while offsets lines arrive late and the issuer
takes descriptors in bursts with long stalls (a descriptor lost or doubled shows up)."""

import random

import numpy as np
import pytest
from amaranth.lib import data

from hw.emb.bags import BagSequencer
from hw.emb.layouts import PoolingMode, table_layout
from tb import pysim

LANES = 16
ADDR_WIDTH = 32
OUTPUT_LINE = 0x400
TABLES = [
    {"base": 0x1_0000, "rows": 9, "dim": 16, "mode": PoolingMode.MEAN},
    {"base": 0x2_0000, "rows": 5, "dim": 32, "mode": PoolingMode.SUM},
    {"base": 0x4_0000, "rows": 7, "dim": 48, "mode": PoolingMode.MEAN},
]
ROW_LINES = sum(table["dim"] for table in TABLES) // LANES


def reciprocal_bits(length):
    return int(np.array(np.float32(1) / np.float32(length)).view(np.uint32))


def expected_descriptors(offsets, bags):
    """(table, bag, start, length, out_line, MEAN factor or None), in TBE order."""
    expected, table_line = [], OUTPUT_LINE
    for t, table in enumerate(TABLES):
        for b in range(bags):
            start, end = offsets[t * bags + b], offsets[t * bags + b + 1]
            mean = table["mode"] == PoolingMode.MEAN and end != start
            expected.append((t, b, start, end - start, table_line + b * ROW_LINES,
                             reciprocal_bits(end - start) if mean else None))
        table_line += table["dim"] // LANES
    return expected


def run_sequencer(draw, offsets, bags, *, stalls=True, abandoned_cycles=0, creep=False,
                  tables=None, **params):
    """The descriptors the sequencer put out, and the cycle of each. Without ``stalls`` every
    offset has landed, lines are always offered and descriptors always taken. Entries at or
    past ``limit`` read as poison (not yet validated, they may hold anything). With
    ``abandoned_cycles`` a walk with every entry validated runs that long first (its
    descriptors never taken), and the walk checked starts over it. With ``creep`` the limit
    grows by one entry every third cycle, so the walk waits at every entry (a line's last
    word and the walk's last entry among them). ``tables`` is what the ``tables`` input
    says (default: the tables' count); with ``given_entries`` the ``entries`` input holds
    the walk's true count. Fails unless every line was taken."""
    dut = BagSequencer(max_tables=len(TABLES), addr_width=ADDR_WIDTH, **params)

    def line_of(number, limit):
        entries = [value if number * LANES + lane < limit else 0xDEAD_0000 + lane
                   for lane, value in enumerate(offsets[number * LANES:(number + 1) * LANES])]
        return sum(value << (32 * lane) for lane, value in enumerate(entries))

    line_count = (len(offsets) + LANES - 1) // LANES
    got, cycles, state = [], [], {"done": False, "abandoned": abandoned_cycles > 0}

    async def control(ctx):
        ctx.set(dut.table_config,
                data.ArrayLayout(table_layout(ADDR_WIDTH), len(TABLES)).const(TABLES))
        ctx.set(dut.bags, bags)
        ctx.set(dut.tables, len(TABLES) if tables is None else tables)
        if params.get("given_entries"):
            ctx.set(dut.entries, bags * len(TABLES) + 1)
        ctx.set(dut.output_line, OUTPUT_LINE)
        ctx.set(dut.row_lines, ROW_LINES)
        if abandoned_cycles:
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            ctx.set(dut.limit, len(offsets))
            line = 0
            for _ in range(abandoned_cycles):
                ctx.set(dut.lines.valid, line < line_count)
                ctx.set(dut.lines.payload, line_of(line, len(offsets)))
                _, _, ready = await ctx.tick().sample(dut.lines.ready)
                line += ready
            # The limit still stands at the old walk's as the new one starts (as the
            # validator's count does when both start together).
            ctx.set(dut.lines.valid, 1)
            ctx.set(dut.lines.payload, line_of(0, 0))
            state["abandoned"] = False
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        # The validator's limit grows in steps; a line is offered only some cycles.
        limit, line = 0, 0
        # Over an abandoned walk, the first cycle offers a line with nothing validated.
        held = bool(abandoned_cycles)
        cycle = 0
        while line < line_count:
            if creep:
                limit = min(limit + (cycle % 3 == 0), len(offsets))
            elif (draw.random() < 0.3 or not stalls) and not held:
                limit = len(offsets) if not stalls else \
                    min(limit + draw.randrange(1, 6), len(offsets))
            cycle += 1
            ctx.set(dut.limit, limit)
            valid = creep or draw.random() < 0.7 or not stalls or held
            held = False
            ctx.set(dut.lines.valid, valid)
            ctx.set(dut.lines.payload, line_of(line, limit))
            _, _, ready = await ctx.tick().sample(dut.lines.ready)
            if valid and ready:
                line += 1
        ctx.set(dut.lines.valid, 0)
        ctx.set(dut.limit, len(offsets))
        state["lines_taken"] = True

    async def take(ctx):
        quiet = cycle = 0
        while quiet < 40:
            # Bursts of readiness between long stalls, so the queue fills up.
            if state["abandoned"]:
                ctx.set(dut.descriptors.ready, 0)
                await ctx.tick()
                continue
            ready = draw.random() < (0.9 if (len(got) // 5) % 2 else 0.05) or not stalls
            ctx.set(dut.descriptors.ready, ready)
            _, _, valid, payload, done = await ctx.tick().sample(
                dut.descriptors.valid, dut.descriptors.payload, dut.done)
            cycle += 1
            if valid and ready:
                got.append(payload)
                cycles.append(cycle)
            quiet = quiet + 1 if done and not valid else 0
        state["done"] = True

    pysim.simulate(dut, control, take, deadline=40_000, check=False)
    assert state["done"], "the sequencer never finished"
    assert state.get("lines_taken"), "an offsets line was never taken"
    return got, cycles


@pytest.mark.parametrize("registered_descriptor", [False, True], ids=["formed", "registered"])
@pytest.mark.parametrize(("mean_reciprocal", "steps"),
                         [("pipelined", 2), ("sequential", 2), ("sequential", 1)])
@pytest.mark.parametrize("seed", [1, 2])
def test_sequencer_emits_every_bag_once_in_order(mean_reciprocal, steps, registered_descriptor,
                                                 seed):
    draw = random.Random(seed)
    bags = 9
    lengths = [draw.choice([0, 1, 2, 3, 7]) for _ in range(bags * len(TABLES))]
    offsets = [0, *np.cumsum(lengths).tolist()]
    got, _ = run_sequencer(draw, offsets, bags, mean_reciprocal=mean_reciprocal,
                           registered_descriptor=registered_descriptor,
                           reciprocal_steps_per_cycle=steps)
    expected = expected_descriptors(offsets, bags)
    assert len(got) == len(expected), \
        f"seed {seed}: {len(got)} descriptors for {len(expected)} bags"
    for number, (descriptor, want) in enumerate(zip(got, expected, strict=True)):
        table, bag, start, length, out_line, scale = want
        assert (descriptor.table, descriptor.bag, descriptor.start, descriptor.length,
                descriptor.out_line) == (table, bag, start, length, out_line), \
            f"seed {seed}, descriptor {number}"
        if scale is not None:
            assert descriptor.scale == scale, f"seed {seed}, descriptor {number}: MEAN factor"


@pytest.mark.parametrize("registered_descriptor", [False, True], ids=["formed", "registered"])
@pytest.mark.parametrize("bags", [1, 2])
def test_sequencer_moves_to_the_next_table_after_few_bags(registered_descriptor, bags):
    """With one or two bags a table, the bag that ends a table comes at once or every other
    entry: each table's bags still land on its own output lines."""
    draw = random.Random(bags)
    lengths = [draw.choice([0, 1, 3]) for _ in range(bags * len(TABLES))]
    offsets = [0, *np.cumsum(lengths).tolist()]
    got, _ = run_sequencer(draw, offsets, bags, mean_reciprocal="sequential",
                           registered_descriptor=registered_descriptor)
    expected = expected_descriptors(offsets, bags)
    assert [(d.table, d.bag, d.start, d.length, d.out_line) for d in got] == \
        [want[:5] for want in expected]


@pytest.mark.parametrize("registered_descriptor", [False, True], ids=["formed", "registered"])
def test_sequencer_waits_at_every_entry_of_a_line(registered_descriptor):
    """The limit creeps an entry at a time: the walk stops at each entry, a line's last word
    and the walk's last entry among them, and frees a line exactly when its last word (or
    the walk's last entry) is taken, not when it waits there."""
    bags = 11  # 34 entries: the last one mid-line
    lengths = [(3 * n) % 4 for n in range(bags * len(TABLES))]
    offsets = [0, *np.cumsum(lengths).tolist()]
    got, _ = run_sequencer(random.Random(0), offsets, bags, creep=True,
                           mean_reciprocal="pipelined",
                           registered_descriptor=registered_descriptor)
    expected = expected_descriptors(offsets, bags)
    assert [(d.table, d.bag, d.start, d.length, d.out_line) for d in got] == \
        [want[:5] for want in expected]


@pytest.mark.parametrize("registered_descriptor", [False, True], ids=["formed", "registered"])
@pytest.mark.parametrize("abandoned_cycles", [3, 9, 40])
def test_sequencer_starts_over_an_abandoned_walk(registered_descriptor, abandoned_cycles):
    """A walk started over one mid-way (every entry validated, the queue full) reads none of
    the new walk's entries before they are validated: over one still taking entries, and over
    one that has stopped (40 cycles: the registered sequencer's fetch waits too)."""
    draw = random.Random(abandoned_cycles)
    bags = 9
    lengths = [draw.choice([0, 1, 2, 3, 7]) for _ in range(bags * len(TABLES))]
    offsets = [0, *np.cumsum(lengths).tolist()]
    got, _ = run_sequencer(draw, offsets, bags, abandoned_cycles=abandoned_cycles,
                           mean_reciprocal="pipelined",
                           registered_descriptor=registered_descriptor)
    expected = expected_descriptors(offsets, bags)
    assert [(d.table, d.bag, d.start, d.length, d.out_line) for d in got] == \
        [want[:5] for want in expected]


@pytest.mark.parametrize("registered_descriptor", [False, True], ids=["formed", "registered"])
def test_sequencer_walks_the_entry_count_it_is_given(registered_descriptor):
    """With ``given_entries`` the walk's length is the ``entries`` input (the lookup's
    register), not ``bags * tables + 1`` of its own: here the ``tables`` input says 0 and
    the walk still covers every table."""
    draw = random.Random(3)
    bags = 9
    lengths = [draw.choice([0, 1, 2, 3, 7]) for _ in range(bags * len(TABLES))]
    offsets = [0, *np.cumsum(lengths).tolist()]
    got, _ = run_sequencer(draw, offsets, bags, tables=0, given_entries=True,
                           mean_reciprocal="pipelined",
                           registered_descriptor=registered_descriptor)
    expected = expected_descriptors(offsets, bags)
    assert [(d.table, d.bag, d.start, d.length, d.out_line) for d in got] == \
        [want[:5] for want in expected]


@pytest.mark.parametrize("registered_descriptor", [False, True], ids=["formed", "registered"])
def test_registered_descriptor_keeps_a_bag_per_cycle(registered_descriptor):
    """With the pipelined divider, every offset landed and the issuer always ready, a
    descriptor leaves every cycle after the first: stage E costs latency only."""
    bags = 12
    offsets = list(range(0, 2 * bags * len(TABLES) + 1, 2))
    got, cycles = run_sequencer(random.Random(0), offsets, bags, stalls=False,
                                mean_reciprocal="pipelined",
                                registered_descriptor=registered_descriptor)
    assert len(got) == bags * len(TABLES)
    assert cycles[-1] - cycles[0] == len(cycles) - 1, cycles


def test_sequencer_options_are_yes_or_no():
    for option, name in (("given_entries", "Given entries"),
                         ("registered_descriptor", "Registered descriptor")):
        with pytest.raises(TypeError, match=rf"^{name} must be True or False, not 1$"):
            BagSequencer(max_tables=2, addr_width=ADDR_WIDTH, **{option: 1})


def test_sequencer_rejects_reciprocal_steps_that_do_not_divide_24():
    with pytest.raises(ValueError, match=r"^Steps per cycle must be a divisor of 24, not 5$"):
        BagSequencer(max_tables=2, addr_width=ADDR_WIDTH, mean_reciprocal="sequential",
                     reciprocal_steps_per_cycle=5)
