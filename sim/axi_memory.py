"""A simulation-only AXI4 memory with a fixed, programmable read latency, in Amaranth.

Python memory models that act every cycle run at about 13k cycles/s (DESIGN.md section 8);
this one lives inside the simulated design, so a benchmark runs at Verilator speed and Python
only acts per command. Reads return one beat per cycle, ``read_latency`` cycles after their
AR handshake (so with enough reads in flight the R channel is busy every cycle, and a design
that keeps it busy reaches exactly 64 bytes per cycle). Writes land at once; their B
response follows the last W beat. Contents are loaded and inspected through a backdoor port.

Not synthesizable in any useful sense (a large memory with two write ports); it is a model.
"""

from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, fifo, wiring
from amaranth.lib.wiring import In, Out

from hw.mem.axi import AXI4Signature

from .line_ram import LineRam

__all__ = ["AxiMemory"]

_LINE_BYTES = 64


class AxiMemory(wiring.Component):
    """AXI4 subordinate over ``depth`` 64-byte lines (addresses wrap modulo the size).

    Parameters
    ----------
    depth : int
        Lines of memory (a power of two).
    addr_width, id_width : int
        As the manager's :class:`~hw.mem.axi.AXI4Signature` (512-bit data).
    max_outstanding : int
        Read bursts accepted and not yet answered; ``arready`` drops when this many wait.

    Members
    -------
    axi : ``In(AXI4Signature(...))``
        The subordinate side of the manager's port.
    read_latency : ``In(16)``
        Cycles from an AR handshake to its first R beat (at least 3).
    backdoor_addr : ``In(range(depth))``, backdoor_wdata : ``In(512)``, backdoor_we : ``In(1)``
        Write a line directly (the same cycle AXI writes are not to that line).
    backdoor_rdata : ``Out(512)``
        The line at ``backdoor_addr`` one cycle earlier.
    """

    def __init__(self, *, depth, addr_width=48, id_width=8, max_outstanding=256):
        if not isinstance(depth, int) or depth < 2 or depth & (depth - 1):
            raise ValueError(f"Depth must be a power of two, at least 2, not {depth!r}")
        self._depth = depth
        self._addr_width = addr_width
        self._id_width = id_width
        self._max_outstanding = max_outstanding
        super().__init__({
            "axi": In(AXI4Signature(addr_width=addr_width, data_width=512, id_width=id_width)),
            "read_latency": In(16),
            "backdoor_addr": In(range(depth)),
            "backdoor_wdata": In(512),
            "backdoor_we": In(1),
            "backdoor_rdata": Out(512),
        })

    @property
    def depth(self):
        return self._depth

    def elaborate(self, platform):
        m = Module()
        axi = self.axi
        line_bits = (self._depth - 1).bit_length()
        m.submodules.lines = lines = LineRam(depth=self._depth, transparent=(False, False))
        write = lines.port("w0")  # byte enables from wstrb
        backdoor_write = lines.port("w2")
        read, backdoor_read = lines.port("r0"), lines.port("r1")
        m.d.comb += [
            backdoor_write.addr.eq(self.backdoor_addr),
            backdoor_write.data.eq(self.backdoor_wdata),
            backdoor_write.en.eq(self.backdoor_we),
            backdoor_read.addr.eq(self.backdoor_addr),
            self.backdoor_rdata.eq(backdoor_read.data),
        ]

        now = Signal(32)
        m.d.sync += now.eq(now + 1)

        # --- reads: a queue of bursts, each released when its time has come -----------------
        burst = data.StructLayout({"id": unsigned(self._id_width), "line": unsigned(line_bits),
                                   "last_beat": unsigned(8), "due": unsigned(32)})
        m.submodules.reads = reads = fifo.SyncFIFOBuffered(width=burst.size,
                                                           depth=self._max_outstanding)
        m.d.comb += [
            axi.arready.eq(reads.w_rdy),
            reads.w_en.eq(axi.arvalid),
            reads.w_data.eq(Cat(axi.arid, axi.araddr[6:6 + line_bits], axi.arlen,
                                # the line is read one cycle before its beat is offered
                                now + self.read_latency - 1)),
        ]
        head = data.View(burst, reads.r_data)
        beat = Signal(8)
        r_valid = Signal()
        r_id = Signal(self._id_width)
        r_last = Signal()
        due = (now - head.due)[31] == 0  # now >= due, modulo 2**32
        issue = reads.r_rdy & due & (~r_valid | axi.rready)
        m.d.comb += [
            read.addr.eq(head.line + beat),
            read.en.eq(issue),
            axi.rvalid.eq(r_valid),
            axi.rid.eq(r_id),
            axi.rdata.eq(read.data),
            axi.rresp.eq(0),
            axi.rlast.eq(r_last),
        ]
        with m.If(issue):
            m.d.sync += [r_valid.eq(1), r_id.eq(head.id), r_last.eq(beat == head.last_beat)]
            with m.If(beat == head.last_beat):
                m.d.sync += beat.eq(0)
                m.d.comb += reads.r_en.eq(1)
            with m.Else():
                m.d.sync += beat.eq(beat + 1)
        with m.Elif(axi.rready):
            m.d.sync += r_valid.eq(0)

        # --- writes: data lands at once; B follows the last beat ------------------------------
        address = data.StructLayout({"id": unsigned(self._id_width),
                                     "line": unsigned(line_bits)})
        m.submodules.addresses = addresses = fifo.SyncFIFOBuffered(width=address.size, depth=8)
        m.submodules.responses = responses = fifo.SyncFIFOBuffered(
            width=self._id_width, depth=self._max_outstanding)
        m.d.comb += [
            axi.awready.eq(addresses.w_rdy),
            addresses.w_en.eq(axi.awvalid),
            addresses.w_data.eq(Cat(axi.awid, axi.awaddr[6:6 + line_bits])),
        ]
        target = data.View(address, addresses.r_data)
        write_beat = Signal(8)
        accept = addresses.r_rdy & axi.wvalid & responses.w_rdy
        m.d.comb += [
            axi.wready.eq(addresses.r_rdy & responses.w_rdy),
            write.addr.eq(target.line + write_beat),
            write.data.eq(axi.wdata),
            write.en.eq(Mux(accept, axi.wstrb, 0)),
            responses.w_data.eq(target.id),
            responses.w_en.eq(accept & axi.wlast),
            addresses.r_en.eq(accept & axi.wlast),
            axi.bvalid.eq(responses.r_rdy),
            axi.bid.eq(responses.r_data),
            axi.bresp.eq(0),
            responses.r_en.eq(axi.bready),
        ]
        with m.If(accept):
            m.d.sync += write_beat.eq(Mux(axi.wlast, 0, write_beat + 1))
        return m
