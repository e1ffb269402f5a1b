"""What every test of the whole device starts with: the system (``tb/device/system.py``) under
the GPI clock, a CXL.mem host, the register driver, one HDM decoder mapping device memory at
:data:`HPA_BASE`, and the preset's memory plan; with the PMEM model, its timing profile, and
with checkpointing, the power control (``tb/device/power.py``). Tests reach the device only
through CXL.mem and the registers."""

import cocotb
from cocotb.triggers import ClockCycles

from sim.rtl import design_from_env
from sw_model.hdm import GRANULE, Decoder
from tb.common import reset, start_clock
from tb.host.cxl_mem import CxlMemHost
from tb.host.driver import DeviceDriver
from tb.host.trainer import HostTrainer, MemoryPlan

__all__ = ["HPA_BASE", "DeviceBench"]

#: The HPA window of decoder 0: device memory from DPA 0 appears here (256 MiB, one way).
HPA_BASE = 0x20_0000_0000


class DeviceBench:
    """The system under test and the host's handles on it (see the module docstring).

    ``host_options`` go to :class:`CxlMemHost` (pauses); ``scoreboard``: see
    :class:`CxlMemHost` (off by default: the device changes memory behind the host's back).
    """

    def __init__(self, dut, *, stream=0, scoreboard=None, profile="pmem", **host_options):
        self.dut = dut
        design = design_from_env()
        self.system = design.elaboratable()
        self.device = self.system.device
        self.preset = self.system.preset
        self.seed = cocotb.RANDOM_SEED * 16 + stream
        self.host = CxlMemHost(dut, seed=self.seed, scoreboard=scoreboard, **host_options)
        self.driver = DeviceDriver(dut, self.device.register_map, irq=dut.irq)
        self.plan = MemoryPlan.for_preset(self.preset, self.device.memory_bytes)
        self.profile = profile
        self.power = None
        if self.system.memory_model == "pmem":
            from sim.pmem import PROFILES

            from .power import PowerControl

            for name, value in PROFILES[profile].inputs().items():
                getattr(dut, name).value = value
            dut.fail_seed.value = 0
            dut.fail_keep.value = 128
            self.power = PowerControl(dut, self.driver) if self.device.checkpointing else None
            if self.power is not None:
                self.driver.after_doorbell = self.power.hook

    def hpa(self, dpa: int) -> int:
        return HPA_BASE + dpa

    async def start(self, *, map_memory=True) -> None:
        """Clock, reset, identify; with ``map_memory`` program decoder 0 and wait until it
        decodes."""
        start_clock(self.dut)
        await reset(self.dut)
        await self.attach_host(map_memory=map_memory)

    async def attach_host(self, *, map_memory=True) -> None:
        """What the host does after every reset: identify the device, map its memory."""
        self.driver.forget()
        await self.driver.identify()
        if map_memory:
            await self.driver.program_hdm([Decoder.make(base=HPA_BASE, size=GRANULE)])
            await ClockCycles(self.dut.clk, self.device.hdm_config_latency + 2)

    def trainer(self, *, gpu_cycles=0) -> HostTrainer:
        return HostTrainer(self.preset, host=self.host, driver=self.driver, plan=self.plan,
                           hpa_base=HPA_BASE, clock=self.dut.clk, gpu_cycles=gpu_cycles)
