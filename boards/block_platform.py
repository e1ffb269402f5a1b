"""A bare LFE5U-85F-6 CABGA381 platform whose only resources are a clock and a harness's pins.

This is the chip of the ULX3S-85F, so per-block figures and the board build share a device,
speed grade and package. The clock constraint is the measurement target: nextpnr optimises
towards it and reports the achieved Fmax next to it.
"""

from amaranth.build import Attrs, Clock, Pins, Resource
from amaranth.vendor import LatticePlatform

from .ecp5_pins import CLOCK_BALL, USER_BALLS

__all__ = ["HARNESS_BALLS", "BlockPlatform"]


# Balls a harness may use: every user ball but the clock's.
HARNESS_BALLS = tuple(ball for ball in USER_BALLS if ball != CLOCK_BALL)


class BlockPlatform(LatticePlatform):
    """Generic ECP5-85F platform for measuring one block.

    Parameters
    ----------
    resources : list of Resource
        The harness's resources (see :mod:`boards.harness`).
    clock_frequency : float
        Target clock frequency in Hz, written as the clock's ``FREQUENCY`` constraint.
    """
    device = "LFE5U-85F"
    package = "BG381"
    speed = "6"
    default_clk = "clk"
    resources = ()
    connectors = ()

    def __init__(self, *, resources, clock_frequency=150e6):
        if not isinstance(clock_frequency, (int, float)) or clock_frequency <= 0:
            raise ValueError(f"Clock frequency must be a positive number of Hz, not "
                             f"{clock_frequency!r}")
        super().__init__()
        self.add_resources([
            Resource("clk", 0, Pins(CLOCK_BALL, dir="i"), Clock(clock_frequency),
                     Attrs(IO_TYPE="LVCMOS33")),
        ])
        self.add_resources(resources)
