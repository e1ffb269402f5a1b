"""Shared pieces of the checkpoint unit tests (Amaranth simulator): a CheckpointEngine on a
PmemModel with an explicit reset, a scripted stand-in for the embedding engine, and AXI/stream
helpers. Not a test module itself."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

from amaranth.hdl import ClockDomain, Module
from amaranth.lib import wiring

from hw.ckpt.engine import CheckpointEngine
from hw.ckpt.join import own_id_base
from hw.ckpt.layouts import (
    COMMIT_LAYOUT,
    FLAG_LAYOUT,
    GROUP_HEADER_LAYOUT,
    SNAPSHOT_LAYOUT,
    SUPERBLOCK_LAYOUT,
    FlagState,
    LogMode,
    MetaLine,
    record_valid,
    unpack,
)
from hw.emb.layouts import ErrorCode, Opcode, command_layout, region_layout, status_layout
from sim.pmem import PmemModel
from tb import pysim

ADDR_WIDTH = 20
ID_WIDTH = 4
LINES = 2048
TABLE_LINE = 0          # table 0: 32 rows of dim 16 at line 0; table 1: 16 rows of dim 32
TABLE1_LINE = 64
BUFFER_LINE = 256       # "indices" (not a table)
META_LINE = 512
LOG_LINE = 640          # 64 lines: 2 areas of 4 groups (28 entries each)
LOG_LINES = 64
SLOT_LINES = (768, 896)

# The stand-in engine's script of the checkpoint tests: LOOKUP reads a duplicate and a line
# outside the tables (neither is logged).
LOOKUP_LINES = [TABLE_LINE + 3, BUFFER_LINE, TABLE_LINE + 5, TABLE_LINE + 3,  # 3 again: dup
                TABLE1_LINE + 2 * 4, TABLE1_LINE + 2 * 4 + 1, TABLE_LINE + 31]
LOGGED = [TABLE_LINE + 3, TABLE_LINE + 5, TABLE1_LINE + 8, TABLE1_LINE + 9, TABLE_LINE + 31]
UPDATE_LINES = [TABLE_LINE + 3, TABLE_LINE + 5, TABLE1_LINE + 8, TABLE1_LINE + 9,
                TABLE_LINE + 31]


class Rig(wiring.Component):
    """CheckpointEngine + PmemModel; the engine's ports are the testbench's."""

    def __init__(self, **ckpt):
        self.ckpt = CheckpointEngine(addr_width=ADDR_WIDTH, id_width=ID_WIDTH, max_tables=2,
                                     **ckpt)
        self.memory = PmemModel(depth=LINES, addr_width=ADDR_WIDTH, id_width=ID_WIDTH,
                                pending_beats=32)
        self.domain = ClockDomain("sync")
        super().__init__({})

    def elaborate(self, platform):
        m = Module()
        m.domains.sync = self.domain
        m.submodules.ckpt = self.ckpt
        m.submodules.memory = self.memory
        wiring.connect(m, self.ckpt.axi, self.memory.axi)
        return m


def configure(ctx, ckpt, *, interval=4, logging=True, log_mode=LogMode.ON_LOOKUP):
    region = region_layout(ADDR_WIDTH)
    ctx.set(ckpt.meta_region, region.const({"base": META_LINE * 64, "size": 8 * 64}))
    ctx.set(ckpt.log_region, region.const({"base": LOG_LINE * 64, "size": LOG_LINES * 64}))
    for slot, line in enumerate(SLOT_LINES):
        ctx.set(ckpt.snapshot_regions[slot], region.const({"base": line * 64, "size": 64 * 64}))
    ctx.set(ckpt.snapshot_interval, interval)
    ctx.set(ckpt.logging_enable, int(logging))
    ctx.set(ckpt.log_mode, log_mode)
    tables = [{"base": TABLE_LINE * 64, "rows": 32, "dim": 16, "mode": 0},
              {"base": TABLE1_LINE * 64, "rows": 16, "dim": 32, "mode": 0}]
    for t, table in enumerate(tables):
        for name, value in table.items():
            ctx.set(getattr(ckpt.tables[t], name), value)


async def backdoor_write(ctx, memory, line, value: int):
    ctx.set(memory.backdoor_addr, line)
    ctx.set(memory.backdoor_wdata, value)
    ctx.set(memory.backdoor_we, 1)
    await ctx.tick()
    ctx.set(memory.backdoor_we, 0)


async def backdoor_read(ctx, memory, line) -> bytes:
    ctx.set(memory.backdoor_addr, line)
    await ctx.tick()
    return ctx.get(memory.backdoor_rdata).to_bytes(64, "little")


def line_value(line, salt=0) -> int:
    """A recognisable 512-bit pattern for a line."""
    return int.from_bytes(bytes((line * 7 + salt + k) & 0xFF for k in range(64)), "little")


async def command(ctx, ckpt, opcode, batch, *, tables=2, timeout=20000):
    """Send one command and return its status (a data.Const of status_layout)."""
    # Opcodes outside the enum (to test refusals) are packed by hand: field 0, 4 bits.
    raw = opcode.value if isinstance(opcode, Opcode) else int(opcode)
    payload = command_layout(ADDR_WIDTH).const({"opcode": Opcode.NOP, "batch": batch,
                                                "tables": tables})
    ctx.set(ckpt.cmd.payload.as_value(), payload.as_bits() | raw)
    ctx.set(ckpt.cmd.valid, 1)
    await ctx.tick().until(ckpt.cmd.ready)
    ctx.set(ckpt.cmd.valid, 0)
    ctx.set(ckpt.done.ready, 1)
    for _ in range(timeout):
        _, _, valid, status = await ctx.tick().sample(ckpt.done.valid, ckpt.done.payload)
        if valid:
            ctx.set(ckpt.done.ready, 0)
            return status
    raise AssertionError(f"{opcode} {batch}: no status after {timeout} cycles")


@dataclass
class EngineScript:
    """What the stand-in embedding engine does for each command.

    LOOKUP: reads ``lookup_lines`` (one AR each, ID = position % 8, several in flight), then
    writes one output line. UPDATE: reads ``update_lines`` and writes each back with a
    different value (``salt``), then reports done once every write has its B response.
    Every command it receives is appended to ``commands`` as ``(opcode, batch)``; the LOOKUPs
    whose position among the LOOKUPs received (from 0) is in ``lookup_errors`` report
    BUS_ERROR.
    """

    lookup_lines: list[int] = field(default_factory=list)
    update_lines: list[int] = field(default_factory=list)
    salt: int = 100
    update_error: bool = False
    lookup_errors: tuple[int, ...] = ()
    commands: list[tuple[Opcode, int]] = field(default_factory=list)
    # (cycle, "ar" or "aw", line) per read and write, (cycle, "cmd", opcode) per command.
    events: list[tuple[int, str, int]] = field(default_factory=list)


class _Reset(Exception):
    """The design was reset under the stand-in engine (a power failure): start over."""


async def fake_engine(ctx, ckpt, script: EngineScript):
    while True:
        try:
            await _engine_commands(ctx, ckpt, script)
        except _Reset:
            for signal in (ckpt.engine_axi.arvalid, ckpt.engine_axi.awvalid,
                           ckpt.engine_axi.wvalid, ckpt.engine_done.valid):
                ctx.set(signal, 0)


async def _tick(ctx, *signals):
    """One clock edge; the sampled values of ``signals``; ``_Reset`` if reset is held."""
    _, reset, *values = await ctx.tick().sample(*signals)
    if reset:
        raise _Reset
    return values[0] if len(values) == 1 else values


async def _engine_commands(ctx, ckpt, script):
    bus = ckpt.engine_axi
    ctx.set(bus.rready, 1)
    ctx.set(bus.bready, 1)
    cycle = 0
    while True:
        ctx.set(ckpt.engine_cmd.ready, 1)
        valid, cmd = await _tick(ctx, ckpt.engine_cmd.valid, ckpt.engine_cmd.payload)
        cycle += 1
        if not valid:
            continue
        ctx.set(ckpt.engine_cmd.ready, 0)
        opcode = cmd.opcode
        script.commands.append((opcode, int(cmd.batch)))
        script.events.append((cycle, "cmd", opcode.value))
        lines = script.lookup_lines if opcode == Opcode.LOOKUP else script.update_lines
        # Issue every read (up to 8 in flight, IDs round robin), collect the data.
        pending = list(enumerate(lines))
        in_flight = {}
        while pending or in_flight:
            if pending and len(in_flight) < 8:
                position, line = pending[0]
                ident = position % 8
                if ident not in in_flight:
                    ctx.set(bus.arvalid, 1)
                    ctx.set(bus.arid, ident)
                    ctx.set(bus.araddr, line * 64)
                    ctx.set(bus.arlen, 0)
            arvalid, arready, rvalid, rid = await _tick(
                ctx, bus.arvalid, bus.arready, bus.rvalid, bus.rid)
            cycle += 1
            if arvalid and arready:
                position, line = pending.pop(0)
                in_flight[position % 8] = line
                script.events.append((cycle, "ar", line))
            ctx.set(bus.arvalid, 0)
            if rvalid:
                in_flight.pop(rid)
        writes = ([(BUFFER_LINE + 8, 0xABCD)] if opcode == Opcode.LOOKUP
                  else [(line, line_value(line, script.salt)) for line in lines])
        outstanding = 0
        for line, value in writes:
            ctx.set(bus.awvalid, 1)
            ctx.set(bus.awid, 1)
            ctx.set(bus.awaddr, line * 64)
            ctx.set(bus.awlen, 0)
            ctx.set(bus.wvalid, 1)
            ctx.set(bus.wdata, value)
            ctx.set(bus.wstrb, (1 << 64) - 1)
            ctx.set(bus.wlast, 1)
            while True:
                ready, bvalid = await _tick(ctx, bus.awready, bus.bvalid)
                cycle += 1
                outstanding -= bvalid
                if ready:
                    break
            outstanding += 1
            script.events.append((cycle, "aw", line))
            ctx.set(bus.awvalid, 0)
            ctx.set(bus.wvalid, 0)
        while outstanding:
            outstanding -= await _tick(ctx, bus.bvalid)
            cycle += 1
        lookups = sum(1 for op, _ in script.commands if op == Opcode.LOOKUP)
        failing = (script.update_error if opcode == Opcode.UPDATE
                   else lookups - 1 in script.lookup_errors)
        error = ErrorCode.BUS_ERROR if failing else ErrorCode.NONE
        ctx.set(ckpt.engine_done.payload, status_layout().const(
            {"opcode": opcode, "batch": cmd.batch, "error": error}))
        ctx.set(ckpt.engine_done.valid, 1)
        while not await _tick(ctx, ckpt.engine_done.ready):
            pass
        ctx.set(ckpt.engine_done.valid, 0)


simulate = partial(pysim.simulate, deadline=200_000)


async def read_meta(ctx, memory):
    """The metadata lines, parsed: {name: (valid, view)}."""
    out = {}
    for name, line, layout in (("superblock", MetaLine.SUPERBLOCK, SUPERBLOCK_LAYOUT),
                               ("commit", MetaLine.COMMIT, COMMIT_LAYOUT),
                               ("flag0", MetaLine.FLAG_0, FLAG_LAYOUT),
                               ("flag1", MetaLine.FLAG_1, FLAG_LAYOUT),
                               ("snap0", MetaLine.SNAPSHOT_0, SNAPSHOT_LAYOUT),
                               ("snap1", MetaLine.SNAPSHOT_1, SNAPSHOT_LAYOUT)):
        raw = await backdoor_read(ctx, memory, META_LINE + line)
        out[name] = (record_valid(layout, raw), unpack(layout, raw))
    return out


async def read_group(ctx, memory, area, group):
    base = LOG_LINE + area * (LOG_LINES // 2) + 8 * group
    header = unpack(GROUP_HEADER_LAYOUT, await backdoor_read(ctx, memory, base))
    data = [await backdoor_read(ctx, memory, base + 1 + k) for k in range(7)]
    return header, data


async def power_cycle(ctx, rig, *, seed=1, keep=128):
    """Fail power now, wait for the image, reset the design (memory survives)."""
    memory = rig.memory
    ctx.set(memory.fail_seed, seed)
    ctx.set(memory.fail_keep, keep)
    ctx.set(memory.power_fail, 1)
    await ctx.tick().until(memory.powered_down)
    ctx.set(memory.power_fail, 0)
    ctx.set(rig.domain.rst, 1)
    await ctx.delay(2e-6)  # (a tick would raise DomainReset while the reset is held)
    ctx.set(rig.domain.rst, 0)
    await ctx.tick()


async def load_tables(ctx, memory):
    for line in range(TABLE_LINE, TABLE_LINE + 32):
        await backdoor_write(ctx, memory, line, line_value(line))
    for line in range(TABLE1_LINE, TABLE1_LINE + 32):
        await backdoor_write(ctx, memory, line, line_value(line))


async def table_image(ctx, memory):
    return {line: await backdoor_read(ctx, memory, line)
            for line in [*range(TABLE_LINE, TABLE_LINE + 32),
                         *range(TABLE1_LINE, TABLE1_LINE + 32)]}


async def open_device(ctx, ckpt, memory, log_mode):
    """The usual start of a test: configure with ``log_mode``, load the tables, RECOVER.
    Returns the tables' image before any batch and RECOVER's status."""
    configure(ctx, ckpt, log_mode=log_mode)
    await load_tables(ctx, memory)
    before = await table_image(ctx, memory)
    return before, await command(ctx, ckpt, Opcode.RECOVER, 0)


def simulate_script(rig, script, host):
    """Run the testbench ``host`` against the rig, the stand-in engine following ``script``."""
    ckpt = rig.ckpt

    async def engine(ctx):
        await fake_engine(ctx, ckpt, script)

    simulate(rig, host, processes=[engine])


def simulate_with_monitor(rig, host, monitor, script, *more_monitors):
    """As :func:`simulate_script`, with ``monitor`` (and ``more_monitors``) running
    alongside: each a process function of ``ctx``."""
    ckpt = rig.ckpt

    async def engine(ctx):
        await fake_engine(ctx, ckpt, script)

    simulate(rig, host, processes=[engine, monitor, *more_monitors])


def write_monitor(ckpt, writes, responses):
    """A monitor (for ``simulate_with_monitor``) of the memory-side write channels: appends
    ``(cycle, kind, line)`` to ``writes`` at each AW handshake and ``(cycle, kind)`` to
    ``responses`` at each B, ``kind`` being the OwnWrite value of an own write, else None."""
    base = own_id_base(ID_WIDTH)

    async def monitor(ctx):
        cycle = 0
        async for _, _, awv, awr, awid, awaddr, bv, br, bid in ctx.tick().sample(
                ckpt.axi.awvalid, ckpt.axi.awready, ckpt.axi.awid, ckpt.axi.awaddr,
                ckpt.axi.bvalid, ckpt.axi.bready, ckpt.axi.bid):
            cycle += 1
            if awv and awr:
                writes.append((cycle, awid - base if awid >= base else None, awaddr // 64))
            if bv and br:
                responses.append((cycle, bid - base if bid >= base else None))

    return monitor


def slow_writes(ctx, memory, den=20):
    """One write accepted every ``den`` cycles: a LOOKUP's log still drains at its status."""
    for name, value in (("write_rate_num", 1), ("write_rate_den", den)):
        ctx.set(getattr(memory, name), value)


def lookups_and_updates(script):
    """The opcodes the stand-in engine received, in order (a replay is a second LOOKUP)."""
    return [opcode for opcode, _ in script.commands]


async def check_first_batch_committed(ctx, memory, before):
    """Batch 0 of the standard script is in memory as committed: its log group holds LOGGED
    with the old values (``before``: the table image), its flag is SET with that many
    entries, the commit record names it, and the updated rows hold their new values."""
    header, data = await read_group(ctx, memory, area=0, group=0)
    assert header.batch == 0 and header.count == len(LOGGED)
    assert [int(header.lines[k]) for k in range(len(LOGGED))] == LOGGED
    for k, line in enumerate(LOGGED):
        assert data[k] == before[line], f"entry {k}: old value of line {line}"
    meta = await read_meta(ctx, memory)
    valid, flag = meta["flag0"]
    assert valid and flag.state == FlagState.SET and flag.entries == len(LOGGED)
    assert meta["commit"][1].batch == 0
    for line in UPDATE_LINES:
        assert await backdoor_read(ctx, memory, line) == \
            line_value(line, 100).to_bytes(64, "little")
