"""Options shared by every pytest run (see noxfile.py: `nox -s sim -- --waves --seed 5`)."""

import os


def pytest_addoption(parser):
    group = parser.getgroup("trainingcxl")
    group.addoption("--waves", action="store_true",
                    help="write a wave file (FST if lz4.h exists, else VCD) and a GTKWave save "
                         "file for every cocotb run, and print their paths")
    group.addoption("--internal-signals", action="store_true",
                    help="build every Verilator model with all its signals visible to the "
                         "testbench (cocotb's --public-flat-rw; a build of its own, slower)")
    group.addoption("--seed", type=int, default=None,
                    help="seed for every cocotb run (default: a fresh one, printed)")


def pytest_configure(config):
    # sim.runner reads these, so the options reach every testbench without plumbing.
    if config.getoption("waves"):
        os.environ["WAVES"] = "1"
    if config.getoption("internal_signals"):
        os.environ["TRAININGCXL_INTERNAL_SIGNALS"] = "1"
    if config.getoption("seed") is not None:
        os.environ["TRAININGCXL_SEED"] = str(config.getoption("seed"))
