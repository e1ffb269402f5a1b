# amaranth: UnusedElaboratable=no
"""Relaxed lookup through the CheckpointEngine (Amaranth's simulator, the stand-in embedding
engine of ``ckpt_fixtures``): LOOKUP(N + 1) runs while batch N is open, deferred in the engine.
In ``ON_LOOKUP`` mode it is logged ahead (its own reads, then the new values UPDATE(N) writes
to its lines); in the other modes it is not logged, and when UPDATE(N) commits a background
replay of its LOOKUP logs the rows as UPDATE(N) left them."""

from ckpt_fixtures import (
    LOG_LINE,
    LOG_LINES,
    LOGGED,
    LOOKUP_LINES,
    TABLE1_LINE,
    TABLE_LINE,
    UPDATE_LINES,
    EngineScript,
    Rig,
    backdoor_read,
    command,
    line_value,
    lookups_and_updates,
    open_device,
    power_cycle,
    read_group,
    read_meta,
    simulate_script,
    simulate_with_monitor,
    slow_writes,
    table_image,
    write_monitor,
)

from hw.ckpt.layouts import NO_BATCH, CheckpointError, CheckpointPhase, LogMode, OwnWrite
from hw.emb.layouts import ErrorCode, Opcode


def _rig_and_script():
    rig = Rig()
    return rig, EngineScript(lookup_lines=LOOKUP_LINES, update_lines=UPDATE_LINES)


def _relaxed_monitor(ckpt, forwarded):
    """Records ``(opcode, batch, engine_relaxed)`` of every command the engine takes."""

    async def monitor(ctx):
        async for _, _, valid, ready, payload, relaxed in ctx.tick().sample(
                ckpt.engine_cmd.valid, ckpt.engine_cmd.ready, ckpt.engine_cmd.payload,
                ckpt.engine_relaxed):
            if valid and ready:
                forwarded.append((payload.opcode, int(payload.batch), relaxed))

    return monitor


def test_relaxed_lookup_runs_ahead_unlogged_and_is_logged_after_the_update():
    """``AFTER_LOOKUP`` when the deferred LOOKUP comes: it is not logged ahead."""
    rig, script = _rig_and_script()
    ckpt, memory = rig.ckpt, rig.memory
    forwarded = []

    async def host(ctx):
        before, _ = await open_device(ctx, ckpt, memory, LogMode.ON_LOOKUP)
        assert (await command(ctx, ckpt, Opcode.LOOKUP, 0)).error == ErrorCode.NONE
        # Strict: LOOKUP(1) before UPDATE(0) is out of order.
        status = await command(ctx, ckpt, Opcode.LOOKUP, 1)
        assert status.error == ErrorCode.BAD_OPCODE
        assert ctx.get(ckpt.error) == CheckpointError.OUT_OF_ORDER

        ctx.set(ckpt.relaxed, 1)
        ctx.set(ckpt.log_mode, LogMode.AFTER_LOOKUP)
        entries = ctx.get(ckpt.counters.log_entries)
        assert entries == len(LOGGED)
        assert (await command(ctx, ckpt, Opcode.LOOKUP, 1)).error == ErrorCode.NONE
        assert ctx.get(ckpt.lookup_deferred) == 1
        assert ctx.get(ckpt.counters.log_entries) == entries   # its reads are not logged
        assert ctx.get(ckpt.log_open) == 1 and ctx.get(ckpt.log_batch) == 0
        # One lookup ahead at most, and only of the next batch.
        for batch in (1, 2):
            status = await command(ctx, ckpt, Opcode.LOOKUP, batch)
            assert status.error == ErrorCode.BAD_OPCODE
            assert ctx.get(ckpt.error) == CheckpointError.OUT_OF_ORDER

        assert (await command(ctx, ckpt, Opcode.UPDATE, 0)).error == ErrorCode.NONE
        assert ctx.get(ckpt.last_committed) == 0 and ctx.get(ckpt.lookup_deferred) == 0
        # Batch 1 is open at once; its log is taken by the background replay.
        assert ctx.get(ckpt.log_open) == 1 and ctx.get(ckpt.log_batch) == 1
        await ctx.tick().until(ckpt.phase == CheckpointPhase.REPLAY)
        await ctx.tick().until(ckpt.phase == CheckpointPhase.IDLE)
        await ctx.tick().repeat(100)
        assert ctx.get(ckpt.counters.log_entries) == 2 * len(LOGGED)
        assert (await command(ctx, ckpt, Opcode.UPDATE, 1)).error == ErrorCode.NONE
        assert ctx.get(ckpt.last_committed) == 1
        # Batch 1's undo log (area 1) holds the rows as UPDATE(0) left them.
        header, data = await read_group(ctx, memory, area=1, group=0)
        assert header.batch == 1 and header.count == len(LOGGED)
        assert [int(header.lines[k]) for k in range(len(LOGGED))] == LOGGED
        for k, line in enumerate(LOGGED):
            assert data[k] == line_value(line, 100).to_bytes(64, "little")
            assert data[k] != before[line]
        assert forwarded == [(Opcode.LOOKUP, 0, 0), (Opcode.LOOKUP, 1, 1),
                             (Opcode.UPDATE, 0, 0), (Opcode.LOOKUP, 1, 0),
                             (Opcode.UPDATE, 1, 0)]

    simulate_with_monitor(rig, host, _relaxed_monitor(ckpt, forwarded), script)


async def _fail_update_1_and_roll_back(ctx, rig, script, before, fresh):
    """After a committed UPDATE(0) whose LOOKUP(1) was logged ahead (LOOKUP(1) read
    ``fresh`` besides batch 0's lines): batch 1's log holds LOOKUP(1)'s reads of ``fresh`` (as
    before UPDATE(0)), then UPDATE(0)'s writes of the lines LOOKUP(1) read too (all of them),
    and a failed UPDATE(1) rolls back to the tables as UPDATE(0) left them."""
    ckpt, memory = rig.ckpt, rig.memory
    script.salt, script.update_error = 200, True
    script.update_lines = UPDATE_LINES + fresh[:1]
    status = await command(ctx, ckpt, Opcode.UPDATE, 1)
    assert status.error == ErrorCode.BUS_ERROR
    assert await backdoor_read(ctx, memory, UPDATE_LINES[0]) == \
        line_value(UPDATE_LINES[0], 200).to_bytes(64, "little")
    # (UPDATE(1) sealed the log: the partial group's header is written.)
    expected = ([(line, before[line]) for line in fresh]
                + [(line, line_value(line, 100).to_bytes(64, "little"))
                   for line in UPDATE_LINES])
    logged = []
    for group in range(-(-len(expected) // 7)):   # (7 entries per group)
        header, data = await read_group(ctx, memory, area=1, group=group)
        assert header.batch == 1
        logged += [(int(header.lines[k]), data[k]) for k in range(header.count)]
    assert logged == expected

    script.update_error = False
    assert (await command(ctx, ckpt, Opcode.RECOVER, 0)).error == ErrorCode.NONE
    assert ctx.get(ckpt.last_committed) == 0 and ctx.get(ckpt.rolled_back) == 1
    assert ctx.get(ckpt.restored_entries) == len(fresh) + len(UPDATE_LINES)
    after = await table_image(ctx, memory)
    for line, value in after.items():
        wanted = (line_value(line, 100).to_bytes(64, "little") if line in UPDATE_LINES
                  else before[line])
        assert value == wanted, f"line {line}"


def test_relaxed_lookup_is_logged_ahead_and_rolls_back_to_the_update_before_it():
    """``ON_LOOKUP``: LOOKUP(1)'s reads of lines batch 0 did not log go into batch 1's log
    while batch 0 is open, UPDATE(0) appends the new values of the lines both batches touch,
    and no replay follows. A failed UPDATE(1) then rolls back to the tables as UPDATE(0) left
    them."""
    rig, script = _rig_and_script()
    ckpt, memory = rig.ckpt, rig.memory
    forwarded = []
    fresh = [TABLE_LINE + 7, TABLE1_LINE + 20]   # read by batch 1 only

    async def host(ctx):
        before, _ = await open_device(ctx, ckpt, memory, LogMode.ON_LOOKUP)
        ctx.set(ckpt.relaxed, 1)
        assert (await command(ctx, ckpt, Opcode.LOOKUP, 0)).error == ErrorCode.NONE
        script.lookup_lines = LOOKUP_LINES + fresh
        assert (await command(ctx, ckpt, Opcode.LOOKUP, 1)).error == ErrorCode.NONE
        assert ctx.get(ckpt.lookup_deferred) == 1
        assert ctx.get(ckpt.counters.log_entries) == len(LOGGED) + len(fresh)
        # (Batch 0's lines, each at its first read in LOOKUP(1): UPDATE(0) logs them.)
        assert ctx.get(ckpt.counters.log_shared) == len(LOGGED)
        # The open batch is still 0, with its own count.
        assert ctx.get(ckpt.log_batch) == 0 and ctx.get(ckpt.log_entries) == len(LOGGED)

        assert (await command(ctx, ckpt, Opcode.UPDATE, 0)).error == ErrorCode.NONE
        assert ctx.get(ckpt.last_committed) == 0
        assert ctx.get(ckpt.log_open) == 1 and ctx.get(ckpt.log_batch) == 1
        await ctx.tick().repeat(200)
        assert ctx.get(ckpt.phase) == CheckpointPhase.IDLE   # no replay
        # Batch 0's flag counts its own entries only.
        meta = await read_meta(ctx, memory)
        assert meta["flag0"][0] and meta["flag0"][1].entries == len(LOGGED)
        # Batch 1's log: LOOKUP(1)'s reads of the fresh lines (as before UPDATE(0)), then
        # UPDATE(0)'s writes of the lines LOOKUP(1) read too (all of them).
        assert ctx.get(ckpt.log_entries) == len(fresh) + len(UPDATE_LINES)
        assert ctx.get(ckpt.counters.log_entries) == 2 * len(LOGGED) + len(fresh)
        await _fail_update_1_and_roll_back(ctx, rig, script, before, fresh)
        assert forwarded == [(Opcode.LOOKUP, 0, 0), (Opcode.LOOKUP, 1, 1),
                             (Opcode.UPDATE, 0, 0), (Opcode.UPDATE, 1, 0)]

    simulate_with_monitor(rig, host, _relaxed_monitor(ckpt, forwarded), script)


def test_update_before_a_log_ahead_seals_without_waiting_for_the_next_batchs_log():
    """With log-ahead, UPDATE(0)'s seal waits for the LOG writes of batch 0 (issued before its
    log closed) and no others: its flag is written while batch 1's log, taken by LOOKUP(1),
    still drains from the tap's buffer on a slow memory."""
    rig, script = _rig_and_script()
    ckpt, memory = rig.ckpt, rig.memory
    fresh = [TABLE_LINE + k for k in range(8, 28)]    # read by batch 1 only: 20 entries
    writes = []      # (cycle, kind or None, line) at the memory's AW
    responses = []   # (cycle, kind or None) at its B

    async def host(ctx):
        await open_device(ctx, ckpt, memory, LogMode.ON_LOOKUP)
        ctx.set(ckpt.relaxed, 1)
        assert (await command(ctx, ckpt, Opcode.LOOKUP, 0)).error == ErrorCode.NONE
        slow_writes(ctx, memory)
        script.lookup_lines = LOOKUP_LINES + fresh
        assert (await command(ctx, ckpt, Opcode.LOOKUP, 1)).error == ErrorCode.NONE
        assert (await command(ctx, ckpt, Opcode.UPDATE, 0)).error == ErrorCode.NONE
        assert ctx.get(ckpt.last_committed) == 0
        await ctx.tick().repeat(2000)   # (batch 1's open group keeps its header until a seal)
        assert ctx.get(ckpt.log_entries) == len(fresh) + len(UPDATE_LINES)

        # LOG B responses come in order: the k-th answers the k-th LOG write.
        log_writes = [(c, line) for c, kind, line in writes if kind == OwnWrite.LOG.value]
        log_answers = [c for c, kind in responses if kind == OwnWrite.LOG.value]
        assert len(log_answers) == len(log_writes)
        area_1 = LOG_LINE + LOG_LINES // 2
        flag_aw = next(c for c, kind, _ in writes if kind == OwnWrite.FLAG.value)
        batch_0 = [b for (_, line), b in zip(log_writes, log_answers, strict=True)
                   if line < area_1]
        batch_1 = [c for c, line in log_writes if line >= area_1]
        assert len(batch_0) == len(LOGGED) + 1            # entries + header
        assert max(batch_0) < flag_aw
        # Batch 1's log was still being written after batch 0's flag.
        assert sum(1 for c in batch_1 if c > flag_aw) >= len(fresh) // 2

    simulate_with_monitor(rig, host, write_monitor(ckpt, writes, responses), script)


def test_a_lookup_logged_ahead_starts_while_the_open_batchs_log_drains():
    """LOOKUP(1), logged ahead, goes to the engine while batch 0's log still drains on a slow
    memory: the tap takes its entries behind batch 0's, and the log writer moves to batch 1's
    area only after batch 0's last entry and header. Each area holds its own batch's entries,
    batch 0's flag counts its own, and a failed UPDATE(1) rolls back to UPDATE(0)'s tables."""
    rig, script = _rig_and_script()
    ckpt, memory = rig.ckpt, rig.memory
    fresh = [TABLE_LINE + 7, TABLE1_LINE + 20]   # read by batch 1 only
    writes = []       # (cycle, kind or None, line) at the memory's AW
    lookup_1 = []     # the cycle LOOKUP(1) went to the engine (counted as write_monitor does)

    async def command_monitor(ctx):
        cycle = 0
        async for _, _, valid, ready, payload in ctx.tick().sample(
                ckpt.engine_cmd.valid, ckpt.engine_cmd.ready, ckpt.engine_cmd.payload):
            cycle += 1
            if valid and ready and payload.opcode == Opcode.LOOKUP and payload.batch == 1:
                lookup_1.append(cycle)

    async def host(ctx):
        before, _ = await open_device(ctx, ckpt, memory, LogMode.ON_LOOKUP)
        ctx.set(ckpt.relaxed, 1)
        slow_writes(ctx, memory, den=40)
        assert (await command(ctx, ckpt, Opcode.LOOKUP, 0)).error == ErrorCode.NONE
        assert ctx.get(ckpt.log_pending) == 1
        script.lookup_lines = LOOKUP_LINES + fresh
        assert (await command(ctx, ckpt, Opcode.LOOKUP, 1)).error == ErrorCode.NONE
        assert ctx.get(ckpt.lookup_deferred) == 1 and ctx.get(ckpt.log_batch) == 0
        assert (await command(ctx, ckpt, Opcode.UPDATE, 0)).error == ErrorCode.NONE
        assert ctx.get(ckpt.last_committed) == 0 and ctx.get(ckpt.log_batch) == 1
        meta = await read_meta(ctx, memory)
        assert meta["flag0"][0] and meta["flag0"][1].entries == len(LOGGED)
        header, data = await read_group(ctx, memory, area=0, group=0)
        assert header.batch == 0 and header.count == len(LOGGED)
        assert [(int(header.lines[k]), data[k]) for k in range(header.count)] == \
            [(line, before[line]) for line in LOGGED]

        await _fail_update_1_and_roll_back(ctx, rig, script, before, fresh)

        area_1 = LOG_LINE + LOG_LINES // 2
        log_writes = [(c, line) for c, kind, line in writes if kind == OwnWrite.LOG.value]
        last_of_batch_0 = max(c for c, line in log_writes if line < area_1)
        first_of_batch_1 = min(c for c, line in log_writes if line >= area_1)
        # LOOKUP(1) started before batch 0's log had left the buffer; the writer finished
        # batch 0's area before it began batch 1's.
        assert lookup_1 and lookup_1[0] < last_of_batch_0
        assert last_of_batch_0 < first_of_batch_1

    simulate_with_monitor(rig, host, write_monitor(ckpt, writes, []), script, command_monitor)


def test_gpf_while_the_open_batchs_log_drains_behind_a_lookup_logged_ahead():
    """A power-fail warning while batch 0's log still drains and LOOKUP(1)'s entries wait
    behind it: the drain finishes both (batch 0's log, then batch 1's), and after the power
    cycle RECOVER finds nothing committed, the tables untouched, and training starts again."""
    rig, script = _rig_and_script()
    ckpt, memory = rig.ckpt, rig.memory
    fresh = [TABLE_LINE + 7, TABLE1_LINE + 20]

    async def host(ctx):
        before, _ = await open_device(ctx, ckpt, memory, LogMode.ON_LOOKUP)
        ctx.set(ckpt.relaxed, 1)
        slow_writes(ctx, memory, den=40)
        assert (await command(ctx, ckpt, Opcode.LOOKUP, 0)).error == ErrorCode.NONE
        script.lookup_lines = LOOKUP_LINES + fresh
        assert (await command(ctx, ckpt, Opcode.LOOKUP, 1)).error == ErrorCode.NONE
        # Batch 0's log is not closed yet: its count is still the writer's, short of LOGGED.
        assert ctx.get(ckpt.log_entries) < len(LOGGED)
        ctx.set(ckpt.gpf, 1)
        await ctx.tick().until(ckpt.gpf_done)
        assert ctx.get(ckpt.log_pending) == 0 and ctx.get(memory.pending) == 0
        header, _ = await read_group(ctx, memory, area=0, group=0)
        assert header.batch == 0 and header.count == len(LOGGED)
        header, _ = await read_group(ctx, memory, area=1, group=0)
        assert header.batch == 1 and header.count == len(fresh)
        await power_cycle(ctx, rig)
        ctx.set(ckpt.gpf, 0)
        assert (await command(ctx, ckpt, Opcode.RECOVER, 0)).error == ErrorCode.NONE
        assert ctx.get(ckpt.last_committed) == NO_BATCH and ctx.get(ckpt.rolled_back) == 0
        assert await table_image(ctx, memory) == before
        assert (await command(ctx, ckpt, Opcode.LOOKUP, 0)).error == ErrorCode.NONE
        assert (await command(ctx, ckpt, Opcode.UPDATE, 0)).error == ErrorCode.NONE
        assert ctx.get(ckpt.last_committed) == 0

    simulate_script(rig, script, host)


def test_a_failed_update_ends_the_deferral_and_recover_forgets_it():
    rig, script = _rig_and_script()
    ckpt, memory = rig.ckpt, rig.memory
    forgets = []

    async def monitor(ctx):
        async for _, _, forget in ctx.tick().sample(ckpt.engine_forget):
            if forget:
                forgets.append(1)

    async def host(ctx):
        await open_device(ctx, ckpt, memory, LogMode.ON_LOOKUP)
        forgets.clear()
        ctx.set(ckpt.relaxed, 1)
        assert (await command(ctx, ckpt, Opcode.LOOKUP, 0)).error == ErrorCode.NONE
        assert (await command(ctx, ckpt, Opcode.LOOKUP, 1)).error == ErrorCode.NONE
        assert ctx.get(ckpt.lookup_deferred) == 1
        script.update_error = True
        status = await command(ctx, ckpt, Opcode.UPDATE, 0)
        assert status.error == ErrorCode.BUS_ERROR
        assert ctx.get(ckpt.error) == CheckpointError.UPDATE_FAILED
        assert ctx.get(ckpt.lookup_deferred) == 0
        script.update_error = False
        assert (await command(ctx, ckpt, Opcode.RECOVER, 0)).error == ErrorCode.NONE
        assert forgets, "RECOVER drops the engine's deferral"
        assert ctx.get(ckpt.last_committed) == 0xFFFF_FFFF
        # Training starts again from batch 0, relaxed.
        assert (await command(ctx, ckpt, Opcode.LOOKUP, 0)).error == ErrorCode.NONE
        assert (await command(ctx, ckpt, Opcode.LOOKUP, 1)).error == ErrorCode.NONE
        assert (await command(ctx, ckpt, Opcode.UPDATE, 0)).error == ErrorCode.NONE
        assert ctx.get(ckpt.last_committed) == 0 and ctx.get(ckpt.log_batch) == 1
        assert lookups_and_updates(script)[-3:] == [Opcode.LOOKUP, Opcode.LOOKUP,
                                                    Opcode.UPDATE]

    simulate_with_monitor(rig, host, monitor, script)


def test_without_logging_relaxed_goes_straight_to_the_engine():
    rig, script = _rig_and_script()
    ckpt, memory = rig.ckpt, rig.memory
    forwarded = []

    async def host(ctx):
        await open_device(ctx, ckpt, memory, LogMode.ON_LOOKUP)
        ctx.set(ckpt.logging_enable, 0)
        ctx.set(ckpt.relaxed, 1)
        for opcode, batch in ((Opcode.LOOKUP, 0), (Opcode.LOOKUP, 1), (Opcode.UPDATE, 0)):
            assert (await command(ctx, ckpt, opcode, batch)).error == ErrorCode.NONE
        ctx.set(ckpt.relaxed, 0)
        assert (await command(ctx, ckpt, Opcode.LOOKUP, 2)).error == ErrorCode.NONE
        assert [relaxed for *_, relaxed in forwarded] == [1, 1, 1, 0]
        assert ctx.get(ckpt.lookup_deferred) == 0   # the checkpoint engine kept out of it

    simulate_with_monitor(rig, host, _relaxed_monitor(ckpt, forwarded), script)
