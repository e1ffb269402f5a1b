"""The block registry and ``python -m boards.blocks`` without running the toolchain."""

import importlib.util
import json

import pytest
from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from boards import blocks
from boards.blocks import BLOCKS, Block, get_block, prepare_block
from boards.build import prepare_plan
from boards.harness import Technique

HAVE_FP = importlib.util.find_spec("hw.fp") is not None


class Doubler(wiring.Component):
    a: In(8)
    y: Out(9)

    def elaborate(self, platform):
        m = Module()
        m.d.sync += self.y.eq(self.a << 1)
        return m


def test_registry_names_the_fp_units():
    assert {"fp_add", "fp_mul", "fp_lanes16_add", "fp_lanes16_mul"} <= set(BLOCKS)
    with pytest.raises(KeyError, match=r"Unknown block 'fp_div'; known blocks: fp_add, "):
        get_block("fp_div")


def test_block_is_validated():
    with pytest.raises(ValueError, match=r"^Block name must be an identifier, not 'fp add'$"):
        Block("fp add", "", Doubler)
    with pytest.raises(TypeError, match=r"^Block factory must be callable, not 1$"):
        Block("x", "", 1)
    with pytest.raises(ValueError, match=r"^Router must be one of None, 'router1', 'router2', "
                                         r"not 'router3'$"):
        Block("x", "", Doubler, router="router3")
    with pytest.raises(ValueError, match=r"^Placer must be one of None, 'heap', 'sa', 'static', "
                                         r"not 'electrostatic'$"):
        Block("x", "", Doubler, placer="electrostatic")
    with pytest.raises(ValueError, match=r"^RAM style of 'buffer' must be one of 'block', "
                                         r"'distributed', 'logic', not 'ultra'$"):
        Block("x", "", Doubler, ram_styles={"buffer": "ultra"})
    with pytest.raises(TypeError, match=r"^RAM styles must be a dict of memory paths to "
                                        r"styles, not 'buffer'$"):
        Block("x", "", Doubler, ram_styles="buffer")
    with pytest.raises(TypeError, match=r"^Factory of block 'x' returned 1, not a "
                                        r"wiring.Component$"):
        prepare_block(Block("x", "", lambda: 1))


def test_own_block_prepares_with_facts():
    harness, platform, facts = prepare_block(Block("doubler", "test block", Doubler))
    assert facts == {"block": "doubler", "description": "test block", "technique": "pins",
                     "harness_ff": 17, "port_bits": 17}
    plan = prepare_plan(platform, harness)
    script = plan.files["build_top.sh"]
    assert "--report report.json --timing-allow-fail" in script
    assert "--85k --package CABGA381 --speed 6" in script


@pytest.mark.skipif(not HAVE_FP, reason="hw.fp is not available")
@pytest.mark.parametrize("name", sorted(BLOCKS))
def test_every_registered_block_prepares(name):
    harness, platform, facts = prepare_block(get_block(name))
    # Wide ports (a 512-bit line, AXI, descriptors) do not fit the package's balls.
    expected = (Technique.PINS if name in ("fp_add", "fp_mul", "fp_mul_generic")
                else Technique.SHIFT_CHAIN)
    assert facts["technique"] == expected.value
    plan = prepare_plan(platform, harness)
    assert "top.il" in plan.files and "top.lpf" in plan.files


def test_cli_lists_blocks(capsys):
    assert blocks.main(["--list"]) == 0
    assert "fp_lanes16_add" in capsys.readouterr().out


@pytest.mark.skipif(not HAVE_FP, reason="hw.fp is not available")
def test_cli_no_build_writes_build_files(tmp_path, capsys):
    assert blocks.main(["--block", "fp_add", "--out", str(tmp_path), "--no-build"]) == 0
    assert (tmp_path / "fp_add" / "build_top.sh").exists()
    assert "fp_add: pins harness" in capsys.readouterr().out


def test_cli_no_build_passes_the_blocks_placer_and_router(tmp_path, monkeypatch):
    monkeypatch.setitem(blocks.BLOCKS, "doubler", Block("doubler", "", Doubler,
                                                        placer="static", router="router2"))
    assert blocks.main(["--block", "fp_add", "--block", "doubler", "--out", str(tmp_path),
                        "--no-build"]) == 0
    default = (tmp_path / "fp_add" / "build_top.sh").read_text()
    assert "--router" not in default and "--placer" not in default
    assert ("--timing-allow-fail --placer static --router router2"
            in (tmp_path / "doubler" / "build_top.sh").read_text())


class Buffered(wiring.Component):
    addr: In(4)
    data: In(64)
    y: Out(64)

    def elaborate(self, platform):
        from amaranth.lib import memory
        m = Module()
        m.submodules.buffer = buffer = memory.Memory(shape=64, depth=16, init=[])
        write, read = buffer.write_port(), buffer.read_port()
        m.d.comb += [write.addr.eq(self.addr), write.data.eq(self.data), write.en.eq(1),
                     read.addr.eq(self.addr + 1), self.y.eq(read.data)]
        return m


def test_cli_no_build_passes_the_blocks_ram_styles(tmp_path, monkeypatch):
    monkeypatch.setitem(blocks.BLOCKS, "buffered", Block(
        "buffered", "", Buffered, ram_styles={"buffer": "distributed"}))
    assert blocks.main(["--block", "buffered", "--out", str(tmp_path), "--no-build"]) == 0
    assert ('setattr -set ram_style "distributed" top.block/m:buffer'
            in (tmp_path / "buffered" / "top.ys").read_text())
    assert prepare_block(blocks.BLOCKS["buffered"])[2]["ram_styles"] == {"buffer": "distributed"}
    monkeypatch.setitem(blocks.BLOCKS, "buffered", Block(
        "buffered", "", Buffered, ram_styles={"fifo": "block"}))
    with pytest.raises(ValueError, match=r"^No memory 'block\.fifo' in the design; its "
                                         r"memories: block\.buffer$"):
        blocks.main(["--block", "buffered", "--out", str(tmp_path), "--no-build"])


def test_cli_no_build_passes_nextpnr_extra(tmp_path):
    assert blocks.main(["--block", "fp_add", "--out", str(tmp_path), "--no-build",
                        "--nextpnr-extra", "--router2-heatmap heat/ --seed 3"]) == 0
    script = (tmp_path / "fp_add" / "build_top.sh").read_text()
    assert "--timing-allow-fail --router2-heatmap heat/ --seed 3" in script
    assert blocks.main(["--block", "fp_add", "--out", str(tmp_path), "--no-build",
                        "--nextpnr-extra", "--tmg-ripup"]) == 0
    script = (tmp_path / "fp_add" / "build_top.sh").read_text()
    assert "--timing-allow-fail --tmg-ripup --log" in script


def test_combined_summary_keeps_earlier_blocks(tmp_path):
    blocks._update_combined(tmp_path, {"a": {"x": 1}})
    blocks._update_combined(tmp_path, {"b": {"x": 2}})
    assert json.loads((tmp_path / "summary.json").read_text()) == {"a": {"x": 1},
                                                                   "b": {"x": 2}}
