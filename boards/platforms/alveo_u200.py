"""AMD/Xilinx Alveo U200 (xcu200-fsgd2104-2-e), built with Vivado.

Only what a self-test needs is defined: the first 300 MHz system clock, the three status LEDs
and the FPGA's USB-UART. Pin locations and I/O standards are those of the card's published
constraints (Xilinx's ``alveo-u200-xdc.xdc`` from UG1289), as carried by LiteX-Boards'
``litex_boards/platforms/xilinx_alveo_u200.py``:

=============== ============== ================ ==============================================
Resource        Balls          I/O standard     Board net
=============== ============== ================ ==============================================
clk300 0        AY37 / AY38    DIFF_SSTL12      SYSCLK0_300_P / SYSCLK0_300_N
led 0, 1, 2     BC21 BB21 BA20 LVCMOS12         STATUS_LED0..2_FPGA
uart 0          rx BF18, tx BB20 LVCMOS12       USB_UART_RX / USB_UART_TX (FTDI FT4232H)
=============== ============== ================ ==============================================

The card is used over JTAG here (no PCIe shell), as in the TrainingCXL prototype's bring-up.
"""

import textwrap

from amaranth.build import Attrs, Clock, DiffPairs, Pins, Resource, Subsignal
from amaranth.vendor import XilinxPlatform

__all__ = ["AlveoU200Platform"]


class AlveoU200Platform(XilinxPlatform):
    device = "xcu200"
    package = "fsgd2104"
    speed = "2-e"
    default_clk = "clk300"
    resources = (
        Resource("clk300", 0, DiffPairs("AY37", "AY38", dir="i"), Clock(300e6),
                 Attrs(IOSTANDARD="DIFF_SSTL12")),
        *[Resource("led", number, Pins(ball, dir="o"), Attrs(IOSTANDARD="LVCMOS12"))
          for number, ball in enumerate(("BC21", "BB21", "BA20"))],
        Resource("uart", 0,
                 Subsignal("rx", Pins("BF18", dir="i")),
                 Subsignal("tx", Pins("BB20", dir="o")),
                 Attrs(IOSTANDARD="LVCMOS12")),
    )
    connectors = ()

    # Card-level bitstream settings (also in LiteX's platform): the passively cooled card
    # must shut down when it overheats, and compression shortens JTAG programming.
    _card_constraints = textwrap.indent(textwrap.dedent("""
        set_property BITSTREAM.CONFIG.OVERTEMPSHUTDOWN ENABLE [current_design]
        set_property BITSTREAM.GENERAL.COMPRESS TRUE [current_design]
    """), " " * 12)

    def __init__(self):
        super().__init__(toolchain="Vivado")

    @property
    def file_templates(self):
        templates = dict(super().file_templates)
        templates["{{name}}.xdc"] = templates["{{name}}.xdc"] + self._card_constraints
        return templates
