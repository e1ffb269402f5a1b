"""An AXI4 memory for the front end's tests: cocotbext-axi's ``AxiRam`` channels and storage,
but every request completes after its own random latency, so responses come back out of order
across IDs, and address ranges can answer SLVERR/DECERR.

A write changes memory when its B response is sent and a read samples memory when its R beat
is sent (not when the request arrived), so a device that lets a read overtake an earlier write
to the same line, or a write overtake an earlier read, gets caught by the host's scoreboard.
Only what the front end issues is supported: single-beat INCR bursts of the full bus width;
anything else fails the test.
"""

import random

import cocotb
from cocotb.triggers import ClockCycles
from cocotbext.axi import AxiResp
from cocotbext.axi.axi_ram import AxiRamRead, AxiRamWrite
from cocotbext.axi.memory import Memory

__all__ = ["OutOfOrderAxiRam"]


class _Reads(AxiRamRead):
    def __init__(self, owner, *args, **kwargs):
        self._owner = owner
        super().__init__(*args, **kwargs)

    async def _process_read(self):
        while True:
            ar = await self.ar_channel.recv()
            self._owner._check_burst(int(ar.arlen), int(ar.arsize), int(ar.arburst),
                                     int(ar.araddr))
            cocotb.start_soon(self._answer(int(ar.arid), int(ar.araddr)))

    async def _answer(self, rid, address):
        await self._owner._delay(self._owner.read_latency)
        r = self.r_channel._transaction_obj()
        r.rid, r.rlast = rid, 1
        r.rresp = self._owner.response_for(address)
        data = self.read(address, self.byte_lanes) if r.rresp == AxiResp.OKAY else \
            bytes(self.byte_lanes)
        r.rdata = int.from_bytes(data, "little")
        await self.r_channel.send(r)


class _Writes(AxiRamWrite):
    def __init__(self, owner, *args, **kwargs):
        self._owner = owner
        super().__init__(*args, **kwargs)

    async def _process_write(self):
        while True:
            aw = await self.aw_channel.recv()
            w = await self.w_channel.recv()
            self._owner._check_burst(int(aw.awlen), int(aw.awsize), int(aw.awburst),
                                     int(aw.awaddr))
            assert int(w.wlast) == 1, "a single-beat burst must have WLAST"
            cocotb.start_soon(self._answer(int(aw.awid), int(aw.awaddr), int(w.wdata),
                                           int(w.wstrb)))

    async def _answer(self, bid, address, data, strobe):
        await self._owner._delay(self._owner.write_latency)
        b = self.b_channel._transaction_obj()
        b.bid = bid
        b.bresp = self._owner.response_for(address)
        if b.bresp == AxiResp.OKAY:
            data = data.to_bytes(self.byte_lanes, "little")
            if strobe == (1 << self.byte_lanes) - 1:
                self.write(address, data)
            else:
                for k in range(self.byte_lanes):
                    if strobe >> k & 1:
                        self.write(address + k, data[k:k + 1])
        self._owner.writes += 1
        await self.b_channel.send(b)


class OutOfOrderAxiRam(Memory):
    """``AxiRam`` look-alike: ``latency`` is a (min, max) range of cycles per request (the
    attributes ``read_latency`` and ``write_latency`` may be changed between requests),
    ``seed`` fixes the draws; ``error_ranges`` is a list of ``(start, end, AxiResp)``."""

    def __init__(self, bus, clock, reset=None, *, size=2**48, latency=(1, 16), seed=0,
                 error_ranges=()):
        super().__init__(size)
        self.clock = clock
        self.read_latency = self.write_latency = latency
        self.error_ranges = list(error_ranges)
        self.writes = 0
        self._draw = random.Random(seed)
        self.write_if = _Writes(self, bus.write, clock, reset, mem=self.mem)
        self.read_if = _Reads(self, bus.read, clock, reset, mem=self.mem)

    def set_pause_generators(self, make):
        """``make(k)`` returns the pause generator of channel k (AW, W, B, AR, R)."""
        channels = (self.write_if.aw_channel, self.write_if.w_channel, self.write_if.b_channel,
                    self.read_if.ar_channel, self.read_if.r_channel)
        for k, channel in enumerate(channels):
            channel.set_pause_generator(make(k))

    def response_for(self, address):
        for start, end, response in self.error_ranges:
            if start <= address < end:
                return response
        return AxiResp.OKAY

    async def _delay(self, latency):
        cycles = self._draw.randint(*latency)
        if cycles:
            await ClockCycles(self.clock, cycles)

    def _check_burst(self, length, size, burst, address):
        assert (length, size, burst) == (0, 6, 1), (
            f"expected one 64-byte INCR beat, got len={length} size={size} burst={burst}")
        assert address % 64 == 0, f"unaligned AXI address {address:#x}"
