"""The simulated system around the device: TrainingCxlDevice with an in-design memory model on
each of its channels (``sim/axi_memory.py``), so the system runs at Verilator speed and the
cocotb side only acts per CXL.mem message and per register access (DESIGN.md section 8).

Its ports are the device's host-facing ones: the four CXL.mem channels, the AXI4-Lite
register port ``csr`` and ``irq``.
"""

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from hw.device import TrainingCxlDevice, device_params
from sim.axi_memory import AxiMemory
from sw_model.presets import get_preset

__all__ = ["DeviceSystem"]

_HOST_PORTS = ("m2s_req", "m2s_rwd", "s2m_ndr", "s2m_drs", "csr", "irq")


class DeviceSystem(wiring.Component):
    """The device of preset ``preset`` (``hw.device.device_params``, the same configuration as
    the ``device`` top of ``hw/tops.py``, with ``overrides`` applied) and one
    :class:`~sim.axi_memory.AxiMemory` per channel, each ``read_latency`` cycles from AR to
    data (at least 3).

    Parameters (keyword-only): ``preset`` (a preset name), ``channels``, ``checkpointing``,
    ``read_latency``, ``overrides`` (dict of TrainingCxlDevice parameters).
    """

    def __init__(self, *, preset="tiny", channels=1, checkpointing=False, read_latency=10,
                 overrides=None):
        if not isinstance(read_latency, int) or not 3 <= read_latency < 1 << 16:
            raise ValueError(f"Read latency must be an integer in 3..65535, "
                             f"not {read_latency!r}")
        if overrides is not None and not isinstance(overrides, dict):
            raise TypeError(f"overrides must be a dict of TrainingCxlDevice parameters, "
                            f"not {overrides!r}")
        self._preset = get_preset(preset)
        params = device_params(self._preset, channels=channels, checkpointing=checkpointing)
        self._device = TrainingCxlDevice(**{**params, **(overrides or {})})
        self._read_latency = read_latency
        members = self._device.signature.members
        super().__init__({name: members[name] for name in _HOST_PORTS})

    @property
    def device(self):
        return self._device

    @property
    def preset(self):
        return self._preset

    @property
    def read_latency(self):
        return self._read_latency

    @property
    def memory_bytes(self):
        return self._device.memory_bytes

    @property
    def channel_count(self):
        return self._device.channel_count

    @property
    def hdm_config_latency(self):
        return self._device.hdm_config_latency

    def elaborate(self, platform):
        m = Module()
        device = m.submodules.device = self._device
        for name in _HOST_PORTS:
            port = getattr(self, name)
            if name == "irq":
                m.d.comb += self.irq.eq(device.irq)
            elif self.signature.members[name].flow == In:
                wiring.connect(m, wiring.flipped(port), getattr(device, name))
            else:
                wiring.connect(m, getattr(device, name), wiring.flipped(port))
        lines = 1 << (device.memory_addr_width - 6)
        for channel in range(device.channel_count):
            memory = m.submodules[f"memory{channel}"] = AxiMemory(
                depth=lines, addr_width=device.memory_addr_width,
                id_width=device.memory_id_width, max_outstanding=64)
            wiring.connect(m, device.mem[channel], memory.axi)
            m.d.comb += memory.read_latency.eq(self._read_latency)
        return m



