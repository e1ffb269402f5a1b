# amaranth: UnusedElaboratable=no
"""The embedding-engine self-test: its golden workload, and the whole BIST system (engine,
block-RAM memory, runner, UART report) in Amaranth's simulator, passing and failing."""

import numpy as np
import pytest
from bist_harness import run_bist

from boards.bist.check import Check
from boards.bist.emb_checks import emb_checks, engine_workload
from boards.bist.emb_dut import ENGINE_DEFAULTS
from boards.bist.runner import CheckRunner, SelfTest
from boards.bist.top import REPORT_FORMAT
from hw.emb.layouts import Opcode, PoolingMode
from sw_model import embedding_bag_tbe
from tb.pysim import simulate

# The UPDATE takes about 350 cycles in simulation (the memory is the same on the board, so
# it does there too); a short timeout keeps the simulated tail after each check short.
TIMEOUT = 768
# LOOKUP: status + 4 bags x 3 lines; UPDATE: status + 64 table lines, LOOKUP as before.
COMPARED = 13 + 1 + 64 + 13


def test_workload_exercises_chunks_duplicates_and_empty_bags():
    workload = engine_workload()
    assert workload.max_unique_rows == ENGINE_DEFAULTS["max_unique_rows"]
    assert workload.chunks >= 2  # more distinct rows than the engine holds on chip
    assert workload.modes == (PoolingMode.MEAN, PoolingMode.WEIGHTED)
    lengths = np.diff(workload.offsets.astype(np.int64))
    assert (lengths == 0).any() and (lengths >= 2).any()
    bags = workload.bags
    for t in range(len(workload.tables)):
        start, end = workload.offsets[t * bags], workload.offsets[(t + 1) * bags]
        rows = workload.indices[start:end]
        assert len(set(rows.tolist())) < len(rows)  # repeated rows
    # The update changed exactly the rows looked up.
    for t, (before, after) in enumerate(zip(workload.tables, workload.updated_tables,
                                            strict=True)):
        start, end = workload.offsets[t * bags], workload.offsets[(t + 1) * bags]
        changed = np.flatnonzero((before != after).any(axis=1))
        assert set(changed.tolist()) <= set(workload.indices[start:end].tolist())
        assert changed.size > 0


def test_workload_golden_results_agree_with_sw_model_directly():
    # With every table in SUM mode the factor trick must equal sw_model's own mode handling.
    workload = engine_workload(modes=(PoolingMode.SUM, PoolingMode.SUM))
    direct = embedding_bag_tbe(list(workload.tables), workload.indices.astype(np.int64),
                               workload.offsets.astype(np.int64), "sum")
    assert direct.tobytes() == workload.pooled.tobytes()
    assert engine_workload(seed=3).pooled.tobytes() == engine_workload(seed=3).pooled.tobytes()
    assert engine_workload(seed=3).pooled.tobytes() != engine_workload(seed=4).pooled.tobytes()


def test_checks_fit_the_engine_and_the_counters():
    lookup, update = emb_checks()
    assert lookup.dut is update.dut
    # One runner for both, comparing the 512-bit lines 128 bits a cycle.
    assert CheckRunner([lookup, update]).compare_beats == 4
    assert (len(lookup.expected), len(update.expected)) == (13, COMPARED - 13)
    with pytest.raises(ValueError, match=r"^The workload has 2 tables; the engine takes 1$"):
        emb_checks(max_tables=1)


def corrupted(check, index, bit):
    expected = list(check.expected)
    expected[index] ^= 1 << bit
    return Check(name=check.name, dut=check.dut, stimulus=check.stimulus, expected=expected,
                 timeout_cycles=check.timeout_cycles)


def test_engine_bist_passes():
    # The default configuration has the smallest output buffer (2 lines).
    line, leds = run_bist(emb_checks(timeout_cycles=TIMEOUT), max_cycles=12_000)
    assert line == REPORT_FORMAT.format(verdict="PASS", compared=COMPARED, errors=0)
    assert leds["pass"] == 1 and leds["fail"] == 0


def test_engine_bist_passes_on_folded_lanes():
    """Both engines on one multiplier and one adder of 8 units each, a line over two
    cycles (``lane_fold=2``): the same results."""
    line, _ = run_bist(emb_checks(timeout_cycles=TIMEOUT, lane_fold=2), max_cycles=12_000)
    assert line == REPORT_FORMAT.format(verdict="PASS", compared=COMPARED, errors=0)


def test_engines_give_their_lanes_nothing_in_a_commands_first_cycle():
    """With fpga_pipelining the shared lanes' per-lane owner copies follow the owner a cycle
    late (``hw/emb/engine.py``): right only while neither engine gives the lanes an operand
    in the cycle after its command is accepted. The self-test's LOOKUP, UPDATE and LOOKUP
    on folded lanes (the ULX3S's configuration)."""
    checks = emb_checks(timeout_cycles=TIMEOUT, lane_fold=2)
    engine = checks[0].dut.engine
    assert engine.shared_lanes
    issues = [getattr(unit, f"{op}_lanes").i.valid
              for unit in engine.engines.values() for op in ("mul", "add")]
    self_test = SelfTest(checks)
    accepted, issued = [], set()

    async def testbench(ctx):
        cycle = 0
        while not ctx.get(self_test.done):
            _, _, valid, ready, opcode, *lanes = await ctx.tick().sample(
                engine.cmd.valid, engine.cmd.ready, engine.cmd.payload.opcode, *issues)
            if valid and ready:
                accepted.append((cycle, Opcode(opcode)))
            if any(lanes):
                issued.add(cycle)
            cycle += 1

    simulate(self_test, testbench, deadline=12_000)
    assert [opcode for _, opcode in accepted] == [Opcode.LOOKUP, Opcode.UPDATE, Opcode.LOOKUP]
    assert issued  # the lanes were used
    assert not issued & {cycle + 1 for cycle, _ in accepted}


def test_engine_bist_fails_on_one_wrong_bit():
    lookup, update = emb_checks(timeout_cycles=TIMEOUT)
    # One bit of one updated table row (the LSB of a float: one ulp).
    update = corrupted(update, 1 + 7, 32 * 5)
    line, leds = run_bist([lookup, update], max_cycles=12_000)
    assert line == REPORT_FORMAT.format(verdict="FAIL", compared=COMPARED, errors=1)
    assert leds["pass"] == 0 and leds["fail"] == 1


@pytest.mark.slow
@pytest.mark.parametrize(("engine", "compared"), [("lookup", 13), ("update", 1 + 64)])
def test_one_engine_alone_passes(engine, compared):
    line, _ = run_bist(emb_checks(timeout_cycles=TIMEOUT, engine=engine), max_cycles=12_000)
    assert line == REPORT_FORMAT.format(verdict="PASS", compared=compared, errors=0)


def test_engine_names_are_validated():
    with pytest.raises(ValueError, match=r"^Engine must be one of 'embedding', 'lookup', "
                                         r"'update', not 'pool'$"):
        emb_checks(engine="pool")
