"""The demo's training run on the RTL (started by ``python -m tb.demo``; settings arrive in
``DEMO_*`` environment variables, the per-batch results leave as JSON in ``DEMO_REPORT``).

The host trainer (tb/host/trainer.py) trains the preset on the device for ``DEMO_BATCHES``
batches while the golden model (sw_model.train.train_step, with the device's update capacity)
steps in lockstep. After every batch: the pooled outputs and the loss must equal the golden
ones bit for bit, and every row the batch updated is read back over CXL.mem and compared; at
the end every row of every table and the MLP parameters are compared. Any difference fails
the test (and the demo exits non-zero).
"""

import json
import os
import time
from pathlib import Path

import cocotb
import numpy as np

from sw_model.checkpoint import first_table_difference
from sw_model.train import initial_state, train_step
from tb.device.harness import DeviceBench


def _same_bits(a, b) -> bool:
    return a.shape == b.shape and bool(np.all(
        (a.view(np.uint32) == b.view(np.uint32)) | (np.isnan(a) & np.isnan(b))))


def _updated_rows(record) -> dict[int, list[int]]:
    rows: dict[int, set[int]] = {}
    for chunk in record.update_chunks:
        for table, row in chunk:
            rows.setdefault(table, set()).add(row)
    return {t: sorted(r) for t, r in rows.items()}


@cocotb.test()
async def train_on_the_device(dut):
    batches = int(os.environ.get("DEMO_BATCHES", "20"))
    gpu_cycles = int(os.environ.get("DEMO_GPU_CYCLES", "0"))
    report_path = os.environ.get("DEMO_REPORT")
    started = time.perf_counter()

    bench = DeviceBench(dut, stream=40)
    await bench.start()
    preset = bench.preset
    capacity = bench.device.register_config.max_unique_rows
    golden = initial_state(preset)
    trainer = bench.trainer(gpu_cycles=gpu_cycles)
    await trainer.configure()
    await trainer.load(golden.tables, golden.mlp)

    report = {"batches": [], "preset": preset.name, "gpu_cycles": gpu_cycles,
              "max_unique_rows": capacity, "channels": bench.device.channel_count}
    failures = []
    for number in range(batches):
        record = train_step(preset, golden, max_unique_rows=capacity)
        result = await trainer.train_batch(number, stage_next=number + 1 < batches)
        pooled_ok = _same_bits(result.pooled, record.pooled)
        loss_ok = result.loss == record.loss
        rows_ok = True
        for table, rows in _updated_rows(record).items():
            got = await trainer.read_rows(table, rows)
            if not _same_bits(got, golden.tables[table][rows]):
                rows_ok = False
        ok = pooled_ok and loss_ok and rows_ok
        if not ok:
            failures.append(f"batch {number}: pooled {'ok' if pooled_ok else 'DIFFER'}, loss "
                            f"{'ok' if loss_ok else 'DIFFERS'}, updated rows "
                            f"{'ok' if rows_ok else 'DIFFER'}")
        timing = result.timing
        report["batches"].append({
            "batch": number, "loss": result.loss, "golden_loss": record.loss,
            "bit_exact": ok, "lookup": timing.lookup, "read_pooled": timing.read_pooled,
            "gpu": timing.gpu, "write_gradient": timing.write_gradient,
            "update": timing.update, "total": timing.total})
        print(f"  batch {number:3d}  loss {result.loss:.5f}  cycles {timing.total:6d} "
              f"(lookup {timing.lookup}, update {timing.update}, gpu {timing.gpu})  "
              f"{'bit-exact' if ok else 'MISMATCH'}", flush=True)

    tables = [await trainer.read_table(t) for t in range(preset.num_tables)]
    difference = first_table_difference(golden.tables, tables)
    mlp_ok = trainer.mlp.bit_equal(golden.mlp)
    if difference is not None:
        failures.append(f"final tables: {difference}")
    if not mlp_ok:
        failures.append("final MLP parameters differ from the golden model's")
    report["counters"] = await bench.driver.counters()
    report["final_tables_bit_exact"] = difference is None
    report["final_mlp_bit_exact"] = mlp_ok
    report["failures"] = failures
    report["wall_seconds"] = time.perf_counter() - started
    report["errors"] = await bench.driver.errors()
    if report_path:
        Path(report_path).write_text(json.dumps(report, indent=1))
    assert not failures, "; ".join(failures)
    assert not any(report["errors"].values()), report["errors"]
