# amaranth: UnusedElaboratable=no
"""The HDM decoder block and its divide-by-3 in Amaranth's simulator, against sw_model.hdm.

Addresses stream in one per cycle; every result must appear exactly ``latency`` cycles later
and agree with the software mirror on hit, target, decoder, position and DPA.
"""

import random

import pytest
from amaranth.hdl import Value
from amaranth.sim import Simulator
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hw.cxl.divide import DivideBy3
from hw.cxl.hdm import HDM_DECODER, HDM_RESULT, HdmDecoder, decoder_fields
from sw_model.hdm import GRANULE, HPA_LIMIT, Decoder, HdmDecoderSet

# --- harness ---------------------------------------------------------------------------------


def run_stream(dut, inputs, *, before=None):
    """Offer ``inputs`` one per cycle on ``dut.i``/``dut.request``, return the output payloads
    (raw bits), checking that each appears exactly ``dut.latency`` cycles after its input."""
    port_in = dut.request if hasattr(dut, "request") else dut.i
    port_out = dut.result if hasattr(dut, "result") else dut.o
    outputs = []

    async def testbench(ctx):
        if before is not None:
            await before(ctx)
        out_payload = Value.cast(port_out.payload)
        for cycle in range(len(inputs) + dut.latency + 1):
            if cycle < len(inputs):
                ctx.set(port_in.payload, inputs[cycle])
                ctx.set(port_in.valid, 1)
            else:
                ctx.set(port_in.valid, 0)
            if ctx.get(port_out.valid):
                assert cycle - dut.latency == len(outputs), "result not `latency` cycles late"
                outputs.append(ctx.get(out_payload))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    sim.run()
    assert len(outputs) == len(inputs)
    return outputs


def decode_rtl(decoders, hpas, *, enable=True, raw_config=None, stage_bits=12):
    """Results of the RTL for ``hpas`` under ``decoders`` (sw_model objects, or raw field dicts
    in ``raw_config``), as HDM_RESULT constants."""
    config = raw_config if raw_config is not None else [decoder_fields(d) for d in decoders]
    dut = HdmDecoder(num_decoders=len(config), divider_stage_bits=stage_bits)

    async def configure(ctx):
        ctx.set(dut.enable, int(enable))
        for index, fields in enumerate(config):
            ctx.set(dut.decoders[index], HDM_DECODER.const(fields))
        await ctx.tick().repeat(dut.config_latency + 1)

    return [HDM_RESULT.from_bits(bits) for bits in run_stream(dut, hpas, before=configure)]


def check_against_model(decoders, hpas, *, enable=True, stage_bits=12):
    model = HdmDecoderSet(decoders, enable=enable)
    for hpa, got in zip(hpas, decode_rtl(decoders, hpas, enable=enable, stage_bits=stage_bits),
                        strict=True):
        want = model.forward(hpa)
        where = f"HPA {hpa:#x}: RTL {got}, model {want}"
        assert bool(got.hit) == want.hit, where
        if want.hit:
            assert got.decoder == want.decoder, where
            assert got.position == want.position, where
            assert bool(got.target) == want.target, where
            if want.target:
                assert got.dpa == want.dpa, where


def addresses(decoders, count, seed):
    """HPAs inside the windows (uniform, at granule edges, first/last byte) and outside."""
    draw = random.Random(seed)
    picks = []
    for d in decoders:
        if d.size:
            picks += [d.base, d.base + d.size - 1, d.base + d.size, max(d.base - 1, 0)]
    while len(picks) < count:
        d = draw.choice(decoders)
        kind = draw.random()
        if kind < 0.6 and d.size:
            picks.append(d.base + draw.randrange(d.size))
        elif kind < 0.8 and d.size:
            granule = draw.randrange(max(1, d.size // d.granularity))
            edge = granule * d.granularity + draw.choice([0, 63, 64, -1])
            picks.append(d.base + edge % d.size)
        else:
            picks.append(draw.randrange(HPA_LIMIT))
    return [hpa % HPA_LIMIT for hpa in picks[:count]]


# --- DivideBy3 -------------------------------------------------------------------------------


def test_divide_by_3_exhaustive_10_bits():
    values = list(range(1 << 10))
    for value, bits in zip(values, run_stream(DivideBy3(width=10, stage_bits=3), values),
                           strict=True):
        assert bits & ((1 << 10) - 1) == value // 3
        assert bits >> 10 == value % 3


@pytest.mark.parametrize("stage_bits", [1, 11, 44])
def test_divide_by_3_random_44_bits(stage_bits):
    draw = random.Random(stage_bits)
    values = [(1 << 44) - 1, 0, 1, 2, 3] + [draw.randrange(1 << 44) for _ in range(300)]
    dut = DivideBy3(width=44, stage_bits=stage_bits)
    assert dut.latency == -(-44 // stage_bits)
    for value, bits in zip(values, run_stream(dut, values), strict=True):
        assert (bits & ((1 << 44) - 1), bits >> 44) == divmod(value, 3)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"width": 0}, r"^Width must be an integer in 1\.\.128, not 0$"),
    ({"width": 8, "stage_bits": 0}, r"^Bits per stage must be a positive integer, not 0$"),
])
def test_divide_by_3_parameter_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DivideBy3(**kwargs)


# --- HdmDecoder against the model ------------------------------------------------------------

BASE = 0x10_0000_0000  # 64 GiB


@pytest.mark.parametrize("ways", [1, 2, 4, 8, 16, 3, 6, 12])
def test_single_decoder_every_way_count(ways):
    granularity = 256 << (ways % 7)  # a different granularity per case, 256 B .. 16 KiB
    decoder = Decoder.make(base=BASE, size=2 * ways * GRANULE, ways=ways,
                           granularity=granularity, position=ways - 1, skip=GRANULE)
    check_against_model([decoder], addresses([decoder], 300, ways))


def test_multiple_decoders_with_skip():
    decoders = [
        Decoder.make(base=BASE, size=6 * GRANULE, ways=3, granularity=512, position=1,
                     skip=2 * GRANULE),
        Decoder.make(base=BASE + 8 * GRANULE, size=4 * GRANULE, ways=2, granularity=4096,
                     position=0, skip=GRANULE),
        Decoder.make(base=BASE + 64 * GRANULE, size=GRANULE, ways=1),
        Decoder.make(base=BASE + 96 * GRANULE, size=12 * GRANULE, ways=12, granularity=16384,
                     position=11, skip=3 * GRANULE),
    ]
    check_against_model(decoders, addresses(decoders, 600, 4))


def test_an_uncommitted_decoder_stops_the_search():
    decoders = [
        Decoder.make(base=BASE, size=GRANULE),
        Decoder.make(base=BASE + GRANULE, size=GRANULE, committed=False),
        Decoder.make(base=BASE + 2 * GRANULE, size=GRANULE),
    ]
    hpas = addresses(decoders, 100, 5)
    check_against_model(decoders, hpas)
    assert not any(r.hit for r in decode_rtl(decoders, [BASE + GRANULE, BASE + 2 * GRANULE]))


def test_global_enable_off_decodes_nothing():
    decoders = [Decoder.make(base=BASE, size=2 * GRANULE, ways=2)]
    assert not any(r.hit for r in decode_rtl(decoders, addresses(decoders, 40, 6), enable=False))
    check_against_model(decoders, addresses(decoders, 40, 6), enable=False)


def test_the_divider_pipeline_depth_does_not_change_results():
    decoders = [Decoder.make(base=BASE, size=6 * GRANULE, ways=6, granularity=1024, position=4)]
    for stage_bits in (1, 44):
        check_against_model(decoders, addresses(decoders, 120, stage_bits),
                            stage_bits=stage_bits)


GOOD = {"base": BASE >> 28, "size": 3, "skip": 0, "ig": 0, "iw": 8, "position": 0,
        "committed": 1}


@pytest.mark.parametrize("bad", [
    {"ig": 7},                          # granularity above 16 KiB
    {"iw": 5}, {"iw": 7}, {"iw": 11},   # reserved ways encodings
    {"position": 3},                    # not below 3 ways
    {"size": 4},                        # 1 GiB is not a multiple of 3 x 256 MiB
    {"iw": 1, "size": 3},               # nor of 2 x 256 MiB
    {"base": (1 << 24) - 1, "size": 3},  # window ends above 2**52
])
def test_inconsistent_registers_never_decode_nor_let_later_decoders_decode(bad):
    later = decoder_fields(Decoder.make(base=BASE + 16 * GRANULE, size=GRANULE))
    raw = [{**GOOD, **bad}, later]
    results = decode_rtl(None, [(GOOD["base"] << 28) + 0x1000, BASE + 16 * GRANULE + 64],
                         raw_config=raw)
    assert [r.hit for r in results] == [0, 0]


def test_the_same_registers_decode_when_consistent():
    results = decode_rtl(None, [(GOOD["base"] << 28) + 0xF00], raw_config=[GOOD])  # granule 15
    assert results[0].hit and results[0].target


@st.composite
def decoder_sets(draw):
    decoders, base = [], draw(st.integers(0, 1 << 10)) * GRANULE
    for _ in range(draw(st.integers(1, 3))):
        ways = draw(st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16]))
        size = ways * GRANULE * draw(st.integers(0, 3))
        decoders.append(Decoder.make(
            base=base, size=size, ways=ways, granularity=256 << draw(st.integers(0, 6)),
            position=draw(st.integers(0, ways - 1)), skip=GRANULE * draw(st.integers(0, 2))))
        base += size + GRANULE * draw(st.integers(0, 2))
    return decoders


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(decoders=decoder_sets(), seed=st.integers(0, 2**32 - 1))
def test_random_decoder_sets_match_the_model(decoders, seed):
    check_against_model(decoders, addresses(decoders, 60, seed))


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"num_decoders": 0}, r"^Decoder count must be an integer in 1\.\.10, not 0$"),
    ({"num_decoders": 11}, r"^Decoder count must be an integer in 1\.\.10, not 11$"),
    ({"num_decoders": "2"}, r"^Decoder count must be an integer in 1\.\.10, not '2'$"),
    ({"divider_stage_bits": 0},
     r"^Divider bits per stage must be a positive integer, not 0$"),
])
def test_hdm_decoder_parameter_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        HdmDecoder(**kwargs)


def test_latency_properties():
    dut = HdmDecoder(num_decoders=3, divider_stage_bits=11)
    assert dut.divider_latency == 4
    assert dut.latency == 7
    assert dut.config_latency == 3 + 3 + 1
