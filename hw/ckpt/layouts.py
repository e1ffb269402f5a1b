"""The checkpoint engine's persistent formats, command-side enums and their Python twins.

Everything here is one 64-byte line (512 bits, little-endian fields in declaration order), so
every record is written with a single AXI beat: under the persistence contract (DESIGN.md
section 4) a beat is the unit of tearing, so a record is either the old line or the new one.

Persistent layout
-----------------
``meta_region`` (at least 8 lines; line offsets from its base)::

    0  superblock        magic "TCXLCKPT", version, region map (log, snapshot slots), K
    1  commit record     last committed batch c (-1 = none yet)
    2  batch flag, area 0   {batch, entries, state SET | ROLLED_BACK}
    3  batch flag, area 1
    4  snapshot record, slot 0   {batch}: the slot's completion record
    5  snapshot record, slot 1
    6-7 reserved

``log_region``: two equal *areas*; batch N logs into area N % 2 (so the log of N is never
overwritten before N is committed: N + 2 is the next batch to use the area, and batches run in
order). An area is a sequence of 8-line *groups*::

    group g at area + 8 g:  line 0  group header {magic, batch, count, 7 line addresses}
                            line 1..7  the old contents of those 7 lines (log entry data)

Entry i of a batch is slot i % 7 of group i // 7. A batch flag ``{N, entries=n, SET}`` is
written only after entries 0..n-1 (data lines and headers) all have their B responses, so the
flag is the valid bit of the whole log: recovery restores exactly entries 0..n-1 and never
looks at anything torn. Headers also carry the batch and their count, which recovery checks
(defence in depth: a mismatch is reported as a corrupt log and nothing is changed).

Snapshot slots (``snapshot_regions``) hold the host's MLP parameters in whatever format the host
chooses; the device only writes the slots' completion records (meta lines 4 and 5).

Records with a ``checksum`` are valid only if magic and checksum match; the checksum is the XOR
of all 32-bit words before it (so an all-zero or stale line of another kind is invalid).
Batch numbers are 32-bit; batch -1 is 0xFFFFFFFF and orders before 0 (compare ``batch + 1``).
"""

from amaranth.hdl import unsigned
from amaranth.lib import data, enum

__all__ = [
    "COMMIT_LAYOUT",
    "ENTRIES_PER_GROUP",
    "FLAG_LAYOUT",
    "GROUP_HEADER_LAYOUT",
    "GROUP_LINES",
    "GROUP_MAGIC",
    "LINE_BITS",
    "META_LINES",
    "NO_BATCH",
    "SNAPSHOT_LAYOUT",
    "SUPERBLOCK_LAYOUT",
    "VERSION",
    "CheckpointError",
    "CheckpointPhase",
    "FlagState",
    "LogMode",
    "MetaLine",
    "OwnWrite",
    "checksum",
    "log_entry_layout",
    "pack",
    "record_valid",
    "unpack",
]

LINE_BITS = 512
NO_BATCH = 0xFFFF_FFFF  # batch -1: "before batch 0"
VERSION = 1
META_LINES = 8
GROUP_LINES = 8
ENTRIES_PER_GROUP = GROUP_LINES - 1


def _magic(text: str) -> int:
    return int.from_bytes(text.encode(), "little")


class MetaLine(enum.IntEnum):
    """Line offsets inside ``meta_region``."""

    SUPERBLOCK = 0
    COMMIT = 1
    FLAG_0 = 2
    FLAG_1 = 3
    SNAPSHOT_0 = 4
    SNAPSHOT_1 = 5


class FlagState(enum.Enum, shape=8):
    CLEAR = 0         # formatted, never set
    SET = 1           # entries 0..n-1 are persistent; in-place writes of the batch may start
    ROLLED_BACK = 2   # recovery restored the entries (so a second recovery does nothing)


class OwnWrite(enum.Enum, shape=2):
    """Kinds of the checkpoint engine's own writes; each has its own AXI ID (so B responses
    say which kind completed, and the ordering rules count each kind separately)."""

    LOG = 0       # log entry data lines and group headers
    FLAG = 1      # batch flags (set and rolled back)
    COMMIT = 2    # commit record
    OTHER = 3     # restores during recovery, snapshot records, superblock and format


class CheckpointPhase(enum.Enum, shape=4):
    """What the checkpoint engine is doing (status output; the testbench maps it onto
    `sw_model.checkpoint.Phase` when it injects a power failure)."""

    DETACHED = 0     # after reset: nothing known about memory until RECOVER
    IDLE = 1
    LOOKUP = 2       # LOOKUP(N) runs; table reads are logged (LogMode.ON_LOOKUP only)
    LOGGED = 3       # (unused as a state: LOOKUP done and log open is IDLE + log_open)
    SEAL = 4         # UPDATE(N) received: waiting for every log write of N to persist
    FLAG = 5         # writing N's batch flag
    UPDATE = 6       # the engine updates rows in place
    COMMIT = 7       # writing N's commit record
    SNAPSHOT = 8     # writing a snapshot slot's completion record
    RECOVER = 9      # RECOVER: reading metadata, restoring, formatting
    PASS = 10        # logging disabled: LOOKUP/UPDATE pass straight through
    FAILED = 11      # an UPDATE failed after its flag: only RECOVER is accepted
    REPLY = 12       # reporting a command's status
    DRAIN = 13       # the engine finished UPDATE(N); its last writes become persistent
    REPLAY = 14      # LOOKUP(N) replayed, its table reads logged (every LogMode but ON_LOOKUP)


class CheckpointError(enum.Enum, shape=4):
    """Why the last command was refused or failed (``error`` output). A refused command is
    answered with ``ErrorCode.BAD_OPCODE`` in ``done`` and changes nothing."""

    NONE = 0
    NOT_RECOVERED = 1      # LOOKUP/UPDATE/SNAPSHOT before RECOVER, or after a failed UPDATE
    OUT_OF_ORDER = 2       # LOOKUP(N) with N != last committed + 1; UPDATE(N) without LOOKUP(N)
    LOG_OVERFLOW = 3       # batch N's log did not fit an area (or GPF cut it short)
    NOT_SNAPSHOT_BATCH = 4  # SNAPSHOT(N) with (N + 1) % K != 0
    SNAPSHOT_ORDER = 5     # SNAPSHOT(N) with N > last committed, or not newer than the newest
    CONFIG_MISMATCH = 6    # superblock's region map differs from the configuration
    CORRUPT_METADATA = 7   # valid superblock but invalid commit record
    CORRUPT_LOG = 8        # a group header of the batch to roll back does not match its flag
    BUS_ERROR = 9          # one of the engine's own reads or writes got SLVERR/DECERR
    UPDATE_FAILED = 10     # the embedding engine reported an error for UPDATE after the flag
    GPF = 11               # command refused during a global persistent flush
    BAD_CONFIG = 12        # meta region smaller than 8 lines, log area smaller than a group
    ENGINE_PROTOCOL = 13   # the engine used a reserved AXI ID or a write burst
    REPLAY_FAILED = 14     # the LOOKUP(N) replayed by UPDATE(N) reported an error


class LogMode(enum.Enum, shape=2):
    """When batch N's undo log is taken (``log_mode`` input, ``CKPT_CONTROL.log_mode``;
    sampled when LOOKUP(N) is accepted and held for batch N; see :mod:`hw.ckpt.engine`)."""

    ON_LOOKUP = 0     # the tap logs LOOKUP(N)'s own table reads (LOOKUP runs at the log's pace)
    AT_UPDATE = 1     # UPDATE(N) first replays LOOKUP(N), logging (nmp_sync_log)
    AFTER_LOOKUP = 2  # LOOKUP(N) runs unlogged; the replay starts as soon as its status is out
    LOOKUP_THEN_REPLAY = 3  # the tap logs what it can without holding LOOKUP(N) up; a
    #                         background replay after its status logs the rest


_COMMON = {"magic": unsigned(32), "batch": unsigned(32)}

SUPERBLOCK_LAYOUT = data.StructLayout({
    "magic": unsigned(64),
    "version": unsigned(16),
    "entries_per_group": unsigned(8),
    "group_lines": unsigned(8),
    "snapshot_interval": unsigned(32),
    "log_base": unsigned(64),
    "log_lines": unsigned(32),
    "snapshot0_base": unsigned(64),
    "snapshot0_lines": unsigned(32),
    "snapshot1_base": unsigned(64),
    "snapshot1_lines": unsigned(32),
    "checksum": unsigned(32),
    "reserved": unsigned(64),
})
SUPERBLOCK_MAGIC = _magic("TCXLCKPT")

COMMIT_LAYOUT = data.StructLayout({
    **_COMMON, "checksum": unsigned(32), "reserved": unsigned(LINE_BITS - 96)})
COMMIT_MAGIC = _magic("CMIT")

FLAG_LAYOUT = data.StructLayout({
    **_COMMON, "entries": unsigned(32), "state": FlagState, "area": unsigned(8),
    "reserved0": unsigned(16), "checksum": unsigned(32),
    "reserved": unsigned(LINE_BITS - 160)})
FLAG_MAGIC = _magic("FLAG")

SNAPSHOT_LAYOUT = data.StructLayout({
    **_COMMON, "slot": unsigned(8), "reserved0": unsigned(24), "checksum": unsigned(32),
    "reserved": unsigned(LINE_BITS - 128)})
SNAPSHOT_MAGIC = _magic("SNAP")

GROUP_HEADER_LAYOUT = data.StructLayout({
    "magic": unsigned(16),
    "count": unsigned(8),    # entries in this group, 1..7
    "reserved": unsigned(8),
    "batch": unsigned(32),
    "lines": data.ArrayLayout(unsigned(64), ENTRIES_PER_GROUP),  # line addresses (byte >> 6)
})
GROUP_MAGIC = 0x4C47  # "GL"


def log_entry_layout(line_address_width: int) -> data.StructLayout:
    """An undo-log entry on its way to the log writer: the line, its data, and the generation
    bit of the batch whose log it is (two batches' entries may be buffered at once)."""
    return data.StructLayout({"line": unsigned(line_address_width),
                              "data": unsigned(LINE_BITS), "generation": 1})

MAGICS = {
    SUPERBLOCK_LAYOUT: SUPERBLOCK_MAGIC, COMMIT_LAYOUT: COMMIT_MAGIC, FLAG_LAYOUT: FLAG_MAGIC,
    SNAPSHOT_LAYOUT: SNAPSHOT_MAGIC,
}

for _layout in (*MAGICS, GROUP_HEADER_LAYOUT):
    assert _layout.size == LINE_BITS, _layout


def checksum_words(layout: data.StructLayout) -> int:
    """How many 32-bit words the checksum covers (all words before the field)."""
    offset = layout["checksum"].offset
    assert offset % 32 == 0
    return offset // 32


def checksum(layout: data.StructLayout, bits: int) -> int:
    """The checksum of a record given as an integer of ``layout.size`` bits."""
    value = 0
    for word in range(checksum_words(layout)):
        value ^= (bits >> (32 * word)) & 0xFFFF_FFFF
    return value


def pack(layout: data.StructLayout, **fields) -> bytes:
    """One line (64 bytes) of ``layout``; ``magic`` and ``checksum`` are filled in."""
    if layout in MAGICS:
        fields.setdefault("magic", MAGICS[layout])
    elif layout is GROUP_HEADER_LAYOUT:
        fields.setdefault("magic", GROUP_MAGIC)
    bits = layout.const(fields).as_bits()
    if "checksum" in layout.members:
        bits |= checksum(layout, bits) << layout["checksum"].offset
    return bits.to_bytes(LINE_BITS // 8, "little")


def unpack(layout: data.StructLayout, line: bytes):
    """The fields of a 64-byte line as a ``data.Const`` view."""
    return layout.from_bits(int.from_bytes(line[:LINE_BITS // 8], "little"))


def record_valid(layout: data.StructLayout, line: bytes) -> bool:
    """Magic and checksum match (the Python twin of the RTL's check)."""
    bits = int.from_bytes(line[:LINE_BITS // 8], "little")
    view = layout.from_bits(bits)
    return int(view.magic) == MAGICS[layout] and int(view.checksum) == checksum(layout, bits)
