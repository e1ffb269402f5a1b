"""The CXL.mem front end of a Type-3 style (HDM-H, host-only coherent) memory device.

Message flows (CXL 2.0, ``research/dlrm_cxl.md`` B.1.2; every completion echoes the request's
Tag and LD-ID, reports MetaField No-Op because this device stores no meta state, and a DevLoad
from the occupancy of its ID pools):

==========================  =================================================================
request                     what the front end does
==========================  =================================================================
MemRd, MemRdData            one AXI read of the line, then one S2M DRS MemData with its data;
                            poison set when the AXI response is SLVERR or DECERR
MemSpecRd                   dropped (counted): it has no completion and CXL allows dropping it
                            (merging it with a later MemRd would be an optimisation)
MemInv, MemInvNT            S2M NDR Cmp once no earlier-accepted write to the line is in
                            flight: the device has no cache, so there is nothing to invalidate
                            but the Cmp still orders behind writes (flush semantics)
MemWr, MemWrPtl             one AXI write (MemWrPtl: ``wstrb`` = the 64 byte enables), then
                            S2M NDR Cmp only after the AXI B response, so a write is
                            persistent and visible to every later read once its Cmp is sent
other opcodes               dropped and counted (``unsupported``): MemRdFwd/MemWrFwd/MemClnEvct
                            do not occur in HDM-H host-only flows and have no response here
Valid bit 0                 an empty slot, not a message: dropped (counted as ``ignored``)
==========================  =================================================================

Errors. An HPA that no committed HDM decoder maps, that maps to another device's position in
the interleave set, or whose DPA lies beyond ``addr_width`` bits is **NXM**: reads get DRS
MemData-NXM with all-ones data (poison set when ``poison_nxm_reads`` is high); writes are
dropped but still completed with NDR Cmp, because CXL 2.0 has no error NDR and a write that
never completes would leak the host's tag and hang its requester; the error is visible in
the ``nxm`` counter and sticky flag. A write whose data the host marked poisoned is dropped the
same way (this memory cannot store poison, and writing the data would hide it). AXI errors on a
write still complete with Cmp and are counted in ``bus_errors``.

Protection. Up to ``num_protected`` DPA ranges (log, snapshot, metadata) are closed to the
host: a read that touches one gets MemData-NXM, a write is dropped (Cmp), and the sticky
``protection`` flag and a counter record it, unless ``debug_unlock`` is high when the request
reaches dispatch. NXM takes precedence over protection, protection over poisoned data.
MemInv carries no data and is never refused.

Ordering. Per 64-byte line (by DPA), the front end performs accesses in the order it accepts
them: a read or MemInv waits while an earlier-accepted write to its line is in flight, and a
write waits while an earlier-accepted read or write to its line is in flight. So a read
returns exactly the data of the writes accepted before it, never of writes accepted after it.
CXL itself orders nothing between Req and RwD (B.1.3), so this is stronger than required; it
also keeps two writes to one line from overtaking each other on AXI, where different IDs are
unordered. Waiting blocks the head of the (single, in-order) dispatch queue; nothing a blocked
request waits for depends on new requests, so the wait always ends.

Flow control. One message is accepted per cycle from M2S Req and M2S RwD together (round-robin
when both offer one); ``ready`` on each is the credit of B.1.3 (see ``hw/cxl/messages.py``).
The front end relies only on the host taking every S2M message eventually; S2M ``ready`` may
pause for any time.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..mem.axi import AXI4Signature
from .hdm import HDM_DECODER, MAX_DECODERS, HdmDecoder
from .messages import (
    DATA_BITS,
    HPA_WIDTH,
    LINE_BYTES,
    M2S_REQ,
    M2S_RWD,
    S2M_DRS,
    S2M_NDR,
    DevLoad,
    DRSOpcode,
    M2SReqOpcode,
    M2SRwDOpcode,
    MetaField,
    MetaValue,
    NDROpcode,
    struct_value,
)

__all__ = ["COUNTERS", "ERRORS", "CxlMemFrontEnd", "protected_region_layout", "status_layout"]

LINE_SHIFT = 6
COUNTER_WIDTH = 32
AXI_BURST_INCR = 1

#: Event counters in ``status`` (wrap at 2**32), in the order of the layout.
COUNTERS = (
    "requests",               # messages accepted on M2S Req and M2S RwD
    "reads",                  # MemRd / MemRdData, whatever their outcome
    "writes",                 # MemWr / MemWrPtl, whatever their outcome
    "invalidates",            # MemInv / MemInvNT
    "spec_reads",             # MemSpecRd (dropped)
    "nxm",                    # reads and writes that decoded to no memory of this device
    "protection_violations",  # reads refused and writes dropped by a protected range
    "poisoned_writes",        # writes dropped because the host poisoned their data
    "bus_errors",             # AXI SLVERR/DECERR responses (reads are poisoned)
    "unsupported",            # opcodes without a flow here (dropped)
    "ignored",                # messages with their Valid bit clear
)
#: Sticky error flags in ``status.errors``: set by the event, cleared by ``clear_errors``.
ERRORS = ("nxm", "protection", "poisoned_write", "bus_error", "unsupported")


def protected_region_layout(addr_width: int) -> data.StructLayout:
    """A DPA range ``[base, base + size)`` closed to host accesses while ``enable`` is set
    (the same shape as ``hw.emb.layouts.region_layout``, so one register block can feed
    both)."""
    return data.StructLayout({
        "base": unsigned(addr_width),
        "size": unsigned(addr_width),
        "enable": unsigned(1),
    })


def status_layout(max_outstanding: int) -> data.StructLayout:
    return data.StructLayout({
        **{name: unsigned(COUNTER_WIDTH) for name in COUNTERS},
        "errors": data.StructLayout({name: unsigned(1) for name in ERRORS}),
        "reads_in_flight": range(max_outstanding + 1),
        "writes_in_flight": range(max_outstanding + 1),
        "idle": unsigned(1),   # nothing accepted and not yet completed
    })


# One accepted message, Req or RwD, as it waits for its decode.
_REQUEST = data.StructLayout({
    "is_write": unsigned(1),     # came on M2S RwD
    "valid": unsigned(1),        # the message's own Valid bit
    "opcode": unsigned(4),
    "tag": unsigned(16),
    "ld_id": unsigned(4),
    "poison": unsigned(1),
    "data": unsigned(DATA_BITS),
    "byte_enable": unsigned(LINE_BYTES),
})

# What a response needs to know of its request while AXI serves it.
_CONTEXT = data.StructLayout({"tag": unsigned(16), "ld_id": unsigned(4)})


class _IdPool:
    """Busy bits and DPA lines of the AXI IDs of one direction: the lowest free ID is handed
    out; ``hazard`` says whether a busy ID holds ``line``."""

    def __init__(self, m, name, size, line_width):
        self.size = size
        self.busy = Signal(size, name=f"{name}_busy")
        self.lines = Signal(data.ArrayLayout(line_width, size), name=f"{name}_lines")
        self.in_flight = Signal(range(size + 1), name=f"{name}_in_flight")
        self.free_id = Signal(range(max(size, 2)), name=f"{name}_free_id")
        self.available = Signal(name=f"{name}_available")
        m.d.comb += self.available.eq(~self.busy.all())
        for index in reversed(range(size)):
            with m.If(~self.busy[index]):
                m.d.comb += self.free_id.eq(index)

    def hazard(self, line):
        return Cat(*(self.busy[i] & (self.lines[i] == line) for i in range(self.size))).any()

    def update(self, m, *, allocate, line, release, release_id):
        with m.If(release):
            m.d.sync += self.busy.bit_select(release_id, 1).eq(0)
        with m.If(allocate):
            m.d.sync += [self.busy.bit_select(self.free_id, 1).eq(1),
                         self.lines[self.free_id].eq(line)]
        m.d.sync += self.in_flight.eq(self.in_flight + allocate - release)


class CxlMemFrontEnd(wiring.Component):
    """CXL.mem (HDM-H) message front end: M2S/S2M message channels on one side, one AXI4
    512-bit manager port into device memory on the other, HDM decoding and protection between.
    See the module docstring for the flows, errors, ordering and flow-control rules.

    Parameters (keyword-only):
        ``addr_width``: DPA width of the AXI port (12..52, default 48); a DPA at or above
        ``2**addr_width`` is NXM.
        ``id_width``: AXI ID width (1..16, default 8).
        ``max_outstanding``: AXI reads and, separately, AXI writes in flight (1..2**id_width,
        at most 256; default 16). Size it by bandwidth x latency.
        ``num_decoders``: HDM decoders (1..10, default 2).
        ``num_protected``: protected DPA ranges (1..16, default 4).
        ``divider_stage_bits``: bits of the HDM divide-by-3 per pipeline stage (default 12).

    Members:
        ``m2s_req``: In(stream of :data:`M2S_REQ`); ``m2s_rwd``: In(stream of :data:`M2S_RWD`);
        ``s2m_ndr``: Out(stream of :data:`S2M_NDR`); ``s2m_drs``: Out(stream of :data:`S2M_DRS`).
        ``axi``: Out(AXI4Signature(addr_width, 512, id_width)): single-beat INCR bursts.
        ``hdm_enable``: In(1); ``decoders``: In(ArrayLayout(HDM_DECODER, num_decoders)).
        ``protected_ranges``: In(ArrayLayout(protected_region_layout(addr_width),
        num_protected)); not ``protected``, which is a SystemVerilog keyword.
        ``debug_unlock``: In(1), lets host accesses into protected ranges.
        ``poison_nxm_reads``: In(1), sets poison on MemData-NXM.
        ``clear_errors``: In(1), clears the sticky ``status.errors`` flags.
        ``status``: Out(status_layout(max_outstanding)): counters, sticky errors, occupancy.
    """

    def __init__(self, *, addr_width=48, id_width=8, max_outstanding=16, num_decoders=2,
                 num_protected=4, divider_stage_bits=12):
        if not isinstance(addr_width, int) or not 12 <= addr_width <= HPA_WIDTH:
            raise ValueError(f"DPA width must be an integer in 12..{HPA_WIDTH}, "
                             f"not {addr_width!r}")
        if not isinstance(id_width, int) or not 1 <= id_width <= 16:
            raise ValueError(f"ID width must be an integer in 1..16, not {id_width!r}")
        limit = min(1 << id_width, 256)
        if not isinstance(max_outstanding, int) or not 1 <= max_outstanding <= limit:
            raise ValueError(f"Outstanding requests must be an integer in 1..{limit} "
                             f"(2**id_width, at most 256), not {max_outstanding!r}")
        if not isinstance(num_decoders, int) or not 1 <= num_decoders <= MAX_DECODERS:
            raise ValueError(f"Decoder count must be an integer in 1..{MAX_DECODERS}, "
                             f"not {num_decoders!r}")
        if not isinstance(num_protected, int) or not 1 <= num_protected <= 16:
            raise ValueError(f"Protected range count must be an integer in 1..16, "
                             f"not {num_protected!r}")
        self._addr_width = addr_width
        self._id_width = id_width
        self._max_outstanding = max_outstanding
        self._num_decoders = num_decoders
        self._num_protected = num_protected
        self._hdm = HdmDecoder(num_decoders=num_decoders, divider_stage_bits=divider_stage_bits)
        super().__init__({
            "m2s_req": In(stream.Signature(M2S_REQ)),
            "m2s_rwd": In(stream.Signature(M2S_RWD)),
            "s2m_ndr": Out(stream.Signature(S2M_NDR)),
            "s2m_drs": Out(stream.Signature(S2M_DRS)),
            "axi": Out(AXI4Signature(addr_width=addr_width, data_width=DATA_BITS,
                                     id_width=id_width)),
            "hdm_enable": In(1),
            "decoders": In(data.ArrayLayout(HDM_DECODER, num_decoders)),
            "protected_ranges": In(data.ArrayLayout(protected_region_layout(addr_width),
                                                    num_protected)),
            "debug_unlock": In(1),
            "poison_nxm_reads": In(1),
            "clear_errors": In(1),
            "status": Out(status_layout(max_outstanding)),
        })

    @property
    def addr_width(self):
        return self._addr_width

    @property
    def id_width(self):
        return self._id_width

    @property
    def max_outstanding(self):
        return self._max_outstanding

    @property
    def num_decoders(self):
        return self._num_decoders

    @property
    def num_protected(self):
        return self._num_protected

    @property
    def hdm_latency(self):
        return self._hdm.latency

    @property
    def config_latency(self):
        """Cycles from stable decoder registers to decoding with them."""
        return self._hdm.config_latency

    @property
    def request_to_axi_latency(self):
        """Cycles from an M2S handshake to ``arvalid``/``awvalid`` of its AXI request, when
        nothing stalls: HDM decode, the protection check, the decoded queue, dispatch."""
        return self._hdm.latency + 4

    @property
    def pipeline_depth(self):
        """Messages accepted but not yet dispatched, at most: enough for one per cycle."""
        return self._hdm.latency + 4

    def elaborate(self, platform):
        m = Module()
        addr_width, outstanding = self._addr_width, self._max_outstanding
        line_width = addr_width - LINE_SHIFT
        depth = self.pipeline_depth
        axi = self.axi

        hdm = m.submodules.hdm = self._hdm
        m.d.comb += [hdm.enable.eq(self.hdm_enable), hdm.decoders.eq(self.decoders)]

        # --- intake: one message per cycle, round-robin between Req and RwD ---------------
        # Every accepted message has a reserved place in both queues, so the decode pipeline
        # never needs back-pressure.
        occupancy = Signal(range(depth + 1))
        space = Signal()
        prefer_rwd = Signal()
        req, rwd = self.m2s_req, self.m2s_rwd
        m.d.comb += [
            space.eq(occupancy < depth),
            req.ready.eq(space & ~(rwd.valid & prefer_rwd)),
            rwd.ready.eq(space & ~(req.valid & ~prefer_rwd)),
        ]
        take_req, take_rwd = req.valid & req.ready, rwd.valid & rwd.ready
        accept = Signal()
        m.d.comb += accept.eq(take_req | take_rwd)
        with m.If(take_rwd):
            m.d.sync += prefer_rwd.eq(0)
        with m.Elif(take_req):
            m.d.sync += prefer_rwd.eq(1)

        incoming = Signal(_REQUEST)
        hpa = Signal(HPA_WIDTH)
        header = rwd.payload.header
        with m.If(take_rwd):
            m.d.comb += [
                incoming.is_write.eq(1), incoming.valid.eq(header.valid),
                incoming.opcode.eq(header.opcode), incoming.tag.eq(header.tag),
                incoming.ld_id.eq(header.ld_id), incoming.poison.eq(header.poison),
                incoming.data.eq(rwd.payload.data),
                incoming.byte_enable.eq(rwd.payload.byte_enable),
                hpa.eq(header.address << LINE_SHIFT),
            ]
        with m.Else():
            m.d.comb += [
                incoming.valid.eq(req.payload.valid), incoming.opcode.eq(req.payload.opcode),
                incoming.tag.eq(req.payload.tag), incoming.ld_id.eq(req.payload.ld_id),
                hpa.eq(req.payload.address[1:] << LINE_SHIFT),  # Address[5] is unused
            ]

        requests = m.submodules.requests = SyncFIFOBuffered(width=_REQUEST.size, depth=depth)
        m.d.comb += [
            requests.w_en.eq(accept), requests.w_data.eq(incoming),
            hdm.request.valid.eq(accept), hdm.request.payload.eq(hpa),
        ]

        # --- after decoding: NXM and protection, by DPA ------------------------------------
        decoded_layout = data.StructLayout({
            "line": unsigned(line_width), "nxm": unsigned(1), "protected": unsigned(1)})
        decoded = m.submodules.decoded = SyncFIFOBuffered(width=decoded_layout.size,
                                                          depth=depth)
        result = hdm.result.payload
        dpa = result.dpa[:addr_width]
        touches = []
        for region in self.protected_ranges:
            end = region.base + region.size
            touches.append(region.enable & (region.size != 0) & (dpa < end) &
                           (dpa + LINE_BYTES > region.base))
        checked = Signal(decoded_layout)
        checked_valid = Signal()
        m.d.sync += [
            checked_valid.eq(hdm.result.valid),
            checked.line.eq(dpa[LINE_SHIFT:]),
            checked.nxm.eq(~result.hit | ~result.target | (result.dpa[addr_width:] != 0)),
            checked.protected.eq(Cat(*touches).any()),
        ]
        m.d.comb += [decoded.w_en.eq(checked_valid), decoded.w_data.eq(checked)]

        # --- dispatch: in order, one message per cycle -------------------------------------
        head = data.View(_REQUEST, requests.r_data)
        where = data.View(decoded_layout, decoded.r_data)
        head_valid = requests.r_rdy & decoded.r_rdy
        pop = Signal()
        m.d.comb += [requests.r_en.eq(pop), decoded.r_en.eq(pop)]
        with m.If(accept & ~pop):
            m.d.sync += occupancy.eq(occupancy + 1)
        with m.Elif(~accept & pop):
            m.d.sync += occupancy.eq(occupancy - 1)

        opcode = head.opcode
        is_read, is_spec, is_inv, is_write = Signal(), Signal(), Signal(), Signal()
        unsupported, ignored = Signal(), Signal()
        m.d.comb += [
            is_read.eq(head.valid & ~head.is_write &
                       opcode.matches(M2SReqOpcode.MEM_RD.value, M2SReqOpcode.MEM_RD_DATA.value)),
            is_spec.eq(head.valid & ~head.is_write & (opcode == M2SReqOpcode.MEM_SPEC_RD.value)),
            is_inv.eq(head.valid & ~head.is_write &
                      opcode.matches(M2SReqOpcode.MEM_INV.value, M2SReqOpcode.MEM_INV_NT.value)),
            is_write.eq(head.valid & head.is_write &
                        opcode.matches(M2SRwDOpcode.MEM_WR.value, M2SRwDOpcode.MEM_WR_PTL.value)),
            ignored.eq(~head.valid),
            unsupported.eq(head.valid & ~(is_read | is_spec | is_inv | is_write)),
        ]
        refused = Signal()
        m.d.comb += refused.eq(~where.nxm & where.protected & ~self.debug_unlock)

        reads = _IdPool(m, "read", outstanding, line_width)
        writes = _IdPool(m, "write", outstanding, line_width)
        write_hazard = Signal()
        read_hazard = Signal()
        m.d.comb += [write_hazard.eq(writes.hazard(where.line)),
                     read_hazard.eq(reads.hazard(where.line))]

        # AXI request registers: the ID is chosen when the request is loaded, so it stays
        # stable while the interconnect stalls.
        ar_valid, aw_valid, w_valid = Signal(), Signal(), Signal()
        ar_free = ~ar_valid | axi.arready
        aw_free = ~aw_valid | axi.awready
        w_free = ~w_valid | axi.wready

        local_drs_valid, local_drs_taken = Signal(), Signal()
        local_ndr_valid, local_ndr_taken = Signal(), Signal()
        issue_read, issue_write = Signal(), Signal()

        with m.If(head_valid):
            with m.If(ignored | is_spec | unsupported):
                m.d.comb += pop.eq(1)
            with m.Elif(is_read):
                with m.If(where.nxm | refused):
                    m.d.comb += [local_drs_valid.eq(1), pop.eq(local_drs_taken)]
                with m.Elif(~write_hazard & reads.available & ar_free):
                    m.d.comb += [issue_read.eq(1), pop.eq(1)]
            with m.Elif(is_inv):
                with m.If(where.nxm | ~write_hazard):
                    m.d.comb += [local_ndr_valid.eq(1), pop.eq(local_ndr_taken)]
            with m.Elif(is_write):
                with m.If(where.nxm | refused | head.poison):
                    m.d.comb += [local_ndr_valid.eq(1), pop.eq(local_ndr_taken)]
                with m.Elif(~write_hazard & ~read_hazard & writes.available &
                            aw_free & w_free):
                    m.d.comb += [issue_write.eq(1), pop.eq(1)]

        line_address = where.line << LINE_SHIFT
        ar_addr, ar_id = Signal(addr_width), Signal(self._id_width)
        aw_addr, aw_id = Signal(addr_width), Signal(self._id_width)
        w_data, w_strb = Signal(DATA_BITS), Signal(LINE_BYTES)
        with m.If(axi.arready):
            m.d.sync += ar_valid.eq(0)
        with m.If(issue_read):
            m.d.sync += [ar_valid.eq(1), ar_addr.eq(line_address), ar_id.eq(reads.free_id)]
        with m.If(axi.awready):
            m.d.sync += aw_valid.eq(0)
        with m.If(axi.wready):
            m.d.sync += w_valid.eq(0)
        with m.If(issue_write):
            partial = opcode == M2SRwDOpcode.MEM_WR_PTL.value
            m.d.sync += [
                aw_valid.eq(1), aw_addr.eq(line_address), aw_id.eq(writes.free_id),
                w_valid.eq(1), w_data.eq(head.data),
                w_strb.eq(Mux(partial, head.byte_enable, (1 << LINE_BYTES) - 1)),
            ]
        size_code = (LINE_BYTES).bit_length() - 1
        m.d.comb += [
            axi.arvalid.eq(ar_valid), axi.araddr.eq(ar_addr), axi.arid.eq(ar_id),
            axi.arlen.eq(0), axi.arsize.eq(size_code), axi.arburst.eq(AXI_BURST_INCR),
            axi.awvalid.eq(aw_valid), axi.awaddr.eq(aw_addr), axi.awid.eq(aw_id),
            axi.awlen.eq(0), axi.awsize.eq(size_code), axi.awburst.eq(AXI_BURST_INCR),
            axi.wvalid.eq(w_valid), axi.wdata.eq(w_data), axi.wstrb.eq(w_strb),
            axi.wlast.eq(1),
        ]

        # Tag and LD-ID per AXI ID, read back when the response arrives.
        read_context = m.submodules.read_context = Memory(
            shape=_CONTEXT, depth=outstanding, init=[])
        write_context = m.submodules.write_context = Memory(
            shape=_CONTEXT, depth=outstanding, init=[])
        context_in = Signal(_CONTEXT)
        m.d.comb += [context_in.tag.eq(head.tag), context_in.ld_id.eq(head.ld_id)]
        for memory, free_id, issue in ((read_context, reads.free_id, issue_read),
                                       (write_context, writes.free_id, issue_write)):
            port = memory.write_port()
            m.d.comb += [port.addr.eq(free_id), port.data.eq(context_in), port.en.eq(issue)]
        read_lookup = read_context.read_port(domain="comb")
        write_lookup = write_context.read_port(domain="comb")
        m.d.comb += [read_lookup.addr.eq(axi.rid), write_lookup.addr.eq(axi.bid)]

        # DevLoad from the fuller ID pool: light below half, optimal below three quarters,
        # moderate below full, severe when full.
        dev_load = Signal(DevLoad)
        fullest = Mux(reads.in_flight > writes.in_flight, reads.in_flight, writes.in_flight)
        with m.If(fullest >= outstanding):
            m.d.sync += dev_load.eq(DevLoad.SEVERE_OVERLOAD)
        with m.Elif(4 * fullest >= 3 * outstanding):
            m.d.sync += dev_load.eq(DevLoad.MODERATE_OVERLOAD)
        with m.Elif(2 * fullest >= outstanding):
            m.d.sync += dev_load.eq(DevLoad.OPTIMAL)
        with m.Else():
            m.d.sync += dev_load.eq(DevLoad.LIGHT)

        # --- responses: AXI first (its requests are already in flight), then local ---------
        drs_queue = m.submodules.drs_queue = SyncFIFOBuffered(width=S2M_DRS.size, depth=3)
        ndr_queue = m.submodules.ndr_queue = SyncFIFOBuffered(width=S2M_NDR.size, depth=3)

        no_meta = {"meta_field": MetaField.NO_OP, "meta_value": MetaValue.INVALID}
        drs_from_memory = struct_value(S2M_DRS, {
            "header": {"valid": 1, "opcode": DRSOpcode.MEM_DATA, **no_meta,
                       "tag": read_lookup.data.tag, "ld_id": read_lookup.data.ld_id,
                       "poison": axi.rresp[1],   # SLVERR (10) or DECERR (11)
                       "dev_load": dev_load},
            "data": axi.rdata})
        drs_nxm = struct_value(S2M_DRS, {
            "header": {"valid": 1, "opcode": DRSOpcode.MEM_DATA_NXM, **no_meta,
                       "tag": head.tag, "ld_id": head.ld_id, "poison": self.poison_nxm_reads,
                       "dev_load": dev_load},
            "data": Const((1 << DATA_BITS) - 1, DATA_BITS)})
        drs = Signal(S2M_DRS)
        m.d.comb += drs.eq(Mux(axi.rvalid, drs_from_memory, drs_nxm))
        read_done = axi.rvalid & drs_queue.w_rdy
        m.d.comb += [
            axi.rready.eq(drs_queue.w_rdy),
            drs_queue.w_en.eq(axi.rvalid | local_drs_valid), drs_queue.w_data.eq(drs),
            local_drs_taken.eq(drs_queue.w_rdy & ~axi.rvalid),
        ]

        ndr = Signal(S2M_NDR)
        m.d.comb += ndr.eq(struct_value(S2M_NDR, {
            "valid": 1, "opcode": NDROpcode.CMP, **no_meta, "dev_load": dev_load,
            "tag": Mux(axi.bvalid, write_lookup.data.tag, head.tag),
            "ld_id": Mux(axi.bvalid, write_lookup.data.ld_id, head.ld_id)}))
        write_done = axi.bvalid & ndr_queue.w_rdy
        m.d.comb += [
            axi.bready.eq(ndr_queue.w_rdy),
            ndr_queue.w_en.eq(axi.bvalid | local_ndr_valid), ndr_queue.w_data.eq(ndr),
            local_ndr_taken.eq(ndr_queue.w_rdy & ~axi.bvalid),
        ]

        reads.update(m, allocate=issue_read, line=where.line, release=read_done,
                     release_id=axi.rid)
        writes.update(m, allocate=issue_write, line=where.line, release=write_done,
                      release_id=axi.bid)

        for queue, port in ((drs_queue, self.s2m_drs), (ndr_queue, self.s2m_ndr)):
            m.d.comb += [port.valid.eq(queue.r_rdy), port.payload.eq(queue.r_data),
                         queue.r_en.eq(port.ready)]

        # --- status --------------------------------------------------------------------------
        status = self.status
        access = is_read | is_write
        read_error = read_done & axi.rresp[1]
        write_error = write_done & axi.bresp[1]
        events = {
            "requests": accept,
            "reads": pop & is_read,
            "writes": pop & is_write,
            "invalidates": pop & is_inv,
            "spec_reads": pop & is_spec,
            "nxm": pop & access & where.nxm,
            "protection_violations": pop & access & refused,
            "poisoned_writes": pop & is_write & ~where.nxm & ~refused & head.poison,
            "unsupported": pop & unsupported,
            "ignored": pop & ignored,
        }
        for name, event in events.items():
            counter = getattr(status, name)
            m.d.sync += counter.eq(counter + event)
        m.d.sync += status.bus_errors.eq(status.bus_errors + read_error + write_error)

        raised = {
            "nxm": events["nxm"], "protection": events["protection_violations"],
            "poisoned_write": events["poisoned_writes"], "bus_error": read_error | write_error,
            "unsupported": events["unsupported"],
        }
        for name, event in raised.items():
            flag = getattr(status.errors, name)
            with m.If(self.clear_errors):
                m.d.sync += flag.eq(0)
            with m.If(event):   # an error in the clearing cycle is kept
                m.d.sync += flag.eq(1)

        m.d.comb += [
            status.reads_in_flight.eq(reads.in_flight),
            status.writes_in_flight.eq(writes.in_flight),
            status.idle.eq((occupancy == 0) & (reads.in_flight == 0) &
                           (writes.in_flight == 0) & (drs_queue.level == 0) &
                           (ndr_queue.level == 0)),
        ]
        return m
