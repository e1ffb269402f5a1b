"""Runs the whole update engine in Amaranth's simulator against a small AXI memory model.

Slow (the engine has 32 binary32 units), so the tests using it keep commands tiny; the
Verilator testbench (``tb/emb``) does the heavy randomised work.
"""

import random
from collections import Counter
from dataclasses import dataclass

import numpy as np

from hw.emb.layouts import counters_layout, status_layout
from tb.pysim import simulate

__all__ = ["EngineRun", "run_engine"]

_OKAY, _SLVERR = 0b00, 0b10  # AXI response codes


class AxiMemoryModel:
    """In-order AXI memory with random ready and response delays (single-beat bursts).

    A write lands when both its AW and W beats arrived and is acknowledged later on B. Each
    read is answered with its own ID (the lookup engine's reads carry several). ``writes``
    and ``line_reads`` count the writes and reads of each line, and ``read_log`` holds
    ``(cycle, address)`` of each read; reads of the lines in ``poisoned_reads`` answer
    SLVERR."""

    def __init__(self, axi, seed: int, busy: float):
        self.axi = axi
        self.image = bytearray()
        self.draw = random.Random(seed)
        self.busy = busy
        self.reads = []       # (address, ID) accepted, awaiting R
        self.addresses = []   # AW accepted
        self.data = []        # W accepted
        self.completions = 0  # B owed
        self.writes = Counter()  # line address -> times written
        self.line_reads = Counter()  # line address -> times read
        self.poisoned_reads = set()
        self.cycle = 0
        self.read_log = []

    def _go(self):
        return self.draw.random() >= self.busy

    async def serve(self, ctx):
        axi = self.axi
        while True:
            ctx.set(axi.arready, int(self._go()))
            ctx.set(axi.awready, int(self._go()))
            ctx.set(axi.wready, int(self._go()))
            read_out = bool(self.reads) and self._go()
            if read_out:
                address, ident = self.reads[0]
                ctx.set(axi.rdata, int.from_bytes(self.image[address:address + 64], "little"))
                ctx.set(axi.rid, ident)
                ctx.set(axi.rlast, 1)
                ctx.set(axi.rresp, _SLVERR if address in self.poisoned_reads else _OKAY)
            ctx.set(axi.rvalid, int(read_out))
            write_out = self.completions > 0 and self._go()
            ctx.set(axi.bvalid, int(write_out))
            (_, _, ar_valid, ar_ready, ar_addr, ar_id, aw_valid, aw_ready, aw_addr, w_valid,
             w_ready, w_data, r_ready, b_ready) = await ctx.tick().sample(
                axi.arvalid, axi.arready, axi.araddr, axi.arid, axi.awvalid, axi.awready,
                axi.awaddr, axi.wvalid, axi.wready, axi.wdata, axi.rready, axi.bready)
            self.cycle += 1
            if ar_valid and ar_ready:
                self.read_log.append((self.cycle, ar_addr))
                self.reads.append((ar_addr, ar_id))
                self.line_reads[ar_addr] += 1
            if read_out and r_ready:
                self.reads.pop(0)
            if aw_valid and aw_ready:
                self.addresses.append(aw_addr)
            if w_valid and w_ready:
                self.data.append(w_data)
            while self.addresses and self.data:
                address, value = self.addresses.pop(0), self.data.pop(0)
                self.image[address:address + 64] = value.to_bytes(64, "little")
                self.writes[address] += 1
                self.completions += 1
            if write_out and b_ready:
                self.completions -= 1


@dataclass
class EngineRun:
    status: object
    image: bytearray
    counters: object
    cycles: int
    reads: list  # (cycles after the command was accepted, line address) of each read


def run_engine(engine, scenarios, *, addr_width, max_tables, num_regions, seed=0, busy=0.3,
               deadline=200_000, poisoned_reads=None):
    """Run each scenario in turn; return one :class:`EngineRun` per scenario.

    ``poisoned_reads``, if given, holds a set of line addresses per scenario whose reads
    answer SLVERR while that scenario runs."""
    memory = AxiMemoryModel(engine.axi, seed, busy)
    results = []
    if poisoned_reads is None:
        poisoned_reads = [set()] * len(scenarios)
    if len(poisoned_reads) != len(scenarios):
        raise ValueError(f"{len(poisoned_reads)} poisoned-read sets for {len(scenarios)} "
                         f"scenarios")

    async def testbench(ctx):
        ctx.set(engine.done.ready, 1)
        for scenario, poisoned in zip(scenarios, poisoned_reads, strict=True):
            memory.image = bytearray(scenario.image)
            memory.poisoned_reads = set(poisoned)
            ctx.set(engine.tables.as_value(), scenario.descriptor_bits(addr_width, max_tables))
            ctx.set(engine.regions.as_value(), scenario.region_bits(addr_width, num_regions))
            ctx.set(engine.lr, int(np.float32(scenario.lr).view(np.uint32)))
            ctx.set(engine.cmd.payload.as_value(), scenario.command_bits(addr_width))
            ctx.set(engine.cmd.valid, 1)
            await ctx.tick().until(engine.cmd.ready)
            ctx.set(engine.cmd.valid, 0)
            accepted = memory.cycle
            memory.read_log.clear()
            cycles = 0
            while not ctx.get(engine.done.valid):
                await ctx.tick()
                cycles += 1
            status = status_layout().from_bits(ctx.get(engine.done.payload.as_value()))
            await ctx.tick()
            counters = counters_layout().from_bits(ctx.get(engine.counters.as_value()))
            reads = [(cycle - accepted, address) for cycle, address in memory.read_log]
            results.append(EngineRun(status, memory.image, counters, cycles, reads))

    simulate(engine, testbench, processes=[memory.serve], deadline=deadline, check=False)
    assert len(results) == len(scenarios), (
        f"the engine finished {len(results)} of {len(scenarios)} commands")
    return results
