"""Verilator's linter (-Wall) over every generated top of a preset: `python -m sim.lint [preset]`.

Warnings that Yosys-emitted Verilog raises by construction are waived, scoped to generated
files, in sim/verilator/yosys_waivers.vlt; anything else fails the run.
"""

import argparse
import os
import subprocess
import sys

from hw.tops import designs_for
from sim import tools
from sim.rtl import BUILD_ROOT, emit
from sim.runner import WAIVER_FILE
from sw_model.presets import get_preset


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim.lint")
    parser.add_argument("preset", nargs="?", default="tiny")
    args = parser.parse_args(argv)
    env = {**os.environ, **tools.verilator_env()}
    failed = []
    for design in designs_for(get_preset(args.preset)):
        verilog, _ = emit(design, BUILD_ROOT / "lint" / args.preset)
        result = subprocess.run(
            ["verilator", "--lint-only", "-Wall", "--top-module", design.name,
             str(WAIVER_FILE), str(verilog)],
            capture_output=True, text=True, env=env)
        status = "clean" if result.returncode == 0 and not result.stderr.strip() else "FAILED"
        print(f"lint {design.name:16s} {status}")
        if status != "clean":
            failed.append(design.name)
            print(result.stderr, file=sys.stderr)
    if failed:
        print(f"lint: {len(failed)} top(s) with warnings: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
