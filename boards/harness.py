"""Harnesses that let an isolated component be placed and routed honestly.

Synthesis removes logic whose outputs reach no pin and constant-folds inputs that no pin
drives, so a block placed alone must have every signature member connected to the outside
world. Two standard techniques, chosen by how many port bits the block has:

``pins`` (coreblocks' ``signature_resources`` technique)
    Every port member of the component's flattened signature becomes a board resource of its
    own, named by the member's path (``i__payload``, ``o__valid`` ...). Each bit is registered
    once between pad and block, so the clock's Fmax covers the block's register-to-register
    paths and not pad delays, which nextpnr reports apart anyway.

``shift-chain`` (scan-style serialisation, for blocks with more port bits than the package has
balls)
    One ball feeds a shift register whose parallel outputs drive all input bits of the block;
    the output bits are first registered, then folded into a multiple-input signature register
    (``misr[k] <= misr[k-1] ^ out[k]``) whose last bit drives one ball. Every input bit is
    controllable and every output bit observable, so nothing is optimised away, and the only
    logic the harness adds to a timing path is one XOR after the output registers.

Both harnesses count the flip-flops they add (:attr:`harness_ff`), so a report can tell the
block's own flip-flops from the harness's.
"""

import enum
from dataclasses import dataclass

from amaranth import Cat, Const, Elaboratable, Module, Signal, Value
from amaranth.build import Attrs, Pins, Resource
from amaranth.lib import io, wiring
from amaranth.lib.wiring import Flow

__all__ = ["BLOCK_SUBMODULE", "PinsHarness", "PortMember", "ShiftChainHarness", "Technique",
           "make_harness", "port_members"]

#: The harness's name for the block it wraps (the first step of a path into the block).
BLOCK_SUBMODULE = "block"


class Technique(enum.Enum):
    """How a harness brings a block's ports to the package balls."""
    PINS = "pins"
    SHIFT_CHAIN = "shift-chain"


@dataclass(frozen=True)
class PortMember:
    """One port member of a component's flattened signature."""
    path: tuple
    flow: Flow  # as seen from the component: In is driven by the harness
    value: Value

    @property
    def name(self):
        return "__".join(str(item) for item in self.path)

    @property
    def width(self):
        return len(self.value)


def port_members(component):
    """The port members of ``component`` with a signal behind them, in signature order.

    Constant members (the ``ready`` of an ``always_ready`` stream, the ``valid`` of an
    ``always_valid`` one) carry no signal and are left out.
    """
    if not isinstance(component, wiring.Component):
        raise TypeError(f"Harnessed block must be a wiring.Component, not {component!r}")
    members = []
    for path, member, value in component.signature.flatten(component):
        value = Value.cast(value)
        if isinstance(value, Const) or len(value) == 0:
            continue
        members.append(PortMember(path=path, flow=member.flow, value=value))
    return members


def _split_bits(members):
    inputs = [member for member in members if member.flow == Flow.In]
    outputs = [member for member in members if member.flow == Flow.Out]
    return inputs, outputs


def _io_attrs():
    # Any single-ended standard will do for a harness; LVCMOS33 is legal in every ECP5 bank.
    return Attrs(IO_TYPE="LVCMOS33")


class PinsHarness(Elaboratable):
    """Connects every port bit of ``component`` to a ball of its own, through one register.

    Parameters
    ----------
    component : wiring.Component
        The block under measurement.
    balls : sequence of str
        Package balls to use, in order; at least as many as the block has port bits.
    """
    technique = Technique.PINS

    def __init__(self, component, *, balls):
        self._members = port_members(component)
        self._component = component
        width = sum(member.width for member in self._members)
        if width > len(balls):
            raise ValueError(f"Block has {width} port bits but only {len(balls)} balls are "
                             f"available; use the shift-chain technique")
        self._resources = []
        offset = 0
        for member in self._members:
            member_balls = balls[offset:offset + member.width]
            offset += member.width
            direction = "i" if member.flow == Flow.In else "o"
            self._resources.append(Resource(member.name, 0,
                                            Pins(" ".join(member_balls), dir=direction),
                                            _io_attrs()))

    @property
    def resources(self):
        """Board resources, one per port member, named after the member's path."""
        return list(self._resources)

    @property
    def harness_ff(self):
        """Flip-flops the harness adds: one per port bit."""
        return sum(member.width for member in self._members)

    def elaborate(self, platform):
        m = Module()
        m.submodules[BLOCK_SUBMODULE] = self._component
        for member in self._members:
            port = platform.request(member.name, 0, dir="-")
            staged = Signal(member.width, name=f"{member.name}__reg")
            if member.flow == Flow.In:
                m.submodules[f"{member.name}__buf"] = buffer = io.Buffer("i", port)
                m.d.sync += staged.eq(buffer.i)
                m.d.comb += member.value.eq(staged)
            else:
                m.submodules[f"{member.name}__buf"] = buffer = io.Buffer("o", port)
                m.d.sync += staged.eq(member.value)
                m.d.comb += buffer.o.eq(staged)
        return m


class ShiftChainHarness(Elaboratable):
    """Drives all input bits of ``component`` from one scan ball and folds all output bits
    into one signature ball (see the module documentation).

    Parameters
    ----------
    component : wiring.Component
        The block under measurement.
    balls : sequence of str
        Package balls to use; the first two become ``scan_in`` and ``scan_out``.
    """
    technique = Technique.SHIFT_CHAIN

    def __init__(self, component, *, balls):
        if len(balls) < 2:
            raise ValueError(f"Shift-chain harness needs 2 balls, not {len(balls)}")
        self._members = port_members(component)
        self._component = component
        inputs, outputs = _split_bits(self._members)
        self._in_width = sum(member.width for member in inputs)
        self._out_width = sum(member.width for member in outputs)
        if self._out_width == 0:
            raise ValueError("Block has no output bits; nothing of it would survive synthesis")
        self._resources = [
            Resource("scan_in", 0, Pins(balls[0], dir="i"), _io_attrs()),
            Resource("scan_out", 0, Pins(balls[1], dir="o"), _io_attrs()),
        ]

    @property
    def resources(self):
        """Board resources: ``scan_in`` and ``scan_out``."""
        return list(self._resources)

    @property
    def harness_ff(self):
        """Flip-flops the harness adds: the input chain, the output registers, the MISR and
        the ``scan_out`` register."""
        return self._in_width + 2 * self._out_width + 1

    def elaborate(self, platform):
        m = Module()
        m.submodules[BLOCK_SUBMODULE] = self._component
        inputs, outputs = _split_bits(self._members)

        m.submodules.scan_in_buf = scan_in = io.Buffer("i", platform.request("scan_in", 0,
                                                                              dir="-"))
        m.submodules.scan_out_buf = scan_out = io.Buffer("o", platform.request("scan_out", 0,
                                                                                dir="-"))

        if self._in_width > 0:
            in_chain = Signal(self._in_width)
            if self._in_width == 1:
                m.d.sync += in_chain.eq(scan_in.i)
            else:
                m.d.sync += in_chain.eq(Cat(scan_in.i, in_chain[:-1]))
            offset = 0
            for member in inputs:
                m.d.comb += member.value.eq(in_chain[offset:offset + member.width])
                offset += member.width

        captured = Signal(self._out_width)
        m.d.sync += captured.eq(Cat(member.value for member in outputs))
        misr = Signal(self._out_width)
        m.d.sync += misr.eq(Cat(Const(0, 1), misr[:-1]) ^ captured)
        scan_out_reg = Signal()
        m.d.sync += scan_out_reg.eq(misr[-1])
        m.d.comb += scan_out.o.eq(scan_out_reg)
        return m


def make_harness(component, *, balls, technique=None):
    """A harness for ``component``: the ``pins`` technique when the block's port bits fit the
    balls, otherwise ``shift-chain``; ``technique`` forces one."""
    if technique is not None and not isinstance(technique, Technique):
        raise TypeError(f"Technique must be a Technique, not {technique!r}")
    if technique is None:
        width = sum(member.width for member in port_members(component))
        technique = Technique.PINS if width <= len(balls) else Technique.SHIFT_CHAIN
    if technique is Technique.PINS:
        return PinsHarness(component, balls=balls)
    return ShiftChainHarness(component, balls=balls)
