"""The whole device in Verilator, reached only through CXL.mem and the registers: identification
and reset values, configuration, LOOKUP/UPDATE bit-exact with sw_model (pooled outputs and
every table row read back over CXL.mem), the command and completion queues, protection of the
reserved (log/snapshot/metadata) region, NXM, errors and counters.

Run through tb/device/test_device.py (or ``nox -s sim -- -k device``).
"""

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, RisingEdge

from hw.cxl.messages import DRSOpcode
from hw.device_regs import ERRORS, MAGIC, VERSION
from hw.emb.layouts import ErrorCode, Opcode
from sw_model.checkpoint import first_table_difference
from sw_model.data import make_batch
from sw_model.embedding import embedding_bag_tbe, sparse_sgd_update
from sw_model.train import initial_state
from tb.common import rng
from tb.device.harness import HPA_BASE, DeviceBench
from tb.host.cxl_mem import CxlMemError
from tb.host.driver import CommandQueueFull, RegisterBusError, TableConfig

LINE = 64


def same_bits(a, b) -> bool:
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return a.shape == b.shape and bool(np.all(
        (a.view(np.uint32) == b.view(np.uint32)) | (np.isnan(a) & np.isnan(b))))


@cocotb.test()
async def identification_and_reset_values(dut):
    bench = DeviceBench(dut)
    await bench.start(map_memory=False)
    driver, device = bench.driver, bench.device
    assert (await driver.read("ID"))["magic"] == MAGIC
    version = await driver.read("VERSION")
    assert (version["major"], version["minor"], version["patch"]) == VERSION
    caps = driver.capabilities
    config = device.register_config
    assert caps["max_tables"] == config.max_tables
    assert caps["max_dim"] == config.max_dim
    assert caps["channels"] == config.channels
    assert caps["num_regions"] == config.num_regions
    assert caps["num_decoders"] == config.num_decoders
    assert caps["num_protected"] == config.num_protected
    assert caps["addr_width"] == device.addr_width
    assert caps["update"] == int(device.has_update)
    assert caps["checkpointing"] == int(device.checkpointing)
    assert caps["max_unique_rows"] == config.max_unique_rows
    # Every rw field comes out of reset with its documented init value, ro status is idle.
    for register in device.register_map:
        if register.name in ("ID", "VERSION") or register.name.startswith("CAPS"):
            continue
        values = await driver.read(register.name)
        for field in register.fields:
            if field.access.value == "rw":
                assert values[field.name] == field.init, (register.name, field.name, values)
    status = await driver.read("STATUS")
    assert status == {"busy": 0, "host_idle": 1, "command_level": 0, "completion_level": 0,
                      "lookup_deferred": 0}
    assert (await driver.read("COMPLETION"))["valid"] == 0
    assert await driver.errors() == dict.fromkeys(ERRORS, 0)
    assert dut.irq.value == 0
    # Outside the map: DECERR.
    for access in (driver._read32(device.register_map.size),
                   driver._write32(device.register_map.size, 1)):
        try:
            await access
        except RegisterBusError:
            continue
        raise AssertionError("an access outside the register map did not answer DECERR")


@cocotb.test()
async def configuration_reads_back(dut):
    bench = DeviceBench(dut, stream=1)
    await bench.start(map_memory=False)
    driver, draw = bench.driver, rng(1)
    aw = bench.device.addr_width
    tables = [TableConfig(int(draw.integers(0, 1 << (aw - 6))) * 64, int(draw.integers(1, 1 << 20)),
                          16 * int(draw.integers(1, 8)), int(draw.integers(0, 3)))
              for _ in range(bench.device.register_config.max_tables)]
    await driver.configure_tables(tables)
    for t, table in enumerate(tables):
        assert await driver.read_wide(f"TABLE{t}_BASE") == table.base
        assert (await driver.read(f"TABLE{t}_ROWS"))["rows"] == table.rows
        assert await driver.read(f"TABLE{t}_FORMAT") == {"dim": table.dim, "mode": table.mode}
    await driver.set_learning_rate(0.3)
    assert (await driver.read("LR"))["value"] == int(np.float32(0.3).view(np.uint32))
    # Byte strobes and partial fields: only the named bits change.
    await driver.set_control(debug_unlock=1)
    assert await driver.read("CONTROL") == {"hdm_enable": 0, "poison_nxm_reads": 0,
                                             "debug_unlock": 1, "irq_enable": 0,
                                             "relaxed_lookup": 0}


async def _load_tables(bench, tables):
    trainer = bench.trainer()
    await trainer.configure(logging=False)   # with a checkpoint engine: pass-through
    await trainer.load(tables, initial_state(bench.preset).mlp)
    return trainer


async def _check_every_row(trainer, expected, label):
    got = [await trainer.read_table(t) for t in range(len(expected))]
    difference = first_table_difference(expected, got)
    assert difference is None, f"{label}: {difference}"


@cocotb.test()
async def lookup_and_update_match_the_golden_model(dut):
    """Three batches of the preset, each LOOKUP then UPDATE with a random gradient: pooled
    outputs and every row of every table (read over CXL.mem) bit-exact with sw_model."""
    bench = DeviceBench(dut, stream=2, drs_pause=0.2, ndr_pause=0.2)
    await bench.start()
    preset, plan = bench.preset, bench.plan
    draw = rng(2)
    tables = [t.copy() for t in initial_state(preset).tables]
    trainer = await _load_tables(bench, tables)
    await _check_every_row(trainer, tables, "after loading")
    capacity = bench.device.register_config.max_unique_rows
    lr = np.float32(preset.lr)
    for number in range(3):
        batch = await trainer.stage(number)
        slot = trainer.slot(number)
        command = trainer._command(number, batch, slot.output)
        done = await bench.driver.run(Opcode.LOOKUP, **command)
        assert (done.opcode, done.batch, done.error) == (Opcode.LOOKUP.value, number, 0)
        row_floats = preset.num_tables * preset.dim
        raw = await bench.host.read(bench.hpa(slot.output), preset.batch_size * row_floats * 4)
        pooled = np.frombuffer(raw, "<f4").reshape(preset.batch_size, row_floats)
        expected = embedding_bag_tbe(tables, batch.indices, batch.offsets, preset.table_modes,
                                     batch.per_sample_weights)
        assert same_bits(pooled, expected), f"batch {number}: pooled outputs differ"

        gradient = draw.standard_normal(pooled.shape).astype(np.float32)
        await bench.host.write(bench.hpa(slot.gradient), gradient.tobytes())
        command["output"] = slot.gradient
        done = await bench.driver.run(Opcode.UPDATE, **command)
        assert (done.opcode, done.batch, done.error) == (Opcode.UPDATE.value, number, 0)
        tables = sparse_sgd_update(tables, gradient, batch.indices, batch.offsets,
                                   preset.table_modes, float(lr), batch.per_sample_weights,
                                   max_unique_rows=capacity).tables
        await _check_every_row(trainer, tables, f"after UPDATE of batch {number}")
    counters = await bench.driver.counters()
    assert counters["engine_rows_read"] > 0 and counters["engine_bytes_written"] > 0
    assert counters["engine_busy_cycles"] < counters["cycles"]
    assert counters["host_reads"] == bench.host.completions["drs"]
    assert counters["host_writes"] == bench.host.completions["ndr"]
    channels = bench.device.channel_count
    reads = [counters[f"mem{c}_reads"] for c in range(channels)]
    assert sum(reads) >= counters["host_reads"] + counters["engine_rows_read"]
    assert all(reads), f"a memory channel was never read: {reads}"   # lines interleave
    assert all(counters[f"mem{c}_writes"] for c in range(channels))
    assert plan.staging_region[0] >= plan.tables_region[1]


@cocotb.test()
async def host_training_steps_match_train_step(dut):
    """The host trainer (tb/host/trainer.py) for two batches: loss and pooled outputs equal the
    golden train_step's, tables bit-exact afterwards."""
    from sw_model.train import train

    bench = DeviceBench(dut, stream=3)
    await bench.start()
    state = initial_state(bench.preset)
    trainer = bench.trainer(gpu_cycles=200)
    await trainer.configure(logging=False)
    await trainer.load(state.tables, state.mlp)
    golden = train(bench.preset, stop=2,
                   max_unique_rows=bench.device.register_config.max_unique_rows)
    for record in golden.records:
        result = await trainer.train_batch(record.number, stage_next=record.number < 1)
        assert same_bits(result.pooled, record.pooled), f"batch {record.number}: pooled"
        assert result.loss == record.loss, (result.loss, record.loss)
        assert result.timing.gpu >= 200
    await _check_every_row(trainer, golden.state.tables, "after two batches")
    assert trainer.mlp.bit_equal(golden.state.mlp)


@cocotb.test()
async def queued_commands_complete_in_order(dut):
    """Commands queue behind a full completion queue; one doorbell too many is dropped and
    flagged; completions come out in submission order with their sequence numbers."""
    bench = DeviceBench(dut, stream=4)
    await bench.start(map_memory=False)
    driver, config = bench.driver, bench.device.register_config
    accepted = config.completion_queue_depth + 1 + config.command_queue_depth
    for number in range(accepted):
        await driver.submit(Opcode.NOP, batch=100 + number)
    await ClockCycles(dut.clk, 20)
    status = await driver.read("STATUS")
    assert status["completion_level"] == config.completion_queue_depth, status
    assert status["command_level"] == config.command_queue_depth, status
    assert (await driver.errors())["doorbell_overflow"] == 0
    try:
        await driver.submit(Opcode.NOP, batch=999)      # no room: dropped
    except CommandQueueFull:
        pass
    else:
        raise AssertionError("a doorbell with the queue full was not reported as dropped")
    assert (await driver.errors())["doorbell_overflow"] == 1
    assert (await driver.read("COMMAND_QUEUE"))["submitted"] == accepted
    for number in range(accepted):
        done = await driver.wait_completion()
        assert (done.sequence, done.batch, done.opcode, done.error) == (
            number, 100 + number, Opcode.NOP.value, 0), done
    assert (await driver.read("COMPLETION"))["valid"] == 0
    assert (await driver.read("COMPLETED"))["count"] == accepted
    await driver.clear_errors("doorbell_overflow")
    assert (await driver.errors())["doorbell_overflow"] == 0
    # Opcodes that cannot run end with BAD_OPCODE and raise ERRORS.command_error: unknown
    # ones, and SNAPSHOT/RECOVER without a checkpoint engine, or with one that is neither
    # configured nor recovered.
    for opcode in (Opcode.SNAPSHOT, Opcode.RECOVER, 15):
        done = await driver.run(opcode, batch=7, check=False)
        assert done.error == ErrorCode.BAD_OPCODE.value, done
    assert (await driver.errors())["command_error"] == 1


@cocotb.test()
async def bad_commands_report_where(dut):
    """An index beyond its table's rows: INDEX_OUT_OF_RANGE with the table, bag and position;
    nothing is written; ERRORS.command_error is sticky until cleared; irq follows the queue."""
    bench = DeviceBench(dut, stream=5)
    await bench.start()
    preset = bench.preset
    tables = [t.copy() for t in initial_state(preset).tables]
    trainer = await _load_tables(bench, tables)
    batch = make_batch(preset, 0)
    table = 1
    position = int(batch.offsets[table * preset.batch_size])   # table 1's first index
    assert position < batch.offsets[(table + 1) * preset.batch_size], "table 1 is empty"
    bad = batch.indices.copy()
    bad[position] = preset.table_rows[table]
    slot = trainer.slot(0)
    await bench.host.write(bench.hpa(slot.indices), bad.astype("<u4").tobytes()
                           + bytes(-(bad.size * 4) % LINE))
    await bench.host.write(bench.hpa(slot.offsets), batch.offsets.astype("<u4").tobytes()
                           + bytes(-(batch.offsets.size * 4) % LINE))
    await bench.driver.set_control(irq_enable=1)
    await bench.driver.submit(Opcode.LOOKUP, **trainer._command(0, batch, slot.output))
    if not dut.irq.value:
        await RisingEdge(dut.irq)
    done = await bench.driver.wait_completion()
    # The bag holding the index: the last bag of table 1 that starts at or before it.
    bag = int(np.searchsorted(batch.offsets, position, side="right")) - 1 \
        - table * preset.batch_size
    assert (done.error, done.table, done.position) == (
        ErrorCode.INDEX_OUT_OF_RANGE.value, table, position), done
    assert done.bag == bag, (done, bag)
    await ClockCycles(dut.clk, 2)
    assert dut.irq.value == 0
    errors = await bench.driver.errors()
    assert errors["command_error"] == 1 and sum(errors.values()) == 1, errors
    await bench.driver.clear_errors()
    assert (await bench.driver.errors())["command_error"] == 0
    await _check_every_row(trainer, tables, "after a failed LOOKUP")


@cocotb.test()
async def reserved_region_is_closed_to_the_host(dut):
    """The checkpoint engine's metadata and undo log (with a checkpoint engine: closed by the
    device itself; without: the whole reserved region, by PROTECT0) are closed to the host:
    reads get MemData-NXM, writes are dropped; both are flagged and counted;
    CONTROL.debug_unlock opens them. The MLP snapshot slots stay open to the host."""
    bench = DeviceBench(dut, stream=6)
    await bench.start()
    trainer = bench.trainer()
    await trainer.configure(logging=False)
    plan = bench.plan
    closed = [plan.meta_region, plan.log_region] if bench.device.checkpointing else \
        [plan.reserved_region]
    inside = [dpa for base, size in closed
              for dpa in (base, base + size - LINE, base + (size // 2 // LINE) * LINE)]
    base = closed[0][0]
    secret = bytes(range(LINE))
    await bench.driver.set_control(debug_unlock=1)
    for dpa in inside:
        await bench.host.write(bench.hpa(dpa), secret)
    await bench.driver.set_control(debug_unlock=0)
    before = await bench.driver.counters()
    for dpa in inside:
        response = await bench.host.read_response(bench.hpa(dpa))
        assert response.opcode == DRSOpcode.MEM_DATA_NXM, response
        assert response.data == b"\xff" * LINE
        await bench.host.write(bench.hpa(dpa), bytes(LINE), track=False)
    # Just outside, and a snapshot slot: ordinary memory for the host.
    outside = [base - LINE] + ([plan.snapshot_regions[1][0]] if bench.device.checkpointing
                               else [])
    for dpa in outside:
        await bench.host.write(bench.hpa(dpa), secret)
        assert await bench.host.read(bench.hpa(dpa)) == secret
    after = await bench.driver.counters()
    assert after["host_protection_violations"] - before["host_protection_violations"] == \
        2 * len(inside)
    errors = await bench.driver.errors()
    assert errors["protection"] == 1 and errors["nxm"] == 0, errors
    await bench.driver.clear_errors("protection")
    assert (await bench.driver.errors())["protection"] == 0
    await bench.driver.set_control(debug_unlock=1)
    for dpa in inside:   # the refused writes changed nothing
        assert await bench.host.read(bench.hpa(dpa)) == secret
    assert (await bench.driver.errors())["protection"] == 0


@cocotb.test()
async def accesses_beyond_memory_are_nxm(dut):
    """A DPA beyond the device's memory, and any access while HDM decoding is disabled, is NXM:
    reads answer MemData-NXM, writes are dropped but completed; flagged and counted."""
    bench = DeviceBench(dut, stream=7)
    await bench.start()
    memory = bench.device.memory_bytes
    await bench.host.write(bench.hpa(0), bytes([7]) * LINE)
    for hpa in (bench.hpa(memory), bench.hpa(memory + 0x1000), HPA_BASE - LINE):
        try:
            await bench.host.read(hpa)
        except CxlMemError as error:
            assert error.response.opcode == DRSOpcode.MEM_DATA_NXM
        else:
            raise AssertionError(f"read of {hpa:#x} did not answer NXM")
        await bench.host.write(hpa, bytes(LINE), track=False)
    assert await bench.host.read(bench.hpa(0)) == bytes([7]) * LINE   # no aliasing
    counters = await bench.driver.counters()
    assert counters["host_nxm"] == 6, counters
    assert (await bench.driver.errors())["nxm"] == 1
    await bench.driver.set_control(hdm_enable=0)
    await ClockCycles(dut.clk, 4)
    response = await bench.host.read_response(bench.hpa(0))
    assert response.opcode == DRSOpcode.MEM_DATA_NXM
