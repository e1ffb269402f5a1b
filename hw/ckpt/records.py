"""RTL helpers for the persistent records of :mod:`hw.ckpt.layouts`: checksums, sealed record
lines, validity checks and batch-number order."""

from amaranth.hdl import Cat, Signal

from .layouts import LINE_BITS, checksum_words

__all__ = ["checksum", "later", "record_line", "record_valid"]


def checksum(value, layout):
    """XOR of the 32-bit words before the layout's checksum field."""
    words = [value[32 * k:32 * (k + 1)] for k in range(checksum_words(layout))]
    result = words[0]
    for word in words[1:]:
        result = result ^ word
    return result


def record_line(m, layout, name):
    """A record signal and its line with the checksum filled in.

    Assign the record's fields only unconditionally (``m.d.comb`` at the top level), from
    field signals that states drive: a signal partly driven inside a state machine gets its
    constant slices in an ``always @*`` that reads nothing, which Verilator never runs.
    """
    record = Signal(layout, name=name)
    offset = layout["checksum"].offset
    raw = record.as_value()
    line = Signal(LINE_BITS, name=f"{name}_line")
    m.d.comb += line.eq(Cat(raw[:offset], checksum(raw, layout), raw[offset + 32:]))
    return record, line


def record_valid(view, value, layout, magic):
    """Magic and checksum of a record read back match."""
    return (view.magic == magic) & (view.checksum == checksum(value, layout))


def later(a, b):
    """Batch ``a`` is newer than batch ``b`` (-1 = 0xFFFFFFFF orders before 0)."""
    return (a + 1)[:32] > (b + 1)[:32]  # -1 wraps to 0, the smallest
