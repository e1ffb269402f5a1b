"""cocotb tests of the LookupEngine against the golden model, under AXI stress.

Memory is cocotbext-axi's RAM with seeded random pauses on all five channels (which also
delays responses at random), or a read side that answers in a random order across IDs. Every
pooled output is compared bit for bit with ``sw_model``; the bytes around the output buffer
(and, for failing commands, the buffer itself) must be left as they were.
"""

import cocotb
import numpy as np

from hw.emb.layouts import LINE_BYTES, ErrorCode, Opcode, PoolingMode
from sim.rtl import design_from_env
from tb.common import draw_until
from tb.emb.harness import (
    BUFFER_REGION,
    BUFFER_REGION_SIZE,
    TABLE_REGION,
    TABLE_REGION_SIZE,
    Bench,
    LookupCase,
    random_case,
)


async def run_random(bench, count, *, label, **shape):
    shape.setdefault("dims", tuple(d for d in (16, 32, 64, 128) if d <= bench.max_dim))
    for k in range(count):
        case = random_case(bench.rng, max_tables=bench.max_tables, **shape)
        await bench.lookup_and_compare(case, f"{label} case {k}")


@cocotb.test()
async def small_random_lookups(dut):
    """Many small batches (they fit on chip: single pass), all modes, uniform and Zipf."""
    bench = Bench(dut, stream=1)
    await bench.start()
    await run_random(bench, 14, label="small", max_bags=6, max_bag=5)
    await run_random(bench, 4, label="specials", max_bags=4, max_bag=4, specials=True)


@cocotb.test()
async def large_random_lookups(dut):
    """Batches larger than the on-chip windows: validate, then stream again while gathering."""
    bench = Bench(dut, stream=2)
    await bench.start()
    await run_random(bench, 3, label="large", max_bags=40, max_bag=24, dims=(16, 32))


@cocotb.test()
async def shuffled_responses(dut):
    """Read responses come back in a random order across IDs."""
    bench = Bench(dut, shuffle=True, busy=0.2, stream=3)
    await bench.start()
    await run_random(bench, 8, label="shuffled", max_bags=8, max_bag=8)
    await run_random(bench, 1, label="shuffled large", max_bags=30, max_bag=20, dims=(16,))


@cocotb.test()
async def full_speed_chains(dut):
    """No back-pressure: lines arrive every cycle, so bag chains meet the adder latency."""
    bench = Bench(dut, busy=0.0, stream=4)
    await bench.start()
    for modes in ([PoolingMode.SUM], [PoolingMode.MEAN], [PoolingMode.WEIGHTED]):
        for dim in (16, 64):
            case = random_case(bench.rng, max_tables=2, dims=(dim,), max_bags=12, max_bag=16,
                               max_rows=8, modes=modes)
            await bench.lookup_and_compare(case, f"{modes[0].name} dim {dim}")
    # One long bag alone: the worst case for the accumulation chain.
    table = np.arange(16 * 4, dtype=np.float32).reshape(4, 16) / np.float32(7)
    indices = np.array([0, 1, 2, 3, 0, 0, 1, 1, 3, 2] * 3, dtype=np.uint32)
    for mode in PoolingMode:
        case = LookupCase([table], [mode], 1, indices,
                          np.array([0, indices.size], dtype=np.uint32),
                          np.linspace(-2, 2, indices.size, dtype=np.float32))
        await bench.lookup_and_compare(case, f"one bag {mode.name}")


def _fixed_case(bench, *, bags=4):
    """Three tables (SUM, MEAN, WEIGHTED), every bag of the middle table has >= 2 rows."""
    generator = np.random.default_rng(7)
    tables = [generator.standard_normal((rows, dim)).astype(np.float32)
              for rows, dim in ((20, 16), (12, 32), (30, 64))]
    modes = [PoolingMode.SUM, PoolingMode.MEAN, PoolingMode.WEIGHTED]
    indices, offsets = [], []
    for t, table in enumerate(tables):
        for b in range(bags):
            length = 2 + (b + t) % 3
            offsets.append(sum(len(i) for i in indices))
            indices.append(generator.integers(0, table.shape[0], length).astype(np.uint32))
    flat = np.concatenate(indices)
    offsets.append(flat.size)
    return LookupCase(tables, modes, bags, flat, np.asarray(offsets, dtype=np.uint32),
                      generator.uniform(0.5, 1.5, flat.size).astype(np.float32))


async def expect_error(bench, case, expected, *, label, table_config=None, placement=None,
                       untouched=True, **overrides):
    status, placement = await bench.issue(case, placement, table_config=table_config,
                                          **overrides)
    got = {key: status[key] for key in expected}
    assert got == expected, f"{label}: status {status}, expected {expected}"
    bench.check_guards(placement, output_too=untouched)


@cocotb.test()
async def bad_inputs(dut):
    """Every kind of bad command ends with the exact status and writes nothing."""
    bench = Bench(dut, stream=5)
    await bench.start()
    case = _fixed_case(bench)
    b = case.bags
    await bench.lookup_and_compare(case, "baseline")

    def variant(**changes):
        fields = dict(tables=case.tables, modes=case.modes, bags=case.bags,
                      indices=case.indices.copy(), offsets=case.offsets.copy(),
                      weights=case.weights)
        fields.update(changes)
        return LookupCase(**fields)

    # Indices: the first bad one in position order is named, with its table and bag.
    bad = variant()
    position = int(case.offsets[1 * b + 2]) + 1            # table 1, bag 2, second index
    bad.indices[position] = case.tables[1].shape[0]
    bad.indices[position + 3] = 0xFFFF_FFFF
    await expect_error(bench, bad, {"error": ErrorCode.INDEX_OUT_OF_RANGE, "table": 1, "bag": 2,
                                    "position": position}, label="index == rows")
    bad = variant()
    last = case.indices.size - 1
    bad.indices[last] = 0xFFFF_FFFF
    await expect_error(bench, bad, {"error": ErrorCode.INDEX_OUT_OF_RANGE, "table": 2,
                                    "bag": b - 1, "position": last}, label="last index")

    # Offsets.
    bad = variant()
    bad.offsets[b + 1] = bad.offsets[b] - 1
    await expect_error(bench, bad, {"error": ErrorCode.OFFSETS_DECREASING, "table": 1, "bag": 1,
                                    "position": b + 1}, label="decreasing")
    bad = variant()
    bad.offsets[2 * b] = case.indices.size + 1
    await expect_error(bench, bad, {"error": ErrorCode.OFFSETS_PAST_END, "table": 2, "bag": 0,
                                    "position": 2 * b}, label="past the end")
    bad = variant()
    bad.offsets[-1] = case.indices.size - 1
    await expect_error(bench, bad, {"error": ErrorCode.OFFSETS_PAST_END, "table": 3, "bag": 0,
                                    "position": 3 * b}, label="last offset short")
    await expect_error(bench, case, {"error": ErrorCode.OFFSETS_PAST_END, "table": 3, "bag": 0,
                                     "position": 3 * b}, label="num_indices too big",
                       num_indices=case.indices.size + 1)
    bad = variant()
    bad.offsets[0] = 1
    await expect_error(bench, bad, {"error": ErrorCode.OFFSETS_NOT_FROM_ZERO, "table": 0,
                                    "bag": 0, "position": 0}, label="offsets[0] != 0")

    # Table shapes, in table order: an earlier table's problem is reported first.
    placement = bench.place(case)
    entries = bench.table_entries(case, placement)

    async def with_tables(changed, expected, label):
        await expect_error(bench, case, expected, label=label, table_config=changed,
                           placement=placement)

    for dim in (0, 24, bench.max_dim + 16):
        changed = [dict(e) for e in entries]
        changed[2]["dim"] = dim
        changed[1]["base"] += 4
        await with_tables(changed, {"error": ErrorCode.MISALIGNED_ADDRESS, "table": 1},
                          f"misaligned table 1 before bad dim {dim}")
        changed[1]["base"] -= 4
        await with_tables(changed, {"error": ErrorCode.BAD_DIMENSION, "table": 2},
                          f"dim {dim}")
    changed = [dict(e) for e in entries]
    changed[0]["base"] = TABLE_REGION + TABLE_REGION_SIZE - 64 * 4
    await with_tables(changed, {"error": ErrorCode.ADDRESS_OUT_OF_REGION, "table": 0},
                      "table past its region")
    changed = [dict(e) for e in entries]
    changed[1]["rows"] = 0x4000_0000
    await with_tables(changed, {"error": ErrorCode.ADDRESS_OUT_OF_REGION, "table": 1},
                      "table too long")

    # Buffers: alignment, then region. `weights` is only checked when a table is WEIGHTED.
    for name, shift in (("indices", 4), ("offsets", 32), ("weights", 16), ("output", 8)):
        await expect_error(bench, case, {"error": ErrorCode.MISALIGNED_ADDRESS, "table": 0},
                           label=f"misaligned {name}", placement=placement,
                           **{name: getattr(placement, name) + shift})
        await expect_error(bench, case, {"error": ErrorCode.ADDRESS_OUT_OF_REGION, "table": 0},
                           label=f"{name} outside", placement=placement,
                           **{name: 0x3000_0000})
    await expect_error(bench, case, {"error": ErrorCode.ADDRESS_OUT_OF_REGION},
                       label="output straddles the region end", placement=placement,
                       output=BUFFER_REGION + BUFFER_REGION_SIZE - 64)
    unweighted = variant(modes=[PoolingMode.SUM, PoolingMode.MEAN, PoolingMode.SUM])
    status, _ = await bench.issue(unweighted, weights=0x3000_0004)
    assert status["error"] == ErrorCode.NONE, f"unused weights were checked: {status}"

    # A disabled region is no region.
    bench.driver.set_regions([dict(bench.regions[0], enable=0), bench.regions[1]])
    await expect_error(bench, case, {"error": ErrorCode.ADDRESS_OUT_OF_REGION, "table": 0},
                       label="disabled region")
    bench.driver.set_regions(bench.regions)

    # Opcodes the design does not serve (the EmbeddingEngine top serves NOP and UPDATE too).
    unserved = [Opcode.SNAPSHOT, Opcode.RECOVER, 15]
    if "LookupEngine" in design_from_env().factory:
        unserved += [Opcode.NOP, Opcode.UPDATE]
    for opcode in unserved:
        await expect_error(bench, case, {"error": ErrorCode.BAD_OPCODE}, label=str(opcode),
                           opcode=opcode)
    await bench.lookup_and_compare(case, "after the errors")


@cocotb.test()
async def table_count_limits(dut):
    bench = Bench(dut, stream=6)
    await bench.start()
    case = _fixed_case(bench)
    for count in (0, bench.max_tables + 1):
        await expect_error(bench, case, {"error": ErrorCode.BAD_TABLE_COUNT, "table": 0,
                                         "bag": 0, "position": 0},
                           label=f"{count} tables", tables=count)


@cocotb.test()
async def index_errors_in_two_passes(dut):
    """A batch too big for the index window: the error is still found before any write."""
    bench = Bench(dut, stream=7)
    await bench.start()
    # Drawn again until the indices overflow the window and the bad one (third from the end)
    # lies in the last table.
    case = draw_until(
        lambda: random_case(bench.rng, max_tables=2, dims=(16,), max_bags=30, max_bag=30,
                            modes=[PoolingMode.SUM]),
        lambda case: (case.indices.size > bench.index_capacity
                      and case.offsets[(len(case.tables) - 1) * case.bags]
                      <= case.indices.size - 3),
        "overflows the index window with its third index from the end in the last table")
    table = len(case.tables) - 1
    position = case.indices.size - 3
    case.indices[position] = case.tables[-1].shape[0] + 5
    starts = case.offsets[table * case.bags:(table + 1) * case.bags]
    bag = int(np.searchsorted(starts, position, side="right")) - 1
    await expect_error(bench, case, {"error": ErrorCode.INDEX_OUT_OF_RANGE, "table": table,
                                     "bag": bag, "position": position}, label="two-pass index")


@cocotb.test()
async def bus_errors(dut):
    """SLVERR on a stream read, a row read or a write ends with BUS_ERROR; the engine then
    works again."""
    bench = Bench(dut, stream=8)
    await bench.start()
    case = _fixed_case(bench)
    placement = bench.place(case)
    memory = bench.memory

    bus_error = {"error": ErrorCode.BUS_ERROR, "table": 0, "bag": 0, "position": 0}
    memory.read_poison.add(placement.indices // LINE_BYTES)
    await expect_error(bench, case, bus_error, label="index read", placement=placement)
    memory.read_poison.clear()

    row = int(case.indices[-1])
    memory.read_poison.add((placement.table_base[2] + row * 64 * 4) // LINE_BYTES)
    await expect_error(bench, case, bus_error, label="row read", placement=placement,
                       untouched=False)
    memory.read_poison.clear()

    memory.write_poison.add(placement.output // LINE_BYTES + 1)
    await expect_error(bench, case, bus_error, label="output write", placement=placement,
                       untouched=False)
    memory.write_poison.clear()
    await bench.lookup_and_compare(case, "after bus errors")


@cocotb.test()
async def counters_and_empty_batches(dut):
    bench = Bench(dut, busy=0.0, stream=9)
    await bench.start()
    case = _fixed_case(bench)
    before = bench.driver.counters()
    await bench.lookup_and_compare(case, "counted")
    after = bench.driver.counters()
    delta = {name: after[name] - before[name] for name in before}
    row_lines = sum(
        int(case.offsets[(t + 1) * case.bags] - case.offsets[t * case.bags])
        * (table.shape[1] // 16) for t, table in enumerate(case.tables))
    stream_lines = (-(-case.offsets.size // 16) + 2 * -(-case.indices.size // 16))
    assert delta["rows_read"] == case.indices.size, delta
    assert delta["bytes_read"] == (row_lines + stream_lines) * LINE_BYTES, delta
    assert delta["bytes_written"] == case.bags * case.row_floats * 4, delta
    assert 0 < delta["stall_cycles"] < delta["busy_cycles"], delta

    # No bags at all, and bags that are all empty.
    empty = LookupCase(case.tables, case.modes, 0, np.zeros(0, np.uint32),
                       np.zeros(1, np.uint32), np.zeros(0, np.float32))
    await bench.lookup_and_compare(empty, "no bags")
    hollow = LookupCase(case.tables, case.modes, 3, np.zeros(0, np.uint32),
                        np.zeros(10, np.uint32), np.zeros(0, np.float32))
    await bench.lookup_and_compare(hollow, "empty bags")
