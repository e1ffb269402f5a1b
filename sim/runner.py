"""The one runner every cocotb testbench goes through.

``run(design, "tb.fp.cocotb_fp")`` emits the design's Verilog (``sim.rtl``), builds it with
Verilator once per configuration into ``build/sim/<name>/<key>[-internal][-<trace>]/`` and
reuses that build while the Verilog and flags are unchanged, runs the cocotb module through
``cocotb_tools.runner``, and raises :class:`SimulationFailed` when the results file is missing,
records no test at all, or records a failure. The seed is always chosen here and printed, so any
run can be repeated with ``--seed``.

Only the top module's signals are visible to the testbenches (they drive and watch ports only):
cocotb's runner builds with ``--public-flat-rw``, which keeps every signal of the design as a
VPI object and made the largest model (``ckpt_system_4ch``) compile in 634 s and simulate about
3.5x slower; this runner drops the flag and marks the top module public in a control file.
``internal_signals=True`` (``$TRAININGCXL_INTERNAL_SIGNALS``, pytest's ``--internal-signals``)
keeps it, in a build directory of its own, for a testbench that reads signals inside the design
(``dut.embedding.update.fsm_state``).

Several processes may share one build tree (``pytest -n 2``, or a campaign started beside the
tests): a build directory is locked while it is emitted and compiled, and a run directory while
its simulation runs, so two processes never write one directory at once.
"""

import contextlib
import hashlib
import json
import os
import random
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; one process per build tree there
    fcntl = None

from . import rtl, tools
from . import waves as waves_mod

__all__ = ["Build", "RunResult", "SimulationFailed", "build", "run"]

#: Verilator warnings that Yosys-emitted Verilog triggers by construction. They are waived only
#: for the generated files (see sim/verilator/yosys_waivers.vlt), never globally.
WAIVER_FILE = Path(__file__).resolve().parent / "verilator" / "yosys_waivers.vlt"

#: Speed over debuggability for the C++ model; X values do not exist in Amaranth designs.
#: ALWNEVER is an error: Yosys can emit constant assignments as an `always @*` block that reads
#: nothing, which Verilator never executes, so those bits would silently simulate as 0.
VERILATOR_ARGS = ["--x-assign", "fast", "--x-initial", "fast", "-Wno-fatal",
                  "-Werror-ALWNEVER", "-O3"]

#: The flag cocotb's runner adds and :func:`_runner` takes out again.
PUBLIC_FLAT_RW = "--public-flat-rw"


class SimulationFailed(AssertionError):
    """A cocotb run that failed, crashed, or ran no test."""


@dataclass(frozen=True)
class Build:
    design: rtl.Design
    directory: Path
    verilog: Path
    sidecar: Path
    trace: str | None  # None, "vcd" or "fst"
    internal_signals: bool  # every signal a VPI object (--public-flat-rw), not only the top's


@dataclass(frozen=True)
class RunResult:
    tests: int
    failures: int
    seed: int
    results_xml: Path
    waves: Path | None
    gtkw: Path | None


@contextlib.contextmanager
def _exclusive(directory: Path):
    """Hold an advisory lock on ``directory`` (created if missing) for the ``with`` body."""
    directory.mkdir(parents=True, exist_ok=True)
    if fcntl is None:
        yield
        return
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _trace_format(waves: bool) -> str | None:
    if not waves:
        return None
    if tools.fst_supported():
        return "fst"
    print("sim: lz4.h not found (Debian: liblz4-dev), so FST tracing is unavailable; "
          "writing VCD instead", file=sys.stderr)
    return "vcd"


def _internal_signals(requested: bool) -> bool:
    return requested or os.environ.get("TRAININGCXL_INTERNAL_SIGNALS", "") not in ("", "0")


def _runner(*, internal_signals: bool = False):
    os.environ.update(tools.verilator_env())
    from cocotb_tools.runner import Verilator

    if internal_signals:
        return Verilator()

    class TopPublicVerilator(Verilator):
        """cocotb's Verilator runner without ``--public-flat-rw`` (see the module docstring)."""

        def _build_command(self):
            commands = super()._build_command()
            commands[0] = [arg for arg in commands[0] if arg != PUBLIC_FLAT_RW]
            return commands

    return TopPublicVerilator()


def _top_public_file(design: rtl.Design, directory: Path) -> Path:
    """A Verilator control file that keeps the top module's signals (its ports, which the
    testbenches drive and watch) visible through VPI; nothing below it is."""
    path = directory / "top_public.vlt"
    text = f'`verilator_config\npublic_flat_rw -module "{design.name}" -var "*"\n'
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path


def _extra_sources(extra_sources: Iterable[str | os.PathLike] | None) -> list[Path]:
    """The additional Verilog (or ``.vlt``) files of a build, as resolved paths; order kept."""
    paths = [Path(source).resolve() for source in extra_sources or ()]
    missing = [str(path) for path in paths if not path.is_file()]
    if missing:
        raise FileNotFoundError(f"extra source files not found: {', '.join(missing)}")
    return paths


def _drop_precompiled_headers(obj_dir: Path) -> None:
    """Delete Verilator's precompiled headers once the model is linked: 180-210 MB per build,
    three quarters of ``build/sim``, and needed only by the compile (a stamped build is reused
    without calling make; a changed one is rebuilt from scratch, ``always=True``)."""
    for header in obj_dir.glob("*.gch"):
        header.unlink()


def build(design: rtl.Design, *, waves: bool = False, internal_signals: bool = False,
          extra_sources: Iterable[str | os.PathLike] | None = None) -> Build:
    """Emit and compile ``design``; reuse the previous build when nothing changed.

    ``internal_signals`` (or ``$TRAININGCXL_INTERNAL_SIGNALS``) makes every signal of the
    design visible to the testbench, in a build of its own; by default only the top module's.

    ``extra_sources`` are additional files handed to Verilator before the design's Verilog,
    for example behavioural models of vendor cells the design instantiates and their ``.vlt``
    waivers. A build with extra sources gets its own directory (keyed on their paths), and
    their contents are part of the rebuild check.
    """
    trace = _trace_format(waves)
    internal_signals = _internal_signals(internal_signals)
    extra = _extra_sources(extra_sources)
    key = design.key
    if extra:
        key += "-x" + hashlib.sha256(
            json.dumps([str(path) for path in extra]).encode()).hexdigest()[:8]
    if internal_signals:
        key += "-internal"
    directory = rtl.BUILD_ROOT / "sim" / design.name / (key + (f"-{trace}" if trace else ""))
    with _exclusive(directory):
        verilog_path, sidecar_path = rtl.emit(design, directory / "rtl")
        top_public = _top_public_file(design, directory)
        build_args = list(VERILATOR_ARGS)
        if trace == "fst":
            build_args += ["--trace-fst", "--trace-structs"]
        inputs = {
            "verilog": hashlib.sha256(verilog_path.read_bytes()).hexdigest(),
            "waivers": hashlib.sha256(WAIVER_FILE.read_bytes()).hexdigest(),
            "public": hashlib.sha256(top_public.read_bytes()).hexdigest(),
            "library": hashlib.sha256(rtl.LIBRARY_VERILOG.read_bytes()).hexdigest(),
            "args": build_args,
            "trace": trace,
            "internal_signals": internal_signals,
            "cxxflags": tools.verilator_env().get("CXXFLAGS", ""),
            "verilator": tools.verilator_version(tools.verilator_env().get("PATH")),
        }
        if extra:  # absent otherwise, so builds without extra sources keep their stamps
            inputs["extra_sources"] = {str(path): hashlib.sha256(path.read_bytes()).hexdigest()
                                       for path in extra}
        stamp = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()
        obj_dir = directory / "obj"
        stamp_file = obj_dir / "trainingcxl.stamp"
        if not ((obj_dir / design.name).exists() and stamp_file.exists()
                and stamp_file.read_text() == stamp):
            runner = _runner(internal_signals=internal_signals)
            runner.build(
                sources=[WAIVER_FILE, top_public, rtl.LIBRARY_VERILOG, *extra, verilog_path],
                hdl_toplevel=design.name,
                build_dir=obj_dir,
                build_args=build_args,
                waves=trace is not None,
                timescale=("1ns", "1ps"),
                always=True,
            )
            _drop_precompiled_headers(obj_dir)
            stamp_file.write_text(stamp)
    return Build(design, directory, verilog_path, sidecar_path, trace, internal_signals)


def _count_results(results_xml: Path) -> tuple[int, int, list[str]]:
    if not results_xml.exists():
        raise SimulationFailed(f"no results file at {results_xml}: the simulator crashed "
                               "before cocotb could record anything")
    tests, failed = 0, []
    for case in ET.parse(results_xml).getroot().iter("testcase"):
        tests += 1
        if case.find("failure") is not None or case.find("error") is not None:
            failed.append(case.get("name", "?"))
    return tests, len(failed), failed


def run(design: rtl.Design, test_module: str, *, testcase: str | None = None,
        test_filter: str | None = None, seed: int | None = None, waves: bool = False,
        internal_signals: bool = False, extra_env: dict[str, str] | None = None,
        run_name: str | None = None,
        extra_sources: Iterable[str | os.PathLike] | None = None) -> RunResult:
    """Build ``design`` (or reuse its build) and run the cocotb tests in ``test_module``.

    ``seed`` defaults to ``$TRAININGCXL_SEED`` or a fresh random one; it is printed and
    appears in the failure message with the way to repeat the run. ``internal_signals`` and
    ``extra_sources`` are passed on to :func:`build`.
    """
    if seed is None:
        seed = int(os.environ.get("TRAININGCXL_SEED", random.randrange(2**31)))
    waves = waves or os.environ.get("WAVES", "") not in ("", "0")
    built = build(design, waves=waves, internal_signals=internal_signals,
                  extra_sources=extra_sources)
    run_dir = built.directory / "runs" / (run_name or test_module.rsplit(".", 1)[-1])
    with _exclusive(run_dir):
        results_xml = run_dir / "results.xml"
        results_xml.unlink(missing_ok=True)
        for stale in ("dump.vcd", "dump.fst"):
            (run_dir / stale).unlink(missing_ok=True)
        env = {
            rtl.SIDECAR_ENV: str(built.sidecar),
            # cocotbext-axi still calls APIs that cocotb 2 deprecated; hide only those.
            "PYTHONWARNINGS": "ignore::DeprecationWarning:cocotbext.axi,"
                              "ignore::DeprecationWarning:cocotb_bus",
            **(extra_env or {}),
        }
        print(f"sim: {design.name} [{design.key}] {test_module} seed={seed} "
              f"(repeat with TRAININGCXL_SEED={seed})", flush=True)
        # The simulator imports the test module from its own working directory: make sure the
        # project's packages resolve even when it is not pip-installed.
        if str(rtl.PROJECT_ROOT) not in sys.path:
            sys.path.insert(0, str(rtl.PROJECT_ROOT))
        runner = _runner(internal_signals=built.internal_signals)
        try:
            runner.test(
                test_module=test_module,
                hdl_toplevel=design.name,
                hdl_toplevel_lang="verilog",
                build_dir=built.directory / "obj",
                test_dir=run_dir,
                testcase=testcase,
                test_filter=test_filter,
                seed=seed,
                waves=built.trace is not None,
                extra_env=env,
                results_xml=str(results_xml),
                timescale=("1ns", "1ps"),
            )
        except SystemExit as exc:  # cocotb's runner exits on simulator failure under pytest
            if not results_xml.exists():
                raise SimulationFailed(f"{design.name}: simulator exited with {exc.code} "
                                       f"(seed {seed})") from None
        tests, failures, failed = _count_results(results_xml)
        wave_file = gtkw = None
        if built.trace:
            wave_file = run_dir / f"dump.{built.trace}"
            gtkw = waves_mod.write_gtkw(built, wave_file)
            print(f"sim: waves  {wave_file}\nsim: layout {gtkw}", flush=True)
    if tests == 0:
        raise SimulationFailed(
            f"{design.name}: {test_module} ran no test (filter {testcase or test_filter!r}); "
            f"results in {results_xml}")
    if failures:
        raise SimulationFailed(
            f"{design.name}: {failures} of {tests} cocotb tests failed: {', '.join(failed)}; "
            f"seed {seed}: repeat with TRAININGCXL_SEED={seed}; results in {results_xml}")
    return RunResult(tests, failures, seed, results_xml, wave_file, gtkw)
