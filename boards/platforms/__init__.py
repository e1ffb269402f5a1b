"""The boards this project builds for, by name.

``ulx3s-85f`` and ``ecpix5-85`` come from amaranth-boards and build with the open toolchain.
``alveo-u200`` (Vivado) and ``agilex7-iseries-dk`` (Quartus Prime Pro) are defined here and
yield build plans: project files and a build script to run where the vendor tools are.
"""

from dataclasses import dataclass

__all__ = ["BOARDS", "Board", "get_board"]


@dataclass(frozen=True)
class Board:
    """A board: how to make its platform and which toolchain builds it."""
    name: str
    description: str
    make_platform: object
    toolchain: str  # "open" (Yosys + nextpnr-ecp5), "Vivado" or "Quartus Pro"

    @property
    def open_toolchain(self):
        return self.toolchain == "open"


# Imports stay inside the factories: amaranth-boards is an optional (``fpga``) dependency.
def _ulx3s_85f():
    from amaranth_boards.ulx3s import ULX3S_85F_Platform
    return ULX3S_85F_Platform()


def _ecpix5_85():
    from amaranth_boards.ecpix5 import ECPIX585Platform
    return ECPIX585Platform()


def _alveo_u200():
    from .alveo_u200 import AlveoU200Platform
    return AlveoU200Platform()


def _agilex7_iseries_dk():
    from .agilex7_iseries import Agilex7IPlatform
    return Agilex7IPlatform()


BOARDS = {board.name: board for board in (
    Board("ulx3s-85f", "Radiona ULX3S, LFE5U-85F-6 CABGA381, 25 MHz", _ulx3s_85f, "open"),
    Board("ecpix5-85", "LambdaConcept ECPIX-5, LFE5UM5G-85F-8 CABGA554, 100 MHz", _ecpix5_85,
          "open"),
    Board("alveo-u200", "AMD Alveo U200, xcu200-fsgd2104-2-e, 300 MHz", _alveo_u200, "Vivado"),
    Board("agilex7-iseries-dk", "Agilex 7 I-Series Development Kit, AGIB027R29A1E2VR3, 100 MHz",
          _agilex7_iseries_dk, "Quartus Pro"),
)}


def get_board(name):
    """The board called ``name``."""
    try:
        return BOARDS[name]
    except KeyError:
        raise KeyError(f"Unknown board {name!r}; known boards: {', '.join(BOARDS)}") from None
