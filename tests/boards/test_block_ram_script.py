"""Which memories the Yosys script moves to block RAM."""

import pytest
from amaranth import Module
from amaranth.back import rtlil
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from boards.build import block_ram_script, ram_style_script


class Memories(wiring.Component):
    addr: In(4)
    data: In(512)
    out: Out(512)

    def elaborate(self, platform):
        m = Module()
        shapes = {"wide": (512, 4), "narrow": (8, 16), "shallow": (512, 2), "forwarding": (512, 8)}
        outputs = []
        for name, (width, depth) in shapes.items():
            m.submodules[name] = mem = memory.Memory(shape=width, depth=depth, init=[])
            write = mem.write_port()
            read = mem.read_port(transparent_for=[write] if name == "forwarding" else ())
            m.d.comb += [write.addr.eq(self.addr), write.data.eq(self.data), write.en.eq(1),
                         read.addr.eq(self.addr + 1)]
            outputs.append(read.data)
        m.submodules.rom = rom = memory.Memory(shape=512, depth=8, init=range(8))
        read = rom.read_port()
        m.d.comb += [read.addr.eq(self.addr), self.out.eq(sum(outputs) + read.data)]
        return m


def test_only_wide_written_memories_go_to_block_ram():
    text = rtlil.convert(Memories(), name="top")
    assert block_ram_script(text, min_width=256).splitlines() == [
        'setattr -set ram_style "block" top/m:wide',
        'setattr -set ram_style "block" top/m:forwarding',
    ]
    assert block_ram_script(text, min_width=8, min_depth=2).splitlines() == [
        'setattr -set ram_style "block" top/m:wide',
        'setattr -set ram_style "block" top/m:narrow',
        'setattr -set ram_style "block" top/m:shallow',
        'setattr -set ram_style "block" top/m:forwarding',
    ]


def test_collisions_are_left_undefined_only_on_request_and_never_for_forwarding_ports():
    text = rtlil.convert(Memories(), name="top")
    assert block_ram_script(text, min_width=256, undefined_collisions=True).splitlines() == [
        'setattr -set ram_style "block" top/m:wide',
        "setparam -set COLLISION_X_MASK 1'1 top/r:MEMID=\\wide top/t:$memrd_v2 %i",
        'setattr -set ram_style "block" top/m:forwarding',
    ]


def test_ram_styles_name_memories_by_path_and_come_after_the_block_ram_rule():
    text = rtlil.convert(Memories(), name="top")
    assert ram_style_script(text, {"wide": "distributed", "rom": "logic"}).splitlines() == [
        'setattr -set ram_style "distributed" top/m:wide',
        'setattr -set ram_style "logic" top/m:rom',
    ]
    with pytest.raises(ValueError, match=r"^No memory 'deep' in the design; its memories: "
                                         r"forwarding, narrow, rom, shallow, wide$"):
        ram_style_script(text, {"deep": "block"})
    with pytest.raises(TypeError, match=r"^Memory path must be a non-empty string, not 3$"):
        ram_style_script(text, {3: "block"})
