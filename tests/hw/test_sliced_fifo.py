"""hw/mem/sliced_fifo.py: a FIFO of lines whose controls are registers copied per slice. It must
keep every entry in order, with SyncFIFOBuffered's capacity, level and latency."""

import random
import re

import pytest
from amaranth.back import rtlil
from amaranth.hdl import Module, ResetInserter, Signal
from amaranth.sim import Simulator

from hw.emb.update_reads import ReadRouter
from hw.fanout import REPLICA_ATTRIBUTE
from hw.mem.line_writer import LineWriter
from hw.mem.sliced_fifo import SlicedFIFO


def run_random_traffic(dut, *, cycles, write_rate, read_rate, seed, reset_rate=0.0):
    """Random writes and reads, checked every cycle against a model of the queue: ``level``
    counts the entries written before this cycle, ``r_rdy`` the ones written at least
    ``latency`` cycles ago. With ``reset_rate`` the FIFO is also reset at random (through a
    ``ResetInserter``, as the engines clear theirs): it then drops that cycle's write and read
    and starts empty. Returns the number of entries read."""
    rng = random.Random(seed)
    queue = []  # (cycle written, data)
    read = []
    reset = Signal()
    top = Module()
    top.submodules.fifo = ResetInserter(reset)(dut)

    async def testbench(ctx):
        for cycle in range(cycles):
            w_en = rng.random() < write_rate
            r_en = rng.random() < read_rate
            w_data = rng.getrandbits(dut.width)
            ctx.set(dut.w_en, w_en)
            ctx.set(dut.w_data, w_data)
            ctx.set(dut.r_en, r_en)
            resetting = rng.random() < reset_rate
            ctx.set(reset, resetting)
            readable = [entry for entry in queue if entry[0] <= cycle - dut.latency]
            where = f"cycle {cycle}, seed {seed}"
            assert ctx.get(dut.level) == len(queue), where
            assert ctx.get(dut.w_rdy) == (len(queue) != dut.depth), where
            assert ctx.get(dut.r_rdy) == bool(readable), where
            if readable:
                assert ctx.get(dut.r_data) == readable[0][1], where
            if resetting:
                queue.clear()
            else:
                if r_en and readable:
                    read.append(queue.pop(0)[1])
                if w_en and ctx.get(dut.w_rdy):
                    queue.append((cycle, w_data))
            await ctx.tick()

    sim = Simulator(top)
    sim.add_clock(1e-6)
    sim.add_testbench(testbench)
    sim.run()
    return len(read)


@pytest.mark.parametrize("depth", [1, 2, 3, 5, 16])
@pytest.mark.parametrize("slices", [1, 4])
def test_fifo_keeps_order_level_and_latency_under_random_traffic(depth, slices):
    for seed, (write_rate, read_rate) in enumerate([(0.9, 0.3), (0.5, 0.5), (0.3, 0.95)]):
        dut = SlicedFIFO(width=19, depth=depth, slices=slices)
        assert run_random_traffic(dut, cycles=400, write_rate=write_rate,
                                  read_rate=read_rate, seed=seed) > 40


@pytest.mark.parametrize("depth", [1, 2, 4, 5])
@pytest.mark.parametrize("slices", [1, 4])
def test_fifo_starts_empty_after_a_reset_under_random_traffic(depth, slices):
    """A reset (the update engine's per-command `clear`) drops what the FIFO holds and that
    cycle's write and read, while entries are on their way to the memories: the addresses'
    registers, which take no reset, must not bring back an old entry or slot."""
    for seed, (write_rate, read_rate) in enumerate([(0.9, 0.3), (0.6, 0.6), (0.3, 0.95)]):
        dut = SlicedFIFO(width=19, depth=depth, slices=slices)
        assert run_random_traffic(dut, cycles=600, write_rate=write_rate, read_rate=read_rate,
                                  seed=seed, reset_rate=0.08) > 30


@pytest.mark.parametrize("depth", [3, 4, 8])
def test_fifo_sustains_a_line_per_cycle(depth):
    """With both sides always willing and ``depth > latency``, the FIFO passes an entry every
    cycle (after the first ``latency``), so it costs a stream no throughput."""
    dut = SlicedFIFO(width=512, depth=depth, slices=16)
    cycles = 200
    assert run_random_traffic(dut, cycles=cycles, write_rate=1.0, read_rate=1.0,
                              seed=7) == cycles - dut.latency


def test_each_slice_has_its_own_control_registers():
    dut = SlicedFIFO(width=19, depth=4, slices=4)
    assert dut.slice_widths == [5, 5, 5, 4]
    text = rtlil.convert(dut, ports=[dut.w_data, dut.w_en, dut.w_rdy, dut.r_data, dut.r_en,
                                     dut.r_rdy, dut.level])
    replicas = set(re.findall(rf"attribute \\{REPLICA_ATTRIBUTE} 1\n\s*wire width \d+ "
                              r"\\(\w+)_replica_(\d+)\n", text))
    # Write enable, write address and read address: one copy per slice.
    assert replicas == {(f"storage_{name}", str(k)) for name in ("write_enable",
                                                                 "write_address",
                                                                 "read_address")
                        for k in range(4)}
    single = SlicedFIFO(width=19, depth=4, slices=1)
    assert REPLICA_ATTRIBUTE not in rtlil.convert(single, ports=[single.w_data, single.r_data])


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"width": 0, "depth": 4}, "Width must be a positive integer, not 0"),
    ({"width": 8, "depth": True}, "Depth must be a positive integer, not True"),
    ({"width": 8, "depth": 4, "slices": 0}, "Slice count must be a positive integer, not 0"),
    ({"width": 8, "depth": 4, "slices": 9}, "Slice count 9 is more than the width 8"),
])
def test_bad_parameters_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        SlicedFIFO(**kwargs)


def test_the_fifos_users_check_their_slice_count():
    with pytest.raises(ValueError, match=r"^Slice count must be a positive integer, not 0$"):
        ReadRouter(line_address_width=16, sources=[("rows", 3)], line_slices=0)
    with pytest.raises(ValueError, match=r"^Slice count 600 is more than the width 512$"):
        LineWriter(depth=2, addr_width=32, slices=600)
