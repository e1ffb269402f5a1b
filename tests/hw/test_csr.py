"""The CSR bank in Amaranth's simulator: every access type, byte strobes, DECERR, and the
map's own validation with its exact messages."""

import pytest

from hw.csr import Access, CsrBank, Field, RegisterMap, registers_markdown
from tb.pysim import simulate


def _map():
    regmap = RegisterMap("test")
    regmap.add("CTRL", "Control.", Field("enable", 1, Access.RW, "Enable."),
               Field("mode", 3, Access.RW, "Mode.", init=5))
    regmap.add("STATUS", "Status.", Field("busy", 1, Access.RO, "Busy."),
               Field("count", 16, Access.RO, "Count."))
    regmap.add("DOORBELL", "Doorbell.", Field("opcode", 4, Access.PULSE, "Opcode."))
    regmap.add("ERRORS", "Errors.", Field("flags", 4, Access.W1C, "Flags."))
    regmap.add("WIDE", "All bits.", Field("value", 32, Access.RW, "Value."))
    return regmap


async def _write(ctx, bus, addr, data, strb=0xF):
    ctx.set(bus.awaddr, addr)
    ctx.set(bus.wdata, data)
    ctx.set(bus.wstrb, strb)
    ctx.set(bus.awvalid, 1)
    ctx.set(bus.wvalid, 1)
    ctx.set(bus.bready, 1)
    await ctx.tick().until(bus.awready)
    ctx.set(bus.awvalid, 0)
    ctx.set(bus.wvalid, 0)
    (resp,) = await ctx.tick().sample(bus.bresp).until(bus.bvalid)
    return resp


async def _read(ctx, bus, addr):
    ctx.set(bus.araddr, addr)
    ctx.set(bus.arvalid, 1)
    ctx.set(bus.rready, 1)
    await ctx.tick().until(bus.arready)
    ctx.set(bus.arvalid, 0)
    data, resp = await ctx.tick().sample(bus.rdata, bus.rresp).until(bus.rvalid)
    return data, resp


def _simulate(dut, testbench):
    simulate(dut, testbench, deadline=10_000, period=1e-8)


def test_access_types_and_strobes():
    regmap = _map()
    dut = CsrBank(regmap=regmap)

    async def testbench(ctx):
        bus, regs = dut.bus, dut.regs
        assert ctx.get(regs.CTRL.mode) == 5  # init value
        assert await _write(ctx, bus, 0x0, regmap["CTRL"].pack(enable=1, mode=2)) == 0
        assert (ctx.get(regs.CTRL.enable), ctx.get(regs.CTRL.mode)) == (1, 2)
        ctx.set(regs.STATUS.busy, 1)
        ctx.set(regs.STATUS.count, 0x1234)
        data, resp = await _read(ctx, bus, regmap["STATUS"].offset)
        assert resp == 0 and regmap["STATUS"].unpack(data) == {"busy": 1, "count": 0x1234}
        # byte strobes: only byte 1 of WIDE changes
        await _write(ctx, bus, regmap["WIDE"].offset, 0xAABBCCDD)
        await _write(ctx, bus, regmap["WIDE"].offset, 0x11223344, strb=0b0010)
        assert (await _read(ctx, bus, regmap["WIDE"].offset))[0] == 0xAABB33DD
        # W1C: hardware sets, host clears with ones, reads show the flags
        ctx.set(regs.ERRORS.flags_set, 0b1010)
        await ctx.tick()
        ctx.set(regs.ERRORS.flags_set, 0)
        assert (await _read(ctx, bus, regmap["ERRORS"].offset))[0] == 0b1010
        await _write(ctx, bus, regmap["ERRORS"].offset, 0b0010)
        assert (await _read(ctx, bus, regmap["ERRORS"].offset))[0] == 0b1000
        # outside the map: DECERR, nothing changes
        assert await _write(ctx, bus, regmap.size, 0xFFFFFFFF) == 0b11
        assert (await _read(ctx, bus, regmap.size))[1] == 0b11
        assert ctx.get(regs.CTRL.mode) == 2

    _simulate(dut, testbench)

    dut2 = CsrBank(regmap=regmap)

    async def ring_and_watch(ctx):
        ctx.set(dut2.bus.awaddr, regmap["DOORBELL"].offset)
        ctx.set(dut2.bus.wdata, 0x9)
        ctx.set(dut2.bus.wstrb, 0xF)
        ctx.set(dut2.bus.awvalid, 1)
        ctx.set(dut2.bus.wvalid, 1)
        assert ctx.get(dut2.regs.DOORBELL.opcode_stb) == 1
        assert ctx.get(dut2.regs.DOORBELL.opcode) == 0x9
        await ctx.tick()
        ctx.set(dut2.bus.awvalid, 0)
        ctx.set(dut2.bus.wvalid, 0)
        assert ctx.get(dut2.regs.DOORBELL.opcode_stb) == 0  # one cycle only (bvalid pending)

    _simulate(dut2, ring_and_watch)


def test_reference_lists_every_field():
    text = registers_markdown(_map())
    for name in ("CTRL", "STATUS", "DOORBELL", "ERRORS", "WIDE", "opcode", "flags"):
        assert name in text
    assert "| 0x004 | **STATUS** | [0] | busy | ro |" in text


@pytest.mark.parametrize(("make", "message"), [
    (lambda: Field("x", 0, Access.RW, ""), r"Field 'x': width must be in 1\.\.32, not 0"),
    (lambda: Field("x", 2, Access.RO, "", init=1), r"Field 'x': only rw fields have an init"),
    (lambda: Field("x", 2, Access.RW, "", init=4), r"Field 'x': init 4 does not fit 2 bits"),
    (lambda: Field("1x", 2, Access.RW, ""), r"Field name must be an identifier, not '1x'"),
])
def test_field_errors(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_map_errors():
    regmap = RegisterMap("m")
    regmap.add("A", "", Field("x", 20, Access.RW, ""))
    with pytest.raises(ValueError, match="Register 'A' is already in map 'm'"):
        regmap.add("A", "", Field("y", 1, Access.RW, ""))
    with pytest.raises(ValueError, match="fields take 40 bits, more than 32"):
        regmap.add("B", "", Field("x", 20, Access.RW, ""), Field("y", 20, Access.RW, ""))
    with pytest.raises(ValueError, match=r"A\.x = 1048576 does not fit 20 bits"):
        regmap["A"].pack(x=1 << 20)
    with pytest.raises(KeyError, match="register A has no field 'z'"):
        regmap["A"].pack(z=1)
    with pytest.raises(ValueError, match="Register map 'e' is empty"):
        CsrBank(regmap=RegisterMap("e"))
