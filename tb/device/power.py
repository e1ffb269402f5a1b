"""Power failures of the simulated system (``tb/device/system.py`` with the PMEM model): an
optional power-fail warning (GPF) that the device drains, the cut itself (beats written but
not yet acknowledged persist or are lost, seeded), and the reset that follows (memory keeps
its contents, everything else starts over).

A failure is *armed* for one command of one batch: :meth:`PowerControl.hook` is the register
driver's ``after_doorbell`` hook, so the cut happens ``delay`` cycles after that doorbell (or as
soon as the command's completion is queued, if that comes first) while the host has no
CXL.mem access in flight; the hook then raises :class:`PowerFailed` out of the host's code.
"""

from dataclasses import dataclass

from cocotb.simtime import get_sim_time
from cocotb.triggers import ClockCycles, First, RisingEdge, with_timeout

from hw.emb.layouts import Opcode
from tb.common import CLOCK_PERIOD_NS, reset

__all__ = ["ArmedFailure", "PowerControl", "PowerFailed", "PowerFailure"]


@dataclass(frozen=True)
class ArmedFailure:
    """Cut power ``delay`` cycles after the doorbell of ``opcode`` for batch ``batch``."""

    opcode: Opcode
    batch: int
    delay: int
    warning: bool        # GPF first (the device drains), or an unannounced cut
    seed: int            # which unacknowledged beats persist
    keep: int            # 0..255: how likely each one is to persist


@dataclass(frozen=True)
class PowerFailure:
    """What happened."""

    armed: ArmedFailure
    completed: bool          # the command's completion was queued before the cut
    gpf_drain_cycles: int    # cycles the GPF drain took (0 without warning)
    cycle: int               # simulation cycle of the cut


class PowerFailed(Exception):
    def __init__(self, failure: PowerFailure):
        super().__init__(f"power failed {failure.armed}")
        self.failure = failure


class PowerControl:
    """Drives ``gpf``, ``power_fail``, ``fail_seed``, ``fail_keep`` and ``rst`` of the system;
    ``driver`` (a DeviceDriver) reads the GPF drain time."""

    #: A GPF drain that takes longer than this fails the test.
    DRAIN_LIMIT = 100_000

    def __init__(self, dut, driver):
        self.dut = dut
        self.driver = driver
        self.armed: list[ArmedFailure] = []
        self.failures: list[PowerFailure] = []
        dut.gpf.value = 0
        dut.power_fail.value = 0

    def arm(self, failure: ArmedFailure) -> None:
        self.armed.append(failure)

    async def hook(self, opcode, batch) -> None:
        """``DeviceDriver.after_doorbell``: cut power if a failure is armed for this command."""
        opcode = getattr(opcode, "value", opcode)
        for armed in self.armed:
            if (armed.opcode.value, armed.batch) == (opcode, batch):
                self.armed.remove(armed)
                failure = await self.cut(armed)
                raise PowerFailed(failure)

    async def cut(self, armed: ArmedFailure) -> PowerFailure:
        dut = self.dut
        if armed.delay:
            await First(ClockCycles(dut.clk, armed.delay), RisingEdge(dut.irq))
        completed = bool(dut.irq.value)
        drain = 0
        if armed.warning:
            dut.gpf.value = 1
            await RisingEdge(dut.clk)
            if not dut.gpf_done.value:
                await with_timeout(RisingEdge(dut.gpf_done), self.DRAIN_LIMIT * CLOCK_PERIOD_NS,
                                   "ns")
            # The register port still works while the device holds its work.
            drain = (await self.driver.read("GPF_DRAIN_CYCLES"))["value"]
        cycle = int(get_sim_time("ns")) // CLOCK_PERIOD_NS
        dut.fail_seed.value = armed.seed
        dut.fail_keep.value = armed.keep
        dut.power_fail.value = 1
        await RisingEdge(dut.clk)
        if not dut.powered_down.value:
            await with_timeout(RisingEdge(dut.powered_down), self.DRAIN_LIMIT * CLOCK_PERIOD_NS,
                               "ns")
        dut.gpf.value = 0
        dut.power_fail.value = 0
        await reset(dut)
        failure = PowerFailure(armed, completed, drain, cycle)
        self.failures.append(failure)
        return failure

