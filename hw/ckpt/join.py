"""One memory port for the embedding engine's traffic and the checkpoint engine's own.

The embedding engine's AXI port arrives here (this side is its subordinate) and leaves toward
memory unchanged, except that:

* its writes pass only while ``engine_write_open`` and its reads only while
  ``engine_read_open`` (the interlock and GPF close them; a request already accepted always
  completes);
* the tap may hold one read address (``engine_ar_hold``) and hold read data
  (``engine_r_hold``, when its log buffer is nearly full), and the write tap may hold writes
  (``engine_w_hold``, when its buffer is nearly full);
* the checkpoint engine's own single-beat reads and writes share the port (the engine's writes
  have priority: the log only needs to be persistent when UPDATE comes), with the top four
  IDs ``2**id_width - 4 + kind`` (:class:`~hw.ckpt.layouts.OwnWrite` for writes, ``kind = 0``
  for reads). The embedding engine must use IDs below ``2**id_width - 4``; a request with a
  reserved ID, or a write burst, is never accepted and raises ``protocol_error``.

Every write is one beat (``awlen = 0``), AW and W together, as the device's AXI arbiter
(``hw/mem/arbiter.py``) requires; a write request leaves through one register stage whose AW
and W halves are accepted independently. Reads may be bursts (they pass through by ID).

Completions are counted per own kind (accepted here -> B response) and for the engine, so the
controller can wait until every write of a kind is persistent (DESIGN.md section 4: a write is
persistent once its B response has been returned).
"""

from amaranth.hdl import Cat, Const, Module, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.mem.axi import AXI4Signature

from .layouts import LINE_BITS, OwnWrite

__all__ = ["OWN_IDS", "AxiJoin", "own_id_base"]

OWN_IDS = 4


def own_id_base(id_width: int) -> int:
    """The first of the IDs reserved for the checkpoint engine's own traffic."""
    return 2 ** id_width - OWN_IDS


class AxiJoin(wiring.Component):
    """The embedding engine's AXI port plus own requests onto one memory port.

    Parameters (keyword-only)
    -------------------------
    addr_width : int
    id_width : int
        3..16; the embedding engine may use IDs ``0 .. 2**id_width - 5``.
    max_outstanding_writes : int
        Writes of one own kind, and engine writes, accepted and not yet completed; beyond it
        the source waits (bounds the counters).

    Members
    -------
    engine : ``In(AXI4Signature(...))``
        The embedding engine's manager port.
    memory : ``Out(AXI4Signature(...))``
        Toward memory, same widths.
    own_ar : ``In(stream.Signature(addr_width - 6))``
        Line address of an own single-beat read.
    own_r : ``Out(stream.Signature({"data": 512, "error": 1}))``
        Own read data, in request order.
    own_w : ``In(stream.Signature({"line", "data", "kind"}))``
        An own single-beat full-line write.
    own_outstanding : ``Out(data.ArrayLayout(unsigned(...), 4))``
        Own writes of each kind accepted on ``own_w`` and not yet answered on B.
    own_completed : ``Out(4)``
        Strobe, bit ``kind``: an own write of that kind got its B response (in the order the
        writes were accepted: one ID per kind).
    engine_outstanding : ``Out(unsigned(...))``
        Engine writes accepted and not yet answered.
    engine_read_open, engine_write_open : ``In(1)``
    engine_ar_hold, engine_r_hold, engine_w_hold : ``In(1)``
    engine_ar_fire, engine_r_fire : ``Out(1)``
        Engine-side AR and R handshakes (for the tap).
    engine_w_fire : ``Out(1)``
        An engine write (AW and W together) is taken (for the write tap).
    own_error : ``Out(1)``
        Strobe: an own B or R response was not OKAY.
    protocol_error : ``Out(1)``
        The engine offers a request with a reserved ID or a write burst (held, never taken).
    quiet : ``Out(1)``
        No write waits in the register stage and none is outstanding (own or engine).
    stage_aw, stage_id : ``Out(1)``, ``Out(id_width)``
        A write's address waits in the register stage, and its ID (for the formal proof's
        bookkeeping: accepted writes = issued writes + the one waiting here).
    """

    def __init__(self, *, addr_width, id_width, max_outstanding_writes=64):
        self._addr_width = addr_width
        self._id_width = id_width
        self._max_writes = max_outstanding_writes
        count = unsigned(max_outstanding_writes.bit_length())
        axi = AXI4Signature(addr_width=addr_width, data_width=LINE_BITS, id_width=id_width)
        super().__init__({
            "engine": In(axi),
            "memory": Out(axi),
            "own_ar": In(stream.Signature(addr_width - 6)),
            "own_r": Out(stream.Signature(data.StructLayout({"data": LINE_BITS, "error": 1}))),
            "own_w": In(stream.Signature(data.StructLayout({
                "line": addr_width - 6, "data": LINE_BITS, "kind": OwnWrite}))),
            "own_outstanding": Out(data.ArrayLayout(count, len(OwnWrite))),
            "own_completed": Out(len(OwnWrite)),
            "engine_outstanding": Out(count),
            "engine_read_open": In(1),
            "engine_write_open": In(1),
            "engine_ar_hold": In(1),
            "engine_r_hold": In(1),
            "engine_w_hold": In(1),
            "engine_ar_fire": Out(1),
            "engine_r_fire": Out(1),
            "engine_w_fire": Out(1),
            "own_error": Out(1),
            "protocol_error": Out(1),
            "quiet": Out(1),
            "stage_aw": Out(1),
            "stage_id": Out(id_width),
        })

    def elaborate(self, platform):
        m = Module()
        engine, memory = self.engine, self.memory
        base = own_id_base(self._id_width)
        size_code = 6  # 64-byte beats
        incr = 1

        # --- read addresses: a register stage; own reads first (they only happen while the
        # engine is idle, during RECOVER) -------------------------------------------------------
        ar_valid = Signal()
        ar_id = Signal(self._id_width)
        ar_addr = Signal(self._addr_width)
        ar_len = Signal(8)
        load_ar = ~ar_valid | memory.arready
        engine_ar_legal = engine.arid < base
        engine_ar_ok = (engine.arvalid & engine_ar_legal & self.engine_read_open
                        & ~self.engine_ar_hold)
        m.d.comb += [
            memory.arvalid.eq(ar_valid), memory.arid.eq(ar_id), memory.araddr.eq(ar_addr),
            memory.arlen.eq(ar_len), memory.arsize.eq(size_code), memory.arburst.eq(incr),
        ]
        with m.If(load_ar):
            m.d.sync += ar_valid.eq(0)
            with m.If(self.own_ar.valid):
                m.d.comb += self.own_ar.ready.eq(1)
                m.d.sync += [ar_valid.eq(1), ar_id.eq(base), ar_len.eq(0),
                             ar_addr.eq(Cat(Const(0, 6), self.own_ar.payload))]
            with m.Elif(engine_ar_ok):
                m.d.comb += engine.arready.eq(1)
                m.d.sync += [ar_valid.eq(1), ar_id.eq(engine.arid), ar_len.eq(engine.arlen),
                             ar_addr.eq(engine.araddr)]
        m.d.comb += self.engine_ar_fire.eq(engine.arvalid & engine.arready)

        # --- read data: routed by ID; the engine's may be held for the tap --------------------
        own_r = memory.rid >= base
        presented = Signal()  # engine R offered last cycle and not taken: must stay offered
        hold = self.engine_r_hold & ~presented
        m.d.comb += [
            engine.rid.eq(memory.rid), engine.rdata.eq(memory.rdata),
            engine.rresp.eq(memory.rresp), engine.rlast.eq(memory.rlast),
            engine.rvalid.eq(memory.rvalid & ~own_r & ~hold),
            self.own_r.valid.eq(memory.rvalid & own_r),
            self.own_r.payload.data.eq(memory.rdata),
            self.own_r.payload.error.eq(memory.rresp != 0),
        ]
        with m.If(own_r):
            m.d.comb += memory.rready.eq(self.own_r.ready)
        with m.Else():
            m.d.comb += memory.rready.eq(engine.rready & ~hold)
        m.d.sync += presented.eq(engine.rvalid & ~engine.rready)
        m.d.comb += self.engine_r_fire.eq(engine.rvalid & engine.rready)

        # --- writes: AW + W together through one register stage, round robin ----------------
        aw_pending = Signal()
        w_pending = Signal()
        w_id = Signal(self._id_width)
        w_addr = Signal(self._addr_width)
        w_data = Signal(LINE_BITS)
        w_strb = Signal(LINE_BITS // 8)
        stage_free = (~aw_pending | memory.awready) & (~w_pending | memory.wready)
        m.d.comb += [
            memory.awvalid.eq(aw_pending), memory.awid.eq(w_id), memory.awaddr.eq(w_addr),
            memory.awlen.eq(0), memory.awsize.eq(size_code), memory.awburst.eq(incr),
            memory.wvalid.eq(w_pending), memory.wdata.eq(w_data), memory.wstrb.eq(w_strb),
            memory.wlast.eq(1),
        ]
        with m.If(memory.awready):
            m.d.sync += aw_pending.eq(0)
        with m.If(memory.wready):
            m.d.sync += w_pending.eq(0)

        own_count = self.own_outstanding
        engine_count = Signal.like(self.engine_outstanding)
        m.d.comb += self.engine_outstanding.eq(engine_count)
        own_kind = self.own_w.payload.kind
        own_room = Signal()
        with m.Switch(own_kind):
            for kind in OwnWrite:
                with m.Case(kind):
                    m.d.comb += own_room.eq(own_count[kind.value] != self._max_writes)
        engine_write_legal = (engine.awid < base) & (engine.awlen == 0) & engine.wlast
        own_wants = self.own_w.valid & own_room
        engine_wants = (engine.awvalid & engine.wvalid & engine_write_legal
                        & self.engine_write_open & ~self.engine_w_hold
                        & (engine_count != self._max_writes))
        # The engine's writes first: they are on its critical path (a LOOKUP's output lines),
        # while the log only has to be persistent by the time UPDATE arrives, so it drains in
        # the gaps (PMEM write bandwidth is the scarce resource). The own writes cannot
        # starve: the engine's writes are finite and gated, and the flag and commit records
        # are written while the gate is closed.
        take_engine = stage_free & engine_wants
        take_own = stage_free & own_wants & ~engine_wants
        own_taken = Signal()
        engine_taken = Signal()
        m.d.comb += [own_taken.eq(take_own), engine_taken.eq(take_engine),
                     self.engine_w_fire.eq(take_engine)]
        with m.If(take_own):
            m.d.comb += self.own_w.ready.eq(1)
            m.d.sync += [aw_pending.eq(1), w_pending.eq(1),
                         w_id.eq(base + own_kind.as_value()),
                         w_addr.eq(Cat(Const(0, 6), self.own_w.payload.line)),
                         w_data.eq(self.own_w.payload.data), w_strb.eq(-1)]
        with m.If(take_engine):
            m.d.comb += [engine.awready.eq(1), engine.wready.eq(1)]
            m.d.sync += [aw_pending.eq(1), w_pending.eq(1),
                         w_id.eq(engine.awid), w_addr.eq(engine.awaddr),
                         w_data.eq(engine.wdata), w_strb.eq(engine.wstrb)]

        # --- write responses: routed by ID; own ones are always taken -------------------------
        own_b = memory.bid >= base
        own_b_kind = memory.bid[:2]  # base is a multiple of 4
        m.d.comb += [
            engine.bid.eq(memory.bid), engine.bresp.eq(memory.bresp),
            engine.bvalid.eq(memory.bvalid & ~own_b),
            memory.bready.eq(own_b | engine.bready),
        ]
        own_done = memory.bvalid & own_b
        engine_done = engine.bvalid & engine.bready
        m.d.comb += self.own_error.eq((own_done & (memory.bresp != 0))
                                      | (self.own_r.valid & self.own_r.ready
                                         & self.own_r.payload.error))
        for kind in OwnWrite:
            issued = own_taken & (own_kind == kind)
            completed = own_done & (own_b_kind == kind.value)
            m.d.comb += self.own_completed[kind.value].eq(completed)
            m.d.sync += own_count[kind.value].eq(own_count[kind.value] + issued - completed)
        m.d.sync += engine_count.eq(engine_count + engine_taken - engine_done)

        m.d.comb += [
            self.protocol_error.eq((engine.arvalid & ~engine_ar_legal)
                                   | (engine.awvalid & engine.wvalid & ~engine_write_legal)),
            self.quiet.eq(~aw_pending & ~w_pending & (engine_count == 0)
                          & (own_count.as_value() == 0)),
            self.stage_aw.eq(aw_pending), self.stage_id.eq(w_id),
        ]
        return m
