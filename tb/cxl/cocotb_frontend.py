"""CxlMemFrontEnd in Verilator: every flow through the host model (tb/host/cxl_mem.py) against
an out-of-order AXI memory (tb/cxl/memory.py), with the HDM decoders programmed at run time
and the expected DPAs computed by sw_model.hdm.

Run through tb/cxl/test_frontend.py (or ``nox -s sim -- -k cxl``).
"""

import random

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiBus, AxiResp

from hw.cxl import DevLoad, DRSOpcode, M2SReqOpcode, decoder_fields
from sim.rtl import design_from_env
from sw_model.hdm import GRANULE, Decoder, HdmDecoderSet
from tb.common import pause_pattern, reset, rng, start_clock
from tb.cxl.memory import OutOfOrderAxiRam
from tb.host.cxl_mem import CxlMemError, CxlMemHost
from tb.host.messages import pack_req, pack_rwd, unpack

BASE = 0x20_0000_0000           # the HPA window of decoder 0
LINE = 64
ONES = b"\xff" * LINE

_component = None


def component():
    global _component
    if _component is None:
        _component = design_from_env().elaboratable()
    return _component


def line_of(seed: int) -> bytes:
    return random.Random(seed).randbytes(LINE)


class Env:
    """Clock, memory, host and the front end's configuration inputs for one test."""

    def __init__(self, dut, memory, host):
        self.dut, self.memory, self.host = dut, memory, host
        self.decoders = []

    @property
    def hdm(self):
        return HdmDecoderSet(self.decoders)

    def dpa(self, hpa):
        translation = self.hdm.forward(hpa)
        assert translation.target, f"{hpa:#x} is not this device's memory"
        return translation.dpa

    async def program(self, decoders, *, enable=True):
        """Program the decoders (unused ones uncommitted) and wait until they decode."""
        count = component().num_decoders
        fields = [decoder_fields(d) for d in decoders]
        fields += [{"committed": 0}] * (count - len(fields))
        layout = component().signature.members["decoders"].shape
        self.dut.hdm_enable.value = int(enable)
        self.dut.decoders.value = layout.const(fields).as_bits()
        self.decoders = list(decoders)
        await ClockCycles(self.dut.clk, component().config_latency + 2)

    def protect(self, regions):
        count = component().num_protected
        regions = list(regions) + [{"enable": 0}] * (count - len(regions))
        layout = component().signature.members["protected_ranges"].shape
        self.dut.protected_ranges.value = layout.const(regions).as_bits()

    def status(self):
        layout = component().signature.members["status"].shape
        return unpack(layout, self.dut.status.value.to_unsigned())

    async def clear_errors(self):
        self.dut.clear_errors.value = 1
        await RisingEdge(self.dut.clk)
        self.dut.clear_errors.value = 0
        await RisingEdge(self.dut.clk)

    async def settle(self, cycles=40):
        """Let responses that should not exist have time to appear."""
        await self.host.idle()
        await ClockCycles(self.dut.clk, cycles)


async def setup(dut, *, stream=0, latency=(1, 16), axi_busy=0.0, host_busy=0.0,
                error_ranges=(), **host_options) -> Env:
    seed = cocotb.RANDOM_SEED * 16 + stream
    start_clock(dut)
    for name in ("hdm_enable", "debug_unlock", "poison_nxm_reads", "clear_errors",
                 "decoders", "protected_ranges"):
        getattr(dut, name).value = 0
    memory = OutOfOrderAxiRam(AxiBus.from_prefix(dut, "axi_"), dut.clk, dut.rst,
                              latency=latency, seed=seed, error_ranges=error_ranges)
    if axi_busy:
        memory.set_pause_generators(lambda k: pause_pattern(seed * 8 + k, axi_busy))
    host = CxlMemHost(dut, seed=seed, ndr_pause=host_busy, drs_pause=host_busy,
                      req_idle=host_busy / 2, rwd_idle=host_busy / 2, **host_options)
    await reset(dut)
    return Env(dut, memory, host)


ONE_WAY = Decoder.make(base=BASE, size=GRANULE)


@cocotb.test()
async def every_opcode(dut):
    """MemRd, MemRdData, MemWr, MemWrPtl, MemInv, MemInvNT, MemSpecRd; reserved opcodes and
    empty slots are dropped and counted; tags and LD-ID are echoed, meta is No-Op."""
    env = await setup(dut, ld_id=5)
    await env.program([ONE_WAY])
    host, memory = env.host, env.memory
    a, b = BASE + 0x1000, BASE + 0x2040

    first = await host.write(a, line_of(1))
    assert (first.ld_id, first.meta_field) == (5, 0b11)
    assert memory.read(env.dpa(a), LINE) == line_of(1)
    for opcode in (M2SReqOpcode.MEM_RD, M2SReqOpcode.MEM_RD_DATA):
        response = await host.read_response(a, opcode=opcode)
        assert (response.opcode, response.data, response.poison) == (
            DRSOpcode.MEM_DATA, line_of(1), False)
        assert (response.ld_id, response.meta_field, response.valid) == (5, 0b11, 1)

    mask = 0x00FF_0000_FFFF_000F
    await host.write(a, line_of(2), byte_enable=mask)
    merged = bytes(line_of(2)[k] if mask >> k & 1 else line_of(1)[k] for k in range(LINE))
    assert memory.read(env.dpa(a), LINE) == merged
    assert await host.read(a) == merged

    await host.invalidate(b)
    await host.invalidate(b, non_temporal=True)
    await host.spec_read(b)
    # Reserved Req opcodes (MemRdFwd, MemWrFwd, MemClnEvct), reserved RwD opcodes, and one
    # empty slot on each channel: accepted, no completion.
    for opcode in (0b0011, 0b0100, 0b1010, 0b1111):
        await host.send_raw("m2s_req", lambda tag, op=opcode: pack_req(op, b, tag))
    for opcode in (0b0000, 0b0100):
        await host.send_raw("m2s_rwd", lambda tag, op=opcode: pack_rwd(op, b, tag, ONES))
    await host.send_raw("m2s_req", lambda tag: pack_req(M2SReqOpcode.MEM_RD, b, tag, valid=0))
    await host.send_raw("m2s_rwd", lambda tag: pack_rwd(1, b, tag, ONES, valid=0))
    await env.settle()
    assert memory.read(env.dpa(b), LINE) == bytes(LINE), "a dropped write reached memory"

    status = env.status()
    assert host.completions == {"ndr": 4, "drs": 3}
    expected = {"requests": 16, "reads": 3, "writes": 2, "invalidates": 2, "spec_reads": 1,
                "unsupported": 6, "ignored": 2, "nxm": 0, "protection_violations": 0,
                "poisoned_writes": 0, "bus_errors": 0}
    assert {k: status[k] for k in expected} == expected
    assert status["errors"]["unsupported"] == 1 and status["idle"] == 1
    await env.clear_errors()
    assert env.status()["errors"]["unsupported"] == 0


@cocotb.test()
async def many_outstanding_tags_echoed_out_of_order(dut):
    """More requests in flight than AXI IDs, slow memory: the ID pools fill, responses return
    out of order, every tag is echoed (the host checks), DevLoad rises and falls."""
    tags = sorted(random.Random(cocotb.RANDOM_SEED).sample(range(1 << 16), 48))
    env = await setup(dut, stream=1, latency=(20, 80), tags=tags)
    await env.program([ONE_WAY])
    host, limit = env.host, component().max_outstanding
    peaks = {"reads_in_flight": 0, "writes_in_flight": 0}
    loads = set()

    async def watch():
        while True:
            await RisingEdge(dut.clk)
            status = env.status()
            for key in peaks:
                peaks[key] = max(peaks[key], status[key])

    watcher = cocotb.start_soon(watch())
    completion_order = []

    async def worker(index):
        hpa = BASE + index * LINE
        response = await host.write_line(hpa, line_of(index))
        loads.add(response.dev_load)
        data = await host.read_response(hpa)
        assert data.data == line_of(index)
        loads.add(data.dev_load)
        completion_order.append(index)

    tasks = [cocotb.start_soon(worker(k)) for k in range(96)]
    for task in tasks:
        await task
    watcher.cancel()
    assert peaks == {"reads_in_flight": limit, "writes_in_flight": limit}, peaks
    assert host.peak_outstanding == len(tags)
    assert completion_order != sorted(completion_order)
    assert DevLoad.SEVERE_OVERLOAD.value in loads and DevLoad.LIGHT.value in loads
    await env.settle(4)
    assert env.status()["idle"] == 1


@cocotb.test()
async def nxm_when_no_decoder_maps_the_address(dut):
    """No window, another position, an uncommitted decoder, HDM disabled: reads get
    MemData-NXM (all ones; poison as programmed), writes complete but change nothing."""
    env = await setup(dut, stream=2)
    two_way = Decoder.make(base=BASE, size=2 * GRANULE, ways=2, granularity=256, position=0)
    await env.program([two_way])
    host, memory = env.host, env.memory
    outside, other_position, mine = BASE + 2 * GRANULE, BASE + 0x100, BASE + 0x200

    for poison in (0, 1):
        dut.poison_nxm_reads.value = poison
        for hpa in (outside, other_position, BASE - LINE):
            response = await host.read_response(hpa)
            assert (response.opcode, response.data, response.poison) == (
                DRSOpcode.MEM_DATA_NXM, ONES, bool(poison))
    try:
        await host.read(outside)
        raise AssertionError("read() of NXM memory did not raise")
    except CxlMemError as error:
        assert error.response.opcode == DRSOpcode.MEM_DATA_NXM

    writes_before = memory.writes
    await host.write(outside, line_of(3), track=False)
    await host.write(other_position, line_of(3), track=False)
    assert memory.writes == writes_before
    status = env.status()
    assert status["nxm"] == 9 and status["errors"]["nxm"] == 1

    await host.write(mine, line_of(4))
    assert await host.read(mine) == line_of(4)
    await env.program([Decoder.make(base=BASE, size=2 * GRANULE, ways=2, committed=False)])
    assert (await host.read_response(mine)).opcode == DRSOpcode.MEM_DATA_NXM
    await env.program([two_way], enable=False)
    assert (await host.read_response(mine)).opcode == DRSOpcode.MEM_DATA_NXM
    await env.program([two_way])
    assert await host.read(mine) == line_of(4)
    await env.clear_errors()
    assert env.status()["errors"]["nxm"] == 0


@cocotb.test()
async def poison_on_memory_errors(dut):
    """SLVERR/DECERR from memory: reads return MemData with poison, writes still complete;
    both are counted as bus errors."""
    slverr_dpa, decerr_dpa = 0x10_0000, 0x20_0000
    env = await setup(dut, stream=3, error_ranges=[
        (slverr_dpa, slverr_dpa + 0x1000, AxiResp.SLVERR),
        (decerr_dpa, decerr_dpa + 0x1000, AxiResp.DECERR)])
    await env.program([ONE_WAY])
    host = env.host
    for dpa in (slverr_dpa, decerr_dpa + 0x40):
        response = await host.read_response(BASE + dpa)
        assert (response.opcode, response.poison) == (DRSOpcode.MEM_DATA, True)
    await host.write(BASE + slverr_dpa + 0x80, line_of(5), track=False)
    assert await host.read(BASE + 0x4000) == bytes(LINE)   # elsewhere: fine
    status = env.status()
    assert (status["bus_errors"], status["errors"]["bus_error"]) == (3, 1)


@cocotb.test()
async def protected_ranges_refuse_until_debug_unlock(dut):
    """Reads of a protected DPA range get NXM and writes are dropped (sticky error), until
    debug_unlock; a disabled range protects nothing; a line touching a range is refused."""
    env = await setup(dut, stream=4)
    await env.program([ONE_WAY])
    host, memory = env.host, env.memory
    log = 0x8_0000
    env.protect([{"base": log, "size": 0x400, "enable": 1},
                 {"base": 0x9_0020, "size": 0x10, "enable": 1}])   # inside one line
    memory.write(log, line_of(6))
    host.scoreboard.preload(BASE + log, line_of(6))

    for hpa in (BASE + log, BASE + log + 0x3C0, BASE + 0x9_0000):
        assert (await host.read_response(hpa)).opcode == DRSOpcode.MEM_DATA_NXM
    await host.write(BASE + log, line_of(7), track=False)
    assert memory.read(log, LINE) == line_of(6)
    assert await host.read(BASE + log + 0x400) == bytes(LINE)        # just past the range
    status = env.status()
    assert status["protection_violations"] == 4 and status["errors"]["protection"] == 1
    await env.clear_errors()
    assert env.status()["errors"]["protection"] == 0

    dut.debug_unlock.value = 1
    assert await host.read(BASE + log) == line_of(6)
    await host.write(BASE + log, line_of(8))
    assert memory.read(log, LINE) == line_of(8)
    dut.debug_unlock.value = 0
    env.protect([{"base": log, "size": 0x400, "enable": 0}])
    assert await host.read(BASE + log) == line_of(8)
    assert env.status()["errors"]["protection"] == 0


async def check_interleave(env, decoders, count, seed):
    """Write distinct lines to random HPAs of this device, check memory at the DPA the
    model gives, read them back; another position's HPAs are NXM."""
    await env.program(decoders)
    hdm, draw = env.hdm, random.Random(seed)
    mine, others = [], []
    while len(mine) < count or len(others) < 8:
        d = draw.choice(decoders)
        hpa = d.base + draw.randrange(d.size // LINE) * LINE
        (mine if hdm.forward(hpa).target else others).append(hpa)
    mine = list(dict.fromkeys(mine))[:count]
    for k, hpa in enumerate(mine):
        await env.host.write(hpa, line_of(seed + k))
    for k, hpa in enumerate(mine):
        assert env.memory.read(hdm.forward(hpa).dpa, LINE) == line_of(seed + k), hex(hpa)
        assert await env.host.read(hpa) == line_of(seed + k)
    for hpa in others[:8]:
        assert (await env.host.read_response(hpa)).opcode == DRSOpcode.MEM_DATA_NXM


@cocotb.test()
async def interleaved_decoders_translate_like_the_model(dut):
    """2-way + 3-way decoders with DPA skip, then 12-way + 1-way: data lands at the DPA of
    sw_model.hdm, and reads return it."""
    env = await setup(dut, stream=5)
    await check_interleave(env, [
        Decoder.make(base=BASE, size=2 * GRANULE, ways=2, granularity=512, position=1,
                     skip=GRANULE),
        Decoder.make(base=BASE + 4 * GRANULE, size=3 * GRANULE, ways=3, granularity=1024,
                     position=2, skip=2 * GRANULE),
    ], 48, 100)
    await env.program([])
    await check_interleave(env, [
        Decoder.make(base=BASE + 16 * GRANULE, size=12 * GRANULE, ways=12, granularity=256,
                     position=7),
        Decoder.make(base=BASE + 64 * GRANULE, size=GRANULE, ways=1, skip=GRANULE),
    ], 48, 200)


@cocotb.test()
async def partial_writes_merge_byte_enables(dut):
    """MemWrPtl with random, empty and full byte enables, checked in memory and by reads."""
    env = await setup(dut, stream=6)
    await env.program([ONE_WAY])
    draw = rng(6)
    expected = {}
    for k in range(40):
        hpa = BASE + int(draw.integers(0, 6)) * LINE
        mask = [0, (1 << LINE) - 1, int(draw.integers(0, 1 << 63)) << 1 | 1][k % 3]
        data = line_of(300 + k)
        await env.host.write(hpa, data, byte_enable=mask)
        old = expected.get(hpa, bytes(LINE))
        expected[hpa] = bytes(data[i] if mask >> i & 1 else old[i] for i in range(LINE))
    for hpa, data in expected.items():
        assert env.memory.read(env.dpa(hpa), LINE) == data
        assert await env.host.read(hpa) == data

    # Multi-line accesses: one request per line, concurrently.
    block = b"".join(line_of(400 + k) for k in range(6))
    await env.host.write(BASE + 0x10000, block)
    assert await env.host.read(BASE + 0x10000, len(block)) == block


@cocotb.test()
async def reads_and_writes_to_one_line_keep_acceptance_order(dut):
    """A read accepted while a write to its line is in flight returns the new data, even when
    the memory answers reads much faster than writes; a write accepted while a read of its line
    is in flight does not leak into that read, even when writes are the faster ones."""
    env = await setup(dut, stream=7)
    await env.program([ONE_WAY])
    host, hpa, memory = env.host, BASE + 0x3000, env.memory
    await host.write(hpa, line_of(9))
    memory.read_latency, memory.write_latency = (2, 2), (60, 60)

    async def accepted(count):
        while env.status()["requests"] < count:
            await RisingEdge(dut.clk)

    before = env.status()["requests"]
    write = cocotb.start_soon(host.write(hpa, line_of(10)))
    await accepted(before + 1)
    read = cocotb.start_soon(host.read(hpa))
    await accepted(before + 2)
    assert not write.done(), "the write completed before the read was accepted"
    assert await read == line_of(10)
    await write

    memory.read_latency, memory.write_latency = (60, 60), (2, 2)
    read = cocotb.start_soon(host.read(hpa))
    await accepted(before + 3)
    write = cocotb.start_soon(host.write(hpa, line_of(11)))
    await accepted(before + 4)
    assert not read.done(), "the read completed before the write was accepted"
    assert await read == line_of(10)
    await write
    assert await host.read(hpa) == line_of(11)


STRESS_STEPS = 200


@cocotb.test()
async def random_traffic_with_backpressure_everywhere(dut):
    """Concurrent random reads, writes, partial writes and invalidates on a few hot lines of a
    2-way interleave, with pauses on all five AXI channels, on both S2M channels and idle
    cycles on both M2S channels; the scoreboard checks every read."""
    env = await setup(dut, stream=8, latency=(0, 24), axi_busy=0.3, host_busy=0.3)
    await env.program([Decoder.make(base=BASE, size=2 * GRANULE, ways=2, granularity=256,
                                    position=0, skip=GRANULE)])
    host = env.host
    hot = [hpa for hpa in range(BASE, BASE + 64 * 256, LINE) if env.hdm.forward(hpa).target]
    hot = random.Random(cocotb.RANDOM_SEED).sample(hot, 12)
    for k, hpa in enumerate(hot):
        env.memory.write(env.dpa(hpa), line_of(500 + k))
        host.scoreboard.preload(hpa, line_of(500 + k))

    async def worker(index):
        draw = random.Random(cocotb.RANDOM_SEED * 100 + index)
        for step in range(STRESS_STEPS):
            hpa = draw.choice(hot)
            kind = draw.random()
            if kind < 0.45:
                await host.read(hpa)
            elif kind < 0.75:
                await host.write(hpa, line_of(index * 1000 + step))
            elif kind < 0.95:
                await host.write(hpa, line_of(index * 1000 + step),
                                 byte_enable=draw.getrandbits(LINE))
            else:
                await host.invalidate(hpa)

    tasks = [cocotb.start_soon(worker(k)) for k in range(8)]
    for task in tasks:
        await task
    for hpa in hot:          # every line ends as the scoreboard says
        await host.read(hpa)
    assert host.scoreboard.checked > 3 * STRESS_STEPS, host.scoreboard.checked
    status = env.status()
    assert status["requests"] == 8 * STRESS_STEPS + len(hot)
    assert status["nxm"] == 0 and status["errors"] == {k: 0 for k in status["errors"]}
    dut._log.info("stress: %d reads checked, %d requests", host.scoreboard.checked,
                  status["requests"])
