# amaranth: UnusedElaboratable=no
"""A whole LookupEngine in Amaranth's simulator: a quick end-to-end check that needs no
Verilator (the thorough tests are the cocotb ones in ``tb/emb``)."""

import random

import numpy as np
import pytest
from amaranth.lib import data

from hw.emb.layouts import (
    ErrorCode,
    Opcode,
    PoolingMode,
    command_layout,
    region_layout,
    table_layout,
)
from hw.emb.lookup import LookupEngine
from tb.emb.cases import LookupCase, Placement, golden, random_case, random_table, same_bits
from tb.pysim import simulate

AW = 32
PARAMS = dict(max_tables=4, max_dim=64, num_regions=2, addr_width=AW, id_width=6,
              outstanding_reads=16, index_buffer_depth=32, offset_buffer_depth=32,
              output_buffer_depth=8, bag_slots=8)


class Memory:
    """Byte-addressed sparse memory with an AXI behaviour model: reads answered after a few
    cycles, newest request first whenever several wait (out of order across IDs)."""

    def __init__(self):
        self.bytes = {}

    def write(self, address, payload):
        for k, value in enumerate(payload):
            self.bytes[address + k] = value

    def read(self, address, length):
        return bytes(self.bytes.get(address + k, 0) for k in range(length))


REGIONS = [{"base": 0x1000_0000, "size": 0x10_0000, "enable": 1},
           {"base": 0x2000_0000, "size": 0x10_0000, "enable": 1}]


def place_cases(memory, cases):
    """Lay each case out in its own 64 KiB of both regions and write it to ``memory``;
    return the LOOKUP commands (batch k for case k), table descriptors and placements."""
    commands, tables, placements = [], [], []
    for k, item in enumerate(cases):
        placement = Placement.lay_out(item, table_region=0x1000_0000 + k * 0x1_0000,
                                      buffer_region=0x2000_0000 + k * 0x1_0000)
        for table, base in zip(item.tables, placement.table_base, strict=True):
            memory.write(base, table.tobytes())
        memory.write(placement.indices, item.indices.tobytes())
        memory.write(placement.offsets, item.offsets.tobytes())
        memory.write(placement.weights, item.weights.tobytes())
        commands.append({"opcode": Opcode.LOOKUP, "batch": k, "bags": item.bags,
                         "tables": len(item.tables), "num_indices": item.indices.size,
                         "indices": placement.indices, "offsets": placement.offsets,
                         "weights": placement.weights, "output": placement.output})
        tables.append([{"base": base, "rows": t.shape[0], "dim": t.shape[1], "mode": mode}
                       for t, mode, base in zip(item.tables, item.modes,
                                                placement.table_base, strict=True)])
        placements.append(placement)
    return commands, tables, placements


def run_commands(engine, memory, commands, tables, regions, defer_mean=None, ar_stalls=None,
                 bad_reads=()):
    """Run ``commands`` on ``engine`` against ``memory``; with ``ar_stalls`` (a
    ``random.Random``) the memory's ``arready`` is low in a third of the cycles; a read of a
    line in ``bad_reads`` (addresses) is answered with SLVERR."""
    statuses = []
    defer_mean = defer_mean or [0] * len(commands)

    async def testbench(ctx):
        axi = engine.axi
        ctx.set(engine.regions, data.ArrayLayout(region_layout(AW), 2).const(regions))
        ctx.set(engine.done.ready, 1)
        ar_ready = True
        ctx.set(axi.arready, ar_ready)
        ctx.set(axi.awready, 1)
        ctx.set(axi.wready, 1)
        waiting, addresses, beats, acks = [], [], [], 0
        for command, table_entries, defer in zip(commands, tables, defer_mean, strict=True):
            ctx.set(engine.defer_mean, defer)
            ctx.set(engine.tables, data.ArrayLayout(table_layout(AW), 4).const(
                table_entries + [{}] * (4 - len(table_entries))))
            ctx.set(engine.cmd.payload, command_layout(AW).const(command))
            ctx.set(engine.cmd.valid, 1)
            for cycle in range(20_000):
                sampled = await ctx.tick().sample(
                    engine.cmd.ready, axi.arvalid, axi.arid, axi.araddr, axi.awvalid,
                    axi.awaddr, axi.wvalid, axi.wdata, engine.done.valid, engine.done.payload)
                (cmd_ready, ar_valid, ar_id, ar_addr, aw_valid, aw_addr, w_valid, w_data,
                 done_valid, done_payload) = sampled[2:]
                if cmd_ready:
                    ctx.set(engine.cmd.valid, 0)
                    ctx.set(engine.defer_mean, 0)  # sampled with the command only
                if ar_valid and ar_ready:
                    waiting.append((cycle + 4, ar_id, ar_addr))
                ar_ready = ar_stalls is None or ar_stalls.random() >= 1 / 3
                ctx.set(axi.arready, ar_ready)
                if aw_valid:
                    addresses.append(aw_addr)
                if w_valid:
                    beats.append(w_data)
                while addresses and beats:
                    memory.write(addresses.pop(0), beats.pop(0).to_bytes(64, "little"))
                    acks += 1
                ctx.set(axi.bvalid, acks > 0)
                acks = max(0, acks - 1)
                ready = [w for w in waiting if w[0] <= cycle]
                ctx.set(axi.rvalid, bool(ready))
                if ready:
                    _, ident, address = ready[-1]  # the newest first: out of order
                    waiting.remove(ready[-1])
                    ctx.set(axi.rid, ident)
                    ctx.set(axi.rdata, int.from_bytes(memory.read(address, 64), "little"))
                    ctx.set(axi.rresp, 2 if address in bad_reads else 0)
                if done_valid:
                    statuses.append(done_payload)
                    break

    simulate(engine, testbench, deadline=10_000)
    return statuses


# The FPGA registers of the board's lookup (the pooler's accumulator operand read a cycle
# early, the issuer's slot readiness registered) with two-stage FP units, the fewest they allow,
# and two bag slots, so that consecutive ops of a bag meet the accumulator hazard often.
FPGA_PIPELINING = dict(bag_slots=2, mul_stages=2, add_stages=2, fpga_pipelining=True)


@pytest.mark.parametrize(("mean_reciprocal", "changes", "ar_stall_seed"), [
    ("pipelined", {}, None), ("sequential", {}, None), ("pipelined", FPGA_PIPELINING, None),
    ("sequential", FPGA_PIPELINING, None),
    ("pipelined", {**FPGA_PIPELINING, "lane_fold": 2}, None), ("pipelined", {"lane_fold": 4}, None),
    ("pipelined", {}, 11), ("pipelined", FPGA_PIPELINING, 12)],
    ids=["pipelined", "sequential", "fpga-pipelining", "sequential-fpga-pipelining",
         "fpga-pipelining-folded-lanes", "lanes-folded-by-4", "read-address-stalls",
         "fpga-pipelining-read-address-stalls"])
def test_lookup_end_to_end_in_pysim(mean_reciprocal, changes, ar_stall_seed):
    """With either MEAN divider (the sequential one holds the bag walk at each MEAN bag), with
    the board's FPGA pipelining, with folded FP lanes (a line every 2 or 4 cycles), and with a
    memory that stalls read addresses (seeded)."""
    rng = np.random.default_rng(3)

    def draw(predicate, **shape):
        while not predicate(case := random_case(rng, **shape)):
            pass
        return case

    # Several modes and dims; its last table has indices (the error case below uses it).
    case = draw(lambda c: c.offsets[-1] > c.offsets[-1 - c.bags], max_tables=3,
                dims=(16, 32, 64), max_bags=3, max_bag=5, max_rows=9, specials=True)
    # Bigger than the 32-entry windows: the two-pass flow. Its weighted table's weights are
    # read again in the second pass.
    big = draw(lambda c: c.indices.size > 32 and len(c.tables) == 2, max_tables=2,
               dims=(16,), max_bags=6, max_bag=12, max_rows=9,
               modes=[PoolingMode.WEIGHTED, PoolingMode.MEAN])
    bad = LookupCase(case.tables, case.modes, case.bags, case.indices.copy(),
                     case.offsets, case.weights)
    bad.indices[-1] = case.tables[-1].shape[0]
    memory = Memory()
    commands, tables, placements = place_cases(memory, (case, big, bad))
    stalls = None if ar_stall_seed is None else random.Random(ar_stall_seed)
    statuses = run_commands(LookupEngine(**{**PARAMS, **changes},
                                         mean_reciprocal=mean_reciprocal), memory,
                            commands, tables, REGIONS, ar_stalls=stalls)
    assert [s.error for s in statuses] == [ErrorCode.NONE, ErrorCode.NONE,
                                           ErrorCode.INDEX_OUT_OF_RANGE]
    # The index validator does not know the bag; the engine finds it from the offsets.
    position, last_table = case.indices.size - 1, len(case.tables) - 1
    table_offsets = case.offsets[last_table * case.bags:(last_table + 1) * case.bags + 1]
    bag = max(b for b in range(case.bags) if table_offsets[b] <= position)
    assert (statuses[2].table, statuses[2].bag, statuses[2].position) == (
        last_table, bag, position)
    for item, placement in zip((case, big), placements, strict=False):
        raw = memory.read(placement.output, placement.output_bytes)
        got = np.frombuffer(raw, dtype=np.float32).reshape(item.bags, item.row_floats)
        assert same_bits(got, golden(item)).all()
    untouched = memory.read(placements[2].output, placements[2].output_bytes)
    assert untouched == bytes(placements[2].output_bytes)


@pytest.mark.parametrize("changes", [{}, FPGA_PIPELINING], ids=["pipelined", "fpga-pipelining"])
def test_lookup_locates_an_index_error_in_its_last_table(changes):
    """An index out of range in the fourth of four tables (the engine's max_tables): the bag
    search counts that table's offsets, whose ends (3 * bags and 4 * bags) need the table's
    two bits and three for the one after it."""
    rng = np.random.default_rng(5)
    while not ((case := random_case(rng, max_tables=4, dims=(16,), max_bags=3, max_bag=4,
                                    max_rows=5, modes=[PoolingMode.SUM]))
               .offsets[-1] > case.offsets[-1 - case.bags] and len(case.tables) == 4):
        pass
    last_table = 3
    table_offsets = case.offsets[last_table * case.bags:]
    # The table's first index, so the bag found is not simply its last one.
    position = int(table_offsets[0])
    indices = case.indices.copy()
    indices[position] = case.tables[last_table].shape[0]
    bad = LookupCase(case.tables, case.modes, case.bags, indices, case.offsets, case.weights)
    memory = Memory()
    commands, tables, _ = place_cases(memory, (bad,))
    (status,) = run_commands(LookupEngine(**{**PARAMS, **changes}), memory, commands,
                             tables, REGIONS)
    bag = max(b for b in range(case.bags) if table_offsets[b] <= position)
    assert (status.error, status.table, status.bag, status.position) == (
        ErrorCode.INDEX_OUT_OF_RANGE, last_table, bag, position)


@pytest.mark.parametrize("changes", [{}, FPGA_PIPELINING], ids=["pipelined", "fpga-pipelining"])
def test_lookup_locates_an_index_error_despite_a_bus_error_behind_it(changes):
    """An index out of range in the second table's first bag, and a bus error on an index
    line read before the validator reached it and answered after the abort: the status is
    the index error recorded as Abort began (not the bus error, table 0, that the error
    choice holds later), and the bag search finds its bag."""
    rng = np.random.default_rng(7)
    tables = [random_table(rng, 4, 16), random_table(rng, 4, 16)]
    # Bags of 10 and 8 indices, then 8 and 17: 43 indices, three lines, one more than the
    # index window holds, so line 2 is read once the validator has freed line 0.
    offsets = np.asarray([0, 10, 18, 26, 43], dtype=np.uint32)
    indices = rng.integers(0, 4, 43).astype(np.uint32)
    position = 20
    indices[position] = 4
    case = LookupCase(tables, [PoolingMode.SUM] * 2, 2, indices, offsets,
                      np.zeros(43, dtype=np.float32))
    memory = Memory()
    commands, table_entries, placements = place_cases(memory, (case,))
    (status,) = run_commands(LookupEngine(**{**PARAMS, **changes}), memory, commands,
                             table_entries, REGIONS, bad_reads={placements[0].indices + 128})
    assert (status.error, status.table, status.bag, status.position) == (
        ErrorCode.INDEX_OUT_OF_RANGE, 1, 0, position)


def test_deferred_lookup_leaves_mean_bags_unscaled():
    """``defer_mean``: MEAN bags come out as their sums (a relaxed lookup's stale result before
    its correction); the next command, without it, scales again."""
    rng = np.random.default_rng(11)
    while not ((case := random_case(rng, max_tables=2, dims=(16, 32), max_bags=3, max_bag=5,
                                    max_rows=9, modes=[PoolingMode.MEAN, PoolingMode.SUM]))
               .indices.size and PoolingMode.MEAN in case.modes):
        pass
    as_sums = LookupCase(case.tables, [PoolingMode.SUM] * len(case.tables), case.bags,
                         case.indices, case.offsets, case.weights)
    memory = Memory()
    commands, tables, placements = place_cases(memory, (case, case))
    statuses = run_commands(LookupEngine(**PARAMS), memory, commands, tables, REGIONS,
                            defer_mean=[1, 0])
    assert [s.error for s in statuses] == [ErrorCode.NONE, ErrorCode.NONE]
    for placement, expected in zip(placements, (golden(as_sums), golden(case)), strict=True):
        raw = memory.read(placement.output, placement.output_bytes)
        got = np.frombuffer(raw, dtype=np.float32).reshape(case.bags, case.row_floats)
        assert same_bits(got, expected).all()
