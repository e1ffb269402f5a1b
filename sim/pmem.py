"""A simulation-only persistent-memory model in Amaranth: latency, bandwidth, persistence domain
and power-fail injection (DESIGN.md sections 4 and 8).

It lives inside the simulated design (like :mod:`sim.axi_memory`), so a system run goes at
Verilator speed and Python acts per command. Timing and the power-fail behaviour are runtime
inputs, so one Verilator build serves every profile:

* **Reads**: one beat at most per cycle, the first ``read_latency`` cycles after the AR
  handshake, and no faster than ``read_rate_num / read_rate_den`` beats per cycle on average
  (a token bucket). Reads return the newest data, persistent or not.
* **Writes**: W beats are taken no faster than ``write_rate_num / write_rate_den`` per cycle;
  the data is visible at once, and the B response follows ``write_latency`` cycles after the
  last beat. A write is *persistent once its B response has been sent* (the handshake).
* **Power failure**: raising ``power_fail`` freezes the AXI port; then every beat written but
  not yet acknowledged either persists or is lost, independently, by a xorshift32 generator
  seeded from ``fail_seed`` (a beat persists when the draw's low byte is below ``fail_keep``,
  or always if ``fail_keep`` is 255: 0 loses them all, 255 keeps them all; see
  :func:`power_fail_verdicts`). Lost beats get their old contents
  back, newest first, and a lost beat never undoes a newer kept write to the same line, so the
  image is exactly "the persistent data plus a seeded subset of the unacknowledged beats"
  (tearing at beat granularity). ``powered_down`` rises when the image is final; the design
  is then reset (memory contents survive reset; pending state does not).
* **Backdoor**: ``backdoor_addr``/``backdoor_wdata``/``backdoor_we`` write a line directly (a
  persistent write, e.g. the host's CXL.mem stores in a testbench); ``backdoor_rdata`` is the
  line at ``backdoor_addr`` one cycle earlier.

:data:`PROFILES` holds the ``dram`` profile and the paper's ``pmem`` profile (TrainingCXL's
emulation: read latency 3x, write latency 7x, read bandwidth 0.6x, write bandwidth 0.1x).

Not synthesizable in any useful sense; it is a model.
"""

from dataclasses import dataclass
from fractions import Fraction

from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, fifo, memory, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from hw.mem.axi import AXI4Signature

from .line_ram import LineRam

__all__ = ["DRAM", "PMEM", "PROFILES", "MemoryProfile", "PmemModel", "power_fail_verdicts"]

_LINE_BITS = 512


@dataclass(frozen=True)
class MemoryProfile:
    """Timing of the memory model; rates are beats per cycle as a fraction (num / den)."""

    name: str
    read_latency: int
    write_latency: int
    read_rate: tuple[int, int]
    write_rate: tuple[int, int]

    def __post_init__(self):
        if not isinstance(self.read_latency, int) or not 3 <= self.read_latency < 2**16:
            raise ValueError(f"Read latency must be an integer in 3..65535, not "
                             f"{self.read_latency!r}")
        if not isinstance(self.write_latency, int) or not 2 <= self.write_latency < 2**16:
            raise ValueError(f"Write latency must be an integer in 2..65535, not "
                             f"{self.write_latency!r}")
        for what, (num, den) in (("Read", self.read_rate), ("Write", self.write_rate)):
            if not (isinstance(num, int) and isinstance(den, int) and 1 <= num <= den < 256):
                raise ValueError(f"{what} rate must be num/den with 1 <= num <= den < 256, "
                                 f"not {num}/{den}")

    def scaled(self, name, *, read_latency, write_latency, read_bandwidth, write_bandwidth):
        """This profile with latencies multiplied and bandwidths scaled (fractions)."""
        def rate(base, factor):
            value = Fraction(*base) * Fraction(factor).limit_denominator(100)
            return (value.numerator, value.denominator)
        return MemoryProfile(name, self.read_latency * read_latency,
                             self.write_latency * write_latency,
                             rate(self.read_rate, read_bandwidth),
                             rate(self.write_rate, write_bandwidth))

    def inputs(self) -> dict[str, int]:
        """The model's timing inputs for this profile (port name -> value)."""
        return {"read_latency": self.read_latency, "write_latency": self.write_latency,
                "read_rate_num": self.read_rate[0], "read_rate_den": self.read_rate[1],
                "write_rate_num": self.write_rate[0], "write_rate_den": self.write_rate[1]}


#: One beat per cycle each way; latencies of an on-board DDR4 controller at a few hundred MHz.
DRAM = MemoryProfile("dram", read_latency=20, write_latency=10, read_rate=(1, 1),
                     write_rate=(1, 1))
#: TrainingCXL's PMEM emulation (DESIGN.md section 1): 3x/7x latency, 0.6x/0.1x bandwidth.
PMEM = DRAM.scaled("pmem", read_latency=3, write_latency=7, read_bandwidth=Fraction(3, 5),
                   write_bandwidth=Fraction(1, 10))
PROFILES = {profile.name: profile for profile in (DRAM, PMEM)}


def _xorshift32(value: int) -> int:
    value ^= (value << 13) & 0xFFFF_FFFF
    value ^= value >> 17
    value ^= (value << 5) & 0xFFFF_FFFF
    return value


def power_fail_verdicts(seed: int, keep: int, count: int) -> list[bool]:
    """Whether each of ``count`` unacknowledged beats persists, newest first (the model's
    generator, in Python)."""
    state = seed if seed else 0x9E3779B9
    verdicts = []
    for _ in range(count):
        state = _xorshift32(state)
        verdicts.append(keep == 255 or (state & 0xFF) < keep)
    return verdicts


def _token_bucket(m, name, num, den, take):
    """``ok``: a beat may go now; ``take``: one does (costs ``den``; ``num`` accrues per
    cycle, up to two beats' worth)."""
    credit = Signal(10, name=f"{name}_credit")
    ok = Signal(name=f"{name}_ok")
    m.d.comb += ok.eq(credit >= den)
    grown = credit + num - Mux(take, den, 0)
    m.d.sync += credit.eq(Mux(grown > 2 * den, 2 * den, grown))
    return ok


class PmemModel(wiring.Component):
    """AXI4 subordinate over ``depth`` 64-byte lines (module docstring for the behaviour).

    Parameters (keyword-only)
    -------------------------
    depth : int
        Lines of memory, a power of two >= 2 (addresses wrap modulo the size).
    addr_width, id_width : int
        As the manager's :class:`~hw.mem.axi.AXI4Signature` (512-bit data).
    max_reads : int
        Read bursts accepted and not yet answered (``arready`` drops beyond).
    max_writes : int
        Write bursts accepted and not yet acknowledged.
    pending_beats : int
        Written beats not yet acknowledged that the model can remember for power failure
        (a power of two; W waits beyond it).

    Members
    -------
    axi : ``In(AXI4Signature(...))``
    read_latency, write_latency : ``In(16)``
        At least 3 and 2 cycles.
    read_rate_num, read_rate_den, write_rate_num, write_rate_den : ``In(8)``
        Beats per cycle = num / den (1 <= num <= den).
    power_fail : ``In(1)``, fail_seed : ``In(32)``, fail_keep : ``In(8)``
    powered_down : ``Out(1)``
        The image is final after a power failure; reset the design next.
    backdoor_addr : ``In(range(depth))``, backdoor_wdata : ``In(512)``, backdoor_we : ``In(1)``
    backdoor_rdata : ``Out(512)``
    now : ``Out(32)``
        Free-running cycle counter (for measurements).
    read_beats, write_beats : ``Out(32)``
        Data beats transferred (free-running).
    pending : ``Out(range(pending_beats + 1))``
        Beats written and not yet persistent.
    lost_beats, kept_beats : ``Out(16)``
        The last power failure's verdicts.
    """

    def __init__(self, *, depth, addr_width=48, id_width=8, max_reads=64, max_writes=32,
                 pending_beats=64):
        if not isinstance(depth, int) or depth < 2 or depth & (depth - 1):
            raise ValueError(f"Depth must be a power of two, at least 2, not {depth!r}")
        for name, value in (("Read burst limit", max_reads), ("Write burst limit", max_writes)):
            if not isinstance(value, int) or not 2 <= value <= 1024:
                raise ValueError(f"{name} must be an integer in 2..1024, not {value!r}")
        if (not isinstance(pending_beats, int) or not 4 <= pending_beats <= 1024
                or pending_beats & (pending_beats - 1)):
            raise ValueError(f"Pending beats must be a power of two in 4..1024, not "
                             f"{pending_beats!r}")
        self._depth = depth
        self._addr_width = addr_width
        self._id_width = id_width
        self._max_reads = max_reads
        self._max_writes = max_writes
        self._pending = pending_beats
        super().__init__({
            "axi": In(AXI4Signature(addr_width=addr_width, data_width=_LINE_BITS,
                                    id_width=id_width)),
            "read_latency": In(16, init=DRAM.read_latency),
            "write_latency": In(16, init=DRAM.write_latency),
            "read_rate_num": In(8, init=1), "read_rate_den": In(8, init=1),
            "write_rate_num": In(8, init=1), "write_rate_den": In(8, init=1),
            "power_fail": In(1),
            "fail_seed": In(32),
            "fail_keep": In(8, init=128),
            "powered_down": Out(1),
            "backdoor_addr": In(range(depth)),
            "backdoor_wdata": In(_LINE_BITS),
            "backdoor_we": In(1),
            "backdoor_rdata": Out(_LINE_BITS),
            "now": Out(32),
            "read_beats": Out(32),
            "write_beats": Out(32),
            "pending": Out(range(pending_beats + 1)),
            "lost_beats": Out(16),
            "kept_beats": Out(16),
        })

    @property
    def depth(self):
        return self._depth

    def elaborate(self, platform):
        m = Module()
        axi = self.axi
        line_bits = max(1, ceil_log2(self._depth))
        pending_bits = ceil_log2(self._pending)

        # Reads and the old-contents read see AXI writes of the same cycle; the backdoor not.
        m.submodules.lines = lines = LineRam(depth=self._depth,
                                             transparent=(True, True, False))
        axi_write, undo_write, backdoor_write = (lines.port(p) for p in ("w0", "w1", "w2"))
        read, old, backdoor_read = (lines.port(p) for p in ("r0", "r1", "r2"))
        m.d.comb += [
            backdoor_write.addr.eq(self.backdoor_addr),
            backdoor_write.data.eq(self.backdoor_wdata),
            backdoor_write.en.eq(self.backdoor_we),
            backdoor_read.addr.eq(self.backdoor_addr),
            self.backdoor_rdata.eq(backdoor_read.data),
        ]

        now = Signal(32)
        m.d.sync += now.eq(now + 1)
        m.d.comb += self.now.eq(now)
        running = Signal()   # the AXI port works (no power failure in progress)

        # --- reads: bursts queue with their due time; beats leave at the read rate -----------
        burst = data.StructLayout({"id": unsigned(self._id_width), "line": unsigned(line_bits),
                                   "last_beat": unsigned(8), "due": unsigned(32)})
        m.submodules.reads = reads = fifo.SyncFIFOBuffered(width=burst.size,
                                                           depth=self._max_reads)
        m.d.comb += [
            axi.arready.eq(reads.w_rdy & running),
            reads.w_en.eq(axi.arvalid & running),
            reads.w_data.eq(Cat(axi.arid, axi.araddr[6:6 + line_bits], axi.arlen,
                                # the line is read one cycle before its beat is offered
                                (now + self.read_latency - 1)[:32])),
        ]
        head = data.View(burst, reads.r_data)
        beat = Signal(8)
        r_valid = Signal()
        r_id = Signal(self._id_width)
        r_last = Signal()
        due = (now - head.due)[31] == 0  # now >= due, modulo 2**32
        issue = Signal()
        read_ok = _token_bucket(m, "read", self.read_rate_num, self.read_rate_den, issue)
        m.d.comb += issue.eq(running & reads.r_rdy & due & read_ok & (~r_valid | axi.rready))
        m.d.comb += [
            read.addr.eq(head.line + beat),
            read.en.eq(issue),
            axi.rvalid.eq(r_valid & running),
            axi.rid.eq(r_id),
            axi.rdata.eq(read.data),
            axi.rresp.eq(0),
            axi.rlast.eq(r_last),
        ]
        read_beats = Signal(32)
        with m.If(axi.rvalid & axi.rready):
            m.d.sync += read_beats.eq(read_beats + 1)
        m.d.comb += self.read_beats.eq(read_beats)
        with m.If(issue):
            m.d.sync += [r_valid.eq(1), r_id.eq(head.id), r_last.eq(beat == head.last_beat)]
            with m.If(beat == head.last_beat):
                m.d.sync += beat.eq(0)
                m.d.comb += reads.r_en.eq(1)
            with m.Else():
                m.d.sync += beat.eq(beat + 1)
        with m.Elif(axi.rready):
            m.d.sync += r_valid.eq(0)

        # --- writes: data lands one cycle after its beat, its old contents go to the ring ----
        address = data.StructLayout({"id": unsigned(self._id_width),
                                     "line": unsigned(line_bits), "len": unsigned(8)})
        m.submodules.addresses = addresses = fifo.SyncFIFOBuffered(
            width=address.size, depth=self._max_writes)
        response = data.StructLayout({"id": unsigned(self._id_width), "due": unsigned(32),
                                      "beats": unsigned(9)})
        m.submodules.responses = responses = fifo.SyncFIFOBuffered(
            width=response.size, depth=self._max_writes)
        m.d.comb += [
            axi.awready.eq(addresses.w_rdy & running),
            addresses.w_en.eq(axi.awvalid & running),
            addresses.w_data.eq(Cat(axi.awid, axi.awaddr[6:6 + line_bits], axi.awlen)),
        ]
        target = data.View(address, addresses.r_data)
        write_beat = Signal(8)

        # The ring of unacknowledged beats: old contents in a memory, line numbers in registers
        # (the power-fail walk compares a line against every newer entry at once).
        m.submodules.ring = ring = memory.Memory(shape=unsigned(_LINE_BITS),
                                                 depth=self._pending, init=[])
        ring_push = ring.write_port()
        ring_read = ring.read_port()
        ring_lines = Signal(data.ArrayLayout(unsigned(line_bits), self._pending))
        ring_head = Signal(pending_bits + 1)   # oldest entry
        ring_tail = Signal(pending_bits + 1)   # next free entry
        occupied = (ring_tail - ring_head)[:pending_bits + 1]
        delayed = Signal()                     # a beat accepted last cycle, landing now
        delayed_line = Signal(line_bits)
        delayed_data = Signal(_LINE_BITS)
        delayed_strb = Signal(_LINE_BITS // 8)
        room = (occupied + delayed) < self._pending

        write_ok = Signal()
        accept = Signal()
        write_rate_ok = _token_bucket(m, "write", self.write_rate_num, self.write_rate_den,
                                      accept)
        m.d.comb += [
            write_ok.eq(running & addresses.r_rdy & responses.w_rdy & room & write_rate_ok),
            accept.eq(write_ok & axi.wvalid),
            axi.wready.eq(write_ok),
            old.addr.eq(target.line + write_beat),
            old.en.eq(accept),
        ]
        with m.If(accept):
            m.d.sync += [delayed.eq(1), delayed_line.eq(target.line + write_beat),
                         delayed_data.eq(axi.wdata), delayed_strb.eq(axi.wstrb),
                         write_beat.eq(Mux(axi.wlast, 0, write_beat + 1))]
        with m.Else():
            m.d.sync += delayed.eq(0)
        m.d.comb += [
            axi_write.addr.eq(delayed_line), axi_write.data.eq(delayed_data),
            axi_write.en.eq(Mux(delayed, delayed_strb, 0)),
            ring_push.addr.eq(ring_tail[:pending_bits]), ring_push.data.eq(old.data),
            ring_push.en.eq(delayed),
        ]
        with m.If(delayed):
            m.d.sync += ring_tail.eq(ring_tail + 1)
            for k in range(self._pending):
                with m.If(ring_tail[:pending_bits] == k):
                    m.d.sync += ring_lines[k].eq(delayed_line)
        write_beats = Signal(32)
        with m.If(accept):
            m.d.sync += write_beats.eq(write_beats + 1)
        m.d.comb += self.write_beats.eq(write_beats)
        m.d.comb += [
            responses.w_en.eq(accept & axi.wlast),
            responses.w_data.eq(Cat(target.id, (now + self.write_latency)[:32],
                                    (target.len + 1)[:9])),
            addresses.r_en.eq(accept & axi.wlast),
        ]
        answer = data.View(response, responses.r_data)
        b_due = (now - answer.due)[31] == 0
        m.d.comb += [
            axi.bvalid.eq(running & responses.r_rdy & b_due),
            axi.bid.eq(answer.id),
            axi.bresp.eq(0),
            responses.r_en.eq(axi.bvalid & axi.bready),
        ]
        with m.If(axi.bvalid & axi.bready):
            # Persistent from now on: forget the old contents of its beats.
            m.d.sync += ring_head.eq(ring_head + answer.beats)
        m.d.comb += self.pending.eq(occupied + delayed)

        # --- power failure -----------------------------------------------------------------
        rng = Signal(32)
        walk = Signal(pending_bits + 1)        # next entry to decide (newest first)
        kept = Signal(self._pending)           # decided so far and kept
        lost = Signal(16)
        kept_count = Signal(16)
        restore = Signal()                     # restore the entry read last cycle
        restore_line = Signal(line_bits)
        m.d.comb += [
            undo_write.addr.eq(restore_line), undo_write.data.eq(ring_read.data),
            undo_write.en.eq(restore),
            self.lost_beats.eq(lost), self.kept_beats.eq(kept_count),
        ]
        m.d.sync += restore.eq(0)
        xorshift = rng ^ (rng << 13)[:32]
        xorshift = xorshift ^ (xorshift >> 17)
        xorshift = xorshift ^ (xorshift << 5)[:32]
        with m.FSM(name="power"):
            with m.State("Running"):
                m.d.comb += running.eq(1)
                with m.If(self.power_fail):
                    # Never a zero state for xorshift.
                    m.d.sync += [rng.eq(Mux(self.fail_seed == 0, 0x9E3779B9, self.fail_seed)),
                                 kept.eq(0), lost.eq(0), kept_count.eq(0)]
                    m.next = "Settle"
            with m.State("Settle"):
                # The beat accepted in the last running cycle lands now.
                m.d.sync += walk.eq(ring_tail + Mux(delayed, 1, 0))
                m.next = "Walk"
            with m.State("Walk"):
                with m.If(walk == ring_head):
                    m.next = "Down"
                with m.Else():
                    index = (walk - 1)[:pending_bits]
                    line = ring_lines[index]
                    shadowed = Cat(kept[k] & (ring_lines[k] == line)
                                   for k in range(self._pending)).any()
                    keep = (xorshift[:8] < self.fail_keep) | (self.fail_keep == 255)
                    m.d.comb += ring_read.addr.eq(index)
                    m.d.sync += [rng.eq(xorshift), walk.eq(walk - 1), restore_line.eq(line)]
                    with m.If(keep):
                        m.d.sync += [kept.eq(kept | (1 << index)),
                                     kept_count.eq(kept_count + 1)]
                    with m.Else():
                        m.d.sync += [restore.eq(~shadowed), lost.eq(lost + 1)]
            with m.State("Down"):
                m.d.comb += self.powered_down.eq(~restore)
        return m
