"""Simulation speed of the PMEM model alone in Verilator (cycles/s), under full traffic.

    python -m tb.ckpt.pmem_speed [--cycles 200000]

The design is :class:`TrafficTop`: a PmemModel and a generator that keeps a read and a write
(single-beat, distinct IDs, addresses walking the memory) offered every cycle, so the model's
latency, rate and persistence machinery is busy all the time. Python only starts the clock and
waits, so the figure is the model's own speed (compare DESIGN.md section 8).
"""

import argparse
import json
import sys

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from sim.pmem import PmemModel
from sim.rtl import BUILD_ROOT, Design
from sim.runner import run

__all__ = ["TrafficTop", "main"]


class TrafficTop(wiring.Component):
    """PmemModel + a read/write generator. Members: the model's timing inputs, ``reads`` and
    ``writes`` (completed R and B beats)."""

    def __init__(self, *, depth=8192):
        self._depth = depth
        super().__init__({
            "read_latency": In(16), "write_latency": In(16),
            "read_rate_num": In(8), "read_rate_den": In(8),
            "write_rate_num": In(8), "write_rate_den": In(8),
            "reads": Out(32), "writes": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.memory = memory = PmemModel(depth=self._depth, addr_width=32, id_width=6)
        axi = memory.axi
        for name in ("read_latency", "write_latency", "read_rate_num", "read_rate_den",
                     "write_rate_num", "write_rate_den"):
            m.d.comb += getattr(memory, name).eq(getattr(self, name))
        read_line = Signal(32)
        write_line = Signal(32)
        m.d.comb += [
            axi.arvalid.eq(1), axi.araddr.eq(read_line << 6), axi.arid.eq(read_line[:5]),
            axi.rready.eq(1), axi.bready.eq(1),
            axi.awvalid.eq(1), axi.awaddr.eq(write_line << 6), axi.awid.eq(write_line[:5]),
            axi.wvalid.eq(1), axi.wdata.eq(write_line * 0x9E3779B1), axi.wstrb.eq(-1),
            axi.wlast.eq(1),
        ]
        with m.If(axi.arready):
            m.d.sync += read_line.eq(read_line + 1)
        with m.If(axi.awready):
            m.d.sync += write_line.eq(write_line + 3)
        reads = Signal(32)
        writes = Signal(32)
        with m.If(axi.rvalid):
            m.d.sync += reads.eq(reads + 1)
        with m.If(axi.bvalid):
            m.d.sync += writes.eq(writes + 1)
        m.d.comb += [self.reads.eq(reads), self.writes.eq(writes)]
        return m


DESIGN = Design("pmem_traffic", "tb.ckpt.pmem_speed:TrafficTop", {"depth": 8192})


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tb.ckpt.pmem_speed",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--cycles", type=int, default=200_000)
    args = parser.parse_args(argv)
    out = BUILD_ROOT / "bench" / "pmem_speed.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    run(DESIGN, "tb.ckpt.cocotb_pmem_speed", run_name="speed",
        extra_env={"SPEED_CYCLES": str(args.cycles), "SPEED_RESULT": str(out)})
    result = json.loads(out.read_text())
    for row in result:
        print(f"pmem model, {row['profile']} profile: {row['cycles_per_second']:.0f} cycles/s "
              f"({row['reads']} reads, {row['writes']} writes in {row['cycles']} cycles)")
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
