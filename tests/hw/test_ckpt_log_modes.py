# amaranth: UnusedElaboratable=no
"""When the undo log is taken (``log_mode``): the CheckpointEngine in Amaranth's simulator with
the stand-in embedding engine of ``test_ckpt_engine``. AT_UPDATE replays LOOKUP(N) at UPDATE(N);
AFTER_LOOKUP replays it in the background as soon as LOOKUP(N)'s status is out. Both log the
same entries as ON_LOOKUP, drop the replay's output writes, and keep the UPDATE ordering."""

import pytest
from ckpt_fixtures import (
    BUFFER_LINE,
    LOGGED,
    LOOKUP_LINES,
    TABLE_LINE,
    UPDATE_LINES,
    EngineScript,
    Rig,
    backdoor_read,
    backdoor_write,
    check_first_batch_committed,
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
)

from hw.ckpt.layouts import (
    NO_BATCH,
    CheckpointError,
    CheckpointPhase,
    FlagState,
    LogMode,
    OwnWrite,
)
from hw.emb.layouts import ErrorCode, Opcode

# --- AT_UPDATE (nmp_sync_log): the undo log taken at UPDATE time by replaying LOOKUP ------------

def test_at_update_replays_the_lookup_at_update_and_logs_the_same_entries():
    rig = Rig()
    ckpt, memory = rig.ckpt, rig.memory
    script = EngineScript(lookup_lines=LOOKUP_LINES, update_lines=UPDATE_LINES)
    own_writes = []   # (cycle, kind, line) at the memory-side AW handshake
    b_responses = []  # (cycle, kind)
    phases = set()

    async def monitor(ctx):
        cycle = 0
        async for _, _, awv, awr, awid, awaddr, bv, br, bid, phase in ctx.tick().sample(
                ckpt.axi.awvalid, ckpt.axi.awready, ckpt.axi.awid, ckpt.axi.awaddr,
                ckpt.axi.bvalid, ckpt.axi.bready, ckpt.axi.bid, ckpt.phase):
            cycle += 1
            phases.add(phase)
            if awv and awr:
                own_writes.append((cycle, awid - 12 if awid >= 12 else None, awaddr // 64))
            if bv and br:
                b_responses.append((cycle, bid - 12 if bid >= 12 else None))

    async def host(ctx):
        before, recovered = await open_device(ctx, ckpt, memory, LogMode.AT_UPDATE)
        assert recovered.error == ErrorCode.NONE
        writes_before = ctx.get(ckpt.counters.own_writes)

        status = await command(ctx, ckpt, Opcode.LOOKUP, 0)
        assert status.error == ErrorCode.NONE and status.opcode == Opcode.LOOKUP
        # Nothing is logged during LOOKUP; the batch is open all the same.
        assert ctx.get(ckpt.log_open) == 1 and ctx.get(ckpt.log_batch) == 0
        assert ctx.get(ckpt.counters.log_entries) == 0 and ctx.get(ckpt.log_entries) == 0
        assert ctx.get(ckpt.counters.own_writes) == writes_before
        assert CheckpointPhase.REPLAY not in phases
        output = await backdoor_read(ctx, memory, BUFFER_LINE + 8)
        assert output == (0xABCD).to_bytes(64, "little")
        # The host puts its gradient where the pooled output was: the replay must not
        # overwrite it.
        await backdoor_write(ctx, memory, BUFFER_LINE + 8, 0x6A6A)

        status = await command(ctx, ckpt, Opcode.UPDATE, 0)
        assert status.error == ErrorCode.NONE, ctx.get(ckpt.error)
        assert status.opcode == Opcode.UPDATE and status.batch == 0
        assert lookups_and_updates(script) == [Opcode.LOOKUP, Opcode.LOOKUP, Opcode.UPDATE]
        assert script.commands[1] == (Opcode.LOOKUP, 0)
        assert CheckpointPhase.REPLAY in phases
        assert ctx.get(ckpt.last_committed) == 0 and ctx.get(ckpt.log_open) == 0
        assert ctx.get(ckpt.counters.log_entries) == len(LOGGED)
        assert ctx.get(ckpt.counters.log_duplicates) == 1
        assert await backdoor_read(ctx, memory, BUFFER_LINE + 8) == \
            (0x6A6A).to_bytes(64, "little")

        await check_first_batch_committed(ctx, memory, before)

        # Ordering at the memory port (invariants 1-3), and the replay wrote nothing.
        log_aws = [c for c, k, _ in own_writes if k == OwnWrite.LOG.value]
        flag_aw = next(c for c, k, _ in own_writes if k == OwnWrite.FLAG.value)
        commit_aw = next(c for c, k, _ in own_writes if k == OwnWrite.COMMIT.value)
        engine_aws = [(c, line) for c, k, line in own_writes if k is None]
        assert [line for _, line in engine_aws] == [BUFFER_LINE + 8, *UPDATE_LINES]
        assert len(log_aws) == len(LOGGED) + 1  # entries + the header
        assert max(c for c, k in b_responses if k == OwnWrite.LOG.value) < flag_aw
        assert max(c for c, k in b_responses if k == OwnWrite.FLAG.value) \
            < min(c for c, _ in engine_aws[1:])
        assert max(c for c, k in b_responses if k is None) < commit_aw

    simulate_with_monitor(rig, host, monitor, script)


def test_at_update_failed_replay_refuses_the_update_and_changes_nothing():
    rig = Rig()
    ckpt, memory = rig.ckpt, rig.memory
    # LOOKUP(0) succeeds, its replay by the first UPDATE(0) fails, the second replay works.
    script = EngineScript(lookup_lines=LOOKUP_LINES, update_lines=UPDATE_LINES,
                          lookup_errors=(1,))

    async def host(ctx):
        before, _ = await open_device(ctx, ckpt, memory, LogMode.AT_UPDATE)
        assert (await command(ctx, ckpt, Opcode.LOOKUP, 0)).error == ErrorCode.NONE
        status = await command(ctx, ckpt, Opcode.UPDATE, 0)
        assert status.error == ErrorCode.BAD_OPCODE and status.opcode == Opcode.UPDATE
        assert ctx.get(ckpt.error) == CheckpointError.REPLAY_FAILED
        assert lookups_and_updates(script) == [Opcode.LOOKUP, Opcode.LOOKUP]
        assert ctx.get(ckpt.phase) == CheckpointPhase.IDLE and ctx.get(ckpt.attached) == 1
        assert ctx.get(ckpt.last_committed) == NO_BATCH and ctx.get(ckpt.log_open) == 1
        await ctx.tick().repeat(200)   # what the failed replay logged drains
        assert await table_image(ctx, memory) == before
        meta = await read_meta(ctx, memory)
        assert meta["flag0"][1].state == FlagState.CLEAR
        assert meta["commit"][1].batch == NO_BATCH
        # A power failure now loses nothing: there is nothing to roll back.
        await power_cycle(ctx, rig, seed=4, keep=128)
        assert (await command(ctx, ckpt, Opcode.RECOVER, 0)).error == ErrorCode.NONE
        assert ctx.get(ckpt.last_committed) == NO_BATCH and ctx.get(ckpt.rolled_back) == 0
        assert await table_image(ctx, memory) == before
        # Batch 0 again: LOOKUP, UPDATE (replays once more) commits.
        assert (await command(ctx, ckpt, Opcode.LOOKUP, 0)).error == ErrorCode.NONE
        status = await command(ctx, ckpt, Opcode.UPDATE, 0)
        assert status.error == ErrorCode.NONE, ctx.get(ckpt.error)
        assert ctx.get(ckpt.last_committed) == 0
        assert lookups_and_updates(script)[-3:] == [Opcode.LOOKUP, Opcode.LOOKUP, Opcode.UPDATE]

    simulate_script(rig, script, host)


def test_at_update_failed_replay_then_retried_update_commits():
    rig = Rig()
    ckpt, memory = rig.ckpt, rig.memory
    script = EngineScript(lookup_lines=LOOKUP_LINES, update_lines=UPDATE_LINES,
                          lookup_errors=(1,))

    async def host(ctx):
        await open_device(ctx, ckpt, memory, LogMode.AT_UPDATE)
        await command(ctx, ckpt, Opcode.LOOKUP, 0)
        assert (await command(ctx, ckpt, Opcode.UPDATE, 0)).error == ErrorCode.BAD_OPCODE
        status = await command(ctx, ckpt, Opcode.UPDATE, 0)   # the batch is still open
        assert status.error == ErrorCode.NONE, ctx.get(ckpt.error)
        assert ctx.get(ckpt.last_committed) == 0
        meta = await read_meta(ctx, memory)
        assert meta["flag0"][1].entries == len(LOGGED)
        header, _ = await read_group(ctx, memory, area=0, group=0)
        assert header.count == len(LOGGED)

    simulate_script(rig, script, host)


def test_at_update_is_sampled_when_the_lookup_is_accepted():
    rig = Rig()
    ckpt, memory = rig.ckpt, rig.memory
    script = EngineScript(lookup_lines=LOOKUP_LINES, update_lines=UPDATE_LINES)

    async def host(ctx):
        await open_device(ctx, ckpt, memory, LogMode.ON_LOOKUP)
        # Batch 0: logged on lookup; AT_UPDATE set before UPDATE(0) changes nothing for it.
        await command(ctx, ckpt, Opcode.LOOKUP, 0)
        assert ctx.get(ckpt.counters.log_entries) == len(LOGGED)
        ctx.set(ckpt.log_mode, LogMode.AT_UPDATE)
        assert (await command(ctx, ckpt, Opcode.UPDATE, 0)).error == ErrorCode.NONE
        assert lookups_and_updates(script) == [Opcode.LOOKUP, Opcode.UPDATE]
        assert ctx.get(ckpt.counters.log_entries) == len(LOGGED)
        # Batch 1: synchronous; ON_LOOKUP set before UPDATE(1) still replays.
        await command(ctx, ckpt, Opcode.LOOKUP, 1)
        assert ctx.get(ckpt.counters.log_entries) == len(LOGGED)
        ctx.set(ckpt.log_mode, LogMode.ON_LOOKUP)
        assert (await command(ctx, ckpt, Opcode.UPDATE, 1)).error == ErrorCode.NONE
        assert lookups_and_updates(script)[2:] == [Opcode.LOOKUP, Opcode.LOOKUP, Opcode.UPDATE]
        assert ctx.get(ckpt.counters.log_entries) == 2 * len(LOGGED)
        assert ctx.get(ckpt.last_committed) == 1
        meta = await read_meta(ctx, memory)
        assert meta["flag1"][1].batch == 1 and meta["flag1"][1].entries == len(LOGGED)
        # Batch 2 with ON_LOOKUP: logged on lookup again.
        await command(ctx, ckpt, Opcode.LOOKUP, 2)
        assert ctx.get(ckpt.counters.log_entries) == 3 * len(LOGGED)
        assert (await command(ctx, ckpt, Opcode.UPDATE, 2)).error == ErrorCode.NONE
        assert lookups_and_updates(script)[5:] == [Opcode.LOOKUP, Opcode.UPDATE]

    simulate_script(rig, script, host)


@pytest.mark.parametrize("where", ["replay", "after_flag"])
def test_at_update_power_failure_during_update_rolls_back(where):
    """Power fails while UPDATE(0) replays LOOKUP(0) (no flag yet: nothing to roll back), or
    after the flag while rows are written in place (rolled back from the synchronous log)."""
    rig = Rig()
    ckpt, memory = rig.ckpt, rig.memory
    script = EngineScript(lookup_lines=LOOKUP_LINES, update_lines=UPDATE_LINES)

    async def host(ctx):
        before, _ = await open_device(ctx, ckpt, memory, LogMode.AT_UPDATE)
        assert (await command(ctx, ckpt, Opcode.LOOKUP, 0)).error == ErrorCode.NONE
        ctx.set(ckpt.cmd.payload.opcode, Opcode.UPDATE)
        ctx.set(ckpt.cmd.payload.batch, 0)
        ctx.set(ckpt.cmd.valid, 1)
        await ctx.tick().until(ckpt.cmd.ready)
        ctx.set(ckpt.cmd.valid, 0)
        if where == "replay":
            # Some of the replay's reads have been issued; part of the log may be written.
            while sum(1 for _, kind, _ in script.events if kind == "ar") < \
                    len(LOOKUP_LINES) + 3:
                await ctx.tick()
            assert ctx.get(ckpt.phase) == CheckpointPhase.REPLAY
        else:
            while sum(1 for _, kind, _ in script.events if kind == "aw") < 3:
                await ctx.tick()
            assert ctx.get(ckpt.phase) == CheckpointPhase.UPDATE
        await power_cycle(ctx, rig, seed=7, keep=128)
        status = await command(ctx, ckpt, Opcode.RECOVER, 0)
        assert status.error == ErrorCode.NONE
        assert ctx.get(ckpt.last_committed) == NO_BATCH
        if where == "replay":
            assert ctx.get(ckpt.rolled_back) == 0
        else:
            assert ctx.get(ckpt.rolled_back) == 1
            assert ctx.get(ckpt.restored_entries) == len(LOGGED)
        assert await table_image(ctx, memory) == before
        # Training resumes at batch 0, still synchronous (the input holds).
        assert (await command(ctx, ckpt, Opcode.LOOKUP, 0)).error == ErrorCode.NONE
        assert (await command(ctx, ckpt, Opcode.UPDATE, 0)).error == ErrorCode.NONE
        assert ctx.get(ckpt.last_committed) == 0

    simulate_script(rig, script, host)


def test_at_update_refuses_update_without_its_lookup():
    rig = Rig()
    ckpt, memory = rig.ckpt, rig.memory
    script = EngineScript(lookup_lines=LOOKUP_LINES, update_lines=UPDATE_LINES)

    async def host(ctx):
        await open_device(ctx, ckpt, memory, LogMode.AT_UPDATE)
        for batch in (0, 1):
            status = await command(ctx, ckpt, Opcode.UPDATE, batch)
            assert status.error == ErrorCode.BAD_OPCODE
            assert ctx.get(ckpt.error) == CheckpointError.OUT_OF_ORDER
        await command(ctx, ckpt, Opcode.LOOKUP, 0)
        assert (await command(ctx, ckpt, Opcode.UPDATE, 1)).error == ErrorCode.BAD_OPCODE
        assert ctx.get(ckpt.error) == CheckpointError.OUT_OF_ORDER
        assert lookups_and_updates(script) == [Opcode.LOOKUP]
        assert (await command(ctx, ckpt, Opcode.UPDATE, 0)).error == ErrorCode.NONE
        # UPDATE(0) again: the batch is closed.
        assert (await command(ctx, ckpt, Opcode.UPDATE, 0)).error == ErrorCode.BAD_OPCODE
        assert ctx.get(ckpt.error) == CheckpointError.OUT_OF_ORDER

    simulate_script(rig, script, host)


# --- AFTER_LOOKUP: the same replay, started as soon as LOOKUP(N)'s status is out ---------------

def test_after_lookup_logs_in_the_background_before_the_update_comes():
    rig = Rig()
    ckpt, memory = rig.ckpt, rig.memory
    script = EngineScript(lookup_lines=LOOKUP_LINES, update_lines=UPDATE_LINES)
    own_writes = []   # (cycle, kind, line) at the memory-side AW handshake
    b_responses = []  # (cycle, kind)
    phases = []       # (cycle, phase) at every change

    async def monitor(ctx):
        cycle = 0
        async for _, _, awv, awr, awid, awaddr, bv, br, bid, phase in ctx.tick().sample(
                ckpt.axi.awvalid, ckpt.axi.awready, ckpt.axi.awid, ckpt.axi.awaddr,
                ckpt.axi.bvalid, ckpt.axi.bready, ckpt.axi.bid, ckpt.phase):
            cycle += 1
            if not phases or phases[-1][1] != phase:
                phases.append((cycle, phase))
            if awv and awr:
                own_writes.append((cycle, awid - 12 if awid >= 12 else None, awaddr // 64))
            if bv and br:
                b_responses.append((cycle, bid - 12 if bid >= 12 else None))

    async def host(ctx):
        before, recovered = await open_device(ctx, ckpt, memory, LogMode.AFTER_LOOKUP)
        assert recovered.error == ErrorCode.NONE

        status = await command(ctx, ckpt, Opcode.LOOKUP, 0)
        assert status.error == ErrorCode.NONE and status.opcode == Opcode.LOOKUP
        # The status comes back before a single entry is taken.
        assert ctx.get(ckpt.counters.log_entries) == 0
        assert ctx.get(ckpt.log_open) == 1 and ctx.get(ckpt.log_batch) == 0
        # The host writes its gradient where the pooled output was, while the replay runs.
        await backdoor_write(ctx, memory, BUFFER_LINE + 8, 0x6A6A)
        # With no command sent, the replay runs, logs the batch and drains.
        await ctx.tick().until(ckpt.phase == CheckpointPhase.REPLAY)
        await ctx.tick().until(ckpt.phase == CheckpointPhase.IDLE)
        await ctx.tick().repeat(100)   # the entries' writes land (the header waits for
        assert lookups_and_updates(script) == [Opcode.LOOKUP, Opcode.LOOKUP]  # the seal)
        assert script.commands[1] == (Opcode.LOOKUP, 0)
        assert ctx.get(ckpt.counters.log_entries) == len(LOGGED)
        assert ctx.get(ckpt.counters.log_duplicates) == 1
        _, data = await read_group(ctx, memory, area=0, group=0)
        for k, line in enumerate(LOGGED):
            assert data[k] == before[line], f"entry {k}: old value of line {line}"
        assert await table_image(ctx, memory) == before

        # UPDATE(0) only seals: no second replay.
        status = await command(ctx, ckpt, Opcode.UPDATE, 0)
        assert status.error == ErrorCode.NONE, ctx.get(ckpt.error)
        assert lookups_and_updates(script) == [Opcode.LOOKUP, Opcode.LOOKUP, Opcode.UPDATE]
        assert ctx.get(ckpt.counters.log_entries) == len(LOGGED)
        assert ctx.get(ckpt.last_committed) == 0 and ctx.get(ckpt.log_open) == 0
        assert await backdoor_read(ctx, memory, BUFFER_LINE + 8) == \
            (0x6A6A).to_bytes(64, "little")
        header, _ = await read_group(ctx, memory, area=0, group=0)
        assert header.batch == 0 and header.count == len(LOGGED)
        assert [int(header.lines[k]) for k in range(len(LOGGED))] == LOGGED
        meta = await read_meta(ctx, memory)
        valid, flag = meta["flag0"]
        assert valid and flag.state == FlagState.SET and flag.entries == len(LOGGED)
        for line in UPDATE_LINES:
            assert await backdoor_read(ctx, memory, line) == \
                line_value(line, 100).to_bytes(64, "little")

        # The replay came straight after LOOKUP's reply; the UPDATE ordering holds.
        sequence = [phase for _, phase in phases]
        reply = sequence.index(CheckpointPhase.REPLY, sequence.index(CheckpointPhase.LOOKUP))
        assert sequence[reply + 1:reply + 3] == [CheckpointPhase.IDLE, CheckpointPhase.REPLAY]
        replay_started = phases[reply + 2][0]
        assert phases[reply + 2][0] - phases[reply + 1][0] == 1
        log_aws = [c for c, k, _ in own_writes if k == OwnWrite.LOG.value]
        flag_aw = next(c for c, k, _ in own_writes if k == OwnWrite.FLAG.value)
        commit_aw = next(c for c, k, _ in own_writes if k == OwnWrite.COMMIT.value)
        engine_aws = [(c, line) for c, k, line in own_writes if k is None]
        assert [line for _, line in engine_aws] == [BUFFER_LINE + 8, *UPDATE_LINES]
        assert len(log_aws) == len(LOGGED) + 1 and min(log_aws) > replay_started
        assert max(c for c, k in b_responses if k == OwnWrite.LOG.value) < flag_aw
        assert max(c for c, k in b_responses if k == OwnWrite.FLAG.value) \
            < min(c for c, _ in engine_aws[1:])
        assert max(c for c, k in b_responses if k is None) < commit_aw

    simulate_with_monitor(rig, host, monitor, script)


def test_after_lookup_an_early_update_waits_for_the_replay():
    rig = Rig()
    ckpt, memory = rig.ckpt, rig.memory
    script = EngineScript(lookup_lines=LOOKUP_LINES, update_lines=UPDATE_LINES)

    async def host(ctx):
        before, _ = await open_device(ctx, ckpt, memory, LogMode.AFTER_LOOKUP)
        for batch in range(3):
            assert (await command(ctx, ckpt, Opcode.LOOKUP, batch)).error == ErrorCode.NONE
            # UPDATE at once: the command waits while the replay runs.
            status = await command(ctx, ckpt, Opcode.UPDATE, batch)
            assert status.error == ErrorCode.NONE, ctx.get(ckpt.error)
            assert ctx.get(ckpt.last_committed) == batch
        assert lookups_and_updates(script) == [Opcode.LOOKUP, Opcode.LOOKUP, Opcode.UPDATE] * 3
        assert ctx.get(ckpt.counters.log_entries) == 3 * len(LOGGED)
        header, data = await read_group(ctx, memory, area=0, group=0)
        assert header.batch == 2 and header.count == len(LOGGED)
        # Batch 2's entries hold the rows as batch 1 left them.
        for k, line in enumerate(LOGGED):
            assert data[k] == line_value(line, 100).to_bytes(64, "little")
            assert data[k] != before[line]

    simulate_script(rig, script, host)


def test_after_lookup_a_failed_background_replay_is_repeated_by_the_update():
    rig = Rig()
    ckpt, memory = rig.ckpt, rig.memory
    # LOOKUP(0) succeeds; its background replay fails; UPDATE(0) replays again.
    script = EngineScript(lookup_lines=LOOKUP_LINES, update_lines=UPDATE_LINES,
                          lookup_errors=(1,))

    async def host(ctx):
        await open_device(ctx, ckpt, memory, LogMode.AFTER_LOOKUP)
        assert (await command(ctx, ckpt, Opcode.LOOKUP, 0)).error == ErrorCode.NONE
        status = await command(ctx, ckpt, Opcode.UPDATE, 0)
        assert status.error == ErrorCode.NONE, ctx.get(ckpt.error)
        assert lookups_and_updates(script) == [Opcode.LOOKUP] * 3 + [Opcode.UPDATE]
        assert ctx.get(ckpt.last_committed) == 0
        meta = await read_meta(ctx, memory)
        assert meta["flag0"][1].entries == len(LOGGED)
        header, _ = await read_group(ctx, memory, area=0, group=0)
        assert header.count == len(LOGGED)

    simulate_script(rig, script, host)


def test_after_lookup_failed_lookup_then_update_replays_and_is_refused():
    rig = Rig()
    ckpt, memory = rig.ckpt, rig.memory
    # LOOKUP(0) fails (no background replay); UPDATE(0)'s replay fails too.
    script = EngineScript(lookup_lines=LOOKUP_LINES, update_lines=UPDATE_LINES,
                          lookup_errors=(0, 1))

    async def host(ctx):
        before, _ = await open_device(ctx, ckpt, memory, LogMode.AFTER_LOOKUP)
        assert (await command(ctx, ckpt, Opcode.LOOKUP, 0)).error == ErrorCode.BUS_ERROR
        await ctx.tick().repeat(50)
        assert lookups_and_updates(script) == [Opcode.LOOKUP]
        status = await command(ctx, ckpt, Opcode.UPDATE, 0)
        assert status.error == ErrorCode.BAD_OPCODE
        assert ctx.get(ckpt.error) == CheckpointError.REPLAY_FAILED
        assert lookups_and_updates(script) == [Opcode.LOOKUP, Opcode.LOOKUP]
        assert ctx.get(ckpt.last_committed) == NO_BATCH
        await ctx.tick().repeat(200)
        assert await table_image(ctx, memory) == before

    simulate_script(rig, script, host)


def test_after_lookup_power_failure_during_the_background_replay_loses_nothing():
    rig = Rig()
    ckpt, memory = rig.ckpt, rig.memory
    script = EngineScript(lookup_lines=LOOKUP_LINES, update_lines=UPDATE_LINES)

    async def host(ctx):
        await open_device(ctx, ckpt, memory, LogMode.AFTER_LOOKUP)
        assert (await command(ctx, ckpt, Opcode.LOOKUP, 0)).error == ErrorCode.NONE
        assert (await command(ctx, ckpt, Opcode.UPDATE, 0)).error == ErrorCode.NONE
        committed = await table_image(ctx, memory)
        assert (await command(ctx, ckpt, Opcode.LOOKUP, 1)).error == ErrorCode.NONE
        while sum(1 for _, kind, _ in script.events if kind == "ar") < \
                3 * len(LOOKUP_LINES) + len(UPDATE_LINES) + 3:
            await ctx.tick()
        assert ctx.get(ckpt.phase) == CheckpointPhase.REPLAY
        await power_cycle(ctx, rig, seed=5, keep=128)
        assert (await command(ctx, ckpt, Opcode.RECOVER, 0)).error == ErrorCode.NONE
        assert ctx.get(ckpt.last_committed) == 0 and ctx.get(ckpt.rolled_back) == 0
        assert await table_image(ctx, memory) == committed
        # Batch 1 again, in the same mode.
        assert (await command(ctx, ckpt, Opcode.LOOKUP, 1)).error == ErrorCode.NONE
        assert (await command(ctx, ckpt, Opcode.UPDATE, 1)).error == ErrorCode.NONE
        assert ctx.get(ckpt.last_committed) == 1
        assert ctx.get(ckpt.log_open) == 0
        meta = await read_meta(ctx, memory)
        assert meta["flag1"][1].batch == 1 and meta["flag1"][1].entries == len(LOGGED)

    simulate_script(rig, script, host)


# --- LOOKUP_THEN_REPLAY: a lossy tap during LOOKUP, the rest replayed in the background -------

MANY_LINES = [TABLE_LINE + k for k in range(20)]


def test_lookup_then_replay_logs_what_fits_and_replays_the_rest():
    """With an 8-entry tap buffer and slow log writes, LOOKUP(0) drops entries rather than
    wait; the background replay logs exactly the missing lines (the filter skips the others),
    so the batch's log holds every line once, with its old value."""
    rig = Rig(log_buffer_depth=8)
    ckpt, memory = rig.ckpt, rig.memory
    script = EngineScript(lookup_lines=[*MANY_LINES, TABLE_LINE + 3],
                          update_lines=MANY_LINES)

    async def host(ctx):
        slow_writes(ctx, memory)   # one write per 20 cycles: the tap buffer fills
        before, _ = await open_device(ctx, ckpt, memory, LogMode.LOOKUP_THEN_REPLAY)
        status = await command(ctx, ckpt, Opcode.LOOKUP, 0)
        assert status.error == ErrorCode.NONE
        on_lookup = ctx.get(ckpt.counters.log_entries)
        assert 0 < on_lookup < len(MANY_LINES), on_lookup
        await ctx.tick().until(ckpt.phase == CheckpointPhase.REPLAY)
        await ctx.tick().until(ckpt.phase == CheckpointPhase.IDLE)
        assert lookups_and_updates(script) == [Opcode.LOOKUP, Opcode.LOOKUP]
        assert ctx.get(ckpt.counters.log_entries) == len(MANY_LINES)
        status = await command(ctx, ckpt, Opcode.UPDATE, 0)
        assert status.error == ErrorCode.NONE, ctx.get(ckpt.error)
        assert lookups_and_updates(script) == [Opcode.LOOKUP, Opcode.LOOKUP, Opcode.UPDATE]
        assert ctx.get(ckpt.last_committed) == 0
        meta = await read_meta(ctx, memory)
        assert meta["flag0"][1].entries == len(MANY_LINES)
        logged = {}
        for group in range(3):
            header, data = await read_group(ctx, memory, area=0, group=group)
            assert header.batch == 0
            for k in range(header.count):
                logged[int(header.lines[k])] = data[k]
        assert sorted(logged) == MANY_LINES
        for line, old in logged.items():
            assert old == before[line], f"line {line}: not its old value"

    simulate_script(rig, script, host)


def test_lookup_then_replay_without_drops_needs_no_replay():
    rig = Rig()
    ckpt, memory = rig.ckpt, rig.memory
    script = EngineScript(lookup_lines=LOOKUP_LINES, update_lines=UPDATE_LINES)

    async def host(ctx):
        before, _ = await open_device(ctx, ckpt, memory, LogMode.LOOKUP_THEN_REPLAY)
        for batch in range(2):
            assert (await command(ctx, ckpt, Opcode.LOOKUP, batch)).error == ErrorCode.NONE
            assert (await command(ctx, ckpt, Opcode.UPDATE, batch)).error == ErrorCode.NONE
        assert lookups_and_updates(script) == [Opcode.LOOKUP, Opcode.UPDATE] * 2
        assert ctx.get(ckpt.counters.log_entries) == 2 * len(LOGGED)
        header, data = await read_group(ctx, memory, area=0, group=0)
        assert [int(header.lines[k]) for k in range(len(LOGGED))] == LOGGED
        for k, line in enumerate(LOGGED):
            assert data[k] == before[line]

    simulate_script(rig, script, host)
