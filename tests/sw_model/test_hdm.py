"""sw_model.hdm: HDM decoding against hand-worked cases and a literal transcription of QEMU's
``cxl_type3_dpa()`` (power-of-two ways) and Linux's 3/6/12-way arithmetic; the inverse, round
trips, positions, the NumPy path, and the validation messages."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sw_model.hdm import (
    GRANULE,
    HPA_LIMIT,
    Decoder,
    HdmDecoderSet,
    dpa_offset,
    granularity_of,
    hpa_offset,
    iw_of,
    position_of,
    ways_of,
)

BASE = 0x10_0000_0000
ALL_WAYS = [1, 2, 4, 8, 16, 3, 6, 12]


def qemu_dpa(decoders, hpa):
    """QEMU hw/mem/cxl_type3.c cxl_type3_dpa(), transcribed (mask form), plus Linux's
    3/6/12-way branch and an explicit position check (QEMU routes by position upstream)."""
    dpa_base = 0
    for d in decoders:
        if not d.committed:
            return None
        dpa_base += d.skip
        off = hpa - d.base
        if hpa < d.base or off >= d.size:
            dpa_base += d.size // d.ways
            continue
        ig, iw = d.ig, d.iw
        if iw < 8:
            if (off >> (8 + ig)) & ((1 << iw) - 1) != d.position:
                return None
            upper_mask = ((1 << (64 - 8 - ig - iw)) - 1) << (8 + ig + iw)
            return dpa_base + (((1 << (8 + ig)) - 1) & off | ((upper_mask & off) >> iw))
        if (off >> (8 + ig)) % d.ways != d.position:
            return None
        return dpa_base + ((off & ((1 << (8 + ig)) - 1)) | (((off >> (ig + iw)) // 3) << (ig + 8)))
    return None


# --- encodings -------------------------------------------------------------------------------


def test_encodings():
    assert [ways_of(iw) for iw in (0, 1, 2, 3, 4, 8, 9, 10)] == [1, 2, 4, 8, 16, 3, 6, 12]
    assert [iw_of(w) for w in ALL_WAYS] == [0, 1, 2, 3, 4, 8, 9, 10]
    assert [granularity_of(ig) for ig in range(7)] == [256 << ig for ig in range(7)]


@pytest.mark.parametrize(("call", "message"), [
    (lambda: ways_of(5), r"^Interleave ways encoding \(IW\) must be one of 0, 1, 2, 3, 4, 8, "
                         r"9, 10, not 5$"),
    (lambda: iw_of(5), r"^Interleave ways must be one of 1, 2, 3, 4, 6, 8, 12, 16, not 5$"),
    (lambda: granularity_of(7), r"^Interleave granularity encoding \(IG\) must be in 0\.\.6, "
                                r"not 7$"),
    (lambda: Decoder(base=1, size=0), r"^Decoder base must be a multiple of 256 MiB below "
                                      r"2\*\*52, not 0x1$"),
    (lambda: Decoder(base=0, size=GRANULE, iw=8), r"^Decoder size must be a non-negative "
                                                  r"multiple of ways x 256 MiB \(3 x 256 MiB\)"),
    (lambda: Decoder(base=HPA_LIMIT - GRANULE, size=2 * GRANULE),
     r"^Decoder window 0xffffff0000000 \+ 0x20000000 ends above 2\*\*52$"),
    (lambda: Decoder(base=0, size=0, skip=5), r"^DPA skip must be a multiple of 256 MiB"),
    (lambda: Decoder(base=0, size=0, iw=1, position=2),
     r"^Position must be in 0\.\.1 for 2 ways, not 2$"),
    (lambda: Decoder.make(base=0, size=0, granularity=300),
     r"^Interleave granularity must be a power of two in 256\.\.16384 bytes, not 300$"),
])
def test_validation_messages(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_non_integer_fields_are_type_errors():
    with pytest.raises(TypeError, match=r"^Decoder size must be an integer, not 1\.5$"):
        Decoder(base=0, size=1.5)
    with pytest.raises(TypeError, match=r"^Decoders must be Decoder objects, not 3$"):
        HdmDecoderSet([3])
    with pytest.raises(ValueError, match=r"^HPA must be an integer in \[0, 2\*\*52\)"):
        HdmDecoderSet([]).forward(HPA_LIMIT)


# --- hand-worked cases -----------------------------------------------------------------------


@pytest.mark.parametrize(("ways", "granularity", "position", "offset", "dpa"), [
    (1, 256, 0, 0x12345, 0x12345),
    (2, 256, 1, 0x100, 0x000),      # granule 1 -> position 1, device granule 0
    (2, 256, 1, 0x3C0, 0x1C0),      # granule 3 -> device granule 1, byte 0xC0
    (4, 1024, 2, 0xA10, 0x210),     # granule 2 (1 KiB) -> device granule 0
    (4, 1024, 2, 0x1800, 0x400),    # granule 6 -> position 2, device granule 1
    (3, 256, 2, 0x200, 0x000),      # granule 2 -> position 2
    (3, 256, 2, 0x5FF, 0x1FF),      # granule 5 = 1*3 + 2 -> device granule 1
    (6, 256, 4, 0xA40, 0x140),      # granule 10 = 1*6 + 4 -> device granule 1
    (12, 4096, 11, 0x17000, 0x1000),  # granule 23 = 1*12 + 11 -> device granule 1
])
def test_hand_worked(ways, granularity, position, offset, dpa):
    d = Decoder.make(base=BASE, size=ways * GRANULE, ways=ways, granularity=granularity,
                     position=position)
    got = HdmDecoderSet([d]).forward(BASE + offset)
    assert got.hit and got.target
    assert got.dpa == dpa
    assert got.position == position


def test_another_position_is_a_hit_but_not_a_target():
    d = Decoder.make(base=BASE, size=3 * GRANULE, ways=3, position=0)
    got = HdmDecoderSet([d]).forward(BASE + 0x100)   # granule 1 -> position 1
    assert got.hit and not got.target and got.nxm and got.dpa is None and got.position == 1


def test_miss_skip_and_decoder_order():
    decoders = [
        Decoder.make(base=BASE, size=2 * GRANULE, ways=2, position=0, skip=GRANULE),
        Decoder.make(base=BASE + 4 * GRANULE, size=3 * GRANULE, ways=3, position=1,
                     skip=2 * GRANULE),
    ]
    hdm = HdmDecoderSet(decoders)
    assert hdm.dpa_bases == [GRANULE, GRANULE + GRANULE + 2 * GRANULE]
    assert hdm.forward(BASE - 64) == hdm.forward(BASE + 2 * GRANULE)
    assert not hdm.forward(BASE + 3 * GRANULE).hit
    assert hdm.forward(BASE).dpa == GRANULE
    assert hdm.forward(BASE + 4 * GRANULE + 0x100).dpa == 4 * GRANULE


def test_uncommitted_decoder_stops_the_walk_and_enable_gates_everything():
    decoders = [Decoder.make(base=BASE, size=GRANULE),
                Decoder.make(base=BASE + GRANULE, size=GRANULE, committed=False),
                Decoder.make(base=BASE + 2 * GRANULE, size=GRANULE)]
    hdm = HdmDecoderSet(decoders)
    assert hdm.forward(BASE).hit
    assert not hdm.forward(BASE + GRANULE).hit
    assert not hdm.forward(BASE + 2 * GRANULE).hit   # as in QEMU: the walk stops
    assert hdm.inverse(0) == BASE and hdm.inverse(GRANULE) is None
    assert not HdmDecoderSet(decoders, enable=False).forward(BASE).hit


# --- against the transcription, round trips, bijection ---------------------------------------


@pytest.mark.parametrize("ways", ALL_WAYS)
@pytest.mark.parametrize("ig", [0, 3, 6])
def test_every_line_of_a_window(ways, ig):
    """Every line of a small window: forward agrees with QEMU/Linux, each position gets exactly
    1/ways of the lines, each device's lines map one-to-one onto its DPA range, and the
    inverse returns the HPA."""
    granularity = 256 << ig
    window = ways * granularity * 4
    counts = [0] * ways
    for position in range(ways):
        d = Decoder.make(base=BASE, size=ways * GRANULE, ways=ways, granularity=granularity,
                         position=position, skip=GRANULE)
        hdm = HdmDecoderSet([d])
        seen = set()
        for hpa in range(BASE, BASE + window, 64):
            got = hdm.forward(hpa)
            assert got.dpa == qemu_dpa([d], hpa)
            if got.target:
                counts[position] += 1
                seen.add(got.dpa)
                assert hdm.inverse(got.dpa) == hpa
        assert seen == set(range(GRANULE, GRANULE + window // ways, 64))
    assert counts == [window // ways // 64] * ways


@st.composite
def decoder_sets(draw):
    decoders, base = [], draw(st.integers(0, 1 << 12)) * GRANULE
    for _ in range(draw(st.integers(1, 4))):
        ways = draw(st.sampled_from(ALL_WAYS))
        size = ways * GRANULE * draw(st.integers(0, 4))
        decoders.append(Decoder.make(
            base=base, size=size, ways=ways, granularity=256 << draw(st.integers(0, 6)),
            position=draw(st.integers(0, ways - 1)), skip=GRANULE * draw(st.integers(0, 3)),
            committed=draw(st.booleans()) or draw(st.booleans())))
        base += size + GRANULE * draw(st.integers(0, 2))
    return decoders


def window_hpas(decoders):
    return st.one_of(
        st.integers(0, HPA_LIMIT - 1),
        st.sampled_from([d for d in decoders if d.size] or decoders).flatmap(
            lambda d: st.integers(d.base, d.base + max(d.size, 1) - 1)))


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_forward_matches_the_transcription(data):
    decoders = data.draw(decoder_sets())
    hpa = data.draw(window_hpas(decoders))
    got = HdmDecoderSet(decoders).forward(hpa)
    assert got.dpa == qemu_dpa(decoders, hpa)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_round_trips(data):
    decoders = data.draw(decoder_sets())
    hdm = HdmDecoderSet(decoders)
    hpa = data.draw(window_hpas(decoders))
    got = hdm.forward(hpa)
    if got.target:
        assert hdm.inverse(got.dpa) == hpa
    usable = decoders[:hdm.usable]
    if any(d.size for d in usable):
        index = data.draw(st.sampled_from([i for i, d in enumerate(usable) if d.size]))
        dpa = hdm.dpa_bases[index] + data.draw(st.integers(0, usable[index].dpa_size - 1))
        back = hdm.inverse(dpa)
        assert back is not None and hdm.forward(back).dpa == dpa


@settings(max_examples=200, deadline=None)
@given(off=st.integers(0, (1 << 44) - 1), ig=st.integers(0, 6),
       iw=st.sampled_from([0, 1, 2, 3, 4, 8, 9, 10]))
def test_offset_functions_invert_each_other(off, ig, iw):
    position = position_of(off, ig, iw)
    assert hpa_offset(dpa_offset(off, ig, iw), ig, iw, position) == off


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_numpy_path_matches_the_scalar_one(data):
    decoders = data.draw(decoder_sets())
    hpas = data.draw(st.lists(window_hpas(decoders), min_size=1, max_size=40))
    hdm = HdmDecoderSet(decoders)
    dpa, hit, target = hdm.forward_array(np.array(hpas, dtype=np.uint64))
    for k, hpa in enumerate(hpas):
        want = hdm.forward(hpa)
        assert (bool(hit[k]), bool(target[k])) == (want.hit, want.target)
        assert int(dpa[k]) == (want.dpa if want.target else 0)


def test_numpy_path_rejects_out_of_range():
    with pytest.raises(ValueError, match=r"^HPAs must be below 2\*\*52$"):
        HdmDecoderSet([]).forward_array([HPA_LIMIT])
