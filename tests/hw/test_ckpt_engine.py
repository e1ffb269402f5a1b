# amaranth: UnusedElaboratable=no
"""The CheckpointEngine in Amaranth's simulator, on the PMEM model, with a scripted stand-in for
the embedding engine: formatting, log-on-lookup (tables only, duplicates skipped), the order
log -> flag -> in-place writes -> commit, rollback after a power failure in the update,
idempotent recovery, snapshots, refusals, GPF and the pass-through mode."""

import pytest
from ckpt_fixtures import (
    LOG_LINE,
    LOGGED,
    LOOKUP_LINES,
    META_LINE,
    TABLE_LINE,
    UPDATE_LINES,
    EngineScript,
    Rig,
    backdoor_read,
    check_first_batch_committed,
    command,
    configure,
    fake_engine,
    load_tables,
    open_device,
    power_cycle,
    read_meta,
    simulate,
    simulate_script,
    simulate_with_monitor,
    slow_writes,
    table_image,
    write_monitor,
)

from hw.ckpt.engine import CheckpointEngine
from hw.ckpt.layouts import (
    NO_BATCH,
    CheckpointError,
    CheckpointPhase,
    FlagState,
    LogMode,
    OwnWrite,
)
from hw.emb.layouts import ErrorCode, Opcode


def test_parameters_are_validated_with_exact_messages():
    with pytest.raises(ValueError, match=r"^ID width must be an integer in 3\.\.16, not 2$"):
        CheckpointEngine(id_width=2)
    with pytest.raises(ValueError, match=r"^Log buffer depth must be a power of two in "
                                         r"8\.\.4096, not 12$"):
        CheckpointEngine(log_buffer_depth=12)
    with pytest.raises(ValueError, match=r"^Write tap buffer depth must be a power of two in "
                                         r"4\.\.4096, not 2$"):
        CheckpointEngine(write_tap_buffer_depth=2)
    assert CheckpointEngine(write_tap_buffer_depth=1024).write_tap_buffer_depth == 1024
    with pytest.raises(ValueError, match=r"^Duplicate filter size must be 0 or a power of "
                                         r"two in 2\.\.16384, not 3$"):
        CheckpointEngine(dedup_entries=3)
    with pytest.raises(TypeError, match=r"^Address width must be an integer, not '32'$"):
        CheckpointEngine(addr_width="32")
    assert CheckpointEngine(id_width=6).engine_id_limit == 60


def test_one_batch_logs_flags_updates_and_commits_in_order():
    rig = Rig()
    ckpt, memory = rig.ckpt, rig.memory
    script = EngineScript(lookup_lines=LOOKUP_LINES, update_lines=UPDATE_LINES)
    own_writes = []   # (cycle, kind, line) at the memory-side AW handshake
    b_responses = []  # (cycle, kind)
    monitor = write_monitor(ckpt, own_writes, b_responses)

    async def host(ctx):
        configure(ctx, ckpt)
        await load_tables(ctx, memory)
        before = await table_image(ctx, memory)
        status = await command(ctx, ckpt, Opcode.RECOVER, 0)
        assert status.error == ErrorCode.NONE
        assert ctx.get(ckpt.last_committed) == NO_BATCH
        meta = await read_meta(ctx, memory)
        assert meta["superblock"][0] and meta["commit"][0]
        assert meta["commit"][1].batch == NO_BATCH

        status = await command(ctx, ckpt, Opcode.LOOKUP, 0)
        assert status.error == ErrorCode.NONE and status.batch == 0
        assert ctx.get(ckpt.log_open) == 1
        status = await command(ctx, ckpt, Opcode.UPDATE, 0)
        assert status.error == ErrorCode.NONE, ctx.get(ckpt.error)
        assert ctx.get(ckpt.last_committed) == 0
        assert ctx.get(ckpt.counters.log_duplicates) == 1

        await check_first_batch_committed(ctx, memory, before)

        # Ordering at the memory port (invariants 1-3).
        def last(kind, before_cycle=None):
            return max(c for c, k in b_responses if k == kind
                       and (before_cycle is None or c < before_cycle))
        log_aws = [c for c, k, _ in own_writes if k == OwnWrite.LOG.value]
        flag_aw = next(c for c, k, _ in own_writes if k == OwnWrite.FLAG.value)
        commit_aw = next(c for c, k, _ in own_writes if k == OwnWrite.COMMIT.value)
        in_place = [c for c, k, line in own_writes if k is None and line in UPDATE_LINES]
        assert len(log_aws) == len(LOGGED) + 1  # entries + the header
        assert last(OwnWrite.LOG.value) < flag_aw
        assert last(OwnWrite.FLAG.value) < min(in_place)
        engine_bs = [c for c, k in b_responses if k is None]
        assert max(engine_bs) < commit_aw
        # UPDATE came while the log was still draining, and its log fits: it went to the
        # engine during the seal, so its reads ran before the flag; its writes waited.
        update_sent = next(c for c, kind, op in script.events
                           if kind == "cmd" and op == Opcode.UPDATE.value)
        update_reads = [c for c, kind, _ in script.events if kind == "ar" and c > update_sent]
        assert update_sent < flag_aw and len(update_reads) == len(UPDATE_LINES)
        assert min(update_reads) < flag_aw

    simulate_with_monitor(rig, host, monitor, script)


async def _update_while_the_log_drains(ctx, ckpt, memory):
    """RECOVER, LOOKUP(0) on a slow memory, then UPDATE(0) at once: the tables' image before
    and UPDATE's status."""
    before, _ = await open_device(ctx, ckpt, memory, LogMode.ON_LOOKUP)
    slow_writes(ctx, memory)
    await command(ctx, ckpt, Opcode.LOOKUP, 0)
    assert ctx.get(ckpt.log_pending) == 1
    return before, await command(ctx, ckpt, Opcode.UPDATE, 0)


def test_update_whose_log_overflows_is_refused_and_never_reaches_the_engine():
    rig = Rig()
    ckpt, memory = rig.ckpt, rig.memory
    # 30 distinct table lines: an area holds 28 entries (4 groups of 7).
    script = EngineScript(lookup_lines=list(range(TABLE_LINE, TABLE_LINE + 30)),
                          update_lines=UPDATE_LINES)

    async def host(ctx):
        before, status = await _update_while_the_log_drains(ctx, ckpt, memory)
        assert status.error == ErrorCode.BAD_OPCODE
        assert ctx.get(ckpt.error) == CheckpointError.LOG_OVERFLOW
        assert [op for op, _ in script.commands] == [Opcode.LOOKUP]
        meta = await read_meta(ctx, memory)
        assert all(meta[flag][1].state != FlagState.SET for flag in ("flag0", "flag1"))
        assert await table_image(ctx, memory) == before

    simulate_script(rig, script, host)


def test_update_failing_at_once_during_the_seal_is_rolled_back():
    """UPDATE goes to the engine while the log drains; the engine reports an error before
    writing anything. The flag is still written only after the log, and the batch needs
    RECOVER, which rolls it back (to the values it already has)."""
    rig = Rig()
    ckpt, memory = rig.ckpt, rig.memory
    script = EngineScript(lookup_lines=LOOKUP_LINES, update_lines=[], update_error=True)
    reported_in = []   # the checkpoint phase when the engine's UPDATE status was taken

    async def watch(ctx):
        async for _, _, valid, ready, status, phase in ctx.tick().sample(
                ckpt.engine_done.valid, ckpt.engine_done.ready, ckpt.engine_done.payload,
                ckpt.phase):
            if valid and ready and status.opcode == Opcode.UPDATE:
                reported_in.append(phase)

    async def host(ctx):
        before, status = await _update_while_the_log_drains(ctx, ckpt, memory)
        assert reported_in == [CheckpointPhase.SEAL]
        assert status.error == ErrorCode.BUS_ERROR
        assert ctx.get(ckpt.error) == CheckpointError.UPDATE_FAILED
        meta = await read_meta(ctx, memory)
        assert meta["flag0"][0] and meta["flag0"][1].state == FlagState.SET
        await command(ctx, ckpt, Opcode.RECOVER, 0)
        assert ctx.get(ckpt.rolled_back) == 1
        assert await table_image(ctx, memory) == before

    simulate_with_monitor(rig, host, watch, script)


@pytest.mark.parametrize(("seed", "keep"), [(1, 0), (2, 128), (3, 255)])
def test_power_failure_during_update_rolls_back_and_recovery_is_idempotent(seed, keep):
    rig = Rig()
    ckpt, memory = rig.ckpt, rig.memory
    script = EngineScript(lookup_lines=LOOKUP_LINES, update_lines=UPDATE_LINES)

    async def engine(ctx):
        await fake_engine(ctx, ckpt, script)

    async def host(ctx):
        configure(ctx, ckpt)
        await load_tables(ctx, memory)
        before = await table_image(ctx, memory)
        assert (await command(ctx, ckpt, Opcode.RECOVER, 0)).error == ErrorCode.NONE
        assert (await command(ctx, ckpt, Opcode.LOOKUP, 0)).error == ErrorCode.NONE
        # UPDATE(0); power fails after the engine's third in-place write was accepted.
        ctx.set(ckpt.cmd.payload.opcode, Opcode.UPDATE)
        ctx.set(ckpt.cmd.payload.batch, 0)
        ctx.set(ckpt.cmd.valid, 1)
        await ctx.tick().until(ckpt.cmd.ready)
        ctx.set(ckpt.cmd.valid, 0)
        while sum(1 for _, kind, _ in script.events if kind == "aw") < 3:
            await ctx.tick()
        assert ctx.get(ckpt.phase) == CheckpointPhase.UPDATE
        await power_cycle(ctx, rig, seed=seed, keep=keep)
        assert ctx.get(ckpt.phase) == CheckpointPhase.DETACHED
        assert (await command(ctx, ckpt, Opcode.LOOKUP, 1)).error == ErrorCode.BAD_OPCODE
        assert ctx.get(ckpt.error) == CheckpointError.NOT_RECOVERED

        status = await command(ctx, ckpt, Opcode.RECOVER, 0)
        assert status.error == ErrorCode.NONE
        assert ctx.get(ckpt.last_committed) == NO_BATCH
        assert ctx.get(ckpt.rolled_back) == 1
        assert ctx.get(ckpt.restored_entries) == len(LOGGED)
        assert ctx.get(ckpt.recovery_cycles) > 0
        assert await table_image(ctx, memory) == before
        meta = await read_meta(ctx, memory)
        assert meta["flag0"][1].state == FlagState.ROLLED_BACK

        # A second recovery finds nothing to do and changes nothing.
        status = await command(ctx, ckpt, Opcode.RECOVER, 0)
        assert status.error == ErrorCode.NONE and ctx.get(ckpt.rolled_back) == 0
        assert await table_image(ctx, memory) == before

        # Training resumes at batch 0.
        assert (await command(ctx, ckpt, Opcode.LOOKUP, 0)).error == ErrorCode.NONE
        assert (await command(ctx, ckpt, Opcode.UPDATE, 0)).error == ErrorCode.NONE
        assert ctx.get(ckpt.last_committed) == 0

    simulate(rig, host, processes=[engine])


def test_power_failure_during_recovery_then_recovery_again():
    rig = Rig()
    ckpt, memory = rig.ckpt, rig.memory
    script = EngineScript(lookup_lines=LOOKUP_LINES, update_lines=UPDATE_LINES)

    async def engine(ctx):
        await fake_engine(ctx, ckpt, script)

    async def host(ctx):
        configure(ctx, ckpt)
        await load_tables(ctx, memory)
        before = await table_image(ctx, memory)
        await command(ctx, ckpt, Opcode.RECOVER, 0)
        await command(ctx, ckpt, Opcode.LOOKUP, 0)
        ctx.set(ckpt.cmd.payload.opcode, Opcode.UPDATE)
        ctx.set(ckpt.cmd.valid, 1)
        await ctx.tick().until(ckpt.cmd.ready)
        ctx.set(ckpt.cmd.valid, 0)
        while sum(1 for _, kind, _ in script.events if kind == "aw") < len(UPDATE_LINES):
            await ctx.tick()
        await power_cycle(ctx, rig, seed=5, keep=255)
        for delay in (40, 80, 120):
            ctx.set(ckpt.cmd.payload.opcode, Opcode.RECOVER)
            ctx.set(ckpt.cmd.valid, 1)
            await ctx.tick().until(ckpt.cmd.ready)
            ctx.set(ckpt.cmd.valid, 0)
            await ctx.tick().repeat(delay)
            await power_cycle(ctx, rig, seed=delay, keep=128)
        assert (await command(ctx, ckpt, Opcode.RECOVER, 0)).error == ErrorCode.NONE
        assert ctx.get(ckpt.last_committed) == NO_BATCH
        assert await table_image(ctx, memory) == before

    simulate(rig, host, processes=[engine])


def test_refusals_change_nothing():
    rig = Rig()
    ckpt, memory = rig.ckpt, rig.memory
    script = EngineScript(lookup_lines=LOOKUP_LINES, update_lines=UPDATE_LINES)

    async def engine(ctx):
        await fake_engine(ctx, ckpt, script)

    async def host(ctx):
        configure(ctx, ckpt)
        await load_tables(ctx, memory)

        async def refused(opcode, batch, reason):
            status = await command(ctx, ckpt, opcode, batch)
            assert status.error == ErrorCode.BAD_OPCODE, (opcode, batch)
            assert ctx.get(ckpt.error) == reason, (opcode, batch, ctx.get(ckpt.error))

        await refused(Opcode.UPDATE, 0, CheckpointError.NOT_RECOVERED)
        await refused(Opcode.SNAPSHOT, 3, CheckpointError.NOT_RECOVERED)
        await command(ctx, ckpt, Opcode.RECOVER, 0)
        await refused(Opcode.LOOKUP, 1, CheckpointError.OUT_OF_ORDER)
        await refused(Opcode.UPDATE, 0, CheckpointError.OUT_OF_ORDER)  # no LOOKUP(0) yet
        assert (await command(ctx, ckpt, Opcode.NOP, 9)).error == ErrorCode.NONE
        assert script.events == []
        await command(ctx, ckpt, Opcode.LOOKUP, 0)
        await refused(Opcode.UPDATE, 1, CheckpointError.OUT_OF_ORDER)
        await command(ctx, ckpt, Opcode.UPDATE, 0)
        await refused(Opcode.SNAPSHOT, 1, CheckpointError.NOT_SNAPSHOT_BATCH)  # K = 4
        await refused(Opcode.SNAPSHOT, 3, CheckpointError.SNAPSHOT_ORDER)      # 3 > c = 0
        status = await command(ctx, ckpt, 9, 0)
        assert status.error == ErrorCode.BAD_OPCODE

    simulate(rig, host, processes=[engine])


def test_snapshots_alternate_and_recovery_reports_the_newest():
    rig = Rig()
    ckpt, memory = rig.ckpt, rig.memory
    script = EngineScript(lookup_lines=[TABLE_LINE], update_lines=[TABLE_LINE])

    async def engine(ctx):
        await fake_engine(ctx, ckpt, script)

    async def host(ctx):
        configure(ctx, ckpt, interval=2)
        await command(ctx, ckpt, Opcode.RECOVER, 0)
        assert ctx.get(ckpt.snapshot_valid) == 0 and ctx.get(ckpt.next_snapshot_slot) == 1
        assert (await command(ctx, ckpt, Opcode.SNAPSHOT, NO_BATCH)).error == ErrorCode.NONE
        assert ctx.get(ckpt.snapshot_slot) == 1 and ctx.get(ckpt.snapshot_batch) == NO_BATCH
        assert ctx.get(ckpt.next_snapshot_slot) == 0
        for batch in range(6):
            await command(ctx, ckpt, Opcode.LOOKUP, batch)
            await command(ctx, ckpt, Opcode.UPDATE, batch)
            if batch % 2 == 1:
                slot = ctx.get(ckpt.next_snapshot_slot)
                assert slot == (batch // 2) % 2   # sw_model.checkpoint.snapshot_slot
                status = await command(ctx, ckpt, Opcode.SNAPSHOT, batch)
                assert status.error == ErrorCode.NONE, ctx.get(ckpt.error)
                assert ctx.get(ckpt.snapshot_batch) == batch
                assert ctx.get(ckpt.snapshot_slot) == slot
        await power_cycle(ctx, rig)
        await command(ctx, ckpt, Opcode.RECOVER, 0)
        assert ctx.get(ckpt.last_committed) == 5
        assert ctx.get(ckpt.snapshot_batch) == 5 and ctx.get(ckpt.snapshot_slot) == 0
        meta = await read_meta(ctx, memory)
        assert meta["snap1"][1].batch == 3 and meta["snap0"][1].batch == 5

    simulate(rig, host, processes=[engine])


def test_gpf_drains_the_log_and_cuts_the_batch():
    rig = Rig(log_buffer_depth=8)
    ckpt, memory = rig.ckpt, rig.memory
    script = EngineScript(lookup_lines=LOGGED * 3, update_lines=UPDATE_LINES)

    async def engine(ctx):
        await fake_engine(ctx, ckpt, script)

    async def host(ctx):
        configure(ctx, ckpt)
        slow_writes(ctx, memory)   # so the log is still draining when GPF comes
        await command(ctx, ckpt, Opcode.RECOVER, 0)
        await command(ctx, ckpt, Opcode.LOOKUP, 0)
        assert ctx.get(ckpt.log_pending) == 1
        ctx.set(ckpt.gpf, 1)
        await ctx.tick().until(ckpt.gpf_done)
        assert ctx.get(ckpt.log_pending) == 0 and ctx.get(memory.pending) == 0
        assert ctx.get(ckpt.gpf_drain_cycles) > 0
        ctx.set(ckpt.gpf, 0)
        await ctx.tick()
        await command(ctx, ckpt, Opcode.UPDATE, 0)  # the log is complete: GPF came after
        assert ctx.get(ckpt.last_committed) == 0

    simulate(rig, host, processes=[engine])


def test_logging_disabled_passes_commands_through():
    rig = Rig()
    ckpt, memory = rig.ckpt, rig.memory
    script = EngineScript(lookup_lines=LOOKUP_LINES, update_lines=UPDATE_LINES)

    async def engine(ctx):
        await fake_engine(ctx, ckpt, script)

    async def host(ctx):
        configure(ctx, ckpt, logging=False)
        assert (await command(ctx, ckpt, Opcode.LOOKUP, 7)).error == ErrorCode.NONE
        assert (await command(ctx, ckpt, Opcode.UPDATE, 7)).error == ErrorCode.NONE
        assert ctx.get(ckpt.counters.own_writes) == 0
        assert await backdoor_read(ctx, memory, META_LINE) == bytes(64)
        assert await backdoor_read(ctx, memory, LOG_LINE) == bytes(64)

    simulate(rig, host, processes=[engine])


def test_failed_update_needs_recovery():
    rig = Rig()
    ckpt, memory = rig.ckpt, rig.memory
    script = EngineScript(lookup_lines=LOOKUP_LINES, update_lines=UPDATE_LINES,
                          update_error=True)

    async def engine(ctx):
        await fake_engine(ctx, ckpt, script)

    async def host(ctx):
        configure(ctx, ckpt)
        await load_tables(ctx, memory)
        before = await table_image(ctx, memory)
        await command(ctx, ckpt, Opcode.RECOVER, 0)
        await command(ctx, ckpt, Opcode.LOOKUP, 0)
        status = await command(ctx, ckpt, Opcode.UPDATE, 0)
        assert status.error == ErrorCode.BUS_ERROR
        assert ctx.get(ckpt.error) == CheckpointError.UPDATE_FAILED
        assert ctx.get(ckpt.phase) == CheckpointPhase.FAILED
        assert (await command(ctx, ckpt, Opcode.LOOKUP, 0)).error == ErrorCode.BAD_OPCODE
        await command(ctx, ckpt, Opcode.RECOVER, 0)
        assert ctx.get(ckpt.rolled_back) == 1
        assert await table_image(ctx, memory) == before

    simulate(rig, host, processes=[engine])
