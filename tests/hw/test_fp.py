# amaranth: UnusedElaboratable=no
"""The binary32 units in Amaranth's simulator against NumPy float32 (via tb.fp.vectors).

Every simulation streams its operations back to back, one per cycle, and checks that each
result appears exactly ``latency`` cycles after its operands: that is both the latency
contract and the one-result-per-cycle throughput.
"""

import numpy as np
import pytest
from amaranth.hdl import ClockDomain, Fragment, Instance, Module, Value, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator
from amaranth.vendor import LatticePlatform

from hw.fp import ADD_OPERANDS, MUL_OPERANDS, QUIET_NAN, FPAdd, FPLanes, FPMul
from tb.fp.vectors import (
    CLASSES,
    OPS,
    directed_pairs,
    expected_results,
    is_nan,
    random_pairs,
    results_match,
)

# --- harness ---------------------------------------------------------------------------------


def stream_through(dut, payloads, valid=None):
    """Offer ``payloads[k]`` (raw bits) in cycle ``k`` with ``i.valid = valid[k]`` (default: all
    valid), sample the output every cycle, and return ``(input_cycles, output_cycles,
    results)`` for the valid beats (results as raw bits)."""
    valid = [1] * len(payloads) if valid is None else [int(beat) for beat in valid]
    input_cycles = [cycle for cycle, beat in enumerate(valid) if beat]
    output_cycles, results = [], []

    async def testbench(ctx):
        i_payload = Value.cast(dut.i.payload)
        o_payload = Value.cast(dut.o.payload)
        for cycle in range(len(payloads) + dut.latency + 1):
            if cycle < len(payloads):
                ctx.set(i_payload, payloads[cycle])
                ctx.set(dut.i.valid, valid[cycle])
            else:
                ctx.set(dut.i.valid, 0)
            # Sampled before the edge, so a combinational unit (latency 0) shows its result in
            # the cycle its operands arrive, and a unit of latency L, L cycles later.
            if ctx.get(dut.o.valid):
                output_cycles.append(cycle)
                results.append(ctx.get(o_payload))
            await ctx.tick()

    # The wrapper declares `sync` so that a purely combinational depth simulates the same way.
    top = Module()
    top.submodules.dut = dut
    top.domains.sync = ClockDomain()
    sim = Simulator(top)
    sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    sim.run()
    return input_cycles, output_cycles, results


def pack_operands(layout, a, b, sub=None):
    """Raw payload bits for each operand pair, packed with the unit's own layout."""
    fields = [{"a": int(x), "b": int(y)} for x, y in zip(a, b, strict=True)]
    if sub is not None:
        for field, s in zip(fields, sub, strict=True):
            field["sub"] = int(s)
    return [layout.const(field).as_bits() for field in fields]


def run_unit(dut, a, b, sub=None, valid=None):
    """Stream the pairs through ``dut``; check timing; return the results as uint32."""
    layout = ADD_OPERANDS if isinstance(dut, FPAdd) else MUL_OPERANDS
    payloads = pack_operands(layout, a, b, sub)
    if valid is not None:
        # Bubbles carry garbage operands that must not produce a result.
        payloads = _interleave_bubbles(payloads, valid)
    input_cycles, output_cycles, results = stream_through(dut, payloads, valid)
    assert output_cycles == [cycle + dut.latency for cycle in input_cycles]
    return np.array(results, dtype=np.uint32)


def _interleave_bubbles(payloads, valid):
    beats = iter(payloads)
    return [next(beats) if beat else 0x1_2345_6789 for beat in valid]


def assert_results(a, b, got, expected, op):
    ok = results_match(got, expected)
    if not ok.all():
        lines = [f"{x:08x} {op} {y:08x}: got {g:08x}, expected {e:08x}"
                 for x, y, g, e in zip(a[~ok], b[~ok], got[~ok], expected[~ok], strict=True)]
        pytest.fail(f"{len(lines)} of {len(a)} results differ:\n" + "\n".join(lines[:20]))
    # Beyond the contract ("is NaN"): every NaN result is the canonical quiet NaN.
    assert (got[is_nan(expected)] == QUIET_NAN).all()


def unit_for(op, **kwargs):
    return FPMul(**kwargs) if op == "mul" else FPAdd(**kwargs)


def sub_bits(op, n):
    return None if op == "mul" else np.full(n, op == "sub", dtype=np.uint32)


# --- interface and parameters ----------------------------------------------------------------


def test_signatures_are_the_published_interface():
    assert FPAdd().signature == wiring.Signature({
        "i": In(stream.Signature(ADD_OPERANDS, always_ready=True)),
        "o": Out(stream.Signature(unsigned(32), always_ready=True)),
    })
    assert FPMul().signature == wiring.Signature({
        "i": In(stream.Signature(MUL_OPERANDS, always_ready=True)),
        "o": Out(stream.Signature(unsigned(32), always_ready=True)),
    })
    line = data.ArrayLayout(32, 16)
    assert FPLanes(op="add").signature == wiring.Signature({
        "i": In(stream.Signature(data.StructLayout({"a": line, "b": line, "sub": 1}),
                                 always_ready=True)),
        "o": Out(stream.Signature(line, always_ready=True)),
    })
    assert FPLanes(op="mul", lanes=4, tag_width=3).signature == wiring.Signature({
        "i": In(stream.Signature(data.StructLayout({
            "a": data.ArrayLayout(32, 4), "b": data.ArrayLayout(32, 4), "tag": 3}),
            always_ready=True)),
        "o": Out(stream.Signature(data.StructLayout({
            "result": data.ArrayLayout(32, 4), "tag": 3}), always_ready=True)),
    })


def test_default_latency_and_cuts():
    assert FPAdd().latency == FPAdd.DEFAULT_STAGES == 7
    assert FPMul().latency == FPMul.DEFAULT_STAGES == 7
    assert FPLanes(op="add").latency == FPAdd.DEFAULT_STAGES
    assert FPLanes(op="mul", stages=3).latency == 3
    # Folded: the operands' entry register, then a cycle per later part.
    assert FPLanes(op="mul", stages=3, fold=2).latency == 5
    assert FPLanes(op="add", lanes=8, stages=2, fold=4).latency == 6
    for unit in (FPAdd, FPMul):
        for depth, cuts in enumerate(unit.CUTS):
            assert len(cuts) == depth
            assert list(cuts) == [name for name in unit.BOUNDARIES if name in cuts]
            assert depth == 0 or cuts[-1] == "output"  # results always leave a register
        assert unit(stages=3).cuts == unit.CUTS[3]


@pytest.mark.parametrize(("make", "error", "message"), [
    (lambda: FPAdd(stages="3"), TypeError,
     "Pipeline stages must be None or an integer, not '3'"),
    (lambda: FPAdd(stages=True), TypeError,
     "Pipeline stages must be None or an integer, not True"),
    (lambda: FPAdd(stages=2.0), TypeError,
     "Pipeline stages must be None or an integer, not 2.0"),
    (lambda: FPAdd(stages=8), ValueError,
     "Pipeline stages must be between 0 and 7, not 8"),
    (lambda: FPAdd(stages=-1), ValueError,
     "Pipeline stages must be between 0 and 7, not -1"),
    (lambda: FPMul(stages=8), ValueError,
     "Pipeline stages must be between 0 and 7, not 8"),
    (lambda: FPLanes(op="div"), ValueError,
     "Operation must be 'add' or 'mul', not 'div'"),
    (lambda: FPLanes(op="add", lanes=2.0), TypeError,
     "Lane count must be an integer, not 2.0"),
    (lambda: FPLanes(op="add", lanes=0), ValueError,
     "Lane count must be at least 1, not 0"),
    (lambda: FPLanes(op="mul", stages=9), ValueError,
     "Pipeline stages must be between 0 and 7, not 9"),
    (lambda: FPLanes(op="add", tag_width="8"), TypeError,
     "Tag width must be an integer, not '8'"),
    (lambda: FPLanes(op="add", tag_width=-1), ValueError,
     "Tag width must be at least 0, not -1"),
    (lambda: FPLanes(op="add", fold=2.0), TypeError,
     "Lane fold must be an integer, not 2.0"),
    (lambda: FPLanes(op="add", fold=True), TypeError,
     "Lane fold must be an integer, not True"),
    (lambda: FPLanes(op="add", fold=0), ValueError,
     "Lane fold must be a positive divisor of the lane count 16, not 0"),
    (lambda: FPLanes(op="mul", lanes=6, fold=4), ValueError,
     "Lane fold must be a positive divisor of the lane count 6, not 4"),
    (lambda: FPMul(dsp="xilinx"), ValueError,
     "DSP mapping must be None, 'ecp5' or 'generic', not 'xilinx'"),
    (lambda: FPMul(dsp="ECP5"), ValueError,
     "DSP mapping must be None, 'ecp5' or 'generic', not 'ECP5'"),
    (lambda: FPMul(dsp=""), ValueError,
     "DSP mapping must be None, 'ecp5' or 'generic', not ''"),
    (lambda: FPMul(dsp=1), TypeError,
     "DSP mapping must be None or a string, not 1"),
    (lambda: FPMul(dsp=True), TypeError,
     "DSP mapping must be None or a string, not True"),
    (lambda: FPLanes(op="mul", dsp="ice40"), ValueError,
     "DSP mapping must be None, 'ecp5' or 'generic', not 'ice40'"),
    (lambda: FPLanes(op="mul", dsp=b"ecp5"), TypeError,
     "DSP mapping must be None or a string, not b'ecp5'"),
    (lambda: FPLanes(op="add", dsp="ecp5"), ValueError,
     "DSP mapping applies only to op='mul', not 'add'"),
    (lambda: FPLanes(op="add", dsp="generic"), ValueError,
     "DSP mapping applies only to op='mul', not 'add'"),
])
def test_constructor_errors(make, error, message):
    with pytest.raises(error) as info:
        make()
    assert str(info.value) == message


def test_parameters_are_keyword_only():
    with pytest.raises(TypeError):
        FPAdd(3)
    with pytest.raises(TypeError):
        FPMul(3)
    with pytest.raises(TypeError):
        FPMul(None, "ecp5")
    with pytest.raises(TypeError):
        FPLanes("add")


# --- DSP mapping of the multiplier -----------------------------------------------------------


class _ECP5(LatticePlatform):
    device, package, speed = "LFE5U-25F", "BG256", "6"
    resources, connectors = [], []


class _MachXO2(LatticePlatform):
    device, package, speed = "LCMXO2-1200HC", "TG144", "4"
    resources, connectors = [], []


def dsp_cells(dut, platform=None):
    """The MULT18X18D instances of ``dut`` elaborated for ``platform``, as
    ``(input registered, output registered)`` pairs."""
    cells = []

    def walk(fragment):
        if isinstance(fragment, Instance):
            if fragment.type == "MULT18X18D":
                parameters = fragment.parameters
                assert parameters["REG_INPUTA_CLK"] == parameters["REG_INPUTB_CLK"]
                assert parameters["REG_PIPELINE_CLK"] == "NONE"
                cells.append((parameters["REG_INPUTA_CLK"] == "CLK0",
                              parameters["REG_OUTPUT_CLK"] == "CLK0"))
            return
        for subfragment, _name, _src_loc in fragment.subfragments:
            walk(subfragment)

    walk(Fragment.get(dut, platform))
    return cells


def test_dsp_defaults_to_automatic():
    assert FPMul().dsp is None
    assert FPLanes(op="mul").dsp is None
    assert FPLanes(op="add").dsp is None
    assert FPLanes(op="mul", dsp="ecp5").dsp == "ecp5"
    assert FPMul(dsp="generic").dsp == "generic"


@pytest.mark.parametrize(("dsp", "platform", "expected"), [
    (None, None, "generic"),          # simulation and platform-less Verilog: plain `*`
    (None, _ECP5(), "ecp5"),
    (None, _MachXO2(), "generic"),    # a Lattice platform, but not ECP5
    ("generic", _ECP5(), "generic"),
    ("ecp5", None, "ecp5"),
])
def test_dsp_mapping_by_platform(dsp, platform, expected):
    dut = FPMul(dsp=dsp)
    assert dut.dsp_for(platform) == expected
    assert len(dsp_cells(dut, platform)) == (4 if expected == "ecp5" else 0)


@pytest.mark.parametrize("stages", range(8))
def test_dsp_registers_replace_the_cut_registers(stages):
    # Both mappings have the same latency and cuts; the DSP blocks' own input registers stand
    # for the `prenormalize` cut and their output registers for the `multiply` cut.
    ecp5, generic = FPMul(stages=stages, dsp="ecp5"), FPMul(stages=stages, dsp="generic")
    assert ecp5.latency == generic.latency == stages
    assert ecp5.cuts == generic.cuts == FPMul.CUTS[stages]
    cuts = FPMul.CUTS[stages]
    assert dsp_cells(ecp5) == [("prenormalize" in cuts, "multiply" in cuts)] * 4
    assert dsp_cells(generic) == []


def test_lanes_pass_the_dsp_mapping_on():
    assert len(dsp_cells(FPLanes(op="mul", lanes=3, dsp="ecp5"))) == 12
    assert len(dsp_cells(FPLanes(op="mul", lanes=3), _ECP5())) == 12
    assert dsp_cells(FPLanes(op="mul", lanes=3)) == []   # what the engines simulate
    assert dsp_cells(FPLanes(op="mul", lanes=3, dsp="generic"), _ECP5()) == []
    assert FPLanes(op="mul", lanes=3, stages=4, dsp="ecp5").latency == 4


# --- arithmetic at the default depth ---------------------------------------------------------


@pytest.mark.parametrize("op", OPS)
def test_directed(op):
    a, b, expected = directed_pairs(op)
    got = run_unit(unit_for(op), a, b, sub_bits(op, len(a)))
    assert_results(a, b, got, expected, op)


@pytest.mark.parametrize("op", OPS)
def test_random(op):
    a, b, expected = random_pairs(10_000, seed=2024, op=op)
    got = run_unit(unit_for(op), a, b, sub_bits(op, len(a)))
    assert_results(a, b, got, expected, op)


def test_add_and_sub_interleaved():
    # The sub bit travels with its operands: alternate it every cycle.
    a, b, _ = random_pairs(600, seed=7, op="add")
    sub = np.arange(len(a), dtype=np.uint32) % 2
    expected = np.where(sub == 1, expected_results(a, b, "sub"), expected_results(a, b, "add"))
    got = run_unit(FPAdd(), a, b, sub)
    assert_results(a, b, got, expected, "add/sub")


def test_signed_zeros_and_cancellation():
    # Spelled out because the sign rules are easy to get subtly wrong.
    pos, neg, one = 0x0000_0000, 0x8000_0000, 0x3F80_0000
    cases = [  # (a, b, sub, expected)
        (one, one | neg, 0, pos),    # x + (-x) = +0
        (one, one, 1, pos),          # x - x = +0
        (neg, neg, 0, neg),          # -0 + -0 = -0
        (neg, pos, 1, neg),          # -0 - +0 = -0
        (pos, neg, 0, pos),          # +0 + -0 = +0
        (neg, pos, 0, pos),          # -0 + +0 = +0
        (pos, pos, 1, pos),          # +0 - +0 = +0
        (neg, neg, 1, pos),          # -0 - -0 = +0
        (0x0000_0001, 0x8000_0001, 0, pos),  # smallest subnormals cancel to +0
    ]
    a, b, sub, expected = (np.array(column, dtype=np.uint32) for column in zip(*cases,
                                                                               strict=True))
    got = run_unit(FPAdd(), a, b, sub)
    assert list(got) == list(expected)
    # Products of zeros take the XOR of the signs.
    got = run_unit(FPMul(), np.array([pos, neg, neg, pos], dtype=np.uint32),
                   np.array([neg, neg, one, one | neg], dtype=np.uint32))
    assert list(got) == [neg, pos, neg, neg]


@pytest.mark.parametrize("stages", [0, 1, 3, 7])
def test_subnormal_operand_at_every_leading_zero_count(stages):
    # The normalizing shift is split into a multiple of 8 (classify) and the rest
    # (prenormalize): walk the leading one of a subnormal operand through every position,
    # with fractions below it all zero, all one and random, against normals of both orders.
    rng = np.random.default_rng(23)
    subnormals = []
    for position in range(23):
        top = 1 << position
        subnormals += [top, top | (top - 1), top | (int(rng.integers(0, 1 << 23)) & (top - 1))]
    normals = [0x3F80_0000, 0x3FFF_FFFF, 0x5A12_3456, 0x7F7F_FFFF, 0x4B80_0001, 0x0080_0000]
    pairs = [(x | sign, y) for x in subnormals for y in normals for sign in (0, 0x8000_0000)]
    pairs += [(y, x) for x, y in pairs]
    a, b = (np.array(column, dtype=np.uint32) for column in zip(*pairs, strict=True))
    got = run_unit(FPMul(stages=stages), a, b)
    assert_results(a, b, got, expected_results(a, b, "mul"), "mul")


# --- every depth -----------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["add", "mul"])
@pytest.mark.parametrize("stages", range(8))
def test_every_depth(op, stages):
    # Random pairs plus a slice of the directed set, with bubbles between some operations;
    # run_unit checks that each result leaves exactly `latency` cycles after its operands.
    rng = np.random.default_rng(stages)
    directed = directed_pairs(op)
    pick = rng.choice(len(directed[0]), 150, replace=False)
    randoms = random_pairs(150, seed=stages, op=op)
    a = np.concatenate([directed[0][pick], randoms[0]])
    b = np.concatenate([directed[1][pick], randoms[1]])
    sub = None if op == "mul" else rng.integers(0, 2, len(a)).astype(np.uint32)
    expected = expected_results(a, b, "mul") if op == "mul" else np.where(
        sub == 1, expected_results(a, b, "sub"), expected_results(a, b, "add"))
    bubbles = 60
    valid = np.ones(len(a) + bubbles, dtype=int)
    valid[rng.choice(len(valid), bubbles, replace=False)] = 0
    dut = unit_for(op, stages=stages)
    assert dut.latency == stages
    got = run_unit(dut, a, b, sub, valid=valid)
    assert_results(a, b, got, expected, op)


# --- lanes -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("op", "lanes", "stages", "tag_width", "fold"), [
    ("add", 3, None, 5, 1),
    ("mul", 2, None, 0, 1),
    ("add", 16, 2, 0, 1),
    ("add", 16, 2, 3, 2),
    ("mul", 16, 5, 0, 2),
    ("mul", 6, 0, 2, 3),
    ("add", 4, 1, 0, 4),
])
def test_lanes(op, lanes, stages, tag_width, fold):
    dut = FPLanes(op=op, lanes=lanes, stages=stages, tag_width=tag_width, fold=fold)
    assert dut.units == lanes // fold and dut.issue_interval == fold
    count = 40
    a, b, _ = random_pairs(count * lanes, seed=lanes, op="mul" if op == "mul" else "add")
    a, b = a.reshape(count, lanes), b.reshape(count, lanes)
    sub = np.arange(count) % 2
    tags = np.arange(count) % (1 << tag_width) if tag_width else None
    if op == "mul":
        expected = expected_results(a, b, "mul")
    else:
        expected = np.where((sub == 1)[:, None], expected_results(a, b, "sub"),
                            expected_results(a, b, "add"))
    in_layout = dut.i.payload.shape()
    payloads = []
    for row in range(count):
        fields = {"a": [int(x) for x in a[row]], "b": [int(x) for x in b[row]]}
        if op == "add":
            fields["sub"] = int(sub[row])
        if tag_width:
            fields["tag"] = int(tags[row])
        payloads.append(in_layout.const(fields).as_bits())
    # Folded lanes take a line at most every `fold` cycles: seeded gaps of at least
    # fold - 1 cycles, whose operands are garbage that must not reach a result.
    gaps = np.random.default_rng(fold).integers(fold - 1, fold + 2, size=count)
    valid = []
    for gap in gaps:
        valid += [1] + [0] * int(gap)
    payloads = _interleave_bubbles(payloads, valid)
    input_cycles, output_cycles, results = stream_through(dut, payloads, valid)
    assert output_cycles == [cycle + dut.latency for cycle in input_cycles]
    out_layout = dut.o.payload.shape()
    got = np.zeros((count, lanes), dtype=np.uint32)
    for row, bits in enumerate(results):
        beat = out_layout.from_bits(bits)
        values = beat.result if tag_width else beat
        got[row] = [values[lane] for lane in range(lanes)]
        if tag_width:
            assert beat.tag == tags[row]
    assert_results(a.ravel(), b.ravel(), got.ravel(), expected.ravel(), op)


# --- the vector generators themselves --------------------------------------------------------


def test_results_match_treats_every_nan_alike_and_nothing_else():
    nans = np.array([0x7FC0_0000, 0xFFC0_0000, 0x7F80_0001, 0xFFFF_FFFF], dtype=np.uint32)
    assert results_match(nans, nans[::-1]).all()
    assert not results_match(np.uint32(0x0000_0000), np.uint32(0x8000_0000))  # signed zeros
    assert not results_match(np.uint32(0x7F80_0000), np.uint32(0x7FC0_0000))  # inf vs NaN
    assert not results_match(np.uint32(0x3F80_0000), np.uint32(0x3F80_0001))


@pytest.mark.parametrize("op", OPS)
def test_directed_pairs_cover_every_class_pair(op):
    a, b, expected = directed_pairs(op)
    values = [value for members in CLASSES.values() for value in members]
    values += [value | 0x8000_0000 for value in values]
    pairs = set(zip(a.tolist(), b.tolist(), strict=True))
    assert all((x, y) in pairs for x in values for y in values)
    assert (results_match(expected, expected_results(a, b, op))).all()


@pytest.mark.parametrize("op", OPS)
def test_random_pairs_are_seeded_and_mixed(op):
    a1, b1, e1 = random_pairs(4000, seed=1, op=op)
    a2, b2, _ = random_pairs(4000, seed=1, op=op)
    a3, _, _ = random_pairs(4000, seed=2, op=op)
    assert (a1 == a2).all() and (b1 == b2).all()
    assert (a1 != a3).any()
    exponent_a, exponent_b = (a1 >> 23) & 0xFF, (b1 >> 23) & 0xFF
    assert np.mean(np.abs(exponent_a.astype(int) - exponent_b.astype(int)) <= 2) > 0.25
    assert np.mean((exponent_a == 0) | (exponent_b == 0)) > 0.1  # subnormal operands
    assert np.mean(((e1 >> 23) & 0xFF) == 0) > 0.02                # subnormal results
    with pytest.raises(ValueError, match="Operation must be one of 'add', 'sub', 'mul'"):
        random_pairs(1, seed=0, op="div")
