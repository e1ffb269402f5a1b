"""The register bank: an AXI4-Lite subordinate holding the fields of a `RegisterMap`."""

from amaranth import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..mem.axi import AXI4LiteSignature
from .map import WORD_BITS, Access, RegisterMap

__all__ = ["CsrBank"]

def _field_members(register) -> dict:
    members = {}
    for f in register.fields:
        if f.access is Access.RW:
            members[f.name] = Out(f.width, init=f.init)
        elif f.access is Access.RO:
            members[f.name] = In(f.width)
        elif f.access is Access.PULSE:
            members[f.name] = Out(f.width)            # the written value, valid with the strobe
            members[f"{f.name}_stb"] = Out(1)
        else:  # W1C
            members[f.name] = Out(f.width)            # the sticky flags
            members[f"{f.name}_set"] = In(f.width)    # hardware sets flags (one cycle pulses)
    return members


class CsrBank(wiring.Component):
    """Registers of ``regmap`` behind an AXI4-Lite port (32-bit data, word-aligned).

    Members
    -------
    bus : ``In(AXI4LiteSignature(addr_width=regmap.addr_width, data_width=32))``
        Reads and writes complete in one cycle after the address (and data) handshake; an
        address outside the map answers DECERR and changes nothing. Byte strobes apply.
    regs : ``Out(...)``, one sub-interface per register, one member per field:
        ``rw`` fields are outputs, ``ro`` fields inputs, a ``pulse`` field is an output with a
        ``<name>_stb`` strobe, a ``w1c`` field an output of sticky flags with a ``<name>_set``
        input.
    """

    def __init__(self, *, regmap):
        if not isinstance(regmap, RegisterMap):
            raise TypeError(f"regmap must be a RegisterMap, not {regmap!r}")
        if not regmap.registers:
            raise ValueError(f"Register map {regmap.name!r} is empty")
        self._map = regmap
        super().__init__({
            "bus": In(AXI4LiteSignature(addr_width=regmap.addr_width, data_width=WORD_BITS)),
            "regs": Out(wiring.Signature({
                r.name: Out(wiring.Signature(_field_members(r))) for r in regmap
            })),
        })

    @property
    def regmap(self):
        return self._map

    def elaborate(self, platform):
        m = Module()
        bus, regs = self.bus, self.regs

        # Byte strobes as a bit mask over the data word.
        write_mask = Cat(*(bus.wstrb[i].replicate(8) for i in range(WORD_BITS // 8)))
        write_fire = bus.awvalid & bus.wvalid & ~bus.bvalid
        read_fire = bus.arvalid & ~bus.rvalid
        m.d.comb += [bus.awready.eq(write_fire), bus.wready.eq(write_fire),
                     bus.arready.eq(~bus.rvalid)]
        write_index = bus.awaddr[2:]
        read_index = bus.araddr[2:]

        read_words = []
        for index, register in enumerate(self._map):
            port = getattr(regs, register.name)
            selected = write_fire & (write_index == index)
            word = Signal(WORD_BITS, name=f"{register.name}_word")
            for f, offset in zip(register.fields, register.field_offsets().values(),
                                 strict=True):
                value = getattr(port, f.name)
                data = bus.wdata[offset:offset + f.width]
                mask = write_mask[offset:offset + f.width]
                if f.access is Access.RW:
                    with m.If(selected):
                        m.d.sync += value.eq((value & ~mask) | (data & mask))
                    m.d.comb += word[offset:offset + f.width].eq(value)
                elif f.access is Access.RO:
                    m.d.comb += word[offset:offset + f.width].eq(value)
                elif f.access is Access.PULSE:
                    m.d.comb += [value.eq(data & mask),
                                 getattr(port, f"{f.name}_stb").eq(selected & mask.any())]
                else:  # W1C: hardware sets win over a simultaneous host clear
                    cleared = Signal(f.width, name=f"{register.name}_{f.name}_clear")
                    m.d.comb += cleared.eq(data & mask & selected.replicate(f.width))
                    m.d.sync += value.eq((value & ~cleared) | getattr(port, f"{f.name}_set"))
                    m.d.comb += word[offset:offset + f.width].eq(value)
            read_words.append(word)

        with m.If(write_fire):
            m.d.sync += [bus.bvalid.eq(1),
                         bus.bresp.eq(_resp(write_index, len(read_words)))]
        with m.Elif(bus.bready):
            m.d.sync += bus.bvalid.eq(0)

        with m.If(read_fire):
            m.d.sync += [bus.rvalid.eq(1), bus.rresp.eq(_resp(read_index, len(read_words))),
                         bus.rdata.eq(0)]
            with m.Switch(read_index):
                for index, word in enumerate(read_words):
                    with m.Case(index):
                        m.d.sync += bus.rdata.eq(word)
        with m.Elif(bus.rready):
            m.d.sync += bus.rvalid.eq(0)
        return m


def _resp(index, count):
    """OKAY (0b00) inside the map, DECERR (0b11) outside."""
    return (index >= count).replicate(2)
