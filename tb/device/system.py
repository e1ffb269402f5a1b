"""The simulated system around the device: TrainingCxlDevice with an in-design memory model on
each of its channels, so the system runs at Verilator speed and the cocotb side only acts per
CXL.mem message and per register access (DESIGN.md section 8).

Two memory models:

* ``"axi"``: ``sim/axi_memory.py``, a fixed read latency (``read_latency``), writes at once;
* ``"pmem"``: ``sim/pmem.py``, latency and bandwidth as runtime inputs (a profile such as
  ``sim.pmem.PMEM``), persistence at the B response and power-fail injection. The system then
  has the model's inputs (fanned out to every channel) and ``powered_down`` (every channel's
  image is final).

Its other ports are the device's host-facing ones: the four CXL.mem channels, the AXI4-Lite
register port ``csr``, ``irq``, and with checkpointing ``gpf``/``gpf_done``.
"""

from amaranth.hdl import Cat, Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hw.device import TrainingCxlDevice, device_params
from sim.axi_memory import AxiMemory
from sw_model.presets import get_preset

__all__ = ["MEMORY_MODELS", "DeviceSystem"]

MEMORY_MODELS = ("axi", "pmem")
_DEVICE_PORTS = ("m2s_req", "m2s_rwd", "s2m_ndr", "s2m_drs", "csr", "irq", "gpf", "gpf_done")
#: PmemModel inputs every channel shares: timing profile and power failure.
PMEM_INPUTS = {"read_latency": 16, "write_latency": 16, "read_rate_num": 8,
               "read_rate_den": 8, "write_rate_num": 8, "write_rate_den": 8,
               "power_fail": 1, "fail_seed": 32, "fail_keep": 8}


class DeviceSystem(wiring.Component):
    """The device of preset ``preset`` (``hw.device.device_params``, the configuration of the
    ``device`` top of ``hw/tops.py``; ``channels``/``checkpointing`` None keep its choice;
    ``overrides`` replace device parameters) and one memory model per channel.

    Parameters (keyword-only): ``preset`` (a preset name), ``channels``, ``checkpointing``,
    ``memory`` (``"axi"`` or ``"pmem"``; None: ``"pmem"`` with checkpointing, else ``"axi"``),
    ``read_latency`` (``"axi"`` only, at least 3), ``overrides`` (dict).
    """

    def __init__(self, *, preset="tiny", channels=None, checkpointing=None, memory=None,
                 read_latency=10, overrides=None):
        if not isinstance(read_latency, int) or not 3 <= read_latency < 1 << 16:
            raise ValueError(f"Read latency must be an integer in 3..65535, "
                             f"not {read_latency!r}")
        if overrides is not None and not isinstance(overrides, dict):
            raise TypeError(f"overrides must be a dict of TrainingCxlDevice parameters, "
                            f"not {overrides!r}")
        self._preset = get_preset(preset)
        choices = {k: v for k, v in (("channels", channels), ("checkpointing", checkpointing))
                   if v is not None}
        params = device_params(self._preset, **choices)
        self._device = TrainingCxlDevice(**{**params, **(overrides or {})})
        if memory is None:
            memory = "pmem" if self._device.checkpointing else "axi"
        if memory not in MEMORY_MODELS:
            raise ValueError(f"Memory model must be one of {', '.join(MEMORY_MODELS)}, "
                             f"not {memory!r}")
        self._memory = memory
        self._read_latency = read_latency
        members = dict(self._device.signature.members)
        ports = {name: members[name] for name in _DEVICE_PORTS if name in members}
        if memory == "pmem":
            ports.update({name: In(width) for name, width in PMEM_INPUTS.items()})
            ports["powered_down"] = Out(1)
        super().__init__(ports)

    @property
    def device(self):
        return self._device

    @property
    def preset(self):
        return self._preset

    @property
    def memory_model(self):
        return self._memory

    @property
    def axi_read_latency(self):
        """The ``"axi"`` model's read latency (the ``"pmem"`` model takes it as an input)."""
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
        for name, member in self.signature.members.items():
            if name not in _DEVICE_PORTS:
                continue
            port, inner = getattr(self, name), getattr(device, name)
            if not member.is_port:
                if member.flow == In:
                    wiring.connect(m, wiring.flipped(port), inner)
                else:
                    wiring.connect(m, inner, wiring.flipped(port))
            elif member.flow == In:
                m.d.comb += inner.eq(port)
            else:
                m.d.comb += port.eq(inner)
        lines = 1 << (device.memory_addr_width - 6)
        powered_down = []
        for channel in range(device.channel_count):
            if self._memory == "axi":
                memory = AxiMemory(depth=lines, addr_width=device.memory_addr_width,
                                   id_width=device.memory_id_width, max_outstanding=64)
                m.d.comb += memory.read_latency.eq(self._read_latency)
            else:
                from sim.pmem import PmemModel

                memory = PmemModel(depth=lines, addr_width=device.memory_addr_width,
                                   id_width=device.memory_id_width)
                for name in PMEM_INPUTS:
                    m.d.comb += getattr(memory, name).eq(getattr(self, name))
                powered_down.append(memory.powered_down)
            m.submodules[f"memory{channel}"] = memory
            wiring.connect(m, device.mem[channel], memory.axi)
        if powered_down:
            m.d.comb += self.powered_down.eq(Cat(*powered_down).all())
        return m
