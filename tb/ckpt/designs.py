"""The Verilator configurations of the checkpoint testbenches and the paper benchmark (a build
of the whole system takes minutes, so the tests, the crash campaign and the benchmark share
a few)."""

from hw.mem.interleave import channel_bits
from sim.rtl import Design

__all__ = ["ENGINE", "PAPER_SYSTEM", "SYSTEM", "SYSTEM_4CH", "paper_system"]

#: EmbeddingEngine parameters: the tiny preset's 4 tables, rows up to 2 lines (dim 32), 32 row
#: reads in flight, a small update capacity so UPDATE chunks (and re-reads rows) often, and a
#: write buffer that holds a whole chunk's row lines.
ENGINE = {
    "max_tables": 4, "max_dim": 32, "num_regions": 2, "addr_width": 32, "id_width": 6,
    "outstanding_reads": 32, "index_buffer_depth": 256, "offset_buffer_depth": 64,
    "output_buffer_depth": 16, "bag_slots": 8, "max_unique_rows": 16,
    "update_outstanding_reads": 8, "update_write_buffer": 32,
}

# A 16-entry log buffer: a tiny batch logs 40-60 lines, so ON_LOOKUP's tap holds the lookup up
# and LOOKUP_THEN_REPLAY's drops entries and replays them, as on the paper-sized presets.
SYSTEM = Design("ckpt_system", "tb.ckpt.harness:CheckpointSystem", {
    **ENGINE, "memory_lines": 8192, "pending_beats": 64, "log_buffer_depth": 16,
    "dedup_entries": 256,
})

#: The same system on four interleaved PMEM channels behind the device's arbiter (the paper's
#: four memory controllers, as the benchmark's system): 64 reads in flight cover the engine's 32
#: and the checkpoint engine's own. Its update engine has the benchmark's delta and correction
#: lanes, so the relaxed cases check them bit-exact in Verilator.
SYSTEM_4CH = Design("ckpt_system_4ch", "tb.ckpt.harness:CheckpointSystem", {
    **SYSTEM.params, "channels": 4, "reorder_depth": 64, "delta_lanes": True,
    "correction_lanes": True,
})

#: The paper-style benchmark's system (``python -m bench paper``): RM1/RM2-shaped presets (up to
#: 32 tables, D up to 64, bags of 120), PMEM of 32 MiB (:mod:`sim.line_ram`: its size costs no
#: build time), the index and offset windows
#: sized so a scaled batch is read once, 1,024 unique rows per UPDATE chunk (the engine's
#: largest: an rm1_sim batch has about 1,370 distinct rows, so UPDATE runs two chunks and the
#: relaxed lookup's correction two passes; with 256 it ran six, each walking the whole next
#: batch), 8 correction contexts (eight bags' correction chains interleave on the adder), 64
#: gradient and 64 row reads in flight in UPDATE (the `pmem` read bandwidth x latency is
#: 0.6 x 60 = 36 lines; with 16 UPDATE was latency-bound), a write buffer of one chunk's row
#: lines (1,024 x 4), so a chunk's apply hands its writes over at once and the relaxed lookup's
#: correction runs while PMEM's slow write port drains them, and the host-gather baseline's
#: CXL.mem link (:class:`sim.host_link.HostLink`). The duplicate filter has the tap's largest
#: size, 16,384 lines (block RAM, valid bits included): an rm2_sim batch touches 8,700 table
#: lines; with 4,096 the lines it evicted were logged again, and the write tap logged nearly
#: every write of UPDATE(N) as LOOKUP(N + 1)'s filter answered "maybe". The memory is four PMEM
#: channels, as the paper's prototype had four memory controllers, each with the whole `pmem`
#: profile; 128 reads in flight through the arbiter: nearly the memory's bandwidth x latency
#: (4 x 0.6 x 60 = 144 lines), and twice the engines' 64. Each correction context queues
#: up to 128 occurrences, a whole bag of either preset (80 and 120): with 16 the walk stalled
#: on the first bag's queue while that bag's chain ran an adder latency per addition, so the
#: contexts seldom worked at once. The apply's ``new - old`` has adder lanes of its own
#: (``delta_lanes``): on the shared adder the apply took a row line every other cycle whenever a
#: relaxed lookup waited (docs/measurements.md has what each of these cost). The
#: undo log's entry buffer holds 4,096 lines (256 KiB, as the write buffer): a lookup logs a
#: line per row line it reads (8,700 per rm2_sim batch) while four PMEM channels write 0.4
#: lines a cycle, so with 64 ``ON_LOOKUP`` held the lookup at the log's pace; now the lookup
#: runs at its own and the log's last 3,000 or so lines drain during the GPU's time. The write
#: tap's buffer (log-ahead's entries from UPDATE(N)'s writes) holds 4,096 too: with 4, UPDATE's
#: row writes and those entries took turns on the write port (rm2_sim's UPDATE 46,900 cycles
#: against 42,300 without the checkpoint); now the entries drain while UPDATE reads. The
#: correction has FP lanes of its own (``correction_lanes``), so each chunk's correction pass
#: runs beside its apply: after it, on the shared units, rm2_sim's three passes took 10,000
#: cycles of each UPDATE.
PAPER_SYSTEM = Design("ckpt_paper_system", "tb.ckpt.harness:CheckpointSystem", {
    "max_tables": 32, "max_dim": 64, "num_regions": 2, "addr_width": 32, "id_width": 7,
    "outstanding_reads": 64, "index_buffer_depth": 8192, "offset_buffer_depth": 256,
    "output_buffer_depth": 32, "bag_slots": 8, "max_unique_rows": 1024,
    "update_outstanding_reads": 64, "update_write_buffer": 4096, "correction_contexts": 8,
    "correction_queue_depth": 128, "delta_lanes": True, "correction_lanes": True,
    "memory_lines": 1 << 19, "pending_beats": 64, "log_buffer_depth": 4096,
    "write_tap_buffer_depth": 4096, "dedup_entries": 16384, "channels": 4, "reorder_depth": 128,
    "host_link": {"desc_depth": 4096, "buffer_lines": 16384},
})


def paper_system(channels: int = 4) -> Design:
    """:data:`PAPER_SYSTEM` with its memory on ``channels`` (1, 2 or 4) PMEM channels (each
    count is its own Verilator build; ``python -m bench paper --channels``)."""
    channel_bits(channels)   # raises with the valid counts
    if channels == PAPER_SYSTEM.params["channels"]:
        return PAPER_SYSTEM
    return Design(f"ckpt_paper_system_{channels}ch", PAPER_SYSTEM.factory,
                  {**PAPER_SYSTEM.params, "channels": channels})
