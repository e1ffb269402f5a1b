# amaranth: UnusedElaboratable=no
"""The update engine as a whole: constructor checks, derived figures, and small commands in
Amaranth's simulator at parameter corners the Verilator testbench (``tb/emb``) does not build:
capacity 1 (a chunk per distinct row), combinational and short FP pipelines (other
accumulation hazard windows), narrow addresses."""

import numpy as np
import pytest

from hw.emb.layouts import ErrorCode, PoolingMode
from hw.emb.update import UpdateEngine
from hw.fp import FPAdd, FPMul
from hw.mem.axi import AXI4Signature
from tb.emb.update_pysim import run_engine
from tb.emb.update_scenarios import (
    corrupted,
    expected_counters,
    expected_image,
    expected_status,
    random_scenario,
)

BAD_PARAMETERS = [
    ("max_tables", 0, r"Table count limit must be an integer in 1\.\.255, not 0"),
    ("max_tables", 256, r"Table count limit must be an integer in 1\.\.255, not 256"),
    ("max_tables", True, r"Table count limit must be an integer in 1\.\.255, not True"),
    ("max_dim", 0, r"Maximum dimension must be a multiple of 16 in 16\.\.65520, not 0"),
    ("max_dim", 24, r"Maximum dimension must be a multiple of 16 in 16\.\.65520, not 24"),
    ("max_dim", 65536,
     r"Maximum dimension must be a multiple of 16 in 16\.\.65520, not 65536"),
    ("max_dim", "16", r"Maximum dimension must be a multiple of 16 in 16\.\.65520, not '16'"),
    ("num_regions", 0, r"Region count must be an integer in 1\.\.64, not 0"),
    ("num_regions", 65, r"Region count must be an integer in 1\.\.64, not 65"),
    ("addr_width", 11, r"Address width must be an integer in 12\.\.64, not 11"),
    ("addr_width", 65, r"Address width must be an integer in 12\.\.64, not 65"),
    ("id_width", 0, r"ID width must be an integer in 1\.\.16, not 0"),
    ("id_width", 17, r"ID width must be an integer in 1\.\.16, not 17"),
    ("max_unique_rows", 0, r"Unique-row capacity must be an integer in 1\.\.1024, not 0"),
    ("max_unique_rows", 1025,
     r"Unique-row capacity must be an integer in 1\.\.1024, not 1025"),
    ("mul_stages", -1, rf"Multiplier stages must be None or an integer in "
                       rf"0\.\.{len(FPMul.CUTS) - 1}, not -1"),
    ("mul_stages", 2.0, rf"Multiplier stages must be None or an integer in "
                        rf"0\.\.{len(FPMul.CUTS) - 1}, not 2\.0"),
    ("add_stages", len(FPAdd.CUTS), rf"Adder stages must be None or an integer in "
                                    rf"0\.\.{len(FPAdd.CUTS) - 1}, not {len(FPAdd.CUTS)}"),
    ("outstanding_reads", 3, r"Outstanding reads must be an integer in 4\.\.256, not 3"),
    ("outstanding_reads", 257, r"Outstanding reads must be an integer in 4\.\.256, not 257"),
    ("write_buffer_lines", 0, r"Write buffer must be None or an integer in 1\.\.65536, not 0"),
    ("write_buffer_lines", 18,
     rf"Write buffer must be at least {FPMul.DEFAULT_STAGES + FPAdd.DEFAULT_STAGES + 5} lines "
     rf"\(the apply latency \+ 3\), not 18"),
    ("correction_bags", -1,
     r"Correction bag count must be None or an integer in 0\.\.4096, not -1"),
    ("correction_bags", True,
     r"Correction bag count must be None or an integer in 0\.\.4096, not True"),
    ("correction_contexts", 0, r"Correction contexts must be None or an integer in 1\.\.64 "
                               r"\(the unique-row capacity\), not 0"),
    ("correction_contexts", 65, r"Correction contexts must be None or an integer in 1\.\.64 "
                                r"\(the unique-row capacity\), not 65"),
    ("correction_queue_depth", 1,
     r"Correction queue depth must be None or an integer in 2\.\.4096, not 1"),
    ("correction_queue_depth", 4097,
     r"Correction queue depth must be None or an integer in 2\.\.4096, not 4097"),
]


@pytest.mark.parametrize(("name", "value", "message"), BAD_PARAMETERS)
def test_constructor_rejects_bad_parameters(name, value, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        UpdateEngine(**{name: value})


def test_correction_bags_need_the_relaxed_lookup():
    with pytest.raises(ValueError, match=r"^Correction bags need the relaxed lookup: without "
                                         r"it the count must be None or 0, not 4$"):
        UpdateEngine(relaxed_lookup=False, correction_bags=4)
    with pytest.raises(TypeError, match=r"^Relaxed lookup must be True or False, not 1$"):
        UpdateEngine(relaxed_lookup=1)
    assert UpdateEngine(relaxed_lookup=False, correction_bags=0).correction_bags == 0
    assert UpdateEngine(relaxed_lookup=False).correction_bags == 0
    assert UpdateEngine().correction_bags == 64


def test_correction_contexts_default_and_need_the_relaxed_lookup():
    assert UpdateEngine().correction_contexts == 4
    assert UpdateEngine(max_unique_rows=2).correction_contexts == 2
    assert UpdateEngine(relaxed_lookup=False).correction_contexts == 1
    assert UpdateEngine(relaxed_lookup=False, correction_contexts=1).correction_contexts == 1
    with pytest.raises(ValueError, match=r"^Correction contexts need the relaxed lookup: "
                                         r"without it the count must be None or 1, not 2$"):
        UpdateEngine(relaxed_lookup=False, correction_contexts=2)


def test_correction_queue_depth_default_and_needs_the_relaxed_lookup():
    assert UpdateEngine().correction_queue_depth == 16
    assert UpdateEngine(correction_queue_depth=128).correction_queue_depth == 128
    with pytest.raises(ValueError, match=r"^Correction queue depth needs the relaxed lookup: "
                                         r"without it the depth must be None, not 16$"):
        UpdateEngine(relaxed_lookup=False, correction_queue_depth=16)


def test_delta_lanes_default_and_need_the_relaxed_lookup():
    assert not UpdateEngine().delta_lanes
    assert UpdateEngine(delta_lanes=True).delta_lanes
    assert not UpdateEngine(relaxed_lookup=False, delta_lanes=False).delta_lanes
    with pytest.raises(ValueError, match=r"^Delta lanes need the relaxed lookup: without it "
                                         r"delta_lanes must be None or False, not True$"):
        UpdateEngine(relaxed_lookup=False, delta_lanes=True)
    with pytest.raises(TypeError, match=r"^Delta lanes must be None or a bool, not 1$"):
        UpdateEngine(delta_lanes=1)


def test_correction_lanes_default_and_need_the_delta_lanes():
    assert not UpdateEngine(delta_lanes=True).correction_lanes
    assert UpdateEngine(delta_lanes=True, correction_lanes=True).correction_lanes
    with pytest.raises(ValueError, match=r"^Correction lanes need the delta lanes: without them "
                                         r"correction_lanes must be None or False, not True$"):
        UpdateEngine(correction_lanes=True)
    with pytest.raises(TypeError, match=r"^Correction lanes must be None or a bool, not 1$"):
        UpdateEngine(delta_lanes=True, correction_lanes=1)


def test_fpga_pipelining_counts_the_operand_register_in_the_write_buffer():
    least = FPMul.DEFAULT_STAGES + FPAdd.DEFAULT_STAGES + 6
    UpdateEngine(fpga_pipelining=True, write_buffer_lines=least)
    with pytest.raises(ValueError, match=rf"^Write buffer must be at least {least} lines \(the "
                                         rf"apply latency \+ 3\), not {least - 1}$"):
        UpdateEngine(fpga_pipelining=True, write_buffer_lines=least - 1)


def test_fpga_pipelining_is_a_bool():
    with pytest.raises(TypeError, match=r"^FPGA pipelining must be True or False, not 1$"):
        UpdateEngine(fpga_pipelining=1)
    with pytest.raises(TypeError, match=r"^FPGA pipelining must be True or False, not None$"):
        UpdateEngine(fpga_pipelining=None)


def test_derived_figures_and_ports():
    engine = UpdateEngine(max_tables=3, max_dim=96, num_regions=2, addr_width=40, id_width=5,
                          max_unique_rows=12, mul_stages=3, add_stages=4, outstanding_reads=6)
    assert (engine.max_tables, engine.max_dim, engine.num_regions) == (3, 96, 2)
    assert (engine.addr_width, engine.id_width, engine.max_unique_rows) == (40, 5, 12)
    assert engine.lines_per_row == 6
    assert engine.gradient_buffer_lines == 72
    assert (engine.mul_latency, engine.add_latency, engine.hazard_window) == (3, 4, 5)
    assert engine.outstanding_reads == 6
    assert engine.signature.members["axi"].signature == AXI4Signature(
        addr_width=40, data_width=512, id_width=5)
    assert set(engine.signature.members) == {
        "cmd", "done", "tables", "regions", "lr", "axi", "counters", "correct",
        "correct_enable"}
    strict = UpdateEngine(relaxed_lookup=False)
    assert not strict.relaxed_lookup
    assert set(strict.signature.members) == {
        "cmd", "done", "tables", "regions", "lr", "axi", "counters"}
    defaults = UpdateEngine()
    assert defaults.relaxed_lookup
    assert (defaults.mul_latency, defaults.add_latency) == (FPMul.DEFAULT_STAGES,
                                                            FPAdd.DEFAULT_STAGES)


CORNERS = {
    "capacity 1, combinational FP": dict(
        max_tables=2, max_dim=32, num_regions=3, addr_width=24, id_width=1,
        max_unique_rows=1, mul_stages=0, add_stages=0, outstanding_reads=4),
    "capacity 2, short FP": dict(
        max_tables=2, max_dim=32, num_regions=3, addr_width=24, id_width=1,
        max_unique_rows=2, mul_stages=1, add_stages=2, outstanding_reads=4),
    "capacity 2, no relaxed lookup (the board's)": dict(
        max_tables=2, max_dim=32, num_regions=3, addr_width=24, id_width=1,
        max_unique_rows=2, mul_stages=2, add_stages=2, outstanding_reads=4,
        relaxed_lookup=False),
    "capacity 2, FPGA pipelining": dict(
        max_tables=2, max_dim=32, num_regions=3, addr_width=24, id_width=1,
        max_unique_rows=2, mul_stages=2, add_stages=2, outstanding_reads=4,
        fpga_pipelining=True),
    "capacity 2, FPGA pipelining, lanes folded by 2 (the board's)": dict(
        max_tables=2, max_dim=32, num_regions=3, addr_width=24, id_width=1,
        max_unique_rows=2, mul_stages=2, add_stages=2, outstanding_reads=4,
        relaxed_lookup=False, fpga_pipelining=True, lane_fold=2),
    "capacity 3, lanes folded by 4": dict(
        max_tables=2, max_dim=32, num_regions=3, addr_width=24, id_width=1,
        max_unique_rows=3, mul_stages=1, add_stages=0, outstanding_reads=4,
        relaxed_lookup=False, lane_fold=4),
}


def _run(params, scenarios, *, seed, busy, poisoned_reads=None):
    engine = UpdateEngine(**params)
    return run_engine(engine, scenarios, addr_width=params["addr_width"],
                      max_tables=params["max_tables"], num_regions=params["num_regions"],
                      seed=seed, busy=busy, deadline=10_000 * len(scenarios),
                      poisoned_reads=poisoned_reads)


@pytest.mark.parametrize("corner", list(CORNERS))
def test_small_commands_at_parameter_corners(corner):
    """Two tiny commands back to back: every mode, repeated rows (back-to-back accumulation
    into one line, rows re-read after their write in the previous chunk), then a bad one."""
    params = CORNERS[corner]
    draw = np.random.default_rng(list(CORNERS).index(corner))
    good = random_scenario(draw, max_tables=2, dims=(16, 32), rows=(1, 3), bags=(2, 2),
                           bag_length=(2, 4), modes=tuple(PoolingMode))
    indices = good.indices.copy()
    indices[-1] = good.tables[-1].shape[0]  # out of range: the command must change nothing
    bad = corrupted(good, indices=indices)
    runs = _run(params, [good, bad], seed=3, busy=0.4)

    capacity = params["max_unique_rows"]
    image, chunks = expected_image(good, capacity)
    assert runs[0].status.error == ErrorCode.NONE
    assert bytes(runs[0].image[:len(image)]) == bytes(image)
    counters = expected_counters(good, chunks)
    assert runs[0].counters.rows_read == counters["rows_read"]
    assert runs[0].counters.bytes_written == counters["bytes_written"]

    expected = expected_status(bad, max_tables=params["max_tables"],
                               max_dim=params["max_dim"])
    status = runs[1].status
    assert (status.error, status.table, status.bag, status.position) == (
        expected["error"], expected["table"], expected["bag"], expected["position"])
    assert bytes(runs[1].image[:len(bad.image)]) == bytes(bad.image)


@pytest.mark.parametrize("corner", ["capacity 2, short FP", "capacity 2, FPGA pipelining"])
def test_a_good_command_after_aborted_ones(corner):
    """Commands that end early, back to back: a bad index (validation), a row read and an index
    read answering SLVERR (BUS_ERROR). The next good command must start clean: no error, flag
    or half-done walk of the aborted ones carries over. (With FPGA pipelining the per-command
    reset comes a cycle after the command is accepted, in state Clear.)"""
    params = CORNERS[corner]
    draw = np.random.default_rng(11)
    good = random_scenario(draw, max_tables=2, dims=(16, 32), rows=(2, 4), bags=(2, 3),
                           bag_length=(2, 4), modes=tuple(PoolingMode))
    indices = good.indices.copy()
    indices[-1] = good.tables[-1].shape[0]
    bad = corrupted(good, indices=indices)
    first_row = good.table_bases[0] + int(good.indices[0]) * good.dims[0] * 4
    runs = _run(params, [bad, good, good, good], seed=5, busy=0.3,
                poisoned_reads=[set(), {first_row}, {good.addresses["indices"]}, set()])

    assert runs[0].status.error == expected_status(
        bad, max_tables=params["max_tables"], max_dim=params["max_dim"])["error"]
    # Refused by the validation, before any chunk's rows are written.
    assert bytes(runs[0].image) == bytes(bad.image)
    for run in runs[1:3]:
        assert (run.status.error, run.status.table, run.status.bag, run.status.position) == (
            ErrorCode.BUS_ERROR, 0, 0, 0)
    last = runs[3]
    image, chunks = expected_image(good, params["max_unique_rows"])
    assert (last.status.error, last.status.table, last.status.bag, last.status.position) == (
        ErrorCode.NONE, 0, 0, 0)
    assert bytes(last.image[:len(image)]) == bytes(image)
    counters = expected_counters(good, chunks)
    assert last.counters.rows_read - runs[2].counters.rows_read == counters["rows_read"]
    assert (last.counters.bytes_written - runs[2].counters.bytes_written ==
            counters["bytes_written"])


@pytest.mark.parametrize("busy", [0.0, 0.3])
def test_the_walks_last_occurrence_is_accumulated_before_the_apply(busy):
    """Forty empty bags keep the walker busy until everything behind it is idle; the last
    occurrence (a row of its own) then reaches the gradient fetch as the walk ends. With FPGA
    pipelining it is still in the skid buffer between them in that cycle, and the chunk must
    wait for it (a walk that counted as finished without it applied the chunk a row short)."""
    params = {**CORNERS["capacity 2, FPGA pipelining"], "max_unique_rows": 4}
    draw = np.random.default_rng(21)
    scenario = random_scenario(draw, max_tables=1, dims=(16,), rows=(8, 8), bags=(42, 42),
                               bag_length=(0, 0), modes=(PoolingMode.SUM,))
    offsets = np.array([0] + [1] * 41 + [2], dtype=np.uint32)
    scenario = corrupted(scenario, indices=np.array([5, 2], dtype=np.uint32), offsets=offsets)
    (run,) = _run(params, [scenario], seed=7, busy=busy)
    image, _ = expected_image(scenario, params["max_unique_rows"])
    assert run.status.error == ErrorCode.NONE
    assert bytes(run.image[:len(image)]) == bytes(image)


def test_indices_are_checked_a_line_per_cycle():
    """The validation checks 16 indices a cycle: the accumulation's first gradient read comes
    about 100 cycles after a command of 600 indices is accepted, where a walk of the indices
    one a cycle would have taken 600. A bad index is still named with its bag."""
    params = CORNERS["capacity 2, short FP"]
    draw = np.random.default_rng(7)
    good = random_scenario(draw, max_tables=1, dims=(16,), rows=(1, 1), bags=(2, 2),
                           bag_length=(300, 300), modes=(PoolingMode.SUM,))
    occurrences = len(good.indices)
    indices = good.indices.copy()
    indices[occurrences - 5] = 1  # the table has one row
    bad = corrupted(good, indices=indices)
    runs = _run(params, [good, bad], seed=1, busy=0.0)
    assert runs[0].status.error == ErrorCode.NONE
    image, _ = expected_image(good, params["max_unique_rows"])
    assert bytes(runs[0].image[:len(image)]) == bytes(image)
    gradient = good.addresses["output"]
    first_gradient_read = min(cycle for cycle, address in runs[0].reads if address >= gradient)
    assert first_gradient_read < occurrences // 4, first_gradient_read
    status = runs[1].status
    assert (status.error, status.table, status.bag, status.position) == (
        ErrorCode.INDEX_OUT_OF_RANGE, 0, 1, occurrences - 5)
