"""The embedding engine's command, table, region and status formats: one definition shared by
the RTL (which decodes them), the cocotb testbenches (which pack them with ``layout.const``)
and the driver.

Data in device memory (all little-endian, every buffer 64-byte aligned):

* ``indices``: ``num_indices`` x uint32, FBGEMM TBE order (table-major, then bag, then position).
* ``offsets``: ``bags * tables + 1`` x uint32; entry ``t*bags + b`` is the start of bag b of
  table t in ``indices``; the last entry must equal ``num_indices``.
* ``weights``: ``num_indices`` x float32 per-sample weights (read only for WEIGHTED tables).
* ``output`` (LOOKUP) / gradient (UPDATE): ``bags`` rows of ``sum(dim)`` float32, table blocks
  in table order, so one bag's row is ``sum(dim) * 4`` bytes (a whole number of lines).
* a table is ``rows`` rows of ``dim`` float32 starting at ``base``; ``dim`` is a multiple of 16,
  so a row is ``dim / 16`` whole lines.
"""

from amaranth.hdl import Mux, unsigned
from amaranth.lib import data, enum

__all__ = [
    "LINE_BYTES", "ErrorCode", "Opcode", "PoolingMode", "command_layout", "counters_layout",
    "region_layout", "row_first_line", "shifted_product", "status_layout", "table_layout",
]

LINE_BYTES = 64
FLOATS_PER_LINE = LINE_BYTES // 4


class Opcode(enum.Enum, shape=4):
    NOP = 0
    LOOKUP = 1   # gather + pool into ``output``
    UPDATE = 2   # sparse SGD from the gradient at ``output`` (coalesced, DESIGN.md section 3)
    # Handled by the checkpoint engine (hw/ckpt), which sits in front of the embedding engine;
    # the embedding engine alone answers them with BAD_OPCODE.
    SNAPSHOT = 3  # seal MLP snapshot slot (batch // K) % 2 with its completion record
    RECOVER = 4   # roll back an uncommitted batch from the undo log; report batch numbers


class PoolingMode(enum.Enum, shape=2):
    SUM = 0
    MEAN = 1
    WEIGHTED = 2  # sum of row * per-sample weight


class ErrorCode(enum.Enum, shape=4):
    NONE = 0
    BAD_OPCODE = 1
    BAD_TABLE_COUNT = 2       # tables == 0 or > max_tables
    BAD_DIMENSION = 3         # dim == 0, not a multiple of 16, or above the engine's maximum
    MISALIGNED_ADDRESS = 4    # a buffer or table base not 64-byte aligned
    ADDRESS_OUT_OF_REGION = 5  # a buffer or table not inside one enabled region
    OFFSETS_DECREASING = 6
    OFFSETS_PAST_END = 7      # an offset above num_indices, or the last one != num_indices
    INDEX_OUT_OF_RANGE = 8    # index >= rows of its table
    BUS_ERROR = 9             # SLVERR/DECERR from memory
    OFFSETS_NOT_FROM_ZERO = 10  # offsets[0] != 0 (the golden model requires a zero start)
    LOOKUP_ALREADY_DEFERRED = 11  # a relaxed LOOKUP while another one waits for its UPDATE


def table_layout(addr_width: int) -> data.StructLayout:
    return data.StructLayout({
        "base": unsigned(addr_width),
        "rows": unsigned(32),
        "dim": unsigned(16),        # floats per row
        "mode": PoolingMode,
    })


def row_first_line(base_line, row, lines):
    """A table row's first line address, ``base_line + row * lines``, as wide as
    ``base_line``: shifted copies of ``row`` added in a tree. A line count is a few bits; as a
    product, synthesis put it in an ECP5 multiplier block, some 5 ns with no register of its
    own, and a carry chain after it."""
    width = len(base_line)
    return _sum_tree([base_line, *_shifted_copies(row, lines, width)], width)


def shifted_product(value, factor, width):
    """``value * factor`` as wide as ``width``, for a factor of a few bits: shifted copies of
    ``value`` added in a tree (as in ``row_first_line``), carry chains beside their
    registers rather than an ECP5 multiplier block and the chain that adds its products."""
    return _sum_tree(_shifted_copies(value, factor, width), width)


def _shifted_copies(value, factor, width):
    return [Mux(factor[bit], value << bit, 0)[:width] for bit in range(len(factor))]


def _sum_tree(terms, width):
    while len(terms) > 1:
        pairs = [(terms[k] + terms[k + 1])[:width] for k in range(0, len(terms) - 1, 2)]
        terms = pairs + terms[len(terms) - len(terms) % 2:]
    return terms[0]


def region_layout(addr_width: int) -> data.StructLayout:
    """A window of device memory the engine may touch: [base, base + size)."""
    return data.StructLayout({
        "base": unsigned(addr_width),
        "size": unsigned(addr_width),
        "enable": unsigned(1),
    })


def command_layout(addr_width: int) -> data.StructLayout:
    return data.StructLayout({
        "opcode": Opcode,
        "batch": unsigned(32),       # batch number N (for the checkpoint logic and status)
        "bags": unsigned(16),        # B
        "tables": unsigned(8),       # T (the first T table descriptors are used)
        "num_indices": unsigned(32),
        "indices": unsigned(addr_width),
        "offsets": unsigned(addr_width),
        "weights": unsigned(addr_width),
        "output": unsigned(addr_width),  # LOOKUP: pooled output; UPDATE: gradient buffer
    })


def status_layout() -> data.StructLayout:
    """Completion of one command. ``table``/``bag``/``position`` locate the first error where
    it has a location (``position`` is the index's position within ``indices`` or the
    offset's position within ``offsets``)."""
    return data.StructLayout({
        "opcode": Opcode,
        "batch": unsigned(32),
        "error": ErrorCode,
        "table": unsigned(8),
        "bag": unsigned(16),
        "position": unsigned(32),
    })


def counters_layout() -> data.StructLayout:
    """Free-running performance counters (wrap at 2**48)."""
    return data.StructLayout({
        "busy_cycles": unsigned(48),
        "rows_read": unsigned(48),
        "bytes_read": unsigned(48),
        "bytes_written": unsigned(48),
        "stall_cycles": unsigned(48),   # cycles with work pending but no bus transfer possible
    })
