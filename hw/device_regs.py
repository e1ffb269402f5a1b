"""The device's register map (the CXL.io BAR), described once: the hardware bank
(``hw.csr.CsrBank`` in ``hw/device.py``), the Markdown reference (``docs/registers.md``) and
the host driver (``tb/host/driver.py``) are all generated from it.

    python -m hw.device_regs --markdown docs/registers.md [--preset tiny]

Conventions
-----------
* Registers are 32 bits at consecutive word offsets; fields are packed from bit 0.
* A quantity wider than 32 bits is split over ``<NAME>_0`` (bits 31:0), ``<NAME>_1`` (bits
  63:32), ... (the convention of ``hw.csr.RegisterDriver.read_wide``/``write_wide``). Device
  addresses are ``addr_width`` bits, so ``_1`` words exist only when ``addr_width > 32``.
* Per-instance registers carry the instance number: ``TABLE2_ROWS``, ``HDM1_CONTROL``.
* Counters are copied into their registers by writing ``COUNTERS_LATCH``, so a multi-word
  counter, and all counters together, are read as of one cycle.
"""

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from hw.csr import Access, Field, RegisterMap, registers_markdown
from hw.cxl.frontend import COUNTERS as HOST_COUNTERS
from hw.cxl.frontend import ERRORS as HOST_ERRORS
from hw.emb.layouts import counters_layout as engine_counters_layout

__all__ = ["ENGINE_COUNTERS", "ERRORS", "MAGIC", "VERSION", "RegisterConfig",
           "device_register_map", "registers_reference", "wide_words"]

#: ``ID.magic``: "TCXL" in ASCII, most significant byte first.
MAGIC = 0x5443_584C
#: ``VERSION``: (major, minor, patch) of the register interface. Minor grows when registers
#: are added, major when one changes meaning.
VERSION = (0, 1, 0)

ENGINE_COUNTERS = tuple(name for name, _ in engine_counters_layout())
ENGINE_COUNTER_WIDTH = 48
CYCLE_COUNTER_WIDTH = 48

#: Sticky error flags in ``ERRORS`` (write 1 to clear), in bit order: the front end's host
#: access errors, then the device's own.
ERRORS = (*HOST_ERRORS, "command_error", "doorbell_overflow", "long_burst",
          "checkpoint_protocol")
_ERROR_DOCS = {
    "nxm": "A host read or write decoded to no memory of this device (MemData-NXM / dropped).",
    "protection": "A host access touched a protected range (refused or dropped).",
    "poisoned_write": "A host write with poisoned data was dropped.",
    "bus_error": "Memory answered a host access with SLVERR/DECERR.",
    "unsupported": "A CXL.mem opcode without a flow here was dropped.",
    "command_error": "A command completed with an error code other than NONE.",
    "doorbell_overflow": "DOORBELL was written while the command queue was full; that command "
                         "was dropped.",
    "long_burst": "An internal AXI manager issued a burst longer than one beat (unsupported by "
                  "the interleaved arbiter).",
    "checkpoint_protocol": "Checkpointing only: the embedding engine used an AXI ID reserved "
                           "for the checkpoint engine, or a write burst (set again while the "
                           "checkpoint engine's own flag stays set, until reset).",
}
#: The checkpoint engine's counters (hw.ckpt.engine.counters_layout), registers CKPT_<NAME>.
CHECKPOINT_COUNTERS = ("log_entries", "log_duplicates", "own_writes", "interlock_cycles",
                       "log_shared")
_CHECKPOINT_COUNTER_DOCS = {
    "log_entries": "Undo-log entries written (all batches).",
    "log_duplicates": "Table lines not logged because the batch had logged them already.",
    "own_writes": "Writes of the checkpoint engine itself (log, flags, records, restores).",
    "interlock_cycles": "Cycles from UPDATE's acceptance until its in-place writes may start "
                        "(the batch's log and flag becoming persistent).",
    "log_shared": "Table lines a LOOKUP logged ahead did not log because the batch before it "
                  "had logged them: that batch's UPDATE logs their new values instead.",
}
_HOST_COUNTER_DOCS = {
    "requests": "CXL.mem messages accepted (M2S Req and RwD).",
    "reads": "MemRd/MemRdData requests.",
    "writes": "MemWr/MemWrPtl requests.",
    "invalidates": "MemInv/MemInvNT requests.",
    "spec_reads": "MemSpecRd requests (dropped).",
    "nxm": "Host accesses that decoded to no memory of this device.",
    "protection_violations": "Host accesses refused by a protected range.",
    "poisoned_writes": "Host writes dropped for poisoned data.",
    "bus_errors": "SLVERR/DECERR answers to host accesses.",
    "unsupported": "Messages with an opcode that has no flow here.",
    "ignored": "Messages with their Valid bit clear.",
}
_ENGINE_COUNTER_DOCS = {
    "busy_cycles": "Cycles with a LOOKUP or UPDATE in progress.",
    "rows_read": "Embedding rows read (gathered or fetched for updating).",
    "bytes_read": "Bytes the engine read from memory.",
    "bytes_written": "Bytes the engine wrote to memory.",
    "stall_cycles": "Busy cycles in which the engine waited on memory and no beat moved.",
}


@dataclass(frozen=True)
class RegisterConfig:
    """The device parameters the register map depends on (``TrainingCxlDevice`` builds one)."""

    max_tables: int
    max_dim: int
    num_regions: int
    num_decoders: int
    num_protected: int
    addr_width: int
    channels: int
    command_queue_depth: int
    completion_queue_depth: int
    max_unique_rows: int
    has_update: bool
    checkpointing: bool
    num_managers: int = 2


def wide_words(width: int) -> int:
    """Registers a ``width``-bit quantity takes."""
    return -(-width // 32)


def _add_wide(regmap, name, field, width, access, doc):
    for word in range(wide_words(width)):
        bits = min(32, width - 32 * word)
        low, high = 32 * word, 32 * word + bits - 1
        regmap.add(f"{name}_{word}", f"{doc} Bits {high}:{low}." if wide_words(width) > 1
                   else doc, Field(field, bits, access, ""))


def device_register_map(config: RegisterConfig) -> RegisterMap:
    """The register map of a device with parameters ``config``."""
    c = config
    aw = c.addr_width
    regmap = RegisterMap("TrainingCXL device")
    ro, rw, pulse, w1c = Access.RO, Access.RW, Access.PULSE, Access.W1C

    # --- identification ---------------------------------------------------------------------
    regmap.add("ID", "Identification.", Field("magic", 32, ro, "0x5443584C ('TCXL')."))
    regmap.add("VERSION", "Register interface version.",
               Field("patch", 8, ro, "Patch."), Field("minor", 8, ro, "Minor."),
               Field("major", 8, ro, "Major."))
    regmap.add("CAPS0", "Capabilities.",
               Field("max_tables", 8, ro, "Table descriptors (TABLEn_*)."),
               Field("channels", 3, ro, "Memory channels (interleaved on address bits [7:6])."),
               Field("num_regions", 5, ro, "Engine region descriptors (REGIONn_*)."),
               Field("num_decoders", 4, ro, "HDM decoders (HDMn_*)."),
               Field("num_protected", 5, ro, "Protected ranges (PROTECTn_*)."),
               Field("update", 1, ro, "UPDATE is implemented."),
               Field("checkpointing", 1, ro, "The checkpoint engine is present (SNAPSHOT, "
                                            "RECOVER, batch flags, GPF)."))
    regmap.add("CAPS1", "Capabilities.",
               Field("max_dim", 13, ro, "Largest table dim (floats per row)."),
               Field("addr_width", 7, ro, "Device physical address bits (memory size is "
                                         "2**addr_width bytes; beyond is NXM)."),
               Field("command_queue_depth", 5, ro, "Commands the queue holds."),
               Field("completion_queue_depth", 5, ro, "Completions the queue holds."))
    regmap.add("CAPS2", "Capabilities.",
               Field("max_unique_rows", 11, ro, "UPDATE's on-chip distinct rows per chunk (the "
                                               "golden model's max_unique_rows)."))

    # --- control, status, errors --------------------------------------------------------------
    regmap.add("CONTROL", "Device control.",
               Field("hdm_enable", 1, rw, "HDM Decoder Enable: host CXL.mem accesses decode "
                                         "through HDMn_*; while clear every access is NXM."),
               Field("poison_nxm_reads", 1, rw, "Set poison on MemData-NXM responses."),
               Field("debug_unlock", 1, rw, "Let host accesses into protected ranges."),
               Field("irq_enable", 1, rw, "Drive `irq` while a completion is queued."),
               Field("relaxed_lookup", 1, rw, "Relaxed lookup (DESIGN.md section 1): a LOOKUP "
                     "sent after a LOOKUP whose UPDATE has not run yet is deferred; it pools "
                     "the tables as they are and that UPDATE corrects its output (its status, "
                     "not the LOOKUP's, says the output is final). With checkpointing only "
                     "LOOKUP(N + 1) after LOOKUP(N) is accepted so. Clear: strict order."))
    regmap.add("STATUS", "Device status.",
               Field("busy", 1, ro, "A command is executing."),
               Field("host_idle", 1, ro, "No host CXL.mem access is in flight."),
               Field("command_level", 5, ro, "Commands queued, not yet started."),
               Field("completion_level", 5, ro, "Completions queued, not yet popped."),
               Field("lookup_deferred", 1, ro, "A relaxed LOOKUP waits for the UPDATE that "
                     "corrects it."))
    regmap.add("ERRORS", "Sticky error flags; write 1 to clear a flag.",
               *(Field(name, 1, w1c, _ERROR_DOCS[name]) for name in ERRORS))

    # --- commands and completions ------------------------------------------------------------
    regmap.add("CMD_BATCH", "Next command: batch number N.", Field("batch", 32, rw, ""))
    regmap.add("CMD_SHAPE", "Next command: batch shape.",
               Field("bags", 16, rw, "Bags per table (B)."),
               Field("tables", 8, rw, "Tables used (T): descriptors 0..T-1."))
    regmap.add("CMD_NUM_INDICES", "Next command: indices in the batch.",
               Field("num_indices", 32, rw, ""))
    for name, doc in (("INDICES", "uint32 indices, TBE order"),
                      ("OFFSETS", "B*T+1 uint32 offsets"),
                      ("WEIGHTS", "float32 per-sample weights (WEIGHTED tables)"),
                      ("OUTPUT", "LOOKUP: pooled output; UPDATE: gradient of the output")):
        _add_wide(regmap, f"CMD_{name}", "address", aw, rw,
                  f"Next command: device address of the {doc} (64-byte aligned).")
    regmap.add("DOORBELL", "Writing queues the command held in CMD_* with this opcode.",
               Field("opcode", 4, pulse, "1 LOOKUP, 2 UPDATE, 3 SNAPSHOT, 4 RECOVER, 0 NOP."))
    regmap.add("COMMAND_QUEUE", "Command queue.",
               Field("submitted", 16, ro, "Commands accepted so far (mod 2**16); command k "
                                          "completes with sequence k."),
               Field("level", 5, ro, "Commands queued, not yet started."))
    regmap.add("COMPLETION", "Oldest queued completion (valid = 0: none).",
               Field("valid", 1, ro, "A completion is queued."),
               Field("opcode", 4, ro, "Its command's opcode."),
               Field("error", 4, ro, "0 NONE, else hw.emb.layouts.ErrorCode."),
               Field("sequence", 16, ro, "Its command's submission number (mod 2**16)."))
    regmap.add("COMPLETION_BATCH", "Oldest completion: batch number.",
               Field("batch", 32, ro, ""))
    regmap.add("COMPLETION_WHERE", "Oldest completion: location of the first error.",
               Field("table", 8, ro, "Table."), Field("bag", 16, ro, "Bag."))
    regmap.add("COMPLETION_POSITION", "Oldest completion: position of the offending index "
               "or offset.", Field("position", 32, ro, ""))
    regmap.add("COMPLETION_POP", "Writing 1 removes the oldest completion.",
               Field("pop", 1, pulse, ""))
    regmap.add("COMPLETED", "Completions produced so far (mod 2**32).",
               Field("count", 32, ro, ""))

    # --- engine configuration ------------------------------------------------------------------
    regmap.add("LR", "Learning rate of UPDATE (float32 bits).", Field("value", 32, rw, ""))
    for t in range(c.max_tables):
        _add_wide(regmap, f"TABLE{t}_BASE", "address", aw, rw,
                  f"Table {t}: device address of row 0 (64-byte aligned).")
        regmap.add(f"TABLE{t}_ROWS", f"Table {t}: rows.", Field("rows", 32, rw, ""))
        regmap.add(f"TABLE{t}_FORMAT", f"Table {t}: row format.",
                   Field("dim", 16, rw, "Floats per row (a multiple of 16)."),
                   Field("mode", 2, rw, "Pooling: 0 SUM, 1 MEAN, 2 WEIGHTED."))
    for r in range(c.num_regions):
        _add_wide(regmap, f"REGION{r}_BASE", "address", aw, rw,
                  f"Engine region {r}: first device address the engine may touch.")
        _add_wide(regmap, f"REGION{r}_SIZE", "size", aw, rw, f"Engine region {r}: bytes.")
        regmap.add(f"REGION{r}_ENABLE", f"Engine region {r}.",
                   Field("enable", 1, rw, "The region is in use."))

    if c.checkpointing:
        _add_checkpoint_registers(regmap, c)

    # --- host access: HDM decoders, protected ranges ----------------------------------------
    for d in range(c.num_decoders):
        regmap.add(f"HDM{d}_BASE", f"HDM decoder {d}: HPA base, bits 51:28.",
                   Field("base", 24, rw, ""))
        regmap.add(f"HDM{d}_SIZE", f"HDM decoder {d}: HPA window size >> 28 (the whole "
                   "interleave set).", Field("size", 24, rw, ""))
        regmap.add(f"HDM{d}_SKIP", f"HDM decoder {d}: DPA skip >> 28.",
                   Field("skip", 24, rw, ""))
        regmap.add(f"HDM{d}_CONTROL", f"HDM decoder {d}: control (CXL 2.0 encodings).",
                   Field("ig", 4, rw, "Interleave granularity 256 B << IG."),
                   Field("iw", 4, rw, "Interleave ways: 0..4 -> 1..16, 8..10 -> 3, 6, 12."),
                   Field("position", 4, rw, "This device's position in the set."),
                   Field("committed", 1, rw, "Commit: the decoder decodes (program the "
                                             "others first; commit in index order)."))
    for p in range(c.num_protected):
        _add_wide(regmap, f"PROTECT{p}_BASE", "address", aw, rw,
                  f"Protected range {p}: first device address closed to the host.")
        _add_wide(regmap, f"PROTECT{p}_SIZE", "size", aw, rw, f"Protected range {p}: bytes.")
        regmap.add(f"PROTECT{p}_ENABLE", f"Protected range {p}.",
                   Field("enable", 1, rw, "Host reads of the range return MemData-NXM and "
                                         "writes are dropped (unless CONTROL.debug_unlock)."))

    # --- performance counters ----------------------------------------------------------------
    regmap.add("COUNTERS_LATCH", "Writing 1 copies every counter below into its registers.",
               Field("latch", 1, pulse, ""))
    _add_wide(regmap, "CYCLES", "count", CYCLE_COUNTER_WIDTH, ro, "Clock cycles since reset.")
    for name in ENGINE_COUNTERS:
        _add_wide(regmap, f"ENGINE_{name.upper()}", "count", ENGINE_COUNTER_WIDTH, ro,
                  f"Engine: {_ENGINE_COUNTER_DOCS[name]}")
    for name in HOST_COUNTERS:
        regmap.add(f"HOST_{name.upper()}", f"Host CXL.mem: {_HOST_COUNTER_DOCS[name]}",
                   Field("count", 32, ro, ""))
    for channel in range(c.channels):
        regmap.add(f"MEM{channel}_READS", f"Memory channel {channel}: read requests.",
                   Field("count", 32, ro, ""))
        regmap.add(f"MEM{channel}_WRITES", f"Memory channel {channel}: write requests.",
                   Field("count", 32, ro, ""))
    for manager in ("HOST", "ENGINE")[:c.num_managers]:
        regmap.add(f"{manager}_MEM_WAITS", f"Cycles the {manager.lower()} port offered a "
                   "memory request that the arbiter did not take.", Field("count", 32, ro, ""))
    if c.checkpointing:
        for name in CHECKPOINT_COUNTERS:
            regmap.add(f"CKPT_{name.upper()}", f"Checkpoint: {_CHECKPOINT_COUNTER_DOCS[name]}",
                       Field("count", 32, ro, ""))
    return regmap


def _add_checkpoint_registers(regmap, c):
    """Configuration and status of the checkpoint engine (hw/ckpt/engine.py)."""
    ro, rw = Access.RO, Access.RW
    regmap.add("CKPT_CONTROL", "Checkpoint control.",
               Field("logging_enable", 1, rw, "Undo logging, batch flags and commit records "
                     "(clear: LOOKUP/UPDATE pass straight through, the no-checkpoint "
                     "baseline).", init=1),
               Field("log_mode", 2, rw, "With logging: when batch N's undo log is taken "
                     "(hw.ckpt.layouts.LogMode). 0 ON_LOOKUP: from LOOKUP(N)'s own table "
                     "reads. 1 AT_UPDATE (the nmp_sync_log comparison): LOOKUP(N) logs "
                     "nothing, UPDATE(N) first replays LOOKUP(N) (re-reading its rows; the "
                     "replay's output writes are dropped) while logging the old rows, then "
                     "seals, flags, updates and commits as usual. 2 AFTER_LOOKUP: the same "
                     "replay starts as soon as LOOKUP(N)'s status is out and runs while the "
                     "host works; commands wait for it. 3 LOOKUP_THEN_REPLAY: as ON_LOOKUP but the "
                     "lookup is never held up (entries that find the tap's buffer full are "
                     "dropped); a background replay after LOOKUP(N)'s status logs the missing "
                     "ones. Sampled when LOOKUP(N) is accepted and held for batch N. With "
                     "relaxed_lookup, a LOOKUP(N + 1) run ahead of UPDATE(N) in ON_LOOKUP mode "
                     "is logged ahead (its reads of the rows batch N did not log, then "
                     "UPDATE(N)'s new values of the rows both touch); in the other modes a "
                     "background replay logs it after UPDATE(N)."))
    regmap.add("CKPT_INTERVAL", "Snapshot interval K: SNAPSHOT(N) needs (N + 1) % K == 0 "
               "(0: any batch).", Field("interval", 32, rw, ""))
    for name, doc in (("META", "metadata (superblock, commit record, batch flags, snapshot "
                       "records; at least 8 lines); closed to the host"),
                      ("LOG", "undo log (two equal areas); closed to the host"),
                      ("SNAPSHOT0", "MLP snapshot slot 0 (the host writes the parameters)"),
                      ("SNAPSHOT1", "MLP snapshot slot 1")):
        _add_wide(regmap, f"CKPT_{name}_BASE", "address", c.addr_width, rw,
                  f"Checkpoint {doc}: first device address (64-byte aligned).")
        _add_wide(regmap, f"CKPT_{name}_SIZE", "size", c.addr_width, rw,
                  f"Checkpoint {doc}: bytes (0: unused).")
    regmap.add("CKPT_STATUS", "Checkpoint engine status.",
               Field("phase", 4, ro, "hw.ckpt.layouts.CheckpointPhase (0 DETACHED until "
                                     "RECOVER, 1 IDLE, ...)."),
               Field("error", 4, ro, "hw.ckpt.layouts.CheckpointError of the last command "
                                     "(why it was refused)."),
               Field("attached", 1, ro, "RECOVER succeeded since reset."),
               Field("snapshot_valid", 1, ro, "A complete MLP snapshot exists."),
               Field("snapshot_slot", 1, ro, "Slot of the newest complete snapshot."),
               Field("next_snapshot_slot", 1, ro, "Slot the host writes the next snapshot "
                                                 "into."),
               Field("log_open", 1, ro, "LOOKUP(LOG_BATCH) is logged; its UPDATE may follow."),
               Field("log_pending", 1, ro, "Log entries or headers not yet issued."),
               Field("rolled_back", 1, ro, "The last RECOVER rolled a batch back."),
               Field("gpf", 1, ro, "The `gpf` input (power-fail warning)."),
               Field("gpf_done", 1, ro, "GPF drain complete: everything accepted is "
                                       "persistent."))
    for name, doc in (("LAST_COMMITTED", "Last committed batch c (0xFFFFFFFF: none)."),
                      ("SNAPSHOT_BATCH", "Batch of the newest complete MLP snapshot "
                                         "(0xFFFFFFFF: the initial parameters)."),
                      ("LOG_BATCH", "Batch whose log is open or being written."),
                      ("LOG_BATCH_ENTRIES", "Entries in that batch's log so far."),
                      ("RECOVERY_CYCLES", "Cycles the last RECOVER took."),
                      ("RESTORED_ENTRIES", "Log entries the last RECOVER restored."),
                      ("GPF_DRAIN_CYCLES", "Cycles the last GPF drain took.")):
        regmap.add(name, doc, Field("value", 32, ro, ""))


def registers_reference(regmap: RegisterMap, config: RegisterConfig, source: str) -> str:
    """``docs/registers.md``: how to use the registers, then the generated table."""
    c = config
    lines = [
        "# TrainingCXL device registers",
        "",
        f"Generated by `python -m hw.device_regs --markdown docs/registers.md` from the "
        f"register map in `hw/device_regs.py`, for {source}: {c.max_tables} tables, "
        f"{c.num_regions} engine regions, {c.num_decoders} HDM decoders, {c.num_protected} "
        f"protected ranges, {c.channels} memory channel(s), {c.addr_width}-bit device "
        f"addresses, checkpointing {'present' if c.checkpointing else 'absent'}. Do not edit "
        f"by hand; a test checks that this file is current.",
        "",
        "The registers sit behind the device's AXI4-Lite port (the CXL.io BAR), 32 bits "
        "each at consecutive word offsets. Access types: `rw` read/write; `ro` read-only; "
        "`pulse` write-only, acts once per write; `w1c` sticky flags, write 1 to clear. "
        "Values wider than 32 bits are split over `<NAME>_0` (bits 31:0), `<NAME>_1` "
        "(bits 63:32), ...; reading an address outside the map answers DECERR.",
        "",
        "Running a command:",
        "",
        "1. Program the table descriptors (`TABLEn_*`), engine regions (`REGIONn_*`) and `LR`; "
        "they must not change while a command runs.",
        "2. Write the command's fields (`CMD_*`), then its opcode to `DOORBELL`: the command "
        "joins the queue (`COMMAND_QUEUE.submitted` counts it; a full queue drops it and sets "
        "`ERRORS.doorbell_overflow`). The next command's fields may be written at once.",
        "3. Commands run one at a time, in order. Each produces one completion: wait for "
        "`COMPLETION.valid` (or `COMPLETED.count`, or the `irq` output with "
        "`CONTROL.irq_enable`), read `COMPLETION*`, write `COMPLETION_POP`. A full completion "
        "queue holds the next completion back (and with it the command queue).",
        "",
        "Host memory access (CXL.mem) decodes through the HDM decoders (`HDMn_*`, "
        "`CONTROL.hdm_enable`); `PROTECTn_*` close device ranges (log, snapshots, metadata) "
        "to the host. Counters are copied into their registers by writing `COUNTERS_LATCH`.",
        "",
    ]
    table = registers_markdown(regmap, title="Register").splitlines()
    # Drop the generic title and notice of registers_markdown: the preface above replaces them.
    start = next(i for i, line in enumerate(table) if line.startswith("| Offset"))
    return "\n".join(lines + table[start:]) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hw.device_regs",
                                     description="Write the device's register reference.")
    parser.add_argument("--markdown", type=Path, required=True, help="output file")
    parser.add_argument("--preset", default="tiny",
                        help="preset whose device top is documented (default: tiny)")
    args = parser.parse_args(argv)
    from hw.device import TrainingCxlDevice, device_params
    from sw_model.presets import get_preset

    try:
        preset = get_preset(args.preset)
    except ValueError as error:
        parser.error(str(error))
    device = TrainingCxlDevice(**device_params(preset))
    text = registers_reference(device.register_map, device.register_config,
                               f"the `device` top of the `{preset.name}` preset (hw/tops.py)")
    args.markdown.parent.mkdir(parents=True, exist_ok=True)
    args.markdown.write_text(text)
    print(f"{args.markdown}: {len(device.register_map.registers)} registers, "
          f"{device.register_map.size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
