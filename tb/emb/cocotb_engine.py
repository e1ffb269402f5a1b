"""cocotb tests of the EmbeddingEngine top: command dispatch and the AXI port changing hands
between LOOKUP and UPDATE (each engine's own behaviour is tested in its own module)."""

import cocotb
import numpy as np

from hw.emb.layouts import ErrorCode, Opcode, PoolingMode
from sim.rtl import sidecar_from_env
from sw_model import sparse_sgd_update
from tb.common import draw_until
from tb.emb.harness import Bench, LookupCase, golden, random_case, same_bits


@cocotb.test()
async def nop_and_unknown_opcodes(dut):
    bench = Bench(dut, stream=20)
    await bench.start()
    # SNAPSHOT and RECOVER belong to the checkpoint engine in front of this one.
    for opcode, error in ((Opcode.NOP, ErrorCode.NONE), (Opcode.SNAPSHOT, ErrorCode.BAD_OPCODE),
                          (Opcode.RECOVER, ErrorCode.BAD_OPCODE), (15, ErrorCode.BAD_OPCODE)):
        status = await bench.driver.command(opcode=opcode, batch=77)
        assert status["batch"] == 77, status
        assert status["opcode"] == opcode, status
        assert status["error"] == error, status


@cocotb.test()
async def lookup_update_lookup(dut):
    """LOOKUP, then UPDATE of the same batch, then LOOKUP again on the updated tables."""
    bench = Bench(dut, busy=0.2, stream=21)
    await bench.start()
    properties = sidecar_from_env()["properties"]
    capacity = bench.params.get("max_unique_rows", 64)
    case = draw_until(
        lambda: random_case(bench.rng, max_tables=2, dims=(16, 32), max_bags=5, max_bag=6,
                            max_rows=10, modes=[PoolingMode.SUM]),
        lambda case: case.indices.size > 0, "has a bag that is not empty")
    before = bench.driver.counters()
    placement = await bench.lookup_and_compare(case, "first lookup")

    gradient = bench.rng.standard_normal((case.bags, case.row_floats)).astype(np.float32)
    lr = np.float32(0.125)
    dut.lr.value = int(lr.view(np.uint32))
    bench.memory.write(placement.output, gradient.tobytes())
    fields = bench.command_fields(case, placement)
    fields["opcode"] = Opcode.UPDATE
    status = await bench.driver.command(**fields)
    if not properties.get("has_update", False):
        assert status["error"] == ErrorCode.BAD_OPCODE, status
        return
    assert status["error"] == ErrorCode.NONE, status
    expected = sparse_sgd_update(case.tables, gradient, case.indices.astype(np.int64),
                                 case.offsets.astype(np.int64), "sum", float(lr),
                                 max_unique_rows=capacity).tables
    for t, (table, base) in enumerate(zip(expected, placement.table_base, strict=True)):
        raw = bench.memory.read(base, table.nbytes)
        got = np.frombuffer(raw, dtype=np.float32).reshape(table.shape)
        assert same_bits(got, table).all(), f"table {t} after UPDATE differs"

    updated = LookupCase(expected, case.modes, case.bags, case.indices, case.offsets,
                         case.weights)
    status, placement = await bench.issue(updated, placement)
    assert status["error"] == ErrorCode.NONE, status
    assert same_bits(bench.output(updated, placement), golden(updated)).all()
    after = bench.driver.counters()
    # Two lookups gather every index once each; the update reads its distinct rows too.
    assert after["rows_read"] - before["rows_read"] > 2 * case.indices.size
    assert after["bytes_written"] - before["bytes_written"] >= 2 * placement.output_bytes
