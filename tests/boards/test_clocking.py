# amaranth: UnusedElaboratable=no
"""Slowing a fast board clock down for the self-test."""

import importlib.util

import pytest

from boards import synth
from boards.build import prepare_plan
from boards.clocking import EcpPllDivisors, ecp5_pll_divisors
from boards.platforms import get_board

HAVE_FP = importlib.util.find_spec("hw.fp") is not None
needs_fp = pytest.mark.skipif(not HAVE_FP, reason="hw.fp is not available")


def test_ecp5_pll_divisors_match_ecppll():
    # `ecppll -i 100 -o 50` chooses the same: refclk /2, feedback /1, output /12 (VCO 600 MHz).
    assert ecp5_pll_divisors(100e6, 50e6) == EcpPllDivisors(2, 1, 12, 50e6)


def test_ecp5_pll_divisors_approximate_when_inexact():
    divisors = ecp5_pll_divisors(100e6, 33.3e6)
    assert abs(divisors.output_frequency - 33.3e6) < 0.1e6
    vco = divisors.output_frequency * divisors.clkop_div
    assert 400e6 <= vco <= 800e6


def test_ecp5_pll_divisors_reject_impossible_inputs():
    with pytest.raises(ValueError, match=r"^No ECP5 PLL setting turns 1 MHz into 50 MHz$"):
        ecp5_pll_divisors(1e6, 50e6)


@needs_fp
def test_ecpix5_runs_the_bist_from_a_50_mhz_pll():
    files = prepare_plan(get_board("ecpix5-85").make_platform(),
                         synth.make_bist_top(lanes=1, vectors=4)).files
    assert "EHXPLLL" in files["top.il"]
    assert "\\CLKOP_DIV 12" in files["top.il"] and "\\CLKI_DIV 2" in files["top.il"]
    # nextpnr derives the 50 MHz constraint from the board clock's, through the PLL.
    assert 'FREQUENCY PORT "clk100_0__io" 100000000.0 HZ;' in files["top.lpf"]


@needs_fp
def test_alveo_divides_300_mhz_by_three():
    files = prepare_plan(get_board("alveo-u200").make_platform(),
                         synth.make_bist_top(lanes=1, vectors=4)).files
    assert "BUFGCE_DIV" in files["top.v"] and "BUFGCE_DIVIDE(32'd3)" in files["top.v"]
    # Vivado derives the divided clock from the 300 MHz one, through BUFGCE_DIV.
    assert "-period 3.3333333333333335" in files["top.xdc"]


@needs_fp
def test_slow_board_clocks_are_used_directly():
    ulx3s = prepare_plan(get_board("ulx3s-85f").make_platform(),
                         synth.make_bist_top(lanes=1, vectors=4)).files
    agilex = prepare_plan(get_board("agilex7-iseries-dk").make_platform(),
                          synth.make_bist_top(lanes=1, vectors=4)).files
    assert "EHXPLLL" not in ulx3s["top.il"]
    assert "create_clock -name \"clk100_0__io\" -period 10.0" in agilex["top.sdc"]


@needs_fp
def test_a_pll_multiplies_the_ulx3s_clock_up_on_request():
    files = prepare_plan(get_board("ulx3s-85f").make_platform(),
                         synth.make_bist_top(lanes=1, vectors=4, clock_mhz=100)).files
    # 25 MHz x 4 = 100 MHz, VCO 600 MHz (as `ecppll -i 25 -o 100`).
    assert "EHXPLLL" in files["top.il"]
    for parameter in ("\\CLKI_DIV 1", "\\CLKFB_DIV 4", "\\CLKOP_DIV 6"):
        assert parameter in files["top.il"]


def test_system_clock_validates_the_frequency():
    from amaranth import Module

    from boards.clocking import system_clock

    platform = get_board("ulx3s-85f").make_platform()
    with pytest.raises(ValueError, match=r"^Frequency must be a positive number of Hz up to "
                                         r"5e\+07, not 100000000.0$"):
        system_clock(Module(), platform, max_frequency=50e6, frequency=100e6)
    alveo = get_board("alveo-u200").make_platform()
    with pytest.raises(ValueError, match=r"^BUFGCE_DIV only divides; it cannot make 4e\+08 Hz "
                                         r"from 3e\+08 Hz$"):
        system_clock(Module(), alveo, max_frequency=400e6, frequency=400e6)
