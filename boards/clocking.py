"""A ``sync`` clock domain no faster than a design can close timing at.

Board oscillators differ (ULX3S 25 MHz, ECPIX-5 100 MHz, Alveo U200 300 MHz, Agilex 7
I-series kit 100 MHz) while a design has one Fmax per family. :func:`system_clock` keeps the
board clock when it is slow enough and otherwise derives a slower one (or, asked for a given
frequency, a faster one where the primitive can) with the family's standard primitive:

- ECP5: an ``EHXPLLL`` PLL, with divisors found as ``ecppll`` finds them;
- UltraScale+: a ``BUFGCE_DIV`` global buffer dividing by 1 to 8.

The domain is held in reset until the PLL locks (and while the board's reset button, if any,
is pressed), through :class:`amaranth.lib.cdc.ResetSynchronizer`.
"""

import math
from dataclasses import dataclass

from amaranth import ClockDomain, Const, Instance, Signal
from amaranth.lib import io
from amaranth.lib.cdc import ResetSynchronizer

__all__ = ["EcpPllDivisors", "ecp5_pll_divisors", "system_clock"]


# ECP5 sysCLOCK PLL limits (Lattice FPGA-TN-02200, as used by Project Trellis' ecppll).
_PFD_MIN, _PFD_MAX = 3.125e6, 400e6
_VCO_MIN, _VCO_MAX = 400e6, 800e6


@dataclass(frozen=True)
class EcpPllDivisors:
    clki_div: int
    clkfb_div: int
    clkop_div: int
    output_frequency: float


def ecp5_pll_divisors(input_frequency, output_frequency):
    """The EHXPLLL divisors whose output is closest to ``output_frequency`` (exact if it can
    be), with the phase-detector and VCO frequencies in range."""
    best = None
    for clki_div in range(1, 129):
        pfd = input_frequency / clki_div
        if not _PFD_MIN <= pfd <= _PFD_MAX:
            continue
        for clkfb_div in range(1, 81):
            achieved = pfd * clkfb_div
            # Of the output dividers that keep the VCO in range, take the one nearest the
            # middle of the range, as ecppll does.
            lowest = max(1, math.ceil(_VCO_MIN / achieved))
            highest = min(128, math.floor(_VCO_MAX / achieved))
            if lowest > highest:
                continue
            middle = (_VCO_MIN + _VCO_MAX) / 2
            clkop_div = min(range(lowest, highest + 1),
                            key=lambda div: abs(achieved * div - middle))
            error = abs(achieved - output_frequency)
            if best is None or error < best[0]:
                best = (error, EcpPllDivisors(clki_div, clkfb_div, clkop_div, achieved))
    if best is None:
        raise ValueError(f"No ECP5 PLL setting turns {input_frequency / 1e6:g} MHz into "
                         f"{output_frequency / 1e6:g} MHz")
    return best[1]


def _ecp5_pll(m, clock_in, clock_out, locked, divisors, input_frequency):
    # The attributes are those ecppll writes; they set the loop filter.
    m.submodules.pll = Instance(
        "EHXPLLL",
        a_FREQUENCY_PIN_CLKI=f"{input_frequency / 1e6:g}",
        a_FREQUENCY_PIN_CLKOP=f"{divisors.output_frequency / 1e6:g}",
        a_ICP_CURRENT="12", a_LPF_RESISTOR="8",
        a_MFG_ENABLE_FILTEROPAMP="1", a_MFG_GMCREF_SEL="2",
        p_PLLRST_ENA="DISABLED", p_INTFB_WAKE="DISABLED", p_STDBY_ENABLE="DISABLED",
        p_DPHASE_SOURCE="DISABLED", p_OUTDIVIDER_MUXA="DIVA", p_FEEDBK_PATH="CLKOP",
        p_CLKI_DIV=divisors.clki_div, p_CLKFB_DIV=divisors.clkfb_div,
        p_CLKOP_ENABLE="ENABLED", p_CLKOP_DIV=divisors.clkop_div,
        p_CLKOP_CPHASE=divisors.clkop_div // 2 - 1, p_CLKOP_FPHASE=0,
        i_RST=Const(0), i_STDBY=Const(0), i_CLKI=clock_in, i_CLKFB=clock_out,
        i_PHASESEL0=Const(0), i_PHASESEL1=Const(0), i_PHASEDIR=Const(1),
        i_PHASESTEP=Const(1), i_PHASELOADREG=Const(1), i_PLLWAKESYNC=Const(0),
        i_ENCLKOP=Const(0),
        o_CLKOP=clock_out, o_LOCK=locked)


def system_clock(m, platform, *, max_frequency, frequency=None):
    """Give module ``m`` (the design's top) a ``sync`` domain of at most ``max_frequency``.

    With ``frequency`` the domain runs at that frequency instead (an ECP5 PLL may multiply
    the board clock up; it must not exceed ``max_frequency``). When the board clock is what
    is needed nothing is added (the platform creates ``sync`` from it); otherwise ``m`` gets
    the domain, its PLL or divider and its reset synchroniser. The domain is defined in ``m``
    itself because Amaranth 0.5 deprecates domains propagating upwards from submodules.
    Returns the frequency of ``sync``.
    """
    if not isinstance(max_frequency, (int, float)) or max_frequency <= 0:
        raise ValueError(f"Maximum frequency must be a positive number of Hz, not "
                         f"{max_frequency!r}")
    if frequency is not None and (not isinstance(frequency, (int, float)) or frequency <= 0
                                  or frequency > max_frequency):
        raise ValueError(f"Frequency must be a positive number of Hz up to "
                         f"{max_frequency:g}, not {frequency!r}")
    input_frequency = platform.default_clk_frequency
    if frequency is None:
        if input_frequency <= max_frequency:
            return input_frequency
        target = max_frequency
    elif frequency == input_frequency:
        return input_frequency
    else:
        target = frequency

    family = getattr(platform, "family", None)
    if family == "ecp5":
        divisors = ecp5_pll_divisors(input_frequency, target)
        if divisors.output_frequency > max_frequency:
            raise ValueError(f"The nearest ECP5 PLL output, {divisors.output_frequency:g} Hz, "
                             f"is above {max_frequency:g} Hz")
        frequency = divisors.output_frequency
    elif family == "ultrascaleplus":
        if target > input_frequency:
            raise ValueError(f"BUFGCE_DIV only divides; it cannot make {target:g} Hz from "
                             f"{input_frequency:g} Hz")
        divide = math.ceil(input_frequency / target)
        if divide > 8:
            raise ValueError(f"BUFGCE_DIV divides by at most 8; {input_frequency:g} Hz needs "
                             f"{divide}")
        frequency = input_frequency / divide
    else:
        raise ValueError(f"No clock divider is defined for {type(platform).__name__} "
                         f"(family {family!r})")

    m.domains.sync = sync = ClockDomain("sync")
    m.submodules.clock_buffer = clock_buffer = io.Buffer(
        "i", platform.request(platform.default_clk, dir="-"))
    ready = Signal()
    if family == "ecp5":
        _ecp5_pll(m, clock_buffer.i, sync.clk, ready, divisors, input_frequency)
    else:
        m.submodules.divider = Instance(
            "BUFGCE_DIV", p_BUFGCE_DIVIDE=divide,
            i_I=clock_buffer.i, i_CE=Const(1), i_CLR=Const(0), o_O=sync.clk)
        m.d.comb += ready.eq(1)

    held = ~ready
    if platform.default_rst is not None:
        m.submodules.reset_buffer = reset_buffer = io.Buffer(
            "i", platform.request(platform.default_rst, dir="-"))
        held = held | reset_buffer.i
    m.submodules.reset_sync = ResetSynchronizer(held, domain="sync")
    # No constraint on sync.clk: nextpnr and Vivado derive it from the board clock's through
    # the PLL or divider, and a net-name constraint would not survive synthesis renaming.
    return frequency
