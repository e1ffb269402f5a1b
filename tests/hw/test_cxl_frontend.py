# amaranth: UnusedElaboratable=no
"""CxlMemFrontEnd in Amaranth's simulator: parameter validation, the message layouts, and a
few flows against a Python AXI memory (the full protocol and stress tests run in Verilator,
tb/cxl). One testbench plays host and memory, deciding each cycle's handshakes before the
clock edge."""

import random
from collections import deque

import pytest
from amaranth.hdl import Value
from amaranth.sim import Simulator

from hw.cxl import (
    HDM_DECODER,
    M2S_REQ,
    M2S_RWD,
    M2S_RWD_HEADER,
    S2M_DRS,
    S2M_DRS_HEADER,
    S2M_NDR,
    CxlMemFrontEnd,
    DevLoad,
    DRSOpcode,
    M2SReqOpcode,
    M2SRwDOpcode,
    NDROpcode,
    decoder_fields,
    protected_region_layout,
    status_layout,
)
from sw_model.hdm import GRANULE, Decoder, HdmDecoderSet
from tb.host.messages import pack, pack_req, pack_rwd, parse_drs, parse_ndr, unpack

BASE = 0x4_0000_0000

# --- layouts ---------------------------------------------------------------------------------


def test_message_widths_are_those_of_cxl_2_0_68b():
    assert M2S_REQ.size == 87
    assert M2S_RWD_HEADER.size == 87
    assert M2S_RWD.size == 87 + 512 + 64
    assert S2M_NDR.size == 30
    assert S2M_DRS_HEADER.size == 40
    assert S2M_DRS.size == 40 + 512
    widths = {name: field.width for name, field in M2S_REQ}
    assert widths == {"valid": 1, "opcode": 4, "snp_type": 3, "meta_field": 2, "meta_value": 2,
                      "tag": 16, "address": 47, "ld_id": 4, "tc": 2, "reserved": 6}
    widths = {name: field.width for name, field in M2S_RWD_HEADER}
    assert widths == {"valid": 1, "opcode": 4, "snp_type": 3, "meta_field": 2, "meta_value": 2,
                      "tag": 16, "address": 46, "poison": 1, "ld_id": 4, "reserved": 6, "tc": 2}


def test_opcode_encodings():
    assert {op.name: op.value for op in M2SReqOpcode} == {
        "MEM_INV": 0, "MEM_RD": 1, "MEM_RD_DATA": 2, "MEM_RD_FWD": 3, "MEM_WR_FWD": 4,
        "MEM_SPEC_RD": 8, "MEM_INV_NT": 9, "MEM_CLN_EVCT": 10}
    assert (M2SRwDOpcode.MEM_WR.value, M2SRwDOpcode.MEM_WR_PTL.value) == (1, 2)
    assert NDROpcode.CMP.value == 0
    assert (DRSOpcode.MEM_DATA.value, DRSOpcode.MEM_DATA_NXM.value) == (0, 1)


def test_packing_round_trips_through_the_layouts():
    line = bytes(range(64))
    bits = pack_rwd(M2SRwDOpcode.MEM_WR_PTL, BASE + 0x1C0, 0xBEEF, line, byte_enable=0xF0F0,
                    poison=True, ld_id=3)
    fields = unpack(M2S_RWD, bits)
    assert fields["header"]["address"] == (BASE + 0x1C0) >> 6
    assert fields["header"]["tag"] == 0xBEEF and fields["header"]["poison"] == 1
    assert fields["data"].to_bytes(64, "little") == line and fields["byte_enable"] == 0xF0F0
    assert unpack(M2S_REQ, pack_req(M2SReqOpcode.MEM_RD, BASE + 0x40, 7))["address"] == \
        (BASE + 0x40) >> 5
    with pytest.raises(ValueError, match=r"^HPA must be a 64-byte-aligned address"):
        pack_req(M2SReqOpcode.MEM_RD, BASE + 1, 0)
    with pytest.raises(ValueError, match=r"^tag=0x10000 does not fit in 16 bits$"):
        pack(S2M_NDR, {"tag": 1 << 16})


# --- parameters ------------------------------------------------------------------------------


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"addr_width": 11}, r"^DPA width must be an integer in 12\.\.52, not 11$"),
    ({"addr_width": 53}, r"^DPA width must be an integer in 12\.\.52, not 53$"),
    ({"addr_width": 48.0}, r"^DPA width must be an integer in 12\.\.52, not 48\.0$"),
    ({"id_width": 0}, r"^ID width must be an integer in 1\.\.16, not 0$"),
    ({"id_width": 17}, r"^ID width must be an integer in 1\.\.16, not 17$"),
    ({"id_width": 2, "max_outstanding": 5},
     r"^Outstanding requests must be an integer in 1\.\.4 \(2\*\*id_width, at most 256\), "
     r"not 5$"),
    ({"max_outstanding": 0},
     r"^Outstanding requests must be an integer in 1\.\.256 \(2\*\*id_width, at most 256\), "
     r"not 0$"),
    ({"id_width": 12, "max_outstanding": 257},
     r"^Outstanding requests must be an integer in 1\.\.256"),
    ({"num_decoders": 0}, r"^Decoder count must be an integer in 1\.\.10, not 0$"),
    ({"num_protected": 0}, r"^Protected range count must be an integer in 1\.\.16, not 0$"),
    ({"num_protected": 17}, r"^Protected range count must be an integer in 1\.\.16, not 17$"),
    ({"divider_stage_bits": 0}, r"^Divider bits per stage must be a positive integer, not 0$"),
])
def test_parameter_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        CxlMemFrontEnd(**kwargs)


def test_ports_and_properties():
    dut = CxlMemFrontEnd(addr_width=40, id_width=3, max_outstanding=8, num_decoders=3,
                         num_protected=2)
    members = dut.signature.members
    assert members["m2s_req"].signature.members["payload"].shape == M2S_REQ
    assert members["s2m_drs"].signature.members["payload"].shape == S2M_DRS
    assert members["axi"].signature.addr_width == 40
    assert members["axi"].signature.id_width == 3
    assert members["protected_ranges"].shape.length == 2
    assert members["protected_ranges"].shape.elem_shape == protected_region_layout(40)
    assert members["status"].shape == status_layout(8)
    assert dut.request_to_axi_latency == dut.hdm_latency + 4 == dut.pipeline_depth


# --- flows against a Python memory -----------------------------------------------------------


class Bench:
    """Host queues on M2S, always-ready S2M sinks, and an AXI memory that answers each request
    ``latency`` plus up to ``jitter`` cycles later, in a random order among those due (so out of
    order across IDs)."""

    def __init__(self, dut, *, latency=4, jitter=8, seed=1, error_lines=()):
        self.dut = dut
        self.latency = latency
        self.jitter = jitter
        self.draw = random.Random(seed)
        self.error_lines = set(error_lines)
        self.memory = {}
        self.req, self.rwd = deque(), deque()   # (earliest cycle, message bits)
        self.accepted = []          # (cycle, "req"/"rwd")
        self.ar, self.aw = [], []   # (cycle, address, id)
        self.ndr, self.drs = [], []
        self.b_done = []            # cycles of B handshakes
        self._reads, self._writes, self._aw, self._w = [], [], deque(), deque()

    def run(self, cycles, *, decoders=(), protected=(), unlock=0, poison_nxm=0):
        dut = self.dut

        async def testbench(ctx):
            ctx.set(dut.hdm_enable, 1)
            for index, d in enumerate(decoders):
                ctx.set(dut.decoders[index], HDM_DECODER.const(decoder_fields(d)))
            for index, region in enumerate(protected):
                ctx.set(dut.protected_ranges[index],
                        dut.protected_ranges[index].shape().const(region))
            ctx.set(dut.debug_unlock, unlock)
            ctx.set(dut.poison_nxm_reads, poison_nxm)
            await ctx.tick().repeat(dut.config_latency + 1)
            for cycle in range(cycles):
                await self._cycle(ctx, cycle)
                await ctx.tick()

        sim = Simulator(dut)
        sim.add_clock(1e-8)
        sim.add_testbench(testbench)
        sim.run()

    async def _cycle(self, ctx, cycle):
        dut, axi = self.dut, self.dut.axi
        offered = {}
        for name, port, queue in (("req", dut.m2s_req, self.req), ("rwd", dut.m2s_rwd, self.rwd)):
            offered[name] = bool(queue) and queue[0][0] <= cycle
            ctx.set(port.valid, offered[name])
            if offered[name]:
                ctx.set(Value.cast(port.payload), queue[0][1])
        for name in ("arready", "awready", "wready"):
            ctx.set(getattr(axi, name), 1)
        ctx.set(dut.s2m_ndr.ready, 1)
        ctx.set(dut.s2m_drs.ready, 1)
        read = self._due(self._reads, cycle)
        write = self._due(self._writes, cycle)
        ctx.set(axi.rvalid, read is not None)
        if read is not None:
            _, rid, address = read
            ctx.set(axi.rid, rid)
            ctx.set(axi.rdata, int.from_bytes(self.memory.get(address, bytes(64)), "little"))
            ctx.set(axi.rresp, 2 if address in self.error_lines else 0)
        ctx.set(axi.bvalid, write is not None)
        if write is not None:
            ctx.set(axi.bid, write[1])
            ctx.set(axi.bresp, 0)

        # Handshakes of this cycle, decided before the edge.
        for name, port, queue in (("req", dut.m2s_req, self.req), ("rwd", dut.m2s_rwd, self.rwd)):
            if offered[name] and ctx.get(port.ready):
                queue.popleft()
                self.accepted.append((cycle, name))
        if ctx.get(axi.arvalid):
            address, rid = ctx.get(axi.araddr), ctx.get(axi.arid)
            assert (ctx.get(axi.arlen), ctx.get(axi.arsize), ctx.get(axi.arburst)) == (0, 6, 1)
            self.ar.append((cycle, address, rid))
            self._reads.append((self._when(cycle), rid, address))
        if read is not None and ctx.get(axi.rready):
            self._reads.remove(read)
        if ctx.get(axi.awvalid):
            self.aw.append((cycle, ctx.get(axi.awaddr), ctx.get(axi.awid)))
            self._aw.append((ctx.get(axi.awaddr), ctx.get(axi.awid)))
        if ctx.get(axi.wvalid):
            self._w.append((ctx.get(axi.wdata), ctx.get(axi.wstrb)))
        while self._aw and self._w:
            (address, wid), (value, strobe) = self._aw.popleft(), self._w.popleft()
            old = bytearray(self.memory.get(address, bytes(64)))
            new = value.to_bytes(64, "little")
            for k in range(64):
                if strobe >> k & 1:
                    old[k] = new[k]
            self.memory[address] = bytes(old)
            self._writes.append((self._when(cycle), wid, address))
        if write is not None and ctx.get(axi.bready):
            self._writes.remove(write)
            self.b_done.append(cycle)
        if ctx.get(dut.s2m_ndr.valid):
            self.ndr.append((cycle, parse_ndr(ctx.get(Value.cast(dut.s2m_ndr.payload)))))
        if ctx.get(dut.s2m_drs.valid):
            self.drs.append((cycle, parse_drs(ctx.get(Value.cast(dut.s2m_drs.payload)))))

    def _when(self, cycle):
        return cycle + self.latency + self.draw.randrange(self.jitter + 1)

    def _due(self, pending, cycle):
        due = [entry for entry in pending if entry[0] <= cycle]
        return self.draw.choice(due) if due else None


def small_frontend(**kwargs):
    return CxlMemFrontEnd(**{"addr_width": 40, "id_width": 3, "max_outstanding": 8,
                             "num_decoders": 2, "num_protected": 1, **kwargs})


@pytest.mark.parametrize("config", [{}, {"id_width": 1, "max_outstanding": 1,
                                     "num_decoders": 1, "addr_width": 30}])
def test_write_then_read_with_tags_echoed_and_the_documented_latency(config):
    dut = small_frontend(**config)
    decoder = Decoder.make(base=BASE, size=2 * GRANULE, ways=2, position=1, skip=GRANULE)
    hpa = BASE + 0x100    # granule 1: position 1
    dpa = HdmDecoderSet([decoder]).forward(hpa).dpa
    line = bytes(range(100, 164))
    bench = Bench(dut)
    bench.rwd.append((0, pack_rwd(M2SRwDOpcode.MEM_WR, hpa, 0x1234, line, ld_id=5)))
    bench.req.append((1, pack_req(M2SReqOpcode.MEM_RD, hpa, 0x4321, ld_id=6)))
    bench.run(60, decoders=[decoder])

    assert bench.memory[dpa] == line
    (write_cycle, _), _ = bench.accepted
    assert bench.aw[0][0] - write_cycle == dut.request_to_axi_latency
    assert [a[1] for a in bench.aw] == [dpa] and [a[1] for a in bench.ar] == [dpa]
    # The read is accepted one cycle after the write but waits for the write's B response.
    assert bench.ar[0][0] > bench.b_done[0]
    (_, cmp), = bench.ndr
    assert (cmp.opcode, cmp.tag, cmp.ld_id, cmp.valid) == (NDROpcode.CMP, 0x1234, 5, 1)
    assert cmp.dev_load in {d.value for d in DevLoad}
    (_, data), = bench.drs
    assert (data.opcode, data.tag, data.ld_id, data.poison, data.data) == (
        DRSOpcode.MEM_DATA, 0x4321, 6, False, line)


def test_back_to_back_reads_one_per_cycle_out_of_order_completions():
    dut = small_frontend()
    decoder = Decoder.make(base=BASE, size=GRANULE)
    bench = Bench(dut, latency=12, seed=3)
    for k in range(8):
        bench.memory[k * 64] = bytes([k]) * 64
        bench.req.append((0, pack_req(M2SReqOpcode.MEM_RD_DATA, BASE + k * 64, 100 + k)))
    bench.run(70, decoders=[decoder])
    cycles = [cycle for cycle, _ in bench.accepted]
    assert cycles == list(range(cycles[0], cycles[0] + 8)), "not one message per cycle"
    assert len({rid for _, _, rid in bench.ar}) == 8
    tags = [r.tag for _, r in bench.drs]
    assert sorted(tags) == list(range(100, 108)) and tags != sorted(tags)
    for _, r in bench.drs:
        assert r.data == bytes([r.tag - 100]) * 64


def test_nxm_poison_protection_and_invalidate():
    dut = small_frontend()
    decoder = Decoder.make(base=BASE, size=GRANULE)
    bench = Bench(dut, error_lines={0x80})
    bench.req.extend((0, bits) for bits in [
        pack_req(M2SReqOpcode.MEM_RD, BASE + GRANULE, 1),          # no decoder: NXM
        pack_req(M2SReqOpcode.MEM_RD, BASE + 0x80, 2),             # SLVERR: poisoned data
        pack_req(M2SReqOpcode.MEM_RD, BASE + 0x1000, 3),           # protected: NXM
        pack_req(M2SReqOpcode.MEM_INV, BASE + 0x40, 4),            # Cmp
        pack_req(M2SReqOpcode.MEM_SPEC_RD, BASE + 0x40, 5),        # no completion
    ])
    bench.rwd.append((0, pack_rwd(M2SRwDOpcode.MEM_WR, BASE + 0x1000, 6, bytes(64))))  # dropped
    region = {"base": 0x1000, "size": 0x40, "enable": 1}
    bench.run(60, decoders=[decoder], protected=[region], poison_nxm=1)

    responses = {r.tag: r for _, r in bench.drs}
    assert set(responses) == {1, 2, 3}
    assert (responses[1].opcode, responses[1].poison, responses[1].data) == (
        DRSOpcode.MEM_DATA_NXM, True, b"\xff" * 64)
    assert (responses[2].opcode, responses[2].poison) == (DRSOpcode.MEM_DATA, True)
    assert responses[3].opcode == DRSOpcode.MEM_DATA_NXM
    assert sorted(r.tag for _, r in bench.ndr) == [4, 6]
    assert 0x1000 not in bench.memory and not bench.aw
