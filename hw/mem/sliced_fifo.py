"""A line-wide FIFO whose controls are registers, copied per slice of the line.

A :class:`amaranth.lib.fifo.SyncFIFOBuffered` of 512-bit lines is, on an ECP5, 128 LUT-RAM
cells (4 bits each) sharing one write enable and one write address, and an output register
whose enable is the consumer's ``ready``. Those nets are driven by the producer's and the
consumer's handshake logic in the same cycle and spread over every cell of the line: in the
ULX3S builds of the embedding engine they were the longest paths (18 ns of routing on the
write enable of the update router's row FIFO).

:class:`SlicedFIFO` has the same interface, capacity and latency, built so that no control
net reaches more than one slice of the line:

- a write is first registered (``w_data`` into a register that loads every cycle, so it has no
  enable), and written to the memory the cycle after from that register, under a write enable
  and address that are registers themselves;
- the memory is split into ``slices`` memories (on an FPGA, the LUT RAM next to each FP lane),
  each with its own copy of the write enable, write address and read address
  (:func:`hw.fanout.lane_copies`);
- ``r_data`` is read asynchronously at the registered read address, so no register's enable
  spans the line.

The memories are read asynchronously, which LUT RAM supports and block RAM does not: this FIFO
is for shallow queues.
"""

from amaranth.hdl import Elaboratable, Module, Mux, Signal
from amaranth.lib import memory
from amaranth.lib.fifo import FIFOInterface

from hw.fanout import lane_copies

__all__ = ["SlicedFIFO", "check_slices", "registered_sliced_memory", "slice_widths"]


def _check_positive(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, not {value!r}")


def check_slices(width, slices):
    """Raise ``ValueError`` unless ``width`` bits can be cut into ``slices`` slices."""
    _check_positive("Slice count", slices)
    if slices > width:
        raise ValueError(f"Slice count {slices} is more than the width {width}")


def slice_widths(width, slices):
    """``width`` bits in ``slices`` parts as equal as possible (the first ``width % slices``
    a bit wider), from the least significant bits up."""
    base, wider = divmod(width, slices)
    return [base + (k < wider) for k in range(slices)]


class SlicedFIFO(Elaboratable, FIFOInterface):
    """Synchronous FIFO of ``depth`` entries of ``width`` bits, stored in ``slices`` memories.

    The interface of :class:`amaranth.lib.fifo.SyncFIFOBuffered`: ``w_data``, ``w_en``,
    ``w_rdy``, ``r_data``, ``r_en``, ``r_rdy``, ``level`` (``w_level`` and ``r_level`` are the
    same), where ``level`` counts the entries written and not yet read, from the cycle after the
    write. An entry written in cycle *t* is readable (``r_rdy``) in cycle *t* + :attr:`latency`,
    the same as ``SyncFIFOBuffered``. Unlike it, ``w_rdy`` is ``level != depth``: the FIFO
    takes a write whenever it has room.

    Parameters (keyword-only)
    -------------------------
    width : int
        Bits per entry.
    depth : int
        Entries (at least 1).
    slices : int
        Memories the entry is split into, as equal in width as possible (the first
        ``width % slices`` are a bit wider). With more than one, each slice has its own copies
        of the control registers (:func:`hw.fanout.replicated_register`), kept apart in the
        board builds.
    """

    #: Cycles from a write to the entry being readable.
    latency = 2

    def __init__(self, *, width, depth, slices=1):
        for name, value in (("Width", width), ("Depth", depth)):
            _check_positive(name, value)
        check_slices(width, slices)
        super().__init__(width=width, depth=depth)
        self._slices = slices
        self.level = Signal(range(depth + 1))

    @property
    def slices(self):
        return self._slices

    @property
    def slice_widths(self):
        """Width of each slice, from the least significant bits up."""
        return slice_widths(self.width, self._slices)

    def elaborate(self, platform):
        m = Module()
        depth = self.depth
        do_write = self.w_en & self.w_rdy
        do_read = self.r_en & self.r_rdy

        def advanced(pointer, step):
            if depth == 1:
                return pointer
            return Mux(step, Mux(pointer == depth - 1, 0, pointer + 1), pointer)

        produce = Signal(range(depth))
        consume = Signal(range(depth))
        consume_next = advanced(consume, do_read)
        m.d.sync += [produce.eq(advanced(produce, do_write)), consume.eq(consume_next)]
        room = Signal(init=1)      # level != depth
        # While there is room the entry at `produce` is free (and not read), so the slices
        # write it whether a write was asked for or not: their enables load `room`, a
        # register, and the producer's `w_en` reaches only the one register that counts a
        # write (a ULX3S build's 12.07 ns from the update router's handshake into the
        # gradient lines' write-enable copies).
        writing, read_data = registered_sliced_memory(
            m, width=self.width, depth=depth, slices=self._slices, write_enable=do_write,
            write_address=produce, write_data=self.w_data, read_address=consume_next,
            slice_write_enable=room)

        # ``level`` counts a write from the next cycle, while it is still on its way to the
        # memory; ``stored`` counts the entries already in the memories (what can be read).
        # Whether there is room and whether an entry is readable are registers loaded with
        # the counts (what comparing them would say), so a producer's and a consumer's
        # handshakes start at flip-flops, not behind the counts' comparisons.
        # Each flag's next value is chosen by the handshakes from outcomes computed from the
        # registers, so a consumer's late `r_en` (and a producer's `w_en`) meets one
        # multiplexer, not the counts' adders and comparisons (a ULX3S build's paths from the
        # update datapath's apply decision into `r_rdy`).
        stored = Signal(range(depth + 1))
        level_next = self.level + do_write - do_read
        stored_next = stored + writing - do_read
        readable = Signal()        # stored != 0
        # Only a write without a read can fill the FIFO (a write needs room, so with a read
        # beside it the level stays below depth); a read leaves room.
        fills = self.level == depth - 1
        # (stored + writing) - 1 != 0 after a read; stored + writing != 0 without.
        still_readable = (stored >= 2) | ((stored == 1) & writing)
        m.d.sync += [
            self.level.eq(level_next),
            room.eq(Mux(do_write & ~do_read, ~fills, Mux(do_read, 1, room))),
            stored.eq(stored_next),
            readable.eq(Mux(do_read, still_readable, readable | writing)),
        ]
        m.d.comb += [
            self.w_rdy.eq(room),
            self.r_rdy.eq(readable),
            self.w_level.eq(self.level),
            self.r_level.eq(self.level),
            self.r_data.eq(read_data),
        ]
        return m


def registered_sliced_memory(m, *, width, depth, slices, write_enable, write_address,
                             write_data, read_address, slice_write_enable=None,
                             name="storage"):
    """A memory of ``depth`` entries of ``width`` bits, cut into ``slices`` memories (submodules
    ``<name>_<k>``), that every control reaches through a register, copied per slice.

    A write asked for in cycle *t* (``write_enable``, ``write_address``, ``write_data``) is
    written at the end of *t* + 1, from registers: the data's loads every cycle (no enable),
    the enable and address have a copy per slice. A read asked for in cycle *t*
    (``read_address``) answers in *t* + 1 on ``read_data``, read asynchronously at a registered
    address (a copy per slice), so it sees every write asked for before *t*. A reset drops a
    write asked for in its cycle, not a read (whose address the caller's reset does not
    change). Returns ``(writing, read_data)``: the registered write enable (a write lands this
    cycle) and the read data.

    With ``slice_write_enable`` the slices write under it instead (its copies, registered the
    same way), while ``writing`` still follows ``write_enable``: for a caller whose entry at
    ``write_address`` is free whenever ``slice_write_enable`` holds, so writing it when no
    write was asked for changes nothing a reader sees."""
    # (No reset either: a reset would reach every bit, for nothing.)
    staged_data = Signal(width, name=f"{name}_write_data", reset_less=True)
    m.d.sync += staged_data.eq(write_data)  # no enable: the write enable says if it counts
    registers = {}
    for part, value in (("write_enable", write_enable), ("write_address", write_address),
                        ("read_address", read_address)):
        # The addresses take no reset either, like the data: a reset clears the write enable,
        # and a read's address is the caller's. Yosys folds no reset into the kept copies, so
        # a reset (the update engine's per-command `clear`) was a LUT of its own in front of
        # each address's copies: behind the read pointer's logic, the fifth LUT level into the
        # update router's row-line read address copies (13.4 ns in a ULX3S build).
        register = Signal.like(value, name=f"{name}_{part}", reset_less=part != "write_enable")
        m.d.sync += register.eq(value)
        if part == "write_enable" and slice_write_enable is not None:
            value = slice_write_enable
            if slices == 1:
                single = Signal.like(value, name=f"{name}_slice_write_enable")
                m.d.sync += single.eq(value)
                registers[part] = register, [single]
                continue
        copies = lane_copies(m, value, register, name=register.name, copies=slices,
                             replicate=slices > 1, reset_less=part != "write_enable")
        registers[part] = register, copies
    read_data = Signal(width, name=f"{name}_read_data")
    low = 0
    for k, slice_width in enumerate(slice_widths(width, slices)):
        storage = m.submodules[f"{name}_{k}"] = memory.Memory(
            shape=slice_width, depth=depth, init=[])
        write = storage.write_port()
        read = storage.read_port(domain="comb")
        m.d.comb += [
            write.en.eq(registers["write_enable"][1][k]),
            write.addr.eq(registers["write_address"][1][k]),
            write.data.eq(staged_data[low:low + slice_width]),
            read.addr.eq(registers["read_address"][1][k]),
            read_data[low:low + slice_width].eq(read.data),
        ]
        low += slice_width
    return registers["write_enable"][0], read_data
