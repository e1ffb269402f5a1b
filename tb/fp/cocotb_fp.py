"""FPLanes in Verilator against NumPy float32: the directed set, then seeded random pairs.

The number of random pairs comes from ``FP_PAIRS`` (set by tb/fp/test_fp_verilator.py); the
operation (add, sub, mul) from ``FP_OP``. Lanes are packed with the offsets of the component's
own payload layout, so the testbench cannot drift from the RTL.
"""

import os

import cocotb
import numpy as np
from cocotb.triggers import RisingEdge

from sim.rtl import design_from_env
from tb.common import reset, start_clock
from tb.fp.vectors import directed_pairs, random_pairs, results_match

BATCH_LINES = 4096  # operand lines generated and checked at a time (bounded memory)


def _field_offsets(component):
    layout = component.signature.members["i"].signature.members["payload"].shape
    return {name: field.offset for name, field in layout}


def _lines(bits: np.ndarray, lanes: int) -> list[int]:
    """Pack uint32 lane values into one integer per line: lane k at bits [32k, 32k+32)."""
    padded = np.zeros(-(-len(bits) // lanes) * lanes, dtype="<u4")
    padded[:len(bits)] = bits
    raw = padded.tobytes()
    step = 4 * lanes
    return [int.from_bytes(raw[i:i + step], "little") for i in range(0, len(raw), step)]


def _unpack(line: int, lanes: int) -> np.ndarray:
    return np.frombuffer(line.to_bytes(4 * lanes, "little"), dtype="<u4")


async def _stream(dut, component, a, b, sub):
    """Push the pairs back to back, one line per cycle; return the results in order."""
    lanes = component.lanes
    offsets = _field_offsets(component)
    a_lines, b_lines = _lines(a, lanes), _lines(b, lanes)
    results = []
    for a_line, b_line in zip(a_lines, b_lines, strict=True):
        payload = (a_line << offsets["a"]) | (b_line << offsets["b"])
        if "sub" in offsets:
            payload |= int(sub) << offsets["sub"]
        dut.i__payload.value = payload
        dut.i__valid.value = 1
        await RisingEdge(dut.clk)
        if dut.o__valid.value:
            results.append(dut.o__payload.value.to_unsigned())
    dut.i__valid.value = 0
    for _ in range(component.latency + 1):
        await RisingEdge(dut.clk)
        if dut.o__valid.value:
            results.append(dut.o__payload.value.to_unsigned())
    assert len(results) == len(a_lines), (
        f"{len(a_lines)} lines in, {len(results)} out: latency is not {component.latency}")
    return np.concatenate([_unpack(r, lanes) for r in results])[:len(a)]


def _check(op, a, b, expected, got, what):
    ok = results_match(got, expected)
    if not ok.all():
        bad = np.flatnonzero(~ok)[:8]
        lines = [f"{a[i]:08x} {op} {b[i]:08x} = {got[i]:08x}, expected {expected[i]:08x}"
                 for i in bad]
        raise AssertionError(f"{op}: {(~ok).sum()} of {len(a)} {what} results differ "
                             f"(seed {cocotb.RANDOM_SEED}):\n" + "\n".join(lines))


@cocotb.test()
async def directed_and_random(dut):
    component = design_from_env().elaboratable()
    op = os.environ["FP_OP"]
    pairs = int(os.environ["FP_PAIRS"])
    start_clock(dut)
    await reset(dut)
    sub = op == "sub"

    a, b, expected = directed_pairs(op)
    _check(op, a, b, expected, await _stream(dut, component, a, b, sub), "directed")
    dut._log.info("%s: %d directed pairs bit-exact", op, len(a))

    chunk = BATCH_LINES * component.lanes
    for start in range(0, pairs, chunk):
        a, b, expected = random_pairs(min(chunk, pairs - start), cocotb.RANDOM_SEED + start, op)
        _check(op, a, b, expected, await _stream(dut, component, a, b, sub), "random")
    dut._log.info("%s: %d seeded random pairs bit-exact", op, pairs)
