"""Named top-level designs, each configured from a preset (`sw_model.presets`).

The same registry drives `nox -s rtl` (Verilog + JSON sidecar per top), `nox -s lint`
(Verilator's linter over every top) and the testbenches, so a preset means the same hardware
everywhere.

    python -m hw.tops tiny                 every top for the tiny preset
    python -m hw.tops rm2 --top fp_lanes   one top
"""

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from hw.device import device_params
from sim.rtl import BUILD_ROOT, Design, emit
from sw_model.presets import PRESETS, Preset, get_preset

__all__ = ["TOPS", "designs_for"]

LINE_FLOATS = 16  # one 64-byte line of float32


def _fp_lanes(op: str) -> Callable[[Preset], Design]:
    return lambda preset: Design(f"fp_lanes_{op}", "hw.fp:FPLanes",
                                 {"op": op, "lanes": LINE_FLOATS})


TOPS: dict[str, Callable[[Preset], Design]] = {
    "fp_add": lambda preset: Design("fp_add", "hw.fp:FPAdd", {}),
    "fp_mul": lambda preset: Design("fp_mul", "hw.fp:FPMul", {}),
    "fp_lanes_add": _fp_lanes("add"),
    "fp_lanes_mul": _fp_lanes("mul"),
    "emb_engine": lambda preset: Design("emb_engine", "hw.emb.engine:EmbeddingEngine", {
        "max_tables": preset.num_tables, "max_dim": preset.dim}),
    "cxl_frontend": lambda preset: Design("cxl_frontend", "hw.cxl.frontend:CxlMemFrontEnd", {}),
    # The whole device as the demo and tb/device run it (tb/device/system.py adds memory).
    "device": lambda preset: Design("device", "hw.device:TrainingCxlDevice",
                                    device_params(preset)),
}


def designs_for(preset: Preset, names: list[str] | None = None) -> list[Design]:
    unknown = sorted(set(names or []) - set(TOPS))
    if unknown:
        raise ValueError(f"unknown top {', '.join(unknown)}; tops: {', '.join(TOPS)}")
    return [TOPS[name](preset) for name in (names or TOPS)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hw.tops", description=__doc__.split("\n")[0])
    parser.add_argument("preset", nargs="?", default="tiny",
                        help=f"one of {', '.join(PRESETS)} (default: tiny)")
    parser.add_argument("--top", action="append", help=f"only this top ({', '.join(TOPS)})")
    parser.add_argument("--out", type=Path, default=None,
                        help="output directory (default: build/rtl/<preset>)")
    args = parser.parse_args(argv)
    try:
        preset = get_preset(args.preset)
        designs = designs_for(preset, args.top)
    except ValueError as error:
        parser.error(str(error))
    out = args.out or BUILD_ROOT / "rtl" / preset.name
    for design in designs:
        verilog, sidecar = emit(design, out)
        print(f"{design.name:16s} {verilog}  {sidecar}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
