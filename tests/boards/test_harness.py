"""Harnesses that bring every signature member of an isolated block to package balls."""

import pytest
from amaranth import Elaboratable, Module
from amaranth.lib import data, io, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from boards.block_platform import HARNESS_BALLS, BlockPlatform
from boards.build import prepare_plan
from boards.harness import (
    PinsHarness,
    ShiftChainHarness,
    Technique,
    make_harness,
    port_members,
)


class RegisteredAdder(wiring.Component):
    """A small stand-in block: a stream adder with an always-ready input."""
    i: In(stream.Signature(data.StructLayout({"a": 16, "b": 16}), always_ready=True))
    o: Out(stream.Signature(17, always_ready=True))

    def elaborate(self, platform):
        m = Module()
        m.d.sync += [self.o.payload.eq(self.i.payload.a + self.i.payload.b),
                     self.o.valid.eq(self.i.valid)]
        return m


class WideBlock(wiring.Component):
    """More port bits than the package has balls."""
    a: In(300)
    y: Out(300)

    def elaborate(self, platform):
        m = Module()
        m.d.sync += self.y.eq(self.a ^ (self.a >> 1))
        return m


def test_port_members_skip_constant_members():
    members = port_members(RegisteredAdder())
    assert [(member.name, member.flow.name, member.width) for member in members] == [
        ("i__payload", "In", 32), ("i__valid", "In", 1),
        ("o__payload", "Out", 17), ("o__valid", "Out", 1),
    ]


def test_technique_follows_port_width():
    assert make_harness(RegisteredAdder(), balls=HARNESS_BALLS).technique is Technique.PINS
    assert make_harness(WideBlock(), balls=HARNESS_BALLS).technique is Technique.SHIFT_CHAIN
    forced = make_harness(RegisteredAdder(), balls=HARNESS_BALLS,
                          technique=Technique.SHIFT_CHAIN)
    assert isinstance(forced, ShiftChainHarness)


def test_pins_harness_constrains_every_bit():
    harness = PinsHarness(RegisteredAdder(), balls=HARNESS_BALLS)
    assert harness.harness_ff == 51
    platform = BlockPlatform(resources=harness.resources, clock_frequency=100e6)
    lpf = prepare_plan(platform, harness).files["top.lpf"]
    assert lpf.count("LOCATE COMP") == 51 + 1
    assert 'LOCATE COMP "i__payload_0__io[31]"' in lpf
    assert 'FREQUENCY PORT "clk_0__io" 100000000.0 HZ;' in lpf


def test_shift_chain_harness_uses_two_balls():
    harness = ShiftChainHarness(WideBlock(), balls=HARNESS_BALLS)
    assert harness.harness_ff == 300 + 2 * 300 + 1
    platform = BlockPlatform(resources=harness.resources)
    lpf = prepare_plan(platform, harness).files["top.lpf"]
    assert lpf.count("LOCATE COMP") == 3


def test_harness_errors():
    with pytest.raises(ValueError, match=r"^Block has 600 port bits but only 191 balls are "
                                         r"available; use the shift-chain technique$"):
        PinsHarness(WideBlock(), balls=HARNESS_BALLS)
    with pytest.raises(TypeError, match=r"^Harnessed block must be a wiring.Component, "
                                        r"not 1$"):
        port_members(1)
    with pytest.raises(TypeError, match=r"^Technique must be a Technique, not 'pins'$"):
        make_harness(RegisteredAdder(), balls=HARNESS_BALLS, technique="pins")
    with pytest.raises(ValueError, match=r"^Clock frequency must be a positive number of Hz, "
                                         r"not 0$"):
        BlockPlatform(resources=[], clock_frequency=0)


class _ScanPorts:
    """Stands in for a platform: scan_in and scan_out become simulation ports."""
    def __init__(self):
        self.ports = {"scan_in": io.SimulationPort("i", 1), "scan_out": io.SimulationPort("o", 1)}

    def request(self, name, number=0, *, dir):
        return self.ports[name]


class _Elaborated(Elaboratable):
    def __init__(self, harness, platform):
        self.harness, self.platform = harness, platform

    def elaborate(self, platform):
        return self.harness.elaborate(self.platform)


def _scan(bits_in, cycles):
    """Shift ``bits_in`` into a shift-chain harnessed 5-bit register; return what the block
    saw and the scan_out bits."""
    class Register(wiring.Component):
        a: In(5)
        y: Out(5)

        def elaborate(self, platform):
            m = Module()
            m.d.sync += self.y.eq(self.a)
            return m

    block = Register()
    ports = _ScanPorts()
    top = _Elaborated(ShiftChainHarness(block, balls=HARNESS_BALLS), ports)
    seen = {}
    out = []

    async def testbench(ctx):
        for bit in bits_in:
            ctx.set(ports.ports["scan_in"].i, bit)
            await ctx.tick()
        seen["a"] = ctx.get(block.a)
        for _ in range(cycles):
            await ctx.tick()
            out.append(ctx.get(ports.ports["scan_out"].o))

    sim = Simulator(top)
    sim.add_clock(1e-6)
    sim.add_testbench(testbench)
    sim.run()
    return seen["a"], out


def test_shift_chain_controls_every_input_and_observes_every_output():
    # The first bit shifted in ends up in the most significant input bit.
    seen, _ = _scan([1, 0, 1, 1, 0], cycles=0)
    assert seen == 0b10110
    # Every output bit reaches scan_out: flipping any one input bit changes the scan stream.
    _, reference = _scan([0, 0, 0, 0, 0], cycles=12)
    for flipped in range(5):
        bits = [int(k == flipped) for k in range(5)]
        _, stream_out = _scan(bits, cycles=12)
        assert stream_out != reference
