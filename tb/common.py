"""Helpers shared by every cocotb testbench: clock, reset, seeded randomness, pause patterns."""

import itertools
import random

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge, Timer

__all__ = ["CLOCK_PERIOD_NS", "cycles_timer", "draw_until", "pause_pattern", "reset", "rng",
           "start_clock", "wait_cycles"]

CLOCK_PERIOD_NS = 10


def start_clock(dut, period_ns: int = CLOCK_PERIOD_NS) -> None:
    """Drive ``dut.clk`` from C (``impl="gpi"``): Python wakes only when a test awaits."""
    Clock(dut.clk, period_ns, unit="ns", impl="gpi").start()


async def wait_cycles(clk, cycles: int, period_ns: int = CLOCK_PERIOD_NS) -> None:
    """Wait for ``cycles`` rising edges of ``clk`` (like ``ClockCycles``), with one timer.

    cocotb 2's ``ClockCycles`` wakes Python on every edge, which caps a system simulation at a
    few thousand cycles per second; here Python wakes three times: the first edge puts us on
    an edge, a timer to the middle of the cycle before the last edge, then the last edge.
    """
    if cycles < 1:
        return
    await RisingEdge(clk)
    if cycles > 1:
        await Timer((cycles - 2) * period_ns + period_ns // 2, unit="ns")
        await RisingEdge(clk)


def cycles_timer(cycles: int, period_ns: int = CLOCK_PERIOD_NS) -> Timer:
    """A timer of about ``cycles`` clock periods, for timeouts in ``First(...)`` (a
    ``ClockCycles`` there would wake Python on every edge of the wait)."""
    return Timer(cycles * period_ns, unit="ns")


async def reset(dut, cycles: int = 2) -> None:
    """Amaranth's ``sync`` reset is ``rst``, active high, synchronous."""
    dut.rst.value = 1
    await ClockCycles(dut.clk, cycles)
    dut.rst.value = 0
    await RisingEdge(dut.clk)


def rng(stream: int = 0) -> np.random.Generator:
    """A NumPy generator seeded from cocotb's seed (printed by ``sim.runner``) and a stream id,
    so two independent random sources in one test do not share draws."""
    return np.random.default_rng([cocotb.RANDOM_SEED, stream])


def pause_pattern(seed: int, busy: float):
    """An endless 0/1 pattern for cocotbext-axi ``set_pause_generator``: 1 pauses the channel
    with probability ``busy``. Seeded, so the back-pressure sequence repeats with the seed."""
    if not 0.0 <= busy < 1.0:
        raise ValueError(f"busy must be in [0, 1), not {busy!r}")
    draw = random.Random(seed)
    return (int(draw.random() < busy) for _ in itertools.count())


def draw_until(draw, accept, what: str, *, attempts: int = 100):
    """``draw()`` again until ``accept`` holds for its value, which is returned. A test that
    needs a property its random generator only usually gives stays bounded: after
    ``attempts`` draws it fails with "no draw of <attempts> <what>"."""
    if attempts < 1:
        raise ValueError(f"attempts must be at least 1, not {attempts!r}")
    for _ in range(attempts):
        value = draw()
        if accept(value):
            return value
    raise AssertionError(f"no draw of {attempts} {what}")
