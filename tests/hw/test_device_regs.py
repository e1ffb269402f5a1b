"""The device's register map: layout rules, widths that follow the parameters, and the
committed reference docs/registers.md generated from the code."""

from dataclasses import replace
from pathlib import Path

import pytest

from hw.csr import Access
from hw.device import TrainingCxlDevice, device_params
from hw.device_regs import ERRORS, RegisterConfig, device_register_map, main, registers_reference
from sw_model.presets import PRESETS, get_preset

DOCS = Path(__file__).resolve().parents[2] / "docs" / "registers.md"

CONFIG = RegisterConfig(max_tables=3, max_dim=64, num_regions=2, num_decoders=2,
                        num_protected=4, addr_width=20, channels=2, command_queue_depth=4,
                        completion_queue_depth=4, max_unique_rows=32, has_update=True,
                        checkpointing=False)


def test_registers_are_consecutive_words_with_unique_names():
    regmap = device_register_map(CONFIG)
    names = [r.name for r in regmap]
    assert len(names) == len(set(names))
    assert [r.offset for r in regmap] == [4 * i for i in range(len(names))]
    assert names[:2] == ["ID", "VERSION"]


def test_instances_follow_the_parameters():
    regmap = device_register_map(CONFIG)
    names = {r.name for r in regmap}
    assert {"TABLE2_ROWS", "REGION1_ENABLE", "HDM1_CONTROL", "PROTECT3_ENABLE",
            "MEM1_READS", "MEM1_WRITES"} <= names
    assert not {"TABLE3_ROWS", "REGION2_ENABLE", "HDM2_CONTROL", "PROTECT4_ENABLE",
                "MEM2_READS"} & names
    # 20-bit addresses take one word; 40-bit ones two, the second 8 bits wide.
    assert "CMD_INDICES_1" not in names and regmap["CMD_INDICES_0"].width == 20
    wide = device_register_map(replace(CONFIG, addr_width=40))
    assert wide["CMD_INDICES_0"].width == 32 and wide["CMD_INDICES_1"].width == 8
    assert wide["TABLE0_BASE_1"].fields[0].access is Access.RW
    # 48-bit counters: two words.
    assert regmap["ENGINE_BUSY_CYCLES_1"].width == 16 and regmap["CYCLES_1"].width == 16


def test_errors_and_doorbells():
    regmap = device_register_map(CONFIG)
    assert [f.name for f in regmap["ERRORS"].fields] == list(ERRORS)
    assert all(f.access is Access.W1C for f in regmap["ERRORS"].fields)
    for name in ("DOORBELL", "COMPLETION_POP", "COUNTERS_LATCH"):
        assert all(f.access is Access.PULSE for f in regmap[name].fields)
    assert regmap["COMPLETION"].unpack(0b1_0010_0001_1) == {
        "valid": 1, "opcode": 1, "error": 2, "sequence": 1}


def test_every_preset_has_a_device_and_a_map():
    for preset in PRESETS.values():
        device = TrainingCxlDevice(**device_params(preset))
        assert device.register_map.addr_width <= 12, preset.name   # fits a 4 KiB BAR
        assert device.memory_bytes >= 2 * sum(preset.table_rows) * preset.dim * 4


def test_reference_is_current():
    """docs/registers.md is generated from the code: regenerate it with
    `python -m hw.device_regs --markdown docs/registers.md` when this fails."""
    device = TrainingCxlDevice(**device_params(get_preset("tiny")))
    expected = registers_reference(device.register_map, device.register_config,
                                   "the `device` top of the `tiny` preset (hw/tops.py)")
    assert DOCS.exists(), "docs/registers.md is missing"
    assert DOCS.read_text() == expected, \
        "docs/registers.md is stale: python -m hw.device_regs --markdown docs/registers.md"


def test_reference_command_line(tmp_path, capsys):
    out = tmp_path / "regs.md"
    assert main(["--markdown", str(out)]) == 0
    assert out.read_text() == DOCS.read_text()
    text = out.read_text()
    for needle in ("| 0x000 | **ID** |", "DOORBELL", "COMPLETION_POP", "| w1c |", "HDM0_BASE"):
        assert needle in text
    assert "registers" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["--markdown", str(out), "--preset", "nope"])
