"""The host's driver for the device's registers (the CXL.io BAR), over cocotbext-axi's
AxiLiteMaster, built on ``hw.csr.RegisterDriver`` and the device's own register map
(``hw/device_regs.py``)::

    driver = DeviceDriver(dut, device.register_map, irq=dut.irq)
    await driver.identify()
    await driver.configure_tables([TableConfig(base, rows, dim)])
    await driver.configure_regions([(base, size)])
    await driver.set_learning_rate(0.3)
    completion = await driver.run(Opcode.LOOKUP, batch=0, bags=8, tables=4, ...)

Commands queue in the device; :meth:`submit` returns the command's sequence number, and
:meth:`wait_completion` takes the oldest completion off the queue. Waiting sleeps on the
``irq`` line when it is given (one Python wake-up per completion), else polls ``COMPLETION``
every ``poll_cycles`` cycles. Command fields are cached, so a register whose value did not
change since the previous command is not written again.
"""

import logging
from dataclasses import dataclass

import numpy as np
from cocotb.triggers import RisingEdge, with_timeout
from cocotbext.axi import AxiLiteBus, AxiLiteMaster, AxiResp

from hw.ckpt.layouts import LogMode
from hw.csr import RegisterDriver, RegisterMap
from hw.cxl.hdm import decoder_fields
from hw.device_regs import ENGINE_COUNTERS, ERRORS, MAGIC, VERSION
from hw.emb.layouts import ErrorCode, Opcode, PoolingMode
from tb.common import CLOCK_PERIOD_NS, wait_cycles

__all__ = ["NO_BATCH", "CommandError", "CommandQueueFull", "Completion", "DeviceDriver",
           "RecoveryReport", "RegisterBusError", "TableConfig", "batch_number"]

#: Batch -1 ("before batch 0") in the 32-bit batch registers and command field.
NO_BATCH = 0xFFFF_FFFF


def batch_number(value: int) -> int:
    """A 32-bit batch register value as a batch number (0xFFFFFFFF is -1)."""
    return -1 if value == NO_BATCH else value


class RegisterBusError(Exception):
    """A register access answered SLVERR/DECERR (an address outside the map)."""


class CommandQueueFull(Exception):
    """The device dropped a doorbell: its command queue was full."""


class CommandError(Exception):
    """A command completed with an error code other than NONE."""

    def __init__(self, completion: "Completion"):
        super().__init__(f"{completion.opcode_name}(batch {completion.batch}) failed with "
                         f"{completion.error_name} at table {completion.table}, bag "
                         f"{completion.bag}, position {completion.position}")
        self.completion = completion


@dataclass(frozen=True)
class TableConfig:
    base: int
    rows: int
    dim: int
    mode: PoolingMode = PoolingMode.SUM


@dataclass(frozen=True)
class Completion:
    opcode: int
    error: int
    sequence: int
    batch: int
    table: int
    bag: int
    position: int

    @property
    def ok(self) -> bool:
        return self.error == ErrorCode.NONE.value

    @property
    def opcode_name(self) -> str:
        return next((o.name for o in Opcode if o.value == self.opcode), str(self.opcode))

    @property
    def error_name(self) -> str:
        return next((e.name for e in ErrorCode if e.value == self.error), str(self.error))


@dataclass(frozen=True)
class RecoveryReport:
    """What RECOVER found and did (the CKPT_* status registers after it)."""

    completion: Completion
    last_committed: int     # -1: none
    snapshot_batch: int     # -1: the initial parameters
    snapshot_slot: int
    snapshot_valid: bool
    rolled_back: bool
    restored_entries: int
    recovery_cycles: int


class DeviceDriver:
    """Register-level host driver of a TrainingCxlDevice (module docstring).

    ``dut``: the simulation handle whose ``<prefix>__aw*``/``__w*``/... signals are the
    register port; ``regmap``: the device's ``register_map``; ``irq``: the device's ``irq``
    signal handle, or None to poll.
    """

    def __init__(self, dut, regmap: RegisterMap, *, prefix="csr", clock=None, reset=None,
                 irq=None, poll_cycles=32):
        self._clock = clock if clock is not None else dut.clk
        bus = AxiLiteBus.from_prefix(dut, f"{prefix}_")
        # cocotbext-axi logs its whole configuration at INFO on construction (and again
        # after every reset): keep the output about the device.
        logging.getLogger(f"cocotb.{dut._name}.{prefix}_").setLevel(logging.WARNING)
        self.master = AxiLiteMaster(bus, self._clock, reset if reset is not None else dut.rst)
        self.master.write_if.log.setLevel(logging.WARNING)   # one INFO line per access
        self.master.read_if.log.setLevel(logging.WARNING)
        self.regmap = regmap
        self.regs = RegisterDriver(regmap, self._read32, self._write32)
        self._irq = irq
        self._poll_cycles = poll_cycles
        self._written: dict[str, int] = {}   # register -> last value written (CMD_* cache)
        self._submitted = 0
        self.capabilities: dict[str, int] = {}
        #: ``async hook(opcode, batch)``, awaited by :meth:`run` between the doorbell and the
        #: wait for the completion (the demo injects power failures there).
        self.after_doorbell = None

    def forget(self) -> None:
        """Forget what was written: the device was reset (call :meth:`identify` next)."""
        self._written.clear()
        self.capabilities = {}

    # --- raw access ---------------------------------------------------------------------------
    async def _read32(self, address: int) -> int:
        response = await self.master.read(address, 4)
        if response.resp != AxiResp.OKAY:
            raise RegisterBusError(f"read of {address:#x} answered {response.resp.name}")
        return int.from_bytes(response.data, "little")

    async def _write32(self, address: int, word: int) -> None:
        response = await self.master.write(address, word.to_bytes(4, "little"))
        if response.resp != AxiResp.OKAY:
            raise RegisterBusError(f"write of {address:#x} answered {response.resp.name}")

    async def read(self, name: str) -> dict[str, int]:
        return await self.regs.read(name)

    async def write(self, name: str, **fields: int) -> None:
        await self.regs.write(name, **fields)

    async def _write_cached(self, name: str, **fields: int) -> None:
        word = self.regmap[name].pack(**fields)
        if self._written.get(name) != word:
            await self._write32(self.regmap[name].offset, word)
            self._written[name] = word

    def _words(self, prefix: str) -> int:
        count = 0
        while f"{prefix}_{count}" in {r.name for r in self.regmap}:
            count += 1
        return count

    async def read_wide(self, prefix: str) -> int:
        return await self.regs.read_wide(prefix, self._words(prefix))

    async def _write_wide(self, prefix: str, field: str, value: int, *, cached=False) -> None:
        words = self._words(prefix)
        if not 0 <= value < 1 << (32 * words):
            raise ValueError(f"{prefix}: {value:#x} does not fit {32 * words} bits")
        for word in range(words):
            name = f"{prefix}_{word}"
            part = (value >> (32 * word)) & ((1 << self.regmap[name].width) - 1)
            if cached:
                await self._write_cached(name, **{field: part})
            else:
                await self.regs.write(name, **{field: part})

    # --- identification and configuration -------------------------------------------------
    async def identify(self) -> dict[str, int]:
        """Check the magic and the major version; return the capabilities (also kept in
        ``self.capabilities``). Resynchronises the command sequence with the device."""
        magic = (await self.read("ID"))["magic"]
        if magic != MAGIC:
            raise RuntimeError(f"ID.magic is {magic:#010x}, not {MAGIC:#010x}: not a "
                               f"TrainingCXL device")
        version = await self.read("VERSION")
        if version["major"] != VERSION[0]:
            raise RuntimeError(f"register interface {version['major']}.{version['minor']} is "
                               f"not compatible with this driver ({VERSION[0]}.x)")
        caps = {}
        for name in ("CAPS0", "CAPS1", "CAPS2"):
            caps.update(await self.read(name))
        caps["version"] = (version["major"], version["minor"], version["patch"])
        self.capabilities = caps
        self._submitted = (await self.read("COMMAND_QUEUE"))["submitted"]
        return caps

    async def configure_tables(self, tables: list[TableConfig]) -> None:
        """Program descriptors 0..len-1 (the others are left as they are)."""
        for t, table in enumerate(tables):
            await self._write_wide(f"TABLE{t}_BASE", "address", table.base)
            await self.write(f"TABLE{t}_ROWS", rows=table.rows)
            await self.write(f"TABLE{t}_FORMAT", dim=table.dim, mode=PoolingMode(table.mode).value)

    async def configure_regions(self, regions: list[tuple[int, int]]) -> None:
        """Enable engine regions ``(base, size)`` in order; disable the remaining ones."""
        count = sum(1 for r in self.regmap if r.name.startswith("REGION")
                    and r.name.endswith("_ENABLE"))
        if len(regions) > count:
            raise ValueError(f"{len(regions)} regions given, the device has {count}")
        for r in range(count):
            if r < len(regions):
                base, size = regions[r]
                await self._write_wide(f"REGION{r}_BASE", "address", base)
                await self._write_wide(f"REGION{r}_SIZE", "size", size)
            await self.write(f"REGION{r}_ENABLE", enable=int(r < len(regions)))

    async def protect(self, ranges: list[tuple[int, int]]) -> None:
        """Close device ranges ``(base, size)`` to the host; disable the remaining ones."""
        count = sum(1 for r in self.regmap if r.name.startswith("PROTECT")
                    and r.name.endswith("_ENABLE"))
        if len(ranges) > count:
            raise ValueError(f"{len(ranges)} protected ranges given, the device has {count}")
        for p in range(count):
            if p < len(ranges):
                base, size = ranges[p]
                await self._write_wide(f"PROTECT{p}_BASE", "address", base)
                await self._write_wide(f"PROTECT{p}_SIZE", "size", size)
            await self.write(f"PROTECT{p}_ENABLE", enable=int(p < len(ranges)))

    async def program_hdm(self, decoders, *, enable: bool = True) -> None:
        """Program HDM decoders from ``sw_model.hdm.Decoder`` objects, commit them in index
        order, and set ``CONTROL.hdm_enable``. The caller waits ``hdm_config_latency``
        cycles before the decoders decode."""
        for d, decoder in enumerate(decoders):
            fields = decoder_fields(decoder)
            await self.write(f"HDM{d}_BASE", base=fields["base"])
            await self.write(f"HDM{d}_SIZE", size=fields["size"])
            await self.write(f"HDM{d}_SKIP", skip=fields["skip"])
            await self.write(f"HDM{d}_CONTROL", ig=fields["ig"], iw=fields["iw"],
                             position=fields["position"], committed=fields["committed"])
        await self.set_control(hdm_enable=int(enable))

    async def set_control(self, **fields: int) -> None:
        await self.regs.write("CONTROL", merge=True, **fields)

    async def set_learning_rate(self, lr: float) -> None:
        await self.write("LR", value=int(np.float32(lr).view(np.uint32)))

    # --- commands ---------------------------------------------------------------------------
    async def submit(self, opcode, *, batch: int, bags: int = 0, tables: int = 0,
                     num_indices: int = 0, indices: int = 0, offsets: int = 0,
                     weights: int = 0, output: int = 0) -> int:
        """Queue one command; returns its sequence number (mod 2**16). Raises
        :class:`CommandQueueFull` if the device dropped it."""
        await self._write_cached("CMD_BATCH", batch=batch)
        await self._write_cached("CMD_SHAPE", bags=bags, tables=tables)
        await self._write_cached("CMD_NUM_INDICES", num_indices=num_indices)
        for name, address in (("INDICES", indices), ("OFFSETS", offsets),
                              ("WEIGHTS", weights), ("OUTPUT", output)):
            await self._write_wide(f"CMD_{name}", "address", address, cached=True)
        sequence = self._submitted
        await self.write("DOORBELL", opcode=int(getattr(opcode, "value", opcode)))
        # The device counts what it accepted: a full queue drops the doorbell.
        self._submitted = (await self.read("COMMAND_QUEUE"))["submitted"]
        if self._submitted == sequence:
            raise CommandQueueFull(f"doorbell of {getattr(opcode, 'name', opcode)} (batch "
                                   f"{batch}) dropped: the command queue is full")
        return sequence

    async def wait_completion(self, *, timeout_cycles: int | None = 2_000_000) -> Completion:
        """Take the oldest completion off the queue (waiting for one)."""
        async def wait():
            while True:
                if self._irq is not None and not self._irq.value:
                    await RisingEdge(self._irq)
                head = await self.read("COMPLETION")
                if head["valid"]:
                    return head
                if self._irq is None:
                    await wait_cycles(self._clock, self._poll_cycles)

        if self._irq is not None:
            await self.set_control(irq_enable=1)
        if timeout_cycles is None:
            head = await wait()
        else:
            head = await with_timeout(wait(), timeout_cycles * CLOCK_PERIOD_NS, "ns")
        where = await self.read("COMPLETION_WHERE")
        completion = Completion(
            opcode=head["opcode"], error=head["error"], sequence=head["sequence"],
            batch=(await self.read("COMPLETION_BATCH"))["batch"],
            table=where["table"], bag=where["bag"],
            position=(await self.read("COMPLETION_POSITION"))["position"])
        await self.write("COMPLETION_POP", pop=1)
        return completion

    async def run(self, opcode, *, check: bool = True, **fields) -> Completion:
        """Submit one command and wait for its completion (the queue must hold no other);
        raise :class:`CommandError` if it failed and ``check``."""
        sequence = await self.submit(opcode, **fields)
        if self.after_doorbell is not None:
            await self.after_doorbell(opcode, fields.get("batch"))
        completion = await self.wait_completion()
        if completion.sequence != sequence:
            raise RuntimeError(f"completion {completion.sequence} arrived while waiting for "
                               f"command {sequence}")
        if check and not completion.ok:
            raise CommandError(completion)
        return completion

    # --- checkpointing -------------------------------------------------------------------------
    async def configure_checkpoint(self, *, meta, log, snapshots, interval: int,
                                   logging: bool = True,
                                   log_mode: LogMode = LogMode.ON_LOOKUP) -> None:
        """The checkpoint engine's regions ``(base, size)``, snapshot interval K, logging
        switch and when the undo log is taken (``log_mode``, see ``hw.ckpt.engine``); the
        regions must hold still from RECOVER on."""
        for name, (base, size) in (("META", meta), ("LOG", log), ("SNAPSHOT0", snapshots[0]),
                                   ("SNAPSHOT1", snapshots[1])):
            await self._write_wide(f"CKPT_{name}_BASE", "address", base)
            await self._write_wide(f"CKPT_{name}_SIZE", "size", size)
        await self.write("CKPT_INTERVAL", interval=interval)
        await self.write("CKPT_CONTROL", logging_enable=int(logging),
                         log_mode=LogMode(log_mode).value)

    async def checkpoint_status(self) -> dict[str, int]:
        status = await self.read("CKPT_STATUS")
        for name in ("LAST_COMMITTED", "SNAPSHOT_BATCH", "LOG_BATCH", "LOG_BATCH_ENTRIES",
                     "RECOVERY_CYCLES", "RESTORED_ENTRIES", "GPF_DRAIN_CYCLES"):
            status[name.lower()] = (await self.read(name))["value"]
        return status

    async def recover(self) -> RecoveryReport:
        """RECOVER (formats unformatted memory; rolls back an uncommitted batch) and what it
        reports. Raises :class:`CommandError` if it was refused."""
        completion = await self.run(Opcode.RECOVER, batch=0)
        status = await self.checkpoint_status()
        return RecoveryReport(
            completion=completion,
            last_committed=batch_number(status["last_committed"]),
            snapshot_batch=batch_number(status["snapshot_batch"]),
            snapshot_slot=status["snapshot_slot"], snapshot_valid=bool(status["snapshot_valid"]),
            rolled_back=bool(status["rolled_back"]),
            restored_entries=status["restored_entries"],
            recovery_cycles=status["recovery_cycles"])

    # --- status, errors, counters -------------------------------------------------------------
    async def errors(self) -> dict[str, int]:
        return await self.read("ERRORS")

    async def clear_errors(self, *names: str) -> None:
        """Clear the named flags (all when none is named)."""
        await self.write("ERRORS", **{name: 1 for name in (names or ERRORS)})

    async def counters(self) -> dict[str, int]:
        """Latch every counter, then read them: ``cycles``, ``engine_<name>``,
        ``host_<name>``, ``mem<c>_reads``/``_writes``, ``<port>_mem_waits``."""
        await self.write("COUNTERS_LATCH", latch=1)
        values = {"cycles": await self.read_wide("CYCLES")}
        for name in ENGINE_COUNTERS:
            values[f"engine_{name}"] = await self.read_wide(f"ENGINE_{name.upper()}")
        for register in self.regmap:
            name = register.name
            if name.startswith(("HOST_", "MEM", "CKPT_")) and register.fields[0].name == "count":
                values[name.lower()] = (await self.read(name))["count"]
        return values

