"""A synthesizable AXI4 subordinate over block RAM: the board's stand-in for PMEM.

``sim.axi_memory.AxiMemory`` and ``sim.pmem.PmemModel`` model timing and power failure with
extra ports and counters and are not meant for an FPGA; this one is the plain memory a board
needs: one read port and one byte-enabled write port on a ``Memory`` of 512-bit lines (a simple
dual-port block RAM), initialised at build time.
"""

from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, fifo, memory, wiring
from amaranth.lib.wiring import In

from hw.mem.axi import AXI4Signature

__all__ = ["LINE_BITS", "AxiBram"]

LINE_BITS = 512
_OKAY, _DECERR = 0, 3


class AxiBram(wiring.Component):
    """AXI4 subordinate over ``depth`` 64-byte lines at byte addresses ``0 .. depth * 64``.

    INCR bursts of full-width beats (``arsize``/``awsize`` are not looked at; the managers in
    this project only use full-width beats). A beat outside the memory is answered with
    DECERR and writes nothing. Reads return one beat per cycle, :attr:`read_latency` (two)
    cycles after their AR handshake; a write lands the cycle after its W beat is accepted
    (the block RAM's write port is fed from registers: the EBRs sit in fixed columns, and
    the W handshake's logic in front of them was a 20 ns path in a ULX3S build) and its B
    response follows the last beat no earlier, so a read issued after a B response sees the
    data. Up to two bursts of each kind are accepted ahead.

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
        return 2

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

        # --- reads: a burst queue, one beat per cycle from its head --------------------------
        # Two slots with the timing of a two-deep SyncFIFOBuffered: a burst waits in `waiting`
        # and moves to the head when the head is free or ends. The block RAMs' read address is
        # a register of its own, `read_line`, loaded with the waiting burst's line as it moves
        # up and counted up a beat at a time: as the head's line plus a beat count it was an
        # adder in front of every EBR's address pins (14.10 ns, seed 2's worst path in a
        # ULX3S build). The head's last beat is a register too, so the issue decision into the
        # read enables and the queue's own registers does not wait for a comparison.
        waiting_valid = Signal()
        waiting = Signal(burst)
        head_valid = Signal()
        head_id = Signal(self._id_width)
        left = Signal(8)        # beats after the next one
        last = Signal()         # the next beat is the burst's last: left == 0
        read_line = Signal(line_width + 1)  # a carry bit: a burst may run past the end
        r_valid = Signal()
        r_id = Signal(self._id_width)
        r_last = Signal()
        r_error = Signal()
        issue = head_valid & (~r_valid | axi.rready)
        m.d.comb += [
            axi.arready.eq(~waiting_valid),
            read.addr.eq(read_line),
            read.en.eq(issue),
            axi.rvalid.eq(r_valid),
            axi.rid.eq(r_id),
            axi.rdata.eq(read.data),
            axi.rresp.eq(Mux(r_error, _DECERR, _OKAY)),
            axi.rlast.eq(r_last),
        ]
        with m.If(axi.arvalid & ~waiting_valid):
            m.d.sync += [waiting_valid.eq(1),
                         waiting.eq(Cat(axi.arid, axi.araddr[6:], axi.arlen))]
        with m.If(issue):
            m.d.sync += [r_valid.eq(1), r_id.eq(head_id), r_last.eq(last),
                         r_error.eq(~inside(read_line))]
        with m.Elif(axi.rready):
            m.d.sync += r_valid.eq(0)
        move_up = waiting_valid & (~head_valid | (issue & last))
        with m.If(move_up):
            m.d.sync += [waiting_valid.eq(0), head_valid.eq(1), head_id.eq(waiting.id),
                         read_line.eq(waiting.line), left.eq(waiting.len),
                         last.eq(waiting.len == 0)]
        with m.Elif(issue):
            with m.If(last):
                m.d.sync += head_valid.eq(0)
            with m.Else():
                m.d.sync += [read_line.eq(read_line + 1), left.eq(left - 1),
                             last.eq(left == 1)]

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
