"""The lookup engine and the EmbeddingEngine top in Verilator: one build for every test.

The configuration is the EmbeddingEngine top (lookup + update behind one command port and one
AXI port), so the lookup tests exercise exactly what a user instantiates. Its windows are
small, so the same build covers both the single-pass flow (offsets and indices fit on chip)
and the two-pass flow (they do not); 32 read IDs are plenty for cocotbext-axi's RAM.
"""

import pytest

from sim.rtl import Design
from sim.runner import run

pytestmark = pytest.mark.sim

ENGINE = Design("emb_engine", "hw.emb.engine:EmbeddingEngine", {
    "max_tables": 4, "max_dim": 128, "num_regions": 2, "addr_width": 32, "id_width": 6,
    "outstanding_reads": 32, "index_buffer_depth": 256, "offset_buffer_depth": 64,
    "output_buffer_depth": 16, "bag_slots": 16, "max_unique_rows": 8,
    "update_outstanding_reads": 8,
})


def test_lookups_match_the_golden_model():
    """Random batches under AXI stress, bad inputs, bus errors, counters (9 cocotb tests)."""
    result = run(ENGINE, "tb.emb.cocotb_lookup", run_name="lookup")
    assert result.tests == 9


def test_engine_dispatches_commands():
    """NOP, unknown opcodes, and LOOKUP -> UPDATE -> LOOKUP sharing the AXI port."""
    result = run(ENGINE, "tb.emb.cocotb_engine", run_name="engine")
    assert result.tests == 2
