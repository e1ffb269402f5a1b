"""HDM decoders of a CXL 2.0 Type-3 endpoint in hardware: HPA -> DPA, pipelined.

The software mirror and the formulas are in ``sw_model/hdm.py`` (``research/dlrm_cxl.md``
B.1.6). Configuration arrives as one :data:`HDM_DECODER` struct per decoder, in the units of
the CXL 2.0 registers (base, size and DPA skip hold address bits [51:28], IG and IW are the
Control register encodings), so a register block can drive these inputs directly.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .divide import DivideBy3
from .messages import HPA_WIDTH

__all__ = ["DPA_WIDTH", "HDM_DECODER", "HDM_RESULT", "HdmDecoder", "decoder_fields"]

GRANULE_SHIFT = 28                      # base/size/skip registers carry bits [51:28]
UNIT_WIDTH = HPA_WIDTH - GRANULE_SHIFT  # 24
#: A DPA as the decoders compute it: DPA bases are sums of up to 20 skips and sizes, so the
#: result can exceed 52 bits for a mis-programmed set; the front end bounds it to its memory.
DPA_WIDTH = 64
MAX_DECODERS = 10                       # CXL 2.0 decoder count encodings reach 10

#: One decoder's registers. ``size`` is the HPA window of the whole interleave set (this device
#: holds ``size / ways`` of it); ``position`` is this device's position in the set.
HDM_DECODER = data.StructLayout({
    "base": unsigned(UNIT_WIDTH),   # HPA[51:28]
    "size": unsigned(UNIT_WIDTH),   # bytes >> 28
    "skip": unsigned(UNIT_WIDTH),   # DPA skip, bytes >> 28
    "ig": unsigned(4),              # granularity 256 B << IG, IG in 0..6
    "iw": unsigned(4),              # ways: 0..4 -> 1, 2, 4, 8, 16; 8, 9, 10 -> 3, 6, 12
    "position": unsigned(4),
    "committed": unsigned(1),
})

#: ``hit``: a usable decoder's window holds the HPA; ``target``: the HPA's granule belongs to
#: this device's position. ``decoder`` and ``position`` are meaningful when ``hit``, ``dpa``
#: when ``hit & target``.
HDM_RESULT = data.StructLayout({
    "dpa": unsigned(DPA_WIDTH),
    "hit": unsigned(1),
    "target": unsigned(1),
    "decoder": unsigned(4),
    "position": unsigned(4),
})


def decoder_fields(decoder) -> dict:
    """``HDM_DECODER.const(...)`` fields of a ``sw_model.hdm.Decoder``."""
    return {
        "base": decoder.base >> GRANULE_SHIFT,
        "size": decoder.size >> GRANULE_SHIFT,
        "skip": decoder.skip >> GRANULE_SHIFT,
        "ig": decoder.ig,
        "iw": decoder.iw,
        "position": decoder.position,
        "committed": int(decoder.committed),
    }


def _delay(m, value, cycles, name):
    """``value`` registered ``cycles`` times."""
    for stage in range(cycles):
        delayed = Signal.like(value, name=f"{name}_d{stage + 1}")
        m.d.sync += delayed.eq(value)
        value = delayed
    return value


class HdmDecoder(wiring.Component):
    """``num_decoders`` endpoint HDM decoders: one HPA in per cycle, its DPA ``latency``
    cycles later.

    Decoders are searched in index order, as QEMU's ``cxl_type3_dpa()`` does: the first whose
    window holds the HPA decodes it, and the search stops at the first decoder that is not
    committed (CXL requires committing in order; the DPA bases of later decoders depend on
    it). A decoder whose registers are inconsistent is treated as not committed (a real device
    would refuse the commit with Commit Error): IG above 6, an IW encoding outside 0..4 and
    8..10, a position not below the ways, a size that is not a multiple of ways x 256 MiB, or a
    window ending above 2**52.

    The DPA bases (skip plus ``size / ways`` of every earlier decoder) are derived from the
    registers in ``config_latency`` cycles, and a newly committed decoder decodes only after
    that; a committed decoder's registers must not change (CXL: Lock / software contract).
    Uncommitting or clearing ``enable`` takes effect at once.

    Members:
        ``enable``: In(1), HDM Decoder Enable (global control bit 1). When clear nothing
        decodes (a CXL 2.0 device would fall back to its DVSEC ranges, which this one lacks).
        ``decoders``: In(ArrayLayout(HDM_DECODER, num_decoders)).
        ``request``: In(stream, always ready) of 52-bit HPAs.
        ``result``: Out(stream, always ready) of :data:`HDM_RESULT`.
    """

    def __init__(self, *, num_decoders=2, divider_stage_bits=12):
        if not isinstance(num_decoders, int) or not 1 <= num_decoders <= MAX_DECODERS:
            raise ValueError(f"Decoder count must be an integer in 1..{MAX_DECODERS}, "
                             f"not {num_decoders!r}")
        if not isinstance(divider_stage_bits, int) or divider_stage_bits < 1:
            raise ValueError(f"Divider bits per stage must be a positive integer, "
                             f"not {divider_stage_bits!r}")
        self._num_decoders = num_decoders
        self._divider_stage_bits = divider_stage_bits
        super().__init__({
            "enable": In(1),
            "decoders": In(data.ArrayLayout(HDM_DECODER, num_decoders)),
            "request": In(stream.Signature(unsigned(HPA_WIDTH), always_ready=True)),
            "result": Out(stream.Signature(HDM_RESULT, always_ready=True)),
        })

    @property
    def num_decoders(self):
        return self._num_decoders

    # The granule number G = offset >> (8 + IG) has at most 52 - 8 bits.
    _GRANULE_WIDTH = HPA_WIDTH - 8

    @property
    def divider_latency(self):
        return -(-self._GRANULE_WIDTH // min(self._divider_stage_bits, self._GRANULE_WIDTH))

    @property
    def latency(self):
        """Cycles from ``request`` to ``result``: window match, offset and shifts, the
        division by 3, DPA assembly."""
        return 2 + self.divider_latency + 1

    @property
    def config_latency(self):
        """Cycles from a stable decoder register set to decoding with it."""
        size_divider = -(-UNIT_WIDTH // min(self._divider_stage_bits, UNIT_WIDTH))
        return size_divider + self._num_decoders + 1

    def _derive(self, m):
        """Per decoder: is it legal, its window end, and its DPA base (registered)."""
        count = self._num_decoders
        derived = []
        for index in range(count):
            d = self.decoders[index]
            by_three = d.iw[3]
            k = Signal(3, name=f"k_{index}")         # ways = 2**k or 3 * 2**k
            m.d.comb += k.eq(d.iw[:3])
            iw_ok = Signal(name=f"iw_ok_{index}")
            m.d.comb += iw_ok.eq(d.iw.matches(0, 1, 2, 3, 4, 8, 9, 10))

            divider = m.submodules[f"size_divider_{index}"] = DivideBy3(
                width=UNIT_WIDTH, stage_bits=self._divider_stage_bits)
            m.d.comb += [divider.i.valid.eq(1), divider.i.payload.eq(d.size >> k)]
            size_by_k_low = Signal(16, name=f"size_low_bits_{index}")
            m.d.comb += size_by_k_low.eq(d.size & ((Const(1, 17) << k) - 1))

            ways_limit = Signal(6, name=f"ways_{index}")
            m.d.comb += ways_limit.eq(Cat(Const(1, 1), by_three) << k)  # 1 or 3, times 2**k
            end = Signal(UNIT_WIDTH + 1, name=f"end_{index}")
            legal = Signal(name=f"legal_{index}")
            m.d.sync += [
                end.eq(d.base + d.size),
                legal.eq(iw_ok & (d.ig <= 6) & (d.position < ways_limit) &
                         (size_by_k_low == 0) & (d.base + d.size <= (1 << UNIT_WIDTH)) &
                         (~by_three | (divider.o.payload.remainder == 0))),
            ]
            per_way = Signal(UNIT_WIDTH, name=f"per_way_{index}")
            m.d.comb += per_way.eq(Mux(by_three, divider.o.payload.quotient, d.size >> k))
            derived.append({"end": end, "legal": legal, "per_way": per_way, "k": k,
                            "by_three": by_three})

        # DPA bases as a registered chain: decoder i's base = decoder (i-1)'s base plus its
        # share plus decoder i's skip.
        base_width = UNIT_WIDTH + 5
        previous = None
        for index in range(count):
            dpa_base = Signal(base_width, name=f"dpa_base_{index}")
            skip = self.decoders[index].skip
            if previous is None:
                m.d.sync += dpa_base.eq(skip)
            else:
                m.d.sync += dpa_base.eq(previous + derived[index - 1]["per_way"] + skip)
            derived[index]["dpa_base"] = dpa_base
            previous = dpa_base

        # A decoder is usable when it and every earlier one are committed and legal; a new
        # commit waits out the derivation latency, a withdrawal counts at once.
        chain = self.enable
        usable_now_bits = []
        for index in range(count):
            chain = chain & self.decoders[index].committed & derived[index]["legal"]
            usable_now_bits.append(chain)
        usable_now = Signal(count, name="usable_now")
        m.d.comb += usable_now.eq(Cat(*usable_now_bits))
        settled = _delay(m, usable_now, self.config_latency, "usable")
        usable = Signal(count)
        m.d.comb += usable.eq(settled & usable_now)
        return derived, usable

    def elaborate(self, platform):
        m = Module()
        count = self._num_decoders
        derived, usable = self._derive(m)

        # Stage 1: which window holds the HPA (the lowest index wins).
        hpa = self.request.payload
        units = hpa[GRANULE_SHIFT:]
        s1_valid, s1_hpa = Signal(), Signal(HPA_WIDTH)
        s1_hit, s1_index = Signal(), Signal(4)
        inside = [usable[i] & (units >= self.decoders[i].base) & (units < derived[i]["end"])
                  for i in range(count)]
        m.d.sync += [s1_valid.eq(self.request.valid), s1_hpa.eq(hpa),
                     s1_hit.eq(Cat(*inside).any()), s1_index.eq(0)]
        for index in reversed(range(count)):
            with m.If(inside[index]):
                m.d.sync += s1_index.eq(index)

        # Stage 2: offset within the window, granule split: low bits, the interleave bits
        # (part of the position), and the upper part to divide.
        def pick(key):
            value = Signal.like(derived[0][key], name=f"sel_{key}")
            m.d.comb += value.eq(0)
            with m.Switch(s1_index):
                for index in range(count):
                    with m.Case(index):
                        m.d.comb += value.eq(derived[index][key])
            return value

        selected = self.decoders[s1_index]
        k, by_three, dpa_base = pick("k"), pick("by_three"), pick("dpa_base")
        offset = Signal(HPA_WIDTH)
        granule_shift = Signal(4)
        m.d.comb += [
            offset.eq(s1_hpa - Cat(Const(0, GRANULE_SHIFT), selected.base)),
            granule_shift.eq(8 + selected.ig[:3]),
        ]
        granule = (offset >> granule_shift)[:self._GRANULE_WIDTH]
        s2 = {
            "valid": Signal(), "hit": Signal(), "index": Signal(4),
            "upper": Signal(self._GRANULE_WIDTH), "interleave_bits": Signal(4),
            "low": Signal(14), "granule_shift": Signal(4), "k": Signal(3), "by_three": Signal(),
            "dpa_base": Signal.like(dpa_base), "position": Signal(4),
        }
        m.d.sync += [
            s2["valid"].eq(s1_valid), s2["hit"].eq(s1_hit), s2["index"].eq(s1_index),
            s2["upper"].eq(granule >> k),
            s2["interleave_bits"].eq(granule[:4] & ((Const(1, 5) << k) - 1)),
            s2["low"].eq(offset & ((Const(1, 15) << granule_shift) - 1)),
            s2["granule_shift"].eq(granule_shift), s2["k"].eq(k),
            s2["by_three"].eq(by_three), s2["dpa_base"].eq(dpa_base),
            s2["position"].eq(selected.position),
        ]

        # Stages 3..: the division by 3 for 3/6/12 ways, everything else delayed alongside.
        divider = m.submodules.granule_divider = DivideBy3(
            width=self._GRANULE_WIDTH, stage_bits=self._divider_stage_bits)
        m.d.comb += [divider.i.valid.eq(s2["valid"]), divider.i.payload.eq(s2["upper"])]
        late = {key: _delay(m, value, divider.latency, f"s2_{key}")
                for key, value in s2.items() if key != "valid"}

        # Last stage: the position and the DPA.
        quotient = Signal(self._GRANULE_WIDTH)
        position = Signal(4)
        m.d.comb += [
            quotient.eq(Mux(late["by_three"], divider.o.payload.quotient, late["upper"])),
            position.eq(late["interleave_bits"] |
                        Mux(late["by_three"], divider.o.payload.remainder << late["k"], 0)),
        ]
        dpa_offset = (quotient << late["granule_shift"]) | late["low"]
        result = self.result.payload
        m.d.sync += [
            self.result.valid.eq(divider.o.valid),
            result.hit.eq(late["hit"]),
            result.target.eq(position == late["position"]),
            result.decoder.eq(late["index"]),
            result.position.eq(position),
            result.dpa.eq((late["dpa_base"] << GRANULE_SHIFT) + dpa_offset),
        ]
        return m
