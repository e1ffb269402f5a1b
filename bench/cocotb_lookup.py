"""cocotb side of the lookup benchmark: load memory, run one LOOKUP per (dim, latency), read
the engine's own cycle counter, check the pooled output bit for bit.

Python touches the design only per command (and for backdoor loads), so the measured runs go at
Verilator speed. The specification comes from ``$BENCH_SPEC`` (JSON) and the results go to
``$BENCH_RESULT``.
"""

import json
import os

import cocotb
import numpy as np
from cocotb.triggers import ReadOnly, RisingEdge

from hw.emb.layouts import LINE_BYTES, ErrorCode, Opcode, PoolingMode
from sim.rtl import design_from_env
from tb.common import reset, start_clock
from tb.emb.cases import LookupCase, golden, same_bits
from tb.emb.harness import LookupDriver


async def backdoor_write(dut, first_line, payload: bytes):
    payload += bytes(-len(payload) % LINE_BYTES)
    dut.backdoor_we.value = 1
    for k in range(len(payload) // LINE_BYTES):
        dut.backdoor_addr.value = first_line + k
        dut.backdoor_wdata.value = int.from_bytes(payload[k * 64:(k + 1) * 64], "little")
        await RisingEdge(dut.clk)
    dut.backdoor_we.value = 0


async def backdoor_read(dut, first_line, lines) -> bytes:
    chunks = []
    for k in range(lines):
        dut.backdoor_addr.value = first_line + k
        await RisingEdge(dut.clk)
        await ReadOnly()
        chunks.append(dut.backdoor_rdata.value.to_unsigned().to_bytes(64, "little"))
        await RisingEdge(dut.clk)
    return b"".join(chunks)


def make_batch(spec, dim, rng):
    """``tables`` tables of ``rows`` x ``dim``; ``bags`` bags of exactly ``bag_length``
    uniform random rows each (duplicates allowed), all SUM."""
    tables, bags, length, rows = spec["tables"], spec["bags"], spec["bag_length"], spec["rows"]
    indices = rng.integers(0, rows, tables * bags * length).astype(np.uint32)
    offsets = (np.arange(tables * bags + 1) * length).astype(np.uint32)
    return indices, offsets


@cocotb.test()
async def measure(dut):
    spec = json.loads(open(os.environ["BENCH_SPEC"]).read())
    params = design_from_env().params
    start_clock(dut)
    dut.backdoor_we.value = 0
    dut.read_latency.value = spec["latencies"][0]
    await reset(dut)
    driver = LookupDriver(dut, addr_width=params.get("addr_width", 48),
                          max_tables=params["max_tables"], num_regions=params["num_regions"])
    size = params["memory_lines"] * LINE_BYTES
    driver.set_regions([{"base": 0, "size": size, "enable": 1}])
    rng = np.random.default_rng(spec["seed"])

    # Table memory: one random image, viewed as tables of each dim in turn.
    max_dim = max(spec["dims"])
    table_bytes = spec["rows"] * max_dim * 4
    image = rng.standard_normal(spec["tables"] * table_bytes // 4).astype(np.float32)
    await backdoor_write(dut, 0, image.tobytes())
    buffers = spec["tables"] * table_bytes
    results = []
    for dim in spec["dims"]:
        indices, offsets = make_batch(spec, dim, rng)
        index_at, offset_at = buffers, buffers + -(-indices.nbytes // 64) * 64
        output_at = offset_at + -(-offsets.nbytes // 64) * 64
        await backdoor_write(dut, index_at // 64, indices.tobytes())
        await backdoor_write(dut, offset_at // 64, offsets.tobytes())
        tables = [image[t * table_bytes // 4:(t + 1) * table_bytes // 4][:spec["rows"] * dim]
                  .reshape(spec["rows"], dim) for t in range(spec["tables"])]
        case = LookupCase(tables, [PoolingMode.SUM] * spec["tables"], spec["bags"], indices,
                          offsets, None)
        expected = golden(case)
        driver.set_tables([{"base": t * table_bytes, "rows": spec["rows"], "dim": dim,
                            "mode": PoolingMode.SUM} for t in range(spec["tables"])])
        for latency in spec["latencies"]:
            dut.read_latency.value = latency
            await RisingEdge(dut.clk)
            before = driver.counters()
            status = await driver.command(
                opcode=Opcode.LOOKUP, batch=len(results), bags=spec["bags"],
                tables=spec["tables"], num_indices=indices.size, indices=index_at,
                offsets=offset_at, weights=0, output=output_at)
            after = driver.counters()
            assert status["error"] == ErrorCode.NONE, status
            raw = await backdoor_read(dut, output_at // 64, expected.nbytes // 64)
            got = np.frombuffer(raw, dtype=np.float32).reshape(expected.shape)
            assert same_bits(got, expected).all(), f"dim {dim} latency {latency}: wrong output"
            delta = {name: after[name] - before[name] for name in after}
            useful = case.useful_bytes
            results.append({
                "dim": dim, "read_latency": latency, "cycles": delta["busy_cycles"],
                "useful_bytes": useful, "bytes_read": delta["bytes_read"],
                "bytes_written": delta["bytes_written"], "rows_read": delta["rows_read"],
                "stall_cycles": delta["stall_cycles"],
                "efficiency": useful / delta["busy_cycles"] / LINE_BYTES,
            })
            dut._log.info("dim %d latency %d: %d cycles, efficiency %.4f", dim, latency,
                          delta["busy_cycles"], results[-1]["efficiency"])
    with open(os.environ["BENCH_RESULT"], "w") as out:
        json.dump(results, out, indent=2)
