"""The ``emb`` board design must fit the ULX3S-85F's block RAM (checked without a toolchain).

Place and route of the design takes an hour, so a design change that needs more block RAM
than the LFE5U-85F has would otherwise go unnoticed until then: a 512-bit memory takes 15
block RAMs whatever its depth, and each new 512-bit FIFO moves the design 15 closer to the
208 there are.
"""

import importlib.util
import math

import pytest

from boards import synth
from boards.build import ecp5_capacity, memories, prepare_plan
from boards.platforms import get_board

HAVE_EMB = importlib.util.find_spec("hw.emb.update") is not None

# DP16KD as Yosys uses it for wide memories: 36 bits by 512 words.
_EBR_WIDTH, _EBR_DEPTH = 36, 512


def block_rams(rtlil, *, min_width):
    """{memory: DP16KD count} for the memories Yosys puts in block RAM: those the build
    marks (``block_ram_min_width``) and the wide ROMs, which it maps there by itself."""
    return {f"{module}/{name}": math.ceil(width / _EBR_WIDTH) * math.ceil(depth / _EBR_DEPTH)
            for module, name, width, depth, _, _ in memories(rtlil)
            if width >= min_width and depth >= 3}


@pytest.mark.skipif(not HAVE_EMB, reason="the update engine is not available")
def test_emb_design_fits_the_85f_block_ram():
    options = synth._BUILD_OPTIONS["emb"]
    platform = get_board("ulx3s-85f").make_platform()
    plan = prepare_plan(platform, synth.make_emb_top(), **options)
    counts = block_rams(plan.files["top.il"], min_width=options["block_ram_min_width"])
    # An estimate: this counts 135 here, where Yosys' synthesis gave 150 DP16KD (small ROMs
    # go to LUTs; a memory with byte enables or two write ports can take more than 15), and
    # 60 and 105 with the lookup or update engine alone (boards.synth --engine), as Yosys did.
    total = sum(counts.values())
    listing = "\n".join(f"{count:4} {name}" for name, count in sorted(counts.items()))
    available = ecp5_capacity(platform.device)["EBR"]
    assert total <= available, f"{total} block RAMs of {available}:\n{listing}"
    # The update engine's word streams share one buffer, not a 512-bit FIFO each.
    assert sum("update.router" in name for name in counts) == 3, listing
