"""The device top's parameters (exact messages), its ports, the preset configurations, and
its place in the top registry. Its behaviour is tested in Verilator (tb/device)."""

import pytest

from hw.ckpt.layouts import LogMode
from hw.csr import Access
from hw.device import TrainingCxlDevice, checkpoint_engine_available, device_params
from hw.tops import TOPS, designs_for
from sw_model.presets import PRESETS, get_preset


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"addr_width": 15}, r"Address width must be an integer in 16\.\.52, not 15"),
    ({"addr_width": 53}, r"Address width must be an integer in 16\.\.52, not 53"),
    ({"channels": 3}, r"Channel count must be one of 1, 2, 4, not 3"),
    ({"command_queue_depth": 0}, r"Command queue depth must be an integer in 1\.\.16, not 0"),
    ({"completion_queue_depth": 17},
     r"Completion queue depth must be an integer in 1\.\.16, not 17"),
    ({"id_width": 5, "outstanding_reads": 32},
     r"Outstanding reads \(32\) plus 3 stream IDs need more than 5 ID bits"),
    ({"num_decoders": 11}, r"Decoder count must be an integer in 1\.\.10, not 11"),
    ({"num_protected": 0}, r"Protected range count must be an integer in 1\.\.16, not 0"),
])
def test_parameter_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TrainingCxlDevice(**kwargs)


def test_checkpointing_must_be_a_bool():
    with pytest.raises(TypeError, match=r"checkpointing must be a bool, not 1"):
        TrainingCxlDevice(checkpointing=1)


def test_checkpointing_needs_the_checkpoint_engine(monkeypatch):
    monkeypatch.setattr("hw.device.checkpoint_engine_available", lambda: False)
    with pytest.raises(ValueError, match=r"Checkpointing needs the CheckpointEngine "
                                         r"\(hw/ckpt/engine\.py\), which is not in this tree yet"):
        TrainingCxlDevice(checkpointing=True)


needs_checkpoint_engine = pytest.mark.skipif(not checkpoint_engine_available(),
                                             reason="hw/ckpt/engine.py is not in the tree")


@needs_checkpoint_engine
@pytest.mark.parametrize(("kwargs", "message"), [
    ({"num_protected": 15},
     r"Protected range count \(with checkpointing\) must be an integer in 1\.\.14, not 15"),
    ({"id_width": 3, "outstanding_reads": 4, "host_outstanding": 8},
     r"With checkpointing the engine's IDs must stay below 4 \(the top four of 3 ID bits are "
     r"the checkpoint engine's\): 4 outstanding reads plus 3 stream IDs do not"),
])
def test_checkpointing_parameter_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TrainingCxlDevice(checkpointing=True, **kwargs)


@needs_checkpoint_engine
def test_checkpointing_ports_and_registers():
    device = TrainingCxlDevice(**device_params(get_preset("tiny"), checkpointing=True))
    assert {"gpf", "gpf_done"} <= set(device.signature.members)
    names = {r.name for r in device.register_map}
    assert {"CKPT_CONTROL", "CKPT_INTERVAL", "CKPT_META_BASE_0", "CKPT_LOG_SIZE_0",
            "CKPT_SNAPSHOT1_BASE_0", "CKPT_STATUS", "LAST_COMMITTED", "SNAPSHOT_BATCH",
            "RECOVERY_CYCLES", "GPF_DRAIN_CYCLES", "CKPT_LOG_ENTRIES"} <= names
    assert device.register_map["CKPT_CONTROL"].fields[0].init == 1   # logging on by default
    log_mode = device.register_map["CKPT_CONTROL"].fields[1]
    assert (log_mode.name, log_mode.width, log_mode.access, log_mode.init) == \
        ("log_mode", 2, Access.RW, LogMode.ON_LOOKUP.value)             # log-on-lookup default
    assert device.register_map.addr_width <= 12


@pytest.mark.parametrize("channels", [1, 2, 4])
def test_ports(channels):
    device = TrainingCxlDevice(channels=channels, addr_width=20, id_width=6)
    members = device.signature.members
    assert set(members) == {"m2s_req", "m2s_rwd", "s2m_ndr", "s2m_drs", "csr", "mem", "irq"}
    assert len(device.mem) == channels
    memory = members["mem"].signature
    assert memory.addr_width == 20 - (channels.bit_length() - 1)
    assert memory.data_width == 512
    # one channel: the manager's ID plus a manager bit; more: a 16-slot reorder ring + 1 bit
    assert memory.id_width == (7 if channels == 1 else 5)
    assert members["csr"].signature.addr_width == device.register_map.addr_width
    assert device.memory_bytes == 1 << 20


def test_presets_configure_a_device():
    for preset in PRESETS.values():
        params = device_params(preset)
        assert params["max_tables"] == preset.num_tables and params["max_dim"] == preset.dim
        indices = preset.batch_size * preset.num_tables * preset.max_bag
        assert params["index_buffer_depth"] >= indices   # one pass per command
        TrainingCxlDevice(**params)
    assert device_params(get_preset("tiny"))["addr_width"] == 18


def test_the_device_is_a_top():
    assert "device" in TOPS
    (design,) = designs_for(get_preset("tiny"), ["device"])
    assert design.factory == "hw.device:TrainingCxlDevice"
    assert design.params == device_params(get_preset("tiny"))
