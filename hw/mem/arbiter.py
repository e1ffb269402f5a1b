"""Shares N interleaved AXI4 memory channels among several AXI4 managers.

The device has several managers (the CXL.mem front end's host traffic, the embedding engine,
later the checkpoint engine's log traffic) and ``channels`` = 1, 2 or 4 memory channels with
64-byte lines interleaved on address bits [7:6] (``hw/mem/interleave.py``). Every manager can
reach every channel:

* **Requests.** Each channel takes at most one read and one write request per cycle, chosen
  round-robin among the managers that have one for it, so a manager waits at most
  ``num_managers - 1`` grants of that channel whatever the others do (no starvation). A write
  request is the AW beat and its W beat together (a subordinate may wait for both valids
  before asserting ready; AXI forbids managers to wait for ready before asserting valid).
  Requests leave through one register stage per channel, so their payload never changes while
  valid, and the channel sees its own compact address (the channel bits removed).
* **IDs.** The manager's index is appended above the ID on its way down, so responses find
  their way back; with one channel the manager's own ID goes down unchanged below it.
* **Ordering with several channels.** AXI returns responses of one ID in request order, and
  the managers rely on it (the update engine uses one ID for everything). Two channels answer
  independently, so a per-manager reorder ring (``hw/mem/reorder.py``, one for reads, one for
  writes, ``reorder_depth`` entries each) gives each request a slot, sends the slot as the
  ID, parks the response in its slot and returns responses in request order with the
  original ID. Space is reserved at request time, so a channel's response is always taken and
  no manager can block another's responses (no deadlock). This also bounds each manager to
  ``reorder_depth`` reads and ``reorder_depth`` writes in flight.
* **Responses.** A manager takes one R (and one B) beat per cycle; when several channels
  answer the same manager at once, they take turns round-robin.

Bursts. The interleave granule is one line, so every request must be one 512-bit beat
(``len = 0``, ``wlast = 1``). All managers in this device issue single-beat requests; a
longer burst is counted in ``counters.long_bursts`` and flagged on ``long_burst`` (a read burst
still works with one channel, since its beats route by ID; a write burst never does, as only
its first W beat travels with the AW).
"""

from amaranth.hdl import Cat, Const, Module, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from .axi import AXI4Signature
from .interleave import channel_bits, channel_of, local_address
from .reorder import ReadReorderBuffer

__all__ = ["AxiArbiter", "counters_layout"]

COUNTER_WIDTH = 32
MAX_MANAGERS = 8
DATA_WIDTH = 512
_BURST_FIELDS = 8 + 3 + 2  # len, size, burst


def counters_layout(*, num_managers: int, channels: int) -> data.StructLayout:
    """Free-running event counters of the arbiter (wrap at 2**32)."""
    return data.StructLayout({
        "reads": data.ArrayLayout(unsigned(COUNTER_WIDTH), channels),    # AR handshakes
        "writes": data.ArrayLayout(unsigned(COUNTER_WIDTH), channels),   # AW handshakes
        # cycles in which a manager offered a read or a write that was not taken
        "waits": data.ArrayLayout(unsigned(COUNTER_WIDTH), num_managers),
        "long_bursts": unsigned(COUNTER_WIDTH),  # requests with len != 0 (unsupported)
    })


def _round_robin(m, name, requests, advance):
    """Index of the granted request: the first one after the previous grant, cyclically.
    The pointer moves only when ``advance`` (a handshake) happens."""
    count = len(requests)
    grant = Signal(range(max(count, 2)), name=f"{name}_grant")
    if count == 1:
        return grant
    last = Signal(range(count), name=f"{name}_last")
    with m.Switch(last):
        for previous in range(count):
            with m.Case(previous):
                # Assignments later in the block win: go from the lowest priority up.
                for step in reversed(range(count)):
                    index = (previous + 1 + step) % count
                    with m.If(requests[index]):
                        m.d.comb += grant.eq(index)
    with m.If(advance):
        m.d.sync += last.eq(grant)
    return grant


def _select(m, name, grant, values):
    """``values[grant]`` as a signal (``values`` all of one shape)."""
    chosen = Signal.like(values[0], name=name)
    if len(values) == 1:
        m.d.comb += chosen.eq(values[0])
        return chosen
    with m.Switch(grant):
        for index, value in enumerate(values):
            with m.Case(index):
                m.d.comb += chosen.eq(value)
    return chosen


class AxiArbiter(wiring.Component):
    """``num_managers`` AXI4 managers onto ``channels`` interleaved memory channels (module
    docstring for the rules).

    Parameters (keyword-only)
    -------------------------
    num_managers : int
        1..8.
    channels : int
        1, 2 or 4; lines are interleaved on address bits [7:6].
    addr_width : int
        Managers' address width (byte addresses); each channel gets ``addr_width - log2
        channels`` bits. At least 12 + log2(channels).
    id_width : int
        Managers' ID width, 1..16.
    reorder_depth : int
        With more than one channel: reads and, separately, writes in flight per manager (the
        reorder rings), a power of two in 2..256. Size it like an ID pool: bandwidth x latency.
        Ignored (no reordering is needed) with one channel.

    Members
    -------
    managers : ``In(AXI4Signature(addr_width, 512, id_width)).array(num_managers)``
    channels : ``Out(AXI4Signature(addr_width - log2 channels, 512, channel_id_width))
        .array(channels)``; ``channel_id_width`` is the manager index above the manager's ID
        (one channel) or above the reorder slot (several).
    counters : ``Out(counters_layout(...))``
    long_burst : ``Out(1)``
        A request with ``len != 0`` was accepted this cycle.
    """

    def __init__(self, *, num_managers=2, channels=1, addr_width=48, id_width=8,
                 reorder_depth=16):
        if (not isinstance(num_managers, int) or isinstance(num_managers, bool)
                or not 1 <= num_managers <= MAX_MANAGERS):
            raise ValueError(f"Manager count must be an integer in 1..{MAX_MANAGERS}, "
                             f"not {num_managers!r}")
        k = channel_bits(channels)
        if (not isinstance(addr_width, int) or isinstance(addr_width, bool)
                or not 12 + k <= addr_width <= 64):
            raise ValueError(f"Address width must be an integer in {12 + k}..64 for "
                             f"{channels} channel(s), not {addr_width!r}")
        if not isinstance(id_width, int) or isinstance(id_width, bool) or not 1 <= id_width <= 16:
            raise ValueError(f"ID width must be an integer in 1..16, not {id_width!r}")
        if (not isinstance(reorder_depth, int) or isinstance(reorder_depth, bool)
                or not 2 <= reorder_depth <= 256 or reorder_depth & (reorder_depth - 1)):
            raise ValueError(f"Reorder depth must be a power of two in 2..256, "
                             f"not {reorder_depth!r}")
        self._num_managers = num_managers
        self._channels = channels
        self._addr_width = addr_width
        self._id_width = id_width
        self._reorder_depth = reorder_depth
        manager_bits = ceil_log2(num_managers)
        self._low_id_width = id_width if channels == 1 else exact_log2(reorder_depth)
        self._channel_id_width = max(1, self._low_id_width + manager_bits)
        self._manager_bits = manager_bits
        super().__init__({
            "managers": In(AXI4Signature(addr_width=addr_width, data_width=DATA_WIDTH,
                                         id_width=id_width)).array(num_managers),
            "channels": Out(AXI4Signature(addr_width=addr_width - k, data_width=DATA_WIDTH,
                                          id_width=self._channel_id_width)).array(channels),
            "counters": Out(counters_layout(num_managers=num_managers, channels=channels)),
            "long_burst": Out(1),
        })

    @property
    def num_managers(self):
        return self._num_managers

    @property
    def channel_count(self):
        return self._channels

    @property
    def channel_addr_width(self):
        return self._addr_width - channel_bits(self._channels)

    @property
    def channel_id_width(self):
        return self._channel_id_width

    @property
    def reorder_depth(self):
        return self._reorder_depth

    def elaborate(self, platform):
        m = Module()
        managers, channels = self._num_managers, self._channels
        low_width = self._low_id_width
        request_layout = data.StructLayout({
            "addr": unsigned(self._addr_width), "len": unsigned(8), "size": unsigned(3),
            "burst": unsigned(2), "id": unsigned(low_width)})

        # Per manager, what the crossbar sees: requests with a low ID (the manager's ID or a
        # reorder slot), and the response sinks it delivers to.
        reads, writes, r_sinks, b_sinks = [], [], [], []
        for index in range(managers):
            port = self.managers[index]
            read = {"valid": Signal(name=f"m{index}_ar_valid"),
                    "ready": Signal(name=f"m{index}_ar_ready"),
                    "payload": Signal(request_layout, name=f"m{index}_ar")}
            write = {"valid": Signal(name=f"m{index}_aw_valid"),
                     "ready": Signal(name=f"m{index}_aw_ready"),
                     "payload": Signal(request_layout, name=f"m{index}_aw")}
            r_sink = {"valid": Signal(name=f"m{index}_r_valid"),
                      "ready": Signal(name=f"m{index}_r_ready"),
                      "id": Signal(low_width, name=f"m{index}_r_id"),
                      "data": Signal(DATA_WIDTH, name=f"m{index}_r_data"),
                      "resp": Signal(2, name=f"m{index}_r_resp"),
                      "last": Signal(name=f"m{index}_r_last")}
            b_sink = {"valid": Signal(name=f"m{index}_b_valid"),
                      "ready": Signal(name=f"m{index}_b_ready"),
                      "id": Signal(low_width, name=f"m{index}_b_id"),
                      "resp": Signal(2, name=f"m{index}_b_resp")}
            pair_valid = port.awvalid & port.wvalid
            burst_of = {
                "ar": Cat(port.araddr, port.arlen, port.arsize, port.arburst),
                "aw": Cat(port.awaddr, port.awlen, port.awsize, port.awburst),
            }
            if channels == 1:
                m.d.comb += [
                    read["valid"].eq(port.arvalid), port.arready.eq(read["ready"]),
                    read["payload"].eq(Cat(burst_of["ar"], port.arid)),
                    write["valid"].eq(pair_valid),
                    port.awready.eq(write["ready"]), port.wready.eq(write["ready"]),
                    write["payload"].eq(Cat(burst_of["aw"], port.awid)),
                    port.rvalid.eq(r_sink["valid"]), r_sink["ready"].eq(port.rready),
                    port.rid.eq(r_sink["id"]), port.rdata.eq(r_sink["data"]),
                    port.rresp.eq(r_sink["resp"]), port.rlast.eq(r_sink["last"]),
                    port.bvalid.eq(b_sink["valid"]), b_sink["ready"].eq(port.bready),
                    port.bid.eq(b_sink["id"]), port.bresp.eq(b_sink["resp"]),
                ]
            else:
                # Reorder rings: the request's burst fields travel as the ring's "address".
                ring_width = self._addr_width + _BURST_FIELDS
                read_ring = m.submodules[f"read_ring_{index}"] = ReadReorderBuffer(
                    depth=self._reorder_depth, addr_width=ring_width,
                    data_width=DATA_WIDTH + 2, context=unsigned(self._id_width))
                write_ring = m.submodules[f"write_ring_{index}"] = ReadReorderBuffer(
                    depth=self._reorder_depth, addr_width=ring_width, data_width=2,
                    context=unsigned(self._id_width))
                write_taken = write_ring.request.ready & pair_valid
                m.d.comb += [
                    read_ring.request.valid.eq(port.arvalid),
                    read_ring.request.payload.addr.eq(burst_of["ar"]),
                    read_ring.request.payload.read.eq(1),
                    read_ring.request.payload.context.eq(port.arid),
                    port.arready.eq(read_ring.request.ready),
                    read["valid"].eq(read_ring.ar.valid),
                    read_ring.ar.ready.eq(read["ready"]),
                    read["payload"].eq(Cat(read_ring.ar.payload.addr, read_ring.ar.payload.id)),
                    read_ring.response.valid.eq(r_sink["valid"]),
                    read_ring.response.payload.id.eq(r_sink["id"]),
                    read_ring.response.payload.data.eq(Cat(r_sink["data"], r_sink["resp"])),
                    r_sink["ready"].eq(1),   # the ring reserved room for every response
                    port.rvalid.eq(read_ring.pop.valid), read_ring.pop.ready.eq(port.rready),
                    port.rid.eq(read_ring.pop.payload.context),
                    port.rdata.eq(read_ring.pop.payload.data[:DATA_WIDTH]),
                    port.rresp.eq(read_ring.pop.payload.data[DATA_WIDTH:]),
                    port.rlast.eq(1),

                    write_ring.request.valid.eq(pair_valid),
                    write_ring.request.payload.addr.eq(burst_of["aw"]),
                    write_ring.request.payload.read.eq(1),
                    write_ring.request.payload.context.eq(port.awid),
                    # AW and W are taken together, and only when both are offered.
                    port.awready.eq(write_taken), port.wready.eq(write_taken),
                    write["valid"].eq(write_ring.ar.valid),
                    write_ring.ar.ready.eq(write["ready"]),
                    write["payload"].eq(Cat(write_ring.ar.payload.addr,
                                            write_ring.ar.payload.id)),
                    write_ring.response.valid.eq(b_sink["valid"]),
                    write_ring.response.payload.id.eq(b_sink["id"]),
                    write_ring.response.payload.data.eq(b_sink["resp"]),
                    b_sink["ready"].eq(1),
                    port.bvalid.eq(write_ring.pop.valid), write_ring.pop.ready.eq(port.bready),
                    port.bid.eq(write_ring.pop.payload.context),
                    port.bresp.eq(write_ring.pop.payload.data),
                ]
            reads.append(read)
            writes.append(write)
            r_sinks.append(r_sink)
            b_sinks.append(b_sink)

        # --- requests: per channel, round-robin among managers, one register stage ----------
        read_ready_terms = [[] for _ in range(managers)]
        write_ready_terms = [[] for _ in range(managers)]
        for c in range(channels):
            bus = self.channels[c]

            def wants(request, c=c):
                if channels == 1:
                    return request["valid"]
                return request["valid"] & (channel_of(request["payload"].addr, channels) == c)

            def downstream_id(request, index):
                if self._manager_bits == 0:
                    return request["payload"].id
                return Cat(request["payload"].id, Const(index, self._manager_bits))

            # reads
            requests = [wants(reads[i]) for i in range(managers)]
            load = ~bus.arvalid | bus.arready
            any_read = Cat(*requests).any()
            grant = _round_robin(m, f"ar{c}", requests, load & any_read)
            chosen = _select(m, f"ar{c}_chosen", grant, [r["payload"] for r in reads])
            chosen_id = _select(m, f"ar{c}_id", grant,
                                [downstream_id(r, i) for i, r in enumerate(reads)])
            with m.If(load):
                m.d.sync += [
                    bus.arvalid.eq(any_read), bus.arid.eq(chosen_id),
                    bus.araddr.eq(local_address(chosen.addr, channels)),
                    bus.arlen.eq(chosen.len), bus.arsize.eq(chosen.size),
                    bus.arburst.eq(chosen.burst),
                ]
            for i in range(managers):
                read_ready_terms[i].append(load & requests[i] & (grant == i))

            # writes: AW and W leave together and are taken independently downstream
            requests = [wants(writes[i]) for i in range(managers)]
            load = (~bus.awvalid | bus.awready) & (~bus.wvalid | bus.wready)
            any_write = Cat(*requests).any()
            grant = _round_robin(m, f"aw{c}", requests, load & any_write)
            chosen = _select(m, f"aw{c}_chosen", grant, [w["payload"] for w in writes])
            chosen_id = _select(m, f"aw{c}_id", grant,
                                [downstream_id(w, i) for i, w in enumerate(writes)])
            w_data = _select(m, f"w{c}_data", grant,
                             [self.managers[i].wdata for i in range(managers)])
            w_strb = _select(m, f"w{c}_strb", grant,
                             [self.managers[i].wstrb for i in range(managers)])
            w_last = _select(m, f"w{c}_last", grant,
                             [self.managers[i].wlast for i in range(managers)])
            with m.If(bus.awready):
                m.d.sync += bus.awvalid.eq(0)
            with m.If(bus.wready):
                m.d.sync += bus.wvalid.eq(0)
            with m.If(load & any_write):
                m.d.sync += [
                    bus.awvalid.eq(1), bus.awid.eq(chosen_id),
                    bus.awaddr.eq(local_address(chosen.addr, channels)),
                    bus.awlen.eq(chosen.len), bus.awsize.eq(chosen.size),
                    bus.awburst.eq(chosen.burst),
                    bus.wvalid.eq(1), bus.wdata.eq(w_data), bus.wstrb.eq(w_strb),
                    bus.wlast.eq(w_last),
                ]
            for i in range(managers):
                write_ready_terms[i].append(load & requests[i] & (grant == i))

        for i in range(managers):
            m.d.comb += [reads[i]["ready"].eq(Cat(*read_ready_terms[i]).any()),
                         writes[i]["ready"].eq(Cat(*write_ready_terms[i]).any())]

        # --- responses: per manager, round-robin among the channels answering it -------------
        def owner_matches(bus_id, index):
            if self._manager_bits == 0:
                return Const(1)
            return bus_id[low_width:low_width + self._manager_bits] == index

        r_ready_terms = [[] for _ in range(channels)]
        b_ready_terms = [[] for _ in range(channels)]
        for i in range(managers):
            for kind, sink, ready_terms in (("r", r_sinks[i], r_ready_terms),
                                            ("b", b_sinks[i], b_ready_terms)):
                buses = [self.channels[c] for c in range(channels)]
                valid = [getattr(b, f"{kind}valid") & owner_matches(getattr(b, f"{kind}id"), i)
                         for b in buses]
                any_valid = Cat(*valid).any()
                grant = _round_robin(m, f"{kind}{i}", valid, any_valid & sink["ready"])
                m.d.comb += [
                    sink["valid"].eq(any_valid),
                    sink["id"].eq(_select(m, f"{kind}{i}_id", grant,
                                          [getattr(b, f"{kind}id")[:low_width] for b in buses])),
                    sink["resp"].eq(_select(m, f"{kind}{i}_resp", grant,
                                            [getattr(b, f"{kind}resp") for b in buses])),
                ]
                if kind == "r":
                    m.d.comb += [
                        sink["data"].eq(_select(m, f"r{i}_data", grant,
                                                [b.rdata for b in buses])),
                        sink["last"].eq(_select(m, f"r{i}_last", grant,
                                                [b.rlast for b in buses])),
                    ]
                for c in range(channels):
                    ready_terms[c].append(valid[c] & (grant == c) & sink["ready"])
        for c in range(channels):
            bus = self.channels[c]
            m.d.comb += [bus.rready.eq(Cat(*r_ready_terms[c]).any()),
                         bus.bready.eq(Cat(*b_ready_terms[c]).any())]

        # --- counters ---------------------------------------------------------------------------
        counters = self.counters
        for c in range(channels):
            bus = self.channels[c]
            m.d.sync += [
                counters.reads[c].eq(counters.reads[c] + (bus.arvalid & bus.arready)),
                counters.writes[c].eq(counters.writes[c] + (bus.awvalid & bus.awready)),
            ]
        long_bursts = []
        for i in range(managers):
            port = self.managers[i]
            waiting = (port.arvalid & ~port.arready) | (port.awvalid & ~port.awready)
            m.d.sync += counters.waits[i].eq(counters.waits[i] + waiting)
            long_bursts += [port.arvalid & port.arready & (port.arlen != 0),
                            port.awvalid & port.awready & (port.awlen != 0)]
        m.d.comb += self.long_burst.eq(Cat(*long_bursts).any())
        m.d.sync += counters.long_bursts.eq(counters.long_bursts + self.long_burst)
        return m

