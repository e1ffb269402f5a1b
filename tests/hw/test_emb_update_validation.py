# amaranth: UnusedElaboratable=no
"""The update engine's checker and walker against the testbench's reference
(``tb.emb.update_scenarios.expected_status``): random corruptions of valid commands, one
error order for descriptors, buffers, offsets and indices; and the walker's occurrences."""

import random

import numpy as np
import pytest

from hw.emb.layouts import ErrorCode, PoolingMode
from hw.emb.update_checks import CommandChecker
from hw.emb.update_reciprocal import reciprocal_bits
from hw.emb.update_walker import OccurrenceWalker, WalkMode
from tb import pysim
from tb.emb.update_scenarios import corrupted, expected_status, random_scenario

MAX_TABLES, MAX_DIM, REGIONS, ADDR_WIDTH = 4, 128, 4, 32
CHECKER_ERRORS = {ErrorCode.BAD_OPCODE, ErrorCode.BAD_TABLE_COUNT, ErrorCode.BAD_DIMENSION,
                  ErrorCode.MISALIGNED_ADDRESS, ErrorCode.ADDRESS_OUT_OF_REGION}


def _base(draw):
    return random_scenario(draw, max_tables=MAX_TABLES, dims=(16, 32, 128), rows=(1, 30),
                           bags=(0, 4), bag_length=(0, 4), specials=False)


def _descriptor_mutation(draw, scenario):
    """One random change to descriptors, regions or buffer addresses."""
    count = len(scenario.tables)
    t = int(draw.integers(count))
    choice = int(draw.integers(10))
    if choice == 0:
        return corrupted(scenario, table_count=int(draw.choice([0, MAX_TABLES + 1, 255])))
    if choice == 1:
        dim = int(draw.choice([0, 8, 24, MAX_DIM + 16, 65520]))
        return corrupted(scenario, descriptor_overrides={t: {"dim": dim}})
    if choice == 2:
        base = scenario.table_bases[t] + int(draw.choice([4, 32, 60]))
        return corrupted(scenario, descriptor_overrides={t: {"base": base}})
    if choice == 3:
        return corrupted(scenario, descriptor_overrides={t: {"rows": 1 << 20}})
    if choice == 4:
        return corrupted(scenario, descriptor_overrides={t: {"rows": 0, "base": 0x100}})
    if choice == 5:
        region = int(draw.integers(2))
        regions = [(b, s, e and r != region) for r, (b, s, e) in enumerate(scenario.regions)]
        return corrupted(scenario, regions=regions)
    if choice == 6:
        name = str(draw.choice(["indices", "offsets", "weights", "output"]))
        delta = int(draw.choice([4, 16, -0x1000]))
        return corrupted(scenario, addresses={**scenario.addresses,
                                              name: scenario.addresses[name] + delta})
    if choice == 7:
        return corrupted(scenario, modes=[PoolingMode.WEIGHTED] * count,
                         addresses={**scenario.addresses, "weights": 0x20})
    if choice == 8:
        return corrupted(scenario, num_indices=0, addresses={**scenario.addresses,
                                                               "indices": 0x7})
    return corrupted(scenario, bags=0, addresses={**scenario.addresses, "output": 0x3})


def _check_commands(cases, *, registered):
    """Run the checker over ``cases``; return the error kinds it expected and saw."""
    dut = CommandChecker(max_tables=MAX_TABLES, max_dim=MAX_DIM, num_regions=REGIONS,
                         addr_width=ADDR_WIDTH, registered_region_checks=registered)
    seen = set()

    async def testbench(ctx):
        for scenario in cases:
            expected = expected_status(scenario, max_tables=MAX_TABLES, max_dim=MAX_DIM)
            if expected["error"] not in CHECKER_ERRORS:  # the walker's business
                expected = {"error": ErrorCode.NONE, "table": 0}
            ctx.set(dut.command.as_value(), scenario.command_bits(ADDR_WIDTH))
            ctx.set(dut.descriptors.as_value(), scenario.descriptor_bits(ADDR_WIDTH,
                                                                         MAX_TABLES))
            ctx.set(dut.regions.as_value(), scenario.region_bits(ADDR_WIDTH, REGIONS))
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            await ctx.tick().until(dut.status.done)
            status = ctx.get(dut.status)
            assert (status.error, status.table) == (expected["error"], expected["table"]), \
                scenario.command()
            seen.add(expected["error"])

    pysim.simulate(dut, testbench, deadline=10_000)
    return seen


@pytest.mark.parametrize("registered", [False, True], ids=["combinational", "registered"])
def test_checker_follows_the_documented_order(registered):
    draw = np.random.default_rng(11)
    cases = []
    for _ in range(60):
        scenario = _base(draw)
        for _ in range(int(draw.integers(1, 4))):
            scenario = _descriptor_mutation(draw, scenario)
        cases.append(scenario)
    seen = _check_commands(cases, registered=registered)
    assert seen >= CHECKER_ERRORS - {ErrorCode.BAD_OPCODE} | {ErrorCode.NONE}


def _buffers_region_ending_at(scenario, end):
    """The scenario with its buffers' region ending at ``end``, then one line short of it."""
    (tables_region, (base, _, enable), disabled) = scenario.regions
    return [corrupted(scenario, regions=[tables_region, (base, size, enable), disabled])
            for size in (end - base, end - base - 64)]


@pytest.mark.parametrize("registered", [False, True], ids=["combinational", "registered"])
def test_checker_region_ends_to_the_line(registered):
    """A gradient buffer that ends exactly at its region's end is inside; one line less of
    region and it is out (a region is ``[base, base + size)``)."""
    draw = np.random.default_rng(5)
    cases = []
    while len(cases) < 8:
        scenario = _base(draw)
        command = scenario.command()
        gradient_bytes = command["bags"] * sum(scenario.dims) * 4
        if gradient_bytes == 0:
            continue
        cases += _buffers_region_ending_at(scenario, command["output"]
                                           + -(-gradient_bytes // 64) * 64)
    seen = _check_commands(cases, registered=registered)
    assert seen == {ErrorCode.NONE, ErrorCode.ADDRESS_OUT_OF_REGION}


def _table_region_ending_at(scenario, table):
    """The scenario with its table region ending where ``table`` ends (inside), and one line
    short of that (out)."""
    end = scenario.table_bases[table] + scenario.tables[table].nbytes
    ((base, _, enable), buffers_region, disabled) = scenario.regions
    return [corrupted(scenario, regions=[(base, size, enable), buffers_region, disabled])
            for size in (end - base, end - base - 64)]


@pytest.mark.parametrize("registered", [False, True], ids=["combinational", "registered"])
def test_checker_table_extents_to_the_line(registered):
    """A table of 2 or 8 lines a row (dim 32 or 128) that ends exactly at its region's end is
    inside; one line less of region and it is out: a row counts dim / 16 lines."""
    draw = np.random.default_rng(9)
    cases = []
    while len(cases) < 8:
        scenario = _base(draw)
        last = max(range(len(scenario.tables)), key=lambda t: scenario.table_bases[t])
        dim = scenario.dims[last]
        if dim < 32:
            continue
        cases += _table_region_ending_at(scenario, last)
    seen = _check_commands(cases, registered=registered)
    assert seen == {ErrorCode.NONE, ErrorCode.ADDRESS_OUT_OF_REGION}


@pytest.mark.parametrize("registered", [False, True], ids=["combinational", "registered"])
def test_checker_table_extents_of_odd_line_counts(registered):
    """Rows of 3, 6 and 7 lines (dim 48, 96, 112), whose line count has several bits set: a
    table that ends at its region's end is inside, one line less of region and it is out (a
    row's extent is the sum of shifted copies of the row count, one a set bit)."""
    draw = np.random.default_rng(17)
    cases = []
    while len(cases) < 12:
        scenario = random_scenario(draw, max_tables=MAX_TABLES, dims=(48, 96, 112),
                                   rows=(1, 30), bags=(0, 3), bag_length=(0, 3),
                                   specials=False)
        last = max(range(len(scenario.tables)), key=lambda t: scenario.table_bases[t])
        cases += _table_region_ending_at(scenario, last)
    seen = _check_commands(cases, registered=registered)
    assert seen == {ErrorCode.NONE, ErrorCode.ADDRESS_OUT_OF_REGION}


@pytest.mark.parametrize("registered", [False, True], ids=["combinational", "registered"])
def test_checker_extents_past_the_address_space(registered):
    """A table at 2 ** 31 in a region that ends 512 bytes short of 2 ** 32: rows of 512 bytes
    up to that end are inside; an end at 2 ** 32, at 2 ** 33 (the low 33 bits of the end
    wrap to 0) and lengths of 2 ** 33 bytes and more (their low 33 bits no more than 512) are
    out (a check of the end's low bits alone, or of a narrower end, lets them in)."""
    draw = np.random.default_rng(19)
    scenario = random_scenario(draw, max_tables=1, dims=(128,), rows=(1, 4), bags=(1, 2),
                               bag_length=(0, 2), specials=False)
    (tables_region, buffers_region, _) = scenario.regions
    everywhere = (0, (1 << 32) - 512, 1)
    cases = [corrupted(scenario, regions=[tables_region, buffers_region, everywhere],
                       descriptor_overrides={0: {"base": 1 << 31, "rows": rows}})
             for rows in ((1 << 22) - 1, 1 << 22, 3 << 22, 1 << 24, (1 << 24) + 1)]
    expected = [ErrorCode.NONE] + [ErrorCode.ADDRESS_OUT_OF_REGION] * 4
    assert [expected_status(case, max_tables=MAX_TABLES, max_dim=MAX_DIM)["error"]
            for case in cases] == expected
    seen = _check_commands(cases, registered=registered)
    assert seen == {ErrorCode.NONE, ErrorCode.ADDRESS_OUT_OF_REGION}


@pytest.mark.parametrize("registered", [False, True], ids=["combinational", "registered"])
def test_checker_gradient_extent_at_the_widest_rows(registered):
    """With every table at the largest dim, a row of the gradient buffer is max_tables *
    max_dim / 16 lines (the checker's sum of dims at its widest): the buffer that ends at
    its region's end is inside, one line less of region and it is out."""
    draw = np.random.default_rng(13)
    cases = []
    while len(cases) < 4:
        scenario = random_scenario(draw, max_tables=MAX_TABLES, dims=(MAX_DIM,),
                                   rows=(1, 4), bags=(1, 4), bag_length=(0, 2),
                                   specials=False)
        if len(scenario.tables) != MAX_TABLES:
            continue
        command = scenario.command()
        cases += _buffers_region_ending_at(scenario, command["output"]
                                           + command["bags"] * MAX_TABLES * MAX_DIM * 4)
    seen = _check_commands(cases, registered=registered)
    assert seen == {ErrorCode.NONE, ErrorCode.ADDRESS_OUT_OF_REGION}


@pytest.mark.parametrize("registered", [False, True], ids=["combinational", "registered"])
def test_checker_gradient_extent_of_the_most_bags(registered):
    """65,535 bags of max_tables * max_dim / 16 lines: a gradient buffer of 2 ** 21 - 32
    lines, its line count as wide as the product of the bag count and the lines a row, ends
    at its region's end inside; one line less of region and it is out."""
    draw = np.random.default_rng(23)
    while True:
        scenario = random_scenario(draw, max_tables=MAX_TABLES, dims=(MAX_DIM,),
                                   rows=(1, 4), bags=(1, 2), bag_length=(0, 2),
                                   specials=False)
        if len(scenario.tables) == MAX_TABLES:
            break
    bags = (1 << 16) - 1
    end = scenario.addresses["output"] + bags * MAX_TABLES * MAX_DIM * 4
    (tables_region, buffers_region, _) = scenario.regions
    cases = [corrupted(scenario, bags=bags,
                       regions=[tables_region, buffers_region, (0, size, 1)])
             for size in (end, end - 64)]
    seen = _check_commands(cases, registered=registered)
    assert seen == {ErrorCode.NONE, ErrorCode.ADDRESS_OUT_OF_REGION}


def _index_mutation(draw, scenario):
    """One random change to offsets or indices."""
    offsets, indices = scenario.offsets.copy(), scenario.indices.copy()
    choice = int(draw.integers(5))
    if choice == 0 or offsets.size < 2:
        offsets[int(draw.integers(offsets.size))] += int(draw.integers(1, 5))
    elif choice == 1:
        e = int(draw.integers(1, offsets.size))
        offsets[e] = max(int(offsets[e]) - int(draw.integers(1, 4)), 0)
    elif choice == 2:
        offsets[int(draw.integers(offsets.size))] = indices.size + int(draw.integers(1, 9))
    elif indices.size:
        indices[int(draw.integers(indices.size))] = 1_000 + int(draw.integers(9))
    return corrupted(scenario, offsets=offsets, indices=indices)


def _words(scenario, name):
    address = scenario.addresses[name]
    count = {"offsets": len(scenario.tables) * scenario.bags + 1,
             "indices": len(scenario.indices), "weights": len(scenario.indices)}[name]
    return np.frombuffer(bytes(scenario.image[address:address + 4 * count]),
                         dtype=np.uint32).tolist()


def _walk(scenario, mode, draw, span=None, *, registered=False):
    """One walk with randomly stalling inputs and output; return (status, occurrences,
    starts: ``{table: (position, column)}`` as ``started`` showed them). ``span`` is
    ``(first_table, first_position, first_column, end_table, end_position)``: the walk of
    those tables only, fed the words from there on (as the engine's readers do)."""
    dut = OccurrenceWalker(max_tables=MAX_TABLES, max_dim=MAX_DIM, addr_width=ADDR_WIDTH,
                           registered_checks=registered, given_entries=registered)
    stall = random.Random(int(draw.integers(1 << 30)))
    occurrences, statuses, starts = [], [], {}
    command = scenario.command()
    if span is None:
        span = (0, 0, 0, command["tables"], command["num_indices"])
    first_table, first_position, first_column, end_table, end_position = span
    first_words = {"offsets": first_table * scenario.bags, "indices": first_position,
                   "weights": first_position}

    def feeder(name):
        async def run(ctx):
            stream = getattr(dut, name)
            for word in _words(scenario, name)[first_words[name]:]:
                ctx.set(stream.valid, 0)
                while stall.random() < 0.3:
                    await ctx.tick()
                ctx.set(stream.payload, word)
                ctx.set(stream.valid, 1)
                while True:
                    _, _, taken, finished = await ctx.tick().sample(stream.ready,
                                                                    dut.status.done)
                    if taken or finished:
                        break
            ctx.set(stream.valid, 0)
        return run

    async def control(ctx):
        ctx.set(dut.mode, mode)
        ctx.set(dut.use_weights, PoolingMode.WEIGHTED in scenario.modes)
        ctx.set(dut.bags, command["bags"])
        ctx.set(dut.tables, end_table)
        ctx.set(dut.num_indices, end_position)
        ctx.set(dut.first_table, first_table)
        ctx.set(dut.first_position, first_position)
        ctx.set(dut.first_column, first_column)
        ctx.set(dut.first_entry, first_table * command["bags"])
        ctx.set(dut.end_entry, end_table * command["bags"])
        ctx.set(dut.gradient, command["output"] >> 6)
        ctx.set(dut.row_lines, sum(scenario.dims) // 16)
        ctx.set(dut.descriptors.as_value(), scenario.descriptor_bits(ADDR_WIDTH, MAX_TABLES))
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        while True:
            ctx.set(dut.o.ready, int(stall.random() < 0.7))
            _, _, ready, valid, payload, finished, started, table, position, column = \
                await ctx.tick().sample(dut.o.ready, dut.o.valid, dut.o.payload,
                                        dut.status.done, dut.started, dut.started_table,
                                        dut.started_position, dut.started_column)
            if started:
                starts[table] = (position, column)
            if ready and valid:
                occurrences.append((payload.table, payload.row, payload.scale,
                                    payload.lines, payload.gradient))
            if finished and not ctx.get(dut.o.valid):
                break
        status = ctx.get(dut.status)
        statuses.append((status.error, status.table, status.bag, status.position))

    feeders = ["offsets"]
    if mode != WalkMode.OFFSETS:
        feeders.append("indices")
    if mode == WalkMode.UPDATE and PoolingMode.WEIGHTED in scenario.modes:
        feeders.append("weights")
    pysim.simulate(dut, control, processes=[feeder(name) for name in feeders], deadline=20_000,
                   check=False)
    assert statuses, "the walk did not finish"
    return statuses[0], occurrences, starts


def _expected_occurrences(scenario):
    result = []
    columns = np.concatenate([[0], np.cumsum(scenario.dims)]) // 16
    row_lines = sum(scenario.dims) // 16
    for k in range(len(scenario.tables) * scenario.bags):
        t, b = divmod(k, scenario.bags)
        begin, end = int(scenario.offsets[k]), int(scenario.offsets[k + 1])
        for p in range(begin, end):
            mode = scenario.modes[t]
            if mode == PoolingMode.WEIGHTED:
                scale = int(scenario.weights[p:p + 1].view(np.uint32)[0])
            elif mode == PoolingMode.MEAN:
                scale = reciprocal_bits(end - begin)
            else:
                scale = 0x3F80_0000
            gradient = (scenario.addresses["output"] >> 6) + b * row_lines + int(columns[t])
            result.append((t, int(scenario.indices[p]), scale, scenario.dims[t] // 16,
                           gradient))
    return result


@pytest.mark.parametrize("registered", [False, True], ids=["combinational", "registered"])
@pytest.mark.parametrize("seed", range(3))
def test_walker_reports_the_first_error_and_emits_occurrences(seed, registered):
    """Walks as the engine runs them (offsets, then indices, then update) stop at the first
    problem in the documented order; a clean update walk emits every occurrence in TBE order
    with its scale and gradient line."""
    draw = np.random.default_rng(100 + seed)
    for number in range(10):
        scenario = _base(draw)
        if number % 2:
            scenario = _index_mutation(draw, scenario)
        expected = expected_status(scenario, max_tables=MAX_TABLES, max_dim=MAX_DIM)
        for mode in WalkMode:
            status, occurrences, _ = _walk(scenario, mode, draw, registered=registered)
            if status[0] != ErrorCode.NONE:
                break
        assert status == (expected["error"], expected["table"], expected["bag"],
                          expected["position"])
        if expected["error"] == ErrorCode.NONE:
            assert occurrences == _expected_occurrences(scenario)
        elif expected["error"] == ErrorCode.INDEX_OUT_OF_RANGE:
            # An update walk over memory changed since its validation stops at the bad
            # index too, having emitted only the occurrences before it.
            status, occurrences, _ = _walk(scenario, WalkMode.UPDATE, draw,
                                           registered=registered)
            assert status[0] == ErrorCode.INDEX_OUT_OF_RANGE
            assert occurrences == _expected_occurrences(scenario)[:status[3]]


@pytest.mark.parametrize("registered", [False, True], ids=["combinational", "registered"])
def test_walker_walks_a_span_of_tables_from_where_a_whole_walk_saw_them_start(registered):
    """A whole walk shows where each table starts (``started``); a walk started there, of
    any run of tables, emits exactly their occurrences, as a correction pass needs. A first
    entry that does not hold the given position (memory changed since) is an error naming
    it."""
    draw = np.random.default_rng(7)
    spans = 0
    while spans < 6:
        scenario = _base(draw)
        tables = len(scenario.tables)
        if scenario.bags == 0 or tables < 2 or scenario.indices.size == 0:
            continue
        status, everything, starts = _walk(scenario, WalkMode.UPDATE, draw,
                                           registered=registered)
        assert status[0] == ErrorCode.NONE
        columns = np.concatenate([[0], np.cumsum(scenario.dims)]) // 16
        assert starts == {t: (int(scenario.offsets[t * scenario.bags]), int(columns[t]))
                          for t in range(tables)}
        first = int(draw.integers(1, tables))
        end = int(draw.integers(first + 1, tables + 1))
        end_position = int(scenario.offsets[end * scenario.bags])
        span = (first, *starts[first], end, end_position)
        status, occurrences, _ = _walk(scenario, WalkMode.UPDATE, draw, span,
                                       registered=registered)
        assert status[0] == ErrorCode.NONE
        assert occurrences == [o for o in everything if first <= o[0] < end]
        position, column = starts[first]
        status, _, _ = _walk(scenario, WalkMode.UPDATE, draw,
                             (first, position + 1, column, end, end_position),
                             registered=registered)
        assert status == (ErrorCode.OFFSETS_NOT_FROM_ZERO, first, 0, first * scenario.bags)
        spans += 1


def test_walker_offset_checks_parameter():
    """``registered_checks`` and ``given_entries`` are yes/no parameters, the second only
    with the first; the registered stage is a cycle of latency."""
    with pytest.raises(TypeError, match=r"^Registered checks must be True or False, "
                                        r"not 1$"):
        OccurrenceWalker(max_tables=MAX_TABLES, max_dim=MAX_DIM, addr_width=ADDR_WIDTH,
                         registered_checks=1)
    with pytest.raises(TypeError, match=r"^Given entries must be True or False, not 1$"):
        OccurrenceWalker(max_tables=MAX_TABLES, max_dim=MAX_DIM, addr_width=ADDR_WIDTH,
                         registered_checks=True, given_entries=1)
    with pytest.raises(ValueError, match=r"^Given entries need registered checks$"):
        OccurrenceWalker(max_tables=MAX_TABLES, max_dim=MAX_DIM, addr_width=ADDR_WIDTH,
                         given_entries=True)
    for registered in (False, True):
        walker = OccurrenceWalker(max_tables=MAX_TABLES, max_dim=MAX_DIM,
                                  addr_width=ADDR_WIDTH, registered_checks=registered)
        assert walker.offset_latency == int(registered)
        assert walker.reciprocal_steps_per_cycle == (1 if registered else 2)


@pytest.mark.parametrize("registered", [False, True], ids=["combinational", "registered"])
def test_walker_finds_a_last_entry_short_of_the_indices(registered):
    """A last offsets entry below ``num_indices`` (but not below the entry before it) is
    ``OFFSETS_PAST_END``, however many bags come before it: only the entry's place in the
    walk tells it from a good one."""
    draw = np.random.default_rng(11)
    walks = single_bag = 0
    while walks < 8 or not single_bag:
        scenario = _base(draw)
        offsets = scenario.offsets.copy()
        if scenario.bags == 0 or offsets[-1] <= offsets[-2]:
            continue
        if len(scenario.tables) * scenario.bags == 1:
            single_bag += 1   # its first entry after entry 0 is the last
        elif walks >= 8:
            continue
        offsets[-1] -= 1
        scenario = corrupted(scenario, offsets=offsets)
        expected = expected_status(scenario, max_tables=MAX_TABLES, max_dim=MAX_DIM)
        assert expected["error"] == ErrorCode.OFFSETS_PAST_END
        status, _, _ = _walk(scenario, WalkMode.OFFSETS, draw, registered=registered)
        assert status == (expected["error"], expected["table"], expected["bag"],
                          expected["position"])
        walks += 1


async def _offer_offsets(ctx, dut, words):
    """Offer ``words`` to the walker's offsets stream, each until it is taken, until the walk
    finishes; return how many index words the walker took meanwhile."""
    indices_taken = 0
    for word in words:
        ctx.set(dut.offsets.payload, word)
        ctx.set(dut.offsets.valid, 1)
        while True:
            _, _, offset_taken, index_taken, finished = await ctx.tick().sample(
                dut.offsets.ready, dut.indices.ready, dut.status.done)
            indices_taken += index_taken
            if offset_taken or finished:
                break
        if finished:
            break
    ctx.set(dut.offsets.valid, 0)
    return indices_taken


@pytest.mark.parametrize("registered", [False, True], ids=["combinational", "registered"])
def test_walker_leaves_no_entry_behind_after_an_error(registered):
    """A walk that stops at an error leaves no offsets entry behind: the next walk on the
    same walker (the engine's next command) starts from its own first entry."""
    dut = OccurrenceWalker(max_tables=MAX_TABLES, max_dim=MAX_DIM, addr_width=ADDR_WIDTH,
                           registered_checks=registered, given_entries=registered)
    walks = [[0, 2, 1, 3, 4], [0, 1, 3, 4, 4]]   # the first decreases at entry 2
    statuses = []

    async def testbench(ctx):
        for words in walks:
            ctx.set(dut.mode, WalkMode.OFFSETS)
            ctx.set(dut.bags, 2)
            ctx.set(dut.tables, 2)
            ctx.set(dut.end_entry, 4)
            ctx.set(dut.num_indices, 4)
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            await _offer_offsets(ctx, dut, words)
            while not ctx.get(dut.status.done):
                await ctx.tick()
            status = ctx.get(dut.status)
            statuses.append((status.error, status.table, status.bag, status.position))
            await ctx.tick()

    pysim.simulate(dut, testbench, deadline=500)
    assert statuses == [(ErrorCode.OFFSETS_DECREASING, 1, 0, 2), (ErrorCode.NONE, 0, 0, 0)]


@pytest.mark.parametrize("registered", [False, True], ids=["combinational", "registered"])
def test_walker_takes_indices_only_in_an_index_walks_bags(registered):
    """An index stream that offers words all along (a reader's word left from an abandoned
    walk) is read only in an index walk's bags: not after the walk stops at a bad index (in
    Idle), nor by an OFFSETS walk, which still finds the offsets good."""
    draw = np.random.default_rng(17)
    while True:
        scenario = _base(draw)
        if scenario.indices.size:
            break
    indices = scenario.indices.copy()
    indices[0] = 1_000   # past every table's rows: the index walk stops at position 0
    scenario = corrupted(scenario, indices=indices)
    expected = expected_status(scenario, max_tables=MAX_TABLES, max_dim=MAX_DIM)
    assert expected["error"] == ErrorCode.INDEX_OUT_OF_RANGE
    command = scenario.command()
    dut = OccurrenceWalker(max_tables=MAX_TABLES, max_dim=MAX_DIM, addr_width=ADDR_WIDTH,
                           registered_checks=registered, given_entries=registered)
    statuses, taken = [], []

    async def testbench(ctx):
        ctx.set(dut.bags, command["bags"])
        ctx.set(dut.tables, command["tables"])
        ctx.set(dut.end_entry, command["tables"] * command["bags"])
        ctx.set(dut.num_indices, command["num_indices"])
        ctx.set(dut.descriptors.as_value(), scenario.descriptor_bits(ADDR_WIDTH, MAX_TABLES))
        ctx.set(dut.indices.payload, 1_000)
        ctx.set(dut.indices.valid, 1)
        for mode in (WalkMode.INDICES, WalkMode.OFFSETS):
            ctx.set(dut.mode, mode)
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            count = await _offer_offsets(ctx, dut, _words(scenario, "offsets"))
            while not ctx.get(dut.status.done):
                _, _, index_taken = await ctx.tick().sample(dut.indices.ready)
                count += index_taken
            for _ in range(4):   # Idle, the index stream still offering a word
                _, _, index_taken = await ctx.tick().sample(dut.indices.ready)
                count += index_taken
            status = ctx.get(dut.status)
            statuses.append((status.error, status.table, status.bag, status.position))
            taken.append(count)

    pysim.simulate(dut, testbench, deadline=2_000)
    assert statuses == [(expected["error"], expected["table"], expected["bag"],
                         expected["position"]), (ErrorCode.NONE, 0, 0, 0)]
    # A registered walker takes the bad index (and then stops); the other one does not.
    assert taken == [int(registered), 0]


def test_checker_region_checks_parameter():
    with pytest.raises(TypeError, match=r"^Registered region checks must be True or False, "
                                        r"not 'yes'$"):
        CommandChecker(max_tables=MAX_TABLES, max_dim=MAX_DIM, num_regions=REGIONS,
                       addr_width=ADDR_WIDTH, registered_region_checks="yes")
