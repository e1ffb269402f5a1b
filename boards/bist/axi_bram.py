"""A synthesizable AXI4 subordinate over block RAM: the board's stand-in for PMEM.

``sim.axi_memory.AxiMemory`` and ``sim.pmem.PmemModel`` model timing and power failure with
extra ports and counters and are not meant for an FPGA; this one is the plain memory a board
needs: one read port and one byte-enabled write port on a ``Memory`` of 512-bit lines (a simple
dual-port block RAM), initialised at build time.
"""

from amaranth.hdl import Array, Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, fifo, memory, wiring
from amaranth.lib.wiring import In

from hw.fanout import replicated_register
from hw.mem.axi import AXI4Signature
from hw.skid import SkidBuffer

__all__ = ["LINE_BITS", "AxiBram"]

LINE_BITS = 512
_OKAY, _DECERR = 0, 3

# Beats read ahead: a beat read lands in a slot two cycles after the decision to read it, which
# counts only beats already taken, so three slots keep a beat a cycle going.
_READ_SLOTS = 3
# Copies of each slot's enable, one per 128 bits of a line (``hw.fanout``).
_LANDING_COPIES = 4
# Copies of the slot that R presents, one per 32 bits of the line.
_CHOICE_COPIES = 16


class AxiBram(wiring.Component):
    """AXI4 subordinate over ``depth`` 64-byte lines at byte addresses ``0 .. depth * 64``.

    INCR bursts of full-width beats (``arsize``/``awsize`` are not looked at; the managers in
    this project only use full-width beats). A beat outside the memory is answered with
    DECERR and writes nothing. Reads return one beat per cycle, :attr:`read_latency` cycles
    after their AR handshake (the beats are read ahead into registers, see ``elaborate``); a
    write lands the cycle after its W beat is accepted (the block RAM's write port is fed
    from registers: the EBRs sit in fixed columns, and the W handshake's logic in front of
    them was a 20 ns path in a ULX3S build) and its B response follows the last beat no
    earlier, so a read issued after a B response sees the data. Up to two bursts of
    each kind are accepted ahead.

    Parameters (keyword-only)
    -------------------------
    depth : int
        Lines of memory (at least 2).
    init : sequence of int
        Initial contents, one 512-bit integer per line (missing lines are zero).
    addr_width, id_width : int
        As the manager's :class:`~hw.mem.axi.AXI4Signature`; the memory must fit the
        address space.

    Members
    -------
    axi : ``In(AXI4Signature(addr_width=addr_width, data_width=512, id_width=id_width))``
    """

    def __init__(self, *, depth, init=(), addr_width=48, id_width=8):
        if not isinstance(depth, int) or isinstance(depth, bool) or depth < 2:
            raise ValueError(f"Depth must be an integer of at least 2, not {depth!r}")
        signature = AXI4Signature(addr_width=addr_width, data_width=LINE_BITS,
                                  id_width=id_width)
        if depth * (LINE_BITS // 8) > 1 << addr_width:
            raise ValueError(f"{depth} lines do not fit a {addr_width}-bit address space")
        init = list(init)
        if len(init) > depth:
            raise ValueError(f"Initial contents have {len(init)} lines, more than the depth "
                             f"{depth}")
        for index, word in enumerate(init):
            if not isinstance(word, int) or not 0 <= word < 1 << LINE_BITS:
                raise ValueError(f"Initial line {index} must be an unsigned integer of "
                                 f"{LINE_BITS} bits")
        self._depth = depth
        self._init = init
        self._addr_width = addr_width
        self._id_width = id_width
        super().__init__({"axi": In(signature)})

    @property
    def depth(self):
        return self._depth

    @property
    def read_latency(self):
        """Cycles from an AR handshake to its first beat on R (with ``rready`` high)."""
        return 4

    def elaborate(self, platform):
        m = Module()
        axi = self.axi
        line_width = self._addr_width - 6
        m.submodules.lines = lines = memory.Memory(shape=unsigned(LINE_BITS), depth=self._depth,
                                                   init=self._init)
        read = lines.read_port()
        write = lines.write_port(granularity=8)  # byte enables from wstrb

        burst = data.StructLayout({"id": unsigned(self._id_width),
                                   "line": unsigned(line_width), "len": unsigned(8)})

        def inside(line):
            return line < self._depth

        # --- reads: a burst queue, and beats read ahead into a queue of registers ----------
        # The R channel and the block RAM's enable come from flip-flops only: a beat is read
        # when a slot of the queue is sure to be free for it (`used`, counted from registers),
        # not when the manager's `rready` says so, and the block RAM's data lands in a slot
        # register with nothing in front of it but that slot's enable. (The block RAM's
        # clock-to-data on an ECP5 is 5-6 ns: its data through a choice of the consumer, and
        # `rready` into every block RAM's enable, were a ULX3S build's paths at 14 and 13 ns.)
        # AR passes a skid buffer first: `arvalid` comes through the engines' and the
        # sequencer's choices of the port, and went on into the burst queue's level (a ULX3S
        # build's 12.4 ns path).
        m.submodules.ar = ar = SkidBuffer(shape=burst.size)
        m.submodules.reads = reads = fifo.SyncFIFOBuffered(width=burst.size, depth=2)
        m.d.comb += [
            axi.arready.eq(ar.i.ready),
            ar.i.valid.eq(axi.arvalid),
            ar.i.payload.eq(Cat(axi.arid, axi.araddr[6:], axi.arlen)),
            reads.w_en.eq(ar.o.valid),
            reads.w_data.eq(ar.o.payload),
            ar.o.ready.eq(reads.w_rdy),
        ]
        head = data.View(burst, reads.r_data)
        beat = Signal(8)
        read_line = Signal(line_width + 1)  # a carry bit: a burst may run past the end
        m.d.comb += read_line.eq(head.line + beat)

        slots = _READ_SLOTS
        beat_layout = data.StructLayout({"id": unsigned(self._id_width), "last": unsigned(1),
                                         "error": unsigned(1)})
        used = Signal(range(slots + 1))  # beats read and not yet taken
        write_slot = Signal(range(slots))
        read_slot = Signal(range(slots))
        full = Signal(slots)
        issue = reads.r_rdy & (used < slots)
        take = axi.rvalid & axi.rready
        m.d.comb += [
            read.addr.eq(read_line),  # `read.en` stays 1: the slots hold what was read
            reads.r_en.eq(issue & (beat == head.len)),
        ]
        m.d.sync += used.eq(used + issue - take)
        with m.If(issue):
            last = beat == head.len
            m.d.sync += [beat.eq(Mux(last, 0, beat + 1)),
                         write_slot.eq(Mux(write_slot == slots - 1, 0, write_slot + 1))]

        # What comes with the beat in the block RAM, and the slot it lands in (one-hot, and
        # copied per 128 data bits for their enables).
        in_flight = Signal(beat_layout)
        m.d.sync += in_flight.eq(Cat(head.id, beat == head.len, ~inside(read_line)))
        slot_data = [Signal(LINE_BITS, name=f"slot_data_{k}", reset_less=True)
                     for k in range(slots)]
        slot_beat = [Signal(beat_layout, name=f"slot_beat_{k}") for k in range(slots)]
        part = LINE_BITS // _LANDING_COPIES
        for k in range(slots):
            lands_next = issue & (write_slot == k)
            lands, *_ = landing = replicated_register(m, lands_next, copies=_LANDING_COPIES,
                                                      name=f"lands_{k}")
            for copy, enable in enumerate(landing):
                with m.If(enable):
                    m.d.sync += slot_data[k][copy * part:(copy + 1) * part].eq(
                        read.data[copy * part:(copy + 1) * part])
            with m.If(lands):
                m.d.sync += [slot_beat[k].eq(in_flight), full[k].eq(1)]
            with m.Elif(take & (read_slot == k)):
                m.d.sync += full[k].eq(0)
        read_slot_next = Mux(take, Mux(read_slot == slots - 1, 0, read_slot + 1), read_slot)
        m.d.sync += read_slot.eq(read_slot_next)
        # The line's choice of slot is made by copies of `read_slot`, one per 32 bits: one
        # register spread over the line's multiplexer (on its way to both engines and the
        # self-test's output) was a ULX3S build's 14.9 ns route.
        choices = replicated_register(m, read_slot_next, copies=_CHOICE_COPIES,
                                      name="read_slot_line")

        presented = data.View(beat_layout, Array(b.as_value() for b in slot_beat)[read_slot])
        m.d.comb += [
            axi.rvalid.eq(full.bit_select(read_slot, 1)),
            axi.rid.eq(presented.id),

            axi.rresp.eq(Mux(presented.error, _DECERR, _OKAY)),
            axi.rlast.eq(presented.last),
        ]
        part = LINE_BITS // _CHOICE_COPIES
        for copy, chosen in enumerate(choices):
            bits = slice(copy * part, (copy + 1) * part)
            m.d.comb += axi.rdata[bits].eq(Array(held[bits] for held in slot_data)[chosen])

        # --- writes: data lands with its W beat; B follows the last one ----------------------
        m.submodules.addresses = addresses = fifo.SyncFIFOBuffered(width=burst.size, depth=2)
        response = data.StructLayout({"id": unsigned(self._id_width), "error": unsigned(1)})
        m.submodules.responses = responses = fifo.SyncFIFOBuffered(width=response.size, depth=2)
        m.d.comb += [
            axi.awready.eq(addresses.w_rdy),
            addresses.w_en.eq(axi.awvalid),
            addresses.w_data.eq(Cat(axi.awid, axi.awaddr[6:], axi.awlen)),
        ]
        target = data.View(burst, addresses.r_data)
        write_beat = Signal(8)
        write_line = Signal(line_width + 1)
        m.d.comb += write_line.eq(target.line + write_beat)
        # A bad beat anywhere in the burst makes its response DECERR.
        burst_error = Signal()
        accept = addresses.r_rdy & axi.wvalid & responses.w_rdy
        beat_error = ~inside(write_line)
        m.d.sync += [
            write.addr.eq(write_line),
            write.data.eq(axi.wdata),
            write.en.eq(Mux(accept & ~beat_error, axi.wstrb, 0)),
        ]
        m.d.comb += [
            axi.wready.eq(addresses.r_rdy & responses.w_rdy),
            responses.w_data.eq(Cat(target.id, burst_error | beat_error)),
            responses.w_en.eq(accept & axi.wlast),
            addresses.r_en.eq(accept & axi.wlast),
        ]
        with m.If(accept):
            m.d.sync += [write_beat.eq(Mux(axi.wlast, 0, write_beat + 1)),
                         burst_error.eq(~axi.wlast & (burst_error | beat_error))]
        answer = data.View(response, responses.r_data)
        m.d.comb += [
            axi.bvalid.eq(responses.r_rdy),
            axi.bid.eq(answer.id),
            axi.bresp.eq(Mux(answer.error, _DECERR, _OKAY)),
            responses.r_en.eq(axi.bready),
        ]
        return m
