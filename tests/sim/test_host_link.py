"""The host-gather baseline's CXL.mem link (sim/host_link.py) against the PMEM model, in
Amaranth's simulator: rows gathered by descriptor, copied to a contiguous region and written
back, and the PMEM profile's rates deciding the time; directly on one model, and through the
device's arbiter on four interleaved channels (the benchmark's memory)."""

import pytest
from amaranth.hdl import Module
from amaranth.lib import wiring

from sim.host_link import HostLink
from sim.pmem import PMEM
from sim.pmem_channels import PmemChannels
from tb.pysim import simulate

MEMORY_LINES = 1024


def _system(channels):
    """The link on ``channels`` PMEM models; returns (module, link, memory)."""
    m = Module()
    m.submodules.link = link = HostLink(addr_width=32, id_width=6, desc_depth=64,
                                        buffer_lines=256)
    m.submodules.memory = memory = PmemChannels(memory_lines=MEMORY_LINES, channels=channels,
                                                addr_width=32, id_width=6)
    wiring.connect(m, link.axi, memory.axi)
    return m, link, memory


@pytest.mark.parametrize("channels", [1, 4])
def test_gather_copy_and_write_back(channels):
    m, link, mem = _system(channels)
    seen = {}

    async def bench(ctx):
        for port, value in PMEM.inputs().items():
            ctx.set(getattr(mem, port), value)
        for line in range(64):
            ctx.set(mem.backdoor_addr, line)
            ctx.set(mem.backdoor_wdata, line * 1000 + 7)
            ctx.set(mem.backdoor_we, 1)
            await ctx.tick()
            ctx.set(mem.backdoor_we, 0)
        rows = [5, 1, 9, 3]  # rows of two lines (128 bytes)
        for index, row in enumerate(rows):
            ctx.set(link.desc_addr, index)
            ctx.set(link.desc_data, row * 128)
            ctx.set(link.desc_we, 1)
            await ctx.tick()
        ctx.set(link.desc_we, 0)

        async def command(op, count, row_lines, base=0):
            ctx.set(link.op, op)
            ctx.set(link.count, count)
            ctx.set(link.row_lines, row_lines)
            ctx.set(link.base, base)
            ctx.set(link.start, 1)
            await ctx.tick()
            ctx.set(link.start, 0)
            started = ctx.get(mem.now)
            await ctx.tick()
            while ctx.get(link.busy):
                await ctx.tick()
            return ctx.get(mem.now) - started

        seen["gather"] = await command(0, 4, 2)
        seen["copy"] = await command(3, 4, 2, base=512 * 64)
        seen["back"] = await command(1, 4, 2)
        seen["lines"] = (ctx.get(link.lines_read), ctx.get(link.lines_written))
        copied = []
        for line in range(512, 520):
            ctx.set(mem.backdoor_addr, line)
            await ctx.tick()
            copied.append(ctx.get(mem.backdoor_rdata))
        seen["copied"] = copied
        seen["read128"] = await command(2, 16, 8, base=0)
        seen["write128"] = await command(3, 16, 8, base=600 * 64)

    simulate(m, bench, deadline=20_000, period=1e-8)
    assert seen["copied"] == [10007, 11007, 2007, 3007, 18007, 19007, 6007, 7007]
    assert seen["lines"] == (8, 16)
    # 128 lines at the PMEM profile's 3/5 read and 1/10 write lines per cycle per channel,
    # plus latency (the token buckets start with two beats of credit); the link itself moves
    # one line per cycle each way.
    read_cycles = 128 / min(1, channels * 3 / 5)
    write_cycles = 128 * 10 / channels
    assert read_cycles + PMEM.read_latency - 4 <= seen["read128"] <= read_cycles + 80
    assert write_cycles + PMEM.write_latency - 20 <= seen["write128"] <= write_cycles + 100
    assert seen["gather"] < seen["copy"]   # the write latency and rate are the slower
