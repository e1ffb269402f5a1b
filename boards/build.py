"""Runs one open-toolchain ECP5 build and writes its ``summary.json``.

The nextpnr options are passed through Amaranth's override mechanism (``nextpnr_opts``), so the
build script Amaranth generates stays the one users know: Yosys ``synth_ecp5``, then
``nextpnr-ecp5 --report report.json``, then ``ecppack``. Timing is allowed to fail in nextpnr
so a block that misses the target still yields its achieved Fmax; the summary records whether
the target was met, and callers decide whether that is an error.
"""

import itertools
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

from hw.fanout import KEEP_REPLICAS_SCRIPT

from .nextpnr_report import load_report, summarise_report
from .router_watch import RouterDivergence, RoutingDiverged, run_watched
from .toolchain import open_toolchain_env, using_open_toolchain

__all__ = ["PLACERS", "RAM_STYLES", "REPORT_FILE", "ROUTERS", "STAT_FILE", "SUMMARY_FILE",
           "add_keep_routing_argument", "add_nextpnr_extra_argument", "block_ram_script",
           "check_place_and_route", "check_ram_styles", "diverged_message", "ecp5_capacity",
           "memories", "parse_build_arguments", "prepare_plan", "ram_style_script",
           "run_ecp5_build", "run_ecp5_synthesis", "source_revision", "synthesis_utilization",
           "write_summary"]


REPORT_FILE = "report.json"
STAT_FILE = "stat.json"
SUMMARY_FILE = "summary.json"

# LUT4s, block RAMs (DP16KD) and 18x18 multipliers of the ECP5 sizes (Lattice's family data
# sheet); an ECP5 has one flip-flop per LUT4.
_ECP5_SIZES = {"12": (12_096, 32, 28), "25": (24_288, 56, 28), "45": (43_848, 108, 72),
               "85": (83_640, 208, 156)}

_NEXTPNR_OPTS = f"--report {REPORT_FILE} --timing-allow-fail"

#: nextpnr-ecp5's placers and routers (``None``: its default, heap and router1).
PLACERS = (None, "heap", "sa", "static")
ROUTERS = (None, "router1", "router2")


def check_place_and_route(placer, router):
    """Raise ``ValueError`` unless ``placer`` and ``router`` are among nextpnr's."""
    for kind, value, choices in (("Placer", placer, PLACERS), ("Router", router, ROUTERS)):
        if value not in choices:
            raise ValueError(f"{kind} must be one of {', '.join(map(repr, choices))}, not "
                             f"{value!r}")


#: Yosys ``ram_style`` values a memory may be given (:func:`ram_style_script`).
RAM_STYLES = ("block", "distributed", "logic")


def check_ram_styles(ram_styles):
    """Raise unless ``ram_styles`` is ``None`` or a dict {memory path: one of
    :data:`RAM_STYLES`}; return it as a dict."""
    if ram_styles is None:
        return {}
    if not isinstance(ram_styles, dict):
        raise TypeError(f"RAM styles must be a dict of memory paths to styles, not "
                        f"{ram_styles!r}")
    for path, style in ram_styles.items():
        if not isinstance(path, str) or not path:
            raise TypeError(f"Memory path must be a non-empty string, not {path!r}")
        if style not in RAM_STYLES:
            raise ValueError(f"RAM style of {path!r} must be one of "
                             f"{', '.join(map(repr, RAM_STYLES))}, not {style!r}")
    return dict(ram_styles)


def prepare_plan(platform, top, *, name="top", block_ram_min_width=None,
                 block_ram_min_depth=3, undefined_collisions=False, ram_styles=None,
                 placer=None, router=None, nextpnr_extra=(), **overrides):
    """``platform.build(top, do_build=False)`` with the open toolchain selected.

    For ECP5 platforms the nextpnr report options are added (and ``--placer placer``,
    ``--router router`` (:data:`PLACERS`, :data:`ROUTERS`), then the arguments in
    ``nextpnr_extra``, such as ``("--placer-heap-beta", "0.7")``), and with
    ``block_ram_min_width`` the Yosys script puts written memories at least that wide and
    ``block_ram_min_depth`` words deep in block RAM (:func:`block_ram_script`, which also
    explains ``undefined_collisions``; the rules are made from the plan's own RTLIL). ``ram_styles``
    ({memory path below ``top``: style}, :func:`ram_style_script`) places single memories,
    after and over the block-RAM rule. Flip-flops copied per consumer
    (:func:`hw.fanout.replicated_register`) are kept apart (:data:`hw.fanout.KEEP_REPLICAS_SCRIPT`).
    ``overrides`` are passed on to Amaranth's template overrides.
    """
    check_place_and_route(placer, router)
    ram_styles = check_ram_styles(ram_styles)
    memory_rules = False
    if getattr(platform, "family", None) == "ecp5":
        options = [_NEXTPNR_OPTS, *([] if placer is None else ["--placer", placer]),
                   *([] if router is None else ["--router", router]),
                   *map(shlex.quote, nextpnr_extra)]
        overrides.setdefault("nextpnr_opts", " ".join(options))
        memory_rules = block_ram_min_width is not None or bool(ram_styles)
        # The memory rules need the design's RTLIL, which only the plan holds: a placeholder
        # now, the rules once the plan is made (elaborating the design once, not twice).
        overrides["script_after_read"] = "\n".join(
            [KEEP_REPLICAS_SCRIPT, *([_MEMORY_RULES] if memory_rules else [])])
    with using_open_toolchain():
        plan = platform.build(top, name=name, do_build=False, **overrides)
    if memory_rules:
        rtlil = plan.files[f"{name}.il"]
        rules = []
        if block_ram_min_width is not None:
            rules.append(block_ram_script(
                rtlil, min_width=block_ram_min_width, min_depth=block_ram_min_depth,
                undefined_collisions=undefined_collisions))
        rules.append(ram_style_script(rtlil, ram_styles, top=name))
        script = plan.files[f"{name}.ys"]
        assert script.count(_MEMORY_RULES) == 1, "the Yosys script lost its placeholder"
        plan.files[f"{name}.ys"] = script.replace(_MEMORY_RULES,
                                                  "\n".join(filter(None, rules)))
    return plan


#: Where :func:`prepare_plan` puts the memory rules, in the Yosys script Amaranth writes.
_MEMORY_RULES = "# trainingcxl: block-RAM and RAM-style rules"


_MEMORY = re.compile(r"^  memory width (\d+) size (\d+) \\(\S+)$", re.M)
_PORT = re.compile(r"^  cell \$(memrd|memwr)_v2 \S+\n((?:    .*\n)*?)  end$", re.M)
_PARAMETER = re.compile(r"^    parameter \\(\w+) (.*)$", re.M)


def _memory_ports(module):
    """{memory name: (read port transparency masks, write port count)} of one RTLIL module."""
    ports = {}
    for kind, body in _PORT.findall(module):
        parameters = dict(_PARAMETER.findall(body))
        name = parameters["MEMID"].strip('"').removeprefix("\\\\")
        reads, writes = ports.get(name, ((), 0))
        if kind == "memrd":
            reads += (parameters["TRANSPARENCY_MASK"],)
        else:
            writes += 1
        ports[name] = (reads, writes)
    return ports


def memories(rtlil):
    """Every memory of ``rtlil`` (Amaranth's RTLIL text): ``(module, name, width, depth,
    read port transparency masks, write port count)``."""
    for module in rtlil.split("\nmodule ")[1:]:
        module_name = module.split("\n", 1)[0].strip().removeprefix("\\")
        ports = _memory_ports(module)
        for width, depth, name in _MEMORY.findall(module):
            reads, writes = ports.get(name, ((), 0))
            yield module_name, name, int(width), int(depth), reads, writes


def block_ram_script(rtlil, *, min_width, min_depth=3, undefined_collisions=False):
    """Yosys commands that put every written memory of at least ``min_width`` bits and
    ``min_depth`` words of ``rtlil`` (Amaranth's RTLIL text) in block RAM.

    Yosys keeps wide, shallow memories (FIFOs, reorder buffers) in LUT RAM, where 4 bits of
    16 words take six LUT slots; a design crowded with FP32 lanes runs out of LUTs long
    before it runs out of block RAM. ROMs are left to Yosys.

    ECP5 block RAM does not define a read of the word being written through the other port,
    so Yosys adds a bypass (a register and a multiplexer per bit) to every non-transparent
    read port. With ``undefined_collisions`` such reads are declared undefined instead (their
    ``COLLISION_X_MASK``), which is only right for designs that never use them: Amaranth's
    ``SyncFIFOBuffered`` reads only words written in earlier cycles, for instance.
    """
    commands = []
    for module_name, name, width, depth, reads, writes in memories(rtlil):
        if width < min_width or depth < min_depth or not writes:
            continue
        commands.append(f'setattr -set ram_style "block" {module_name}/m:{name}')
        if undefined_collisions and all("1" not in mask.split("'")[1] for mask in reads):
            commands.append(f"setparam -set COLLISION_X_MASK {writes}'{'1' * writes} "
                            f"{module_name}/r:MEMID=\\{name} {module_name}/t:$memrd_v2 %i")
    return "\n".join(commands)


def ram_style_script(rtlil, ram_styles, *, top="top"):
    """Yosys commands that give each memory of ``rtlil`` named in ``ram_styles`` its
    ``ram_style``. A memory's path is its place below ``top``, dotted, ending in its name
    (``"block.tap.buffer.storage"``); an unknown path raises ``ValueError`` listing the
    memories there are."""
    paths = {}
    for module_name, name, *_ in memories(rtlil):
        below = module_name[len(top) + 1:] if module_name.startswith(f"{top}.") else ""
        paths[f"{below}.{name}" if below else name] = (module_name, name)
    commands = []
    for path, style in check_ram_styles(ram_styles).items():
        if path not in paths:
            raise ValueError(f"No memory {path!r} in the design; its memories: "
                             f"{', '.join(sorted(paths)) or 'none'}")
        module_name, name = paths[path]
        commands.append(f'setattr -set ram_style "{style}" {module_name}/m:{name}')
    return "\n".join(commands)


def source_revision():
    """``git describe --always --dirty`` of the working tree, so figures tracked over time say
    which sources they measured; ``None`` outside a git checkout."""
    try:
        result = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True,
                                text=True, check=True, cwd=Path(__file__).parent)
    except (OSError, subprocess.CalledProcessError):
        return None
    return result.stdout.strip()


def write_summary(path, summary):
    """Write ``summary`` as indented JSON, creating the parent directory."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")


def ecp5_capacity(device):
    """{"LUT4", "FF", "EBR", "DSP": count} of an ECP5 ``device`` (``"LFE5U-85F"``...)."""
    match = re.search(r"-(\d+)F$", device)
    if match is None or match.group(1) not in _ECP5_SIZES:
        raise ValueError(f"Unknown ECP5 device {device!r}")
    luts, ebr, dsp = _ECP5_SIZES[match.group(1)]
    return {"LUT4": luts, "FF": luts, "EBR": ebr, "DSP": dsp}


def synthesis_utilization(cells, device):
    """Utilisation of ``device`` (``"LFE5U-85F"``...) from Yosys' ECP5 cell counts (``cells``:
    {cell type: count}), counted as nextpnr counts LUT4s before packing: one per ``LUT4``,
    two per ``CCU2C`` carry cell and six per ``TRELLIS_DPR16X4`` (four of RAM, two of write
    port)."""
    available = ecp5_capacity(device)
    used = resource_counts(cells)
    return {kind: {"used": used[kind], "available": available[kind]} for kind in used}


def resource_counts(cells):
    """{"LUT4", "FF", "EBR", "DSP": count} of Yosys' ECP5 cell counts ``cells`` ({cell type:
    count}), LUT4s counted as :func:`synthesis_utilization` says."""
    lut4 = (cells.get("LUT4", 0) + 2 * cells.get("CCU2C", 0)
            + 6 * cells.get("TRELLIS_DPR16X4", 0))
    return {"LUT4": lut4, "FF": cells.get("TRELLIS_FF", 0), "EBR": cells.get("DP16KD", 0),
            "DSP": cells.get("MULT18X18D", 0)}


def _check_ecp5(platform):
    if getattr(platform, "family", None) != "ecp5":
        raise ValueError(f"The open-toolchain build is for ECP5 platforms, not {platform!r}")


def _build_facts(platform, revision, seconds):
    """The summary fields every open-toolchain run records (``revision``: the sources' at the
    start, as the design was elaborated from them; a build takes long enough for a commit to
    land before it ends)."""
    return {
        "device": f"{platform.device}-{platform.speed}{platform.package}",
        "source_revision": revision,
        "build_seconds": round(seconds, 1),
    }


def run_ecp5_synthesis(platform, top, *, build_dir, name="top", extra_summary=None,
                       block_ram_min_width=None, block_ram_min_depth=3,
                       undefined_collisions=False, ram_styles=None):
    """Synthesize ``top`` for ``platform`` with Yosys alone (minutes, where place and route
    of a large design takes an hour or more) and summarise its cell counts.

    Returns the summary (also written to ``build_dir/summary.json``): ``utilization`` as
    :func:`synthesis_utilization` counts it, ``cells`` (every cell type), ``placed: False``,
    the device, the revision and the seconds taken, and ``extra_summary``.
    """
    _check_ecp5(platform)
    revision = source_revision()
    build_dir = Path(build_dir)
    plan = prepare_plan(platform, top, name=name, block_ram_min_width=block_ram_min_width,
                        block_ram_min_depth=block_ram_min_depth,
                        undefined_collisions=undefined_collisions, ram_styles=ram_styles,
                        script_after_synth=f"tee -q -o {STAT_FILE} stat -json")
    plan.extract(str(build_dir))
    env = open_toolchain_env()
    started = time.monotonic()
    subprocess.run([env["YOSYS"], "-q", "-l", f"{name}.rpt", f"{name}.ys"], cwd=build_dir,
                   env=env, check=True)
    seconds = time.monotonic() - started

    stat = json.loads((build_dir / STAT_FILE).read_text())
    cells = stat["modules"][f"\\{name}"]["num_cells_by_type"]
    summary = {
        "placed": False,
        "utilization": synthesis_utilization(cells, platform.device),
        "cells": {kind: count for kind, count in sorted(cells.items())
                  if not kind.startswith("$")},
        **_build_facts(platform, revision, seconds),
    }
    summary.update(extra_summary or {})
    write_summary(build_dir / SUMMARY_FILE, summary)
    return summary


def add_nextpnr_extra_argument(parser):
    """The ``--nextpnr-extra ARGS`` option of the build commands (a list, ``[]`` if absent);
    parse with :func:`parse_build_arguments`."""
    parser.add_argument("--nextpnr-extra", type=shlex.split, default=[], metavar="ARGS",
                        help="more nextpnr arguments, one quoted string (e.g. "
                             "'--router2-heatmap heat/ --seed 2'; relative paths are in the "
                             "build directory)")


def add_keep_routing_argument(parser):
    """The ``--keep-routing`` option of the build commands: do not stop a build whose router2
    diverges (:mod:`boards.router_watch`)."""
    parser.add_argument("--keep-routing", action="store_true",
                        help="let nextpnr's router2 go on when its overused wires keep rising "
                             "(by default the build stops there: the placement will not route)")


def diverged_message(stopped, *, next_seed=2):
    """The error a build command prints for a :class:`~boards.router_watch.RoutingDiverged`
    (``next_seed``: the seed it suggests trying)."""
    return (f"error: {stopped}; the build was stopped. Another nextpnr seed places the design "
            f"anew and may route it (--nextpnr-extra \"--seed {next_seed}\"); --keep-routing "
            f"lets router2 go on.")


def parse_build_arguments(parser, argv=None):
    """``parser.parse_args(argv)`` (``argv`` defaults to the command line), taking the word
    after ``--nextpnr-extra`` as its value even when it is a single option such as
    ``--tmg-ripup``: argparse would read that as an option of the command's own and stop
    with "expected one argument"."""
    words = iter(sys.argv[1:] if argv is None else argv)
    joined = []
    for word in words:
        value = next(words, None) if word == "--nextpnr-extra" else None
        joined.append(word if value is None else f"{word}={value}")
    return parser.parse_args(joined)


def _make_heatmap_directory(build_dir, nextpnr_extra):
    """nextpnr writes router2 heatmaps to ``<prefix>...`` but does not make the prefix's
    directory: make it (relative prefixes are in the build directory)."""
    for option, prefix in itertools.pairwise(nextpnr_extra):
        if option == "--router2-heatmap" and os.path.dirname(prefix):
            (Path(build_dir) / os.path.dirname(prefix)).mkdir(parents=True, exist_ok=True)


def run_ecp5_build(platform, top, *, build_dir, name="top", extra_summary=None,
                   block_ram_min_width=None, block_ram_min_depth=3,
                   undefined_collisions=False, ram_styles=None, placer=None, router=None,
                   nextpnr_extra=(), stop_diverging=True):
    """Build ``top`` for ``platform`` in ``build_dir`` and summarise nextpnr's report
    (``block_ram_min_width``, ``block_ram_min_depth``, ``undefined_collisions``,
    ``ram_styles``, ``placer``, ``router``, ``nextpnr_extra``: see :func:`prepare_plan`).

    With ``stop_diverging`` the build is stopped once router2 no longer converges
    (:mod:`boards.router_watch`): :class:`~boards.router_watch.RoutingDiverged` is raised, and
    ``summary.json`` says ``"built": false`` and why (``stopped``).

    Returns the summary (also written to ``build_dir/summary.json``): the fields of
    :func:`boards.nextpnr_report.summarise_report`, the placer and router, the device, the
    build's wall-clock
    seconds, the paths of the report and the bitstream, and ``extra_summary``.
    """
    _check_ecp5(platform)
    revision = source_revision()
    build_dir = Path(build_dir)
    plan = prepare_plan(platform, top, name=name, block_ram_min_width=block_ram_min_width,
                        block_ram_min_depth=block_ram_min_depth,
                        undefined_collisions=undefined_collisions, ram_styles=ram_styles,
                        placer=placer, router=router, nextpnr_extra=nextpnr_extra)
    _make_heatmap_directory(build_dir, nextpnr_extra)
    place_and_route = {"placer": placer or "heap", "router": router or "router1"}  # (defaults)
    started = time.monotonic()
    build_dir = Path(plan.extract(str(build_dir)))
    try:
        run_watched(["sh", f"{plan.script}.sh"], cwd=build_dir, env=open_toolchain_env(),
                    log=f"{name}.tim", check=RouterDivergence() if stop_diverging else None)
    except RoutingDiverged as stopped:
        write_summary(build_dir / SUMMARY_FILE, {
            **_build_facts(platform, revision, time.monotonic() - started), **place_and_route,
            **(extra_summary or {}), "built": False, "stopped": str(stopped)})
        raise
    seconds = time.monotonic() - started

    summary = summarise_report(load_report(build_dir / REPORT_FILE))
    summary.update({
        **_build_facts(platform, revision, seconds),
        **place_and_route,
        "report": str(build_dir / REPORT_FILE),
        "bitstream": str(build_dir / f"{name}.bit"),
    })
    summary.update(extra_summary or {})
    write_summary(build_dir / SUMMARY_FILE, summary)
    return summary
