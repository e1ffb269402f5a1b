"""The ``emb`` board design's memories, as its build maps them (checked without a toolchain).

Place and route of the design takes 20 minutes or more, so a design change that puts more in
block RAM would otherwise go unnoticed until then. A 512-bit memory takes 15 block RAMs
whatever its depth, and they lie along a row of the die: with its FIFOs in block RAM the
design did not route. The build keeps memories of at most 16 lines in LUT RAM, where a
16-word slice holds 4 bits of each word.
"""

import importlib.util
import math

import pytest

from boards import synth
from boards.build import memories, prepare_plan
from boards.platforms import get_board

HAVE_EMB = importlib.util.find_spec("hw.emb.update") is not None

# DP16KD as Yosys uses it for wide memories: 36 bits by 512 words.
_EBR_WIDTH, _EBR_DEPTH = 36, 512


def block_rams(rtlil, *, min_width, min_depth):
    """{memory: DP16KD count} for the memories Yosys puts in block RAM: those the build
    marks (``block_ram_min_width``, ``block_ram_min_depth``) and the wide ROMs, which it maps
    there by itself."""
    return {f"{module}/{name}": math.ceil(width / _EBR_WIDTH) * math.ceil(depth / _EBR_DEPTH)
            for module, name, width, depth, _, _ in memories(rtlil)
            if width >= min_width and depth >= min_depth}


@pytest.mark.skipif(not HAVE_EMB, reason="the update engine is not available")
def test_emb_design_keeps_only_the_memory_in_block_ram():
    options = synth._BUILD_OPTIONS["emb"]
    platform = get_board("ulx3s-85f").make_platform()
    plan = prepare_plan(platform, synth.make_emb_top(), **options)
    counts = block_rams(plan.files["top.il"], min_width=options["block_ram_min_width"],
                        min_depth=options["block_ram_min_depth"])
    listing = "\n".join(f"{count:4} {name}" for name, count in sorted(counts.items()))
    # The 105-line memory standing in for PMEM; Yosys' synthesis adds 4 DP16KD of ROMs
    # (19 in all). The engines' FIFOs and buffers are in LUT RAM.
    assert counts == {"top.bist.self_test.dut_0.memory/lines": 15}, listing
