"""A simulation-only host CXL.mem link for the host-gather baseline (``python -m bench paper``).

The host of a PMEM-based system without near-memory compute reads every embedding row it needs
over CXL.mem, pools and updates on the host, and writes the rows back. This component is that
host's side of the link, as an AXI4 manager on the same PMEM model the device uses: it moves
whole 64-byte lines between the PMEM model and a host-memory buffer, **at most one line per
cycle in each direction** (one AXI R beat and one W beat per cycle: the modelled CXL.mem link
rate), with many reads in flight (one request per line, as a CPU's outstanding misses), so the
PMEM model's latencies and bandwidths decide the time, exactly as for the device's engines.

One command at a time (``start`` pulse while ``busy`` is low), ``count`` rows of ``row_lines``
lines each; ``op``:

* 0: read rows, row ``i`` from the byte address in descriptor ``i``, into buffer lines
  ``buf_base + i * row_lines ...``;
* 1: write rows, buffer to the descriptors' addresses;
* 2: read contiguous lines from ``base`` (descriptors unused);
* 3: write contiguous lines to ``base``.

Writes finish when every B response is back: the data is then persistent (DESIGN.md section
4). The descriptor memory is the host's own (its list of row addresses, known from the
indices); it is written through ``desc_*`` one entry per cycle before a command. The buffer is
host DRAM; its contents are not visible to Python (the baseline's values are not checked, only
its traffic and time).
"""

from amaranth.hdl import Module, Mux, Signal, unsigned
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from hw.mem.axi import AXI4Signature

from .line_ram import LineRam

__all__ = ["HostLink"]

_LINE_BITS = 512


class HostLink(wiring.Component):
    """Parameters: ``addr_width``, ``id_width`` (as the memory's AXI port), ``desc_depth``
    (rows per command), ``buffer_lines`` (host buffer, lines); powers of two."""

    def __init__(self, *, addr_width=32, id_width=6, desc_depth=8192, buffer_lines=16384):
        self._aw, self._iw = addr_width, id_width
        self._desc_depth, self._buffer_lines = desc_depth, buffer_lines
        count_bits = (desc_depth * 8).bit_length() + 1
        super().__init__({
            "axi": Out(AXI4Signature(addr_width=addr_width, data_width=_LINE_BITS,
                                     id_width=id_width)),
            "desc_addr": In(range(desc_depth)),
            "desc_data": In(addr_width),
            "desc_we": In(1),
            "start": In(1),
            "op": In(2),
            "count": In(count_bits),
            "row_lines": In(4),
            "base": In(addr_width),
            "buf_base": In(range(buffer_lines)),
            "busy": Out(1),
            "lines_read": Out(32),
            "lines_written": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        axi = self.axi
        cw = len(self.count)
        m.submodules.desc = desc = memory.Memory(shape=unsigned(self._aw),
                                                 depth=self._desc_depth, init=[])
        m.submodules.buffer = buffer = LineRam(depth=self._buffer_lines, transparent=(False,))
        desc_w = desc.write_port()
        desc_r = desc.read_port()
        buf_w, buf_r = buffer.port("w1"), buffer.port("r0")
        m.d.comb += [desc_w.addr.eq(self.desc_addr), desc_w.data.eq(self.desc_data),
                     desc_w.en.eq(self.desc_we)]

        op = Signal(2)
        count = Signal(cw)
        row_lines = Signal(4)
        total = Signal(cw + 4)          # lines of the command
        buf_base = Signal(range(self._buffer_lines))
        next_addr = Signal(self._aw)    # contiguous ops: the next line's address
        row = Signal(cw)                # descriptor of the next address request
        row_line = Signal(4)            # line within that row
        requests = Signal(cw + 4)       # AR / AW requests issued (one line each)
        beats = Signal(cw + 4)          # R beats received / W beats sent
        acks = Signal(cw + 4)           # B responses received
        lines_read = Signal(32)
        lines_written = Signal(32)
        m.d.comb += [self.lines_read.eq(lines_read), self.lines_written.eq(lines_written)]

        writing = op[0]
        contiguous = op[1]
        addr = Mux(contiguous, next_addr, desc_r.data + (row_line << 6))[:self._aw]
        row_done = row_line == row_lines - 1
        a_fire = Signal()
        w_fire = Signal()
        # Synchronous read ports: address the entry needed next cycle.
        m.d.comb += [
            desc_r.addr.eq(Mux(a_fire & row_done, row + 1, row)[:len(desc_r.addr)]),
            buf_r.addr.eq((buf_base + Mux(w_fire, beats + 1, beats))[:len(buf_r.addr)]),
        ]
        # Every request is one line (len 0), as a CPU's cache misses are, so the link works
        # through the device's channel interleave (AW and W of a line go together).
        m.d.comb += [axi.arid.eq(0), axi.arsize.eq(6), axi.arburst.eq(1), axi.arlen.eq(0),
                     axi.awid.eq(0), axi.awsize.eq(6), axi.awburst.eq(1), axi.awlen.eq(0),
                     axi.araddr.eq(addr), axi.awaddr.eq(addr),
                     axi.wdata.eq(buf_r.data), axi.wstrb.eq(-1), axi.wlast.eq(1),
                     axi.rready.eq(1), axi.bready.eq(1)]
        m.d.comb += [
            buf_w.addr.eq((buf_base + beats)[:len(buf_w.addr)]),
            buf_w.data.eq(axi.rdata),
        ]
        with m.FSM(name="link"):
            with m.State("Idle"):
                with m.If(self.start):
                    m.d.sync += [op.eq(self.op), count.eq(self.count),
                                 row_lines.eq(self.row_lines),
                                 total.eq(self.count * self.row_lines),
                                 buf_base.eq(self.buf_base), next_addr.eq(self.base),
                                 row.eq(0), row_line.eq(0), requests.eq(0), beats.eq(0),
                                 acks.eq(0)]
                    m.next = "Prime"
            with m.State("Prime"):
                # The read ports now address entry 0; their data is there next cycle.
                m.d.comb += self.busy.eq(1)
                m.next = "Run"
            with m.State("Run"):
                m.d.comb += self.busy.eq(1)
                more_requests = requests < total
                m.d.comb += [
                    axi.arvalid.eq(~writing & more_requests),
                    axi.awvalid.eq(writing & more_requests),
                    a_fire.eq(more_requests & Mux(writing, axi.awready, axi.arready)),
                    axi.wvalid.eq(writing & (beats < total)),
                    w_fire.eq(axi.wvalid & axi.wready),
                    buf_w.en.eq(~writing & axi.rvalid),
                ]
                with m.If(a_fire):
                    m.d.sync += [requests.eq(requests + 1), next_addr.eq(next_addr + 64),
                                 row_line.eq(Mux(row_done, 0, row_line + 1))]
                    with m.If(row_done):
                        m.d.sync += row.eq(row + 1)
                with m.If(~writing & axi.rvalid):
                    m.d.sync += [beats.eq(beats + 1), lines_read.eq(lines_read + 1)]
                with m.If(w_fire):
                    m.d.sync += [beats.eq(beats + 1), lines_written.eq(lines_written + 1)]
                acked = acks + axi.bvalid
                with m.If(axi.bvalid):
                    m.d.sync += acks.eq(acked)
                with m.If(Mux(writing, acked == total, (beats + axi.rvalid) == total)
                          & (requests + a_fire == total)):
                    m.next = "Idle"
        return m
