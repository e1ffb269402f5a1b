"""Per-consumer register copies (hw/fanout.py): the same value as one register in simulation,
and separate flip-flops after Yosys, which would otherwise merge them."""

import json
import subprocess

import pytest
from amaranth.back import rtlil
from amaranth.hdl import Module, ResetInserter, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from boards.toolchain import open_toolchain_available, open_toolchain_env
from hw.fanout import (
    KEEP_REPLICAS_SCRIPT,
    REPLICA_ATTRIBUTE,
    lane_copies,
    replicated_register,
    staged_copies,
    word_of_line,
)

COPIES = 4


class _Gates(wiring.Component):
    """Four 4-bit groups of ``a``, each gated by its own copy of the registered ``enable``."""

    enable: In(1)
    a: In(4 * COPIES)
    y: Out(4 * COPIES)

    def elaborate(self, platform):
        m = Module()
        copies = replicated_register(m, self.enable, copies=COPIES, name="enable")
        for k, copy in enumerate(copies):
            group = slice(4 * k, 4 * (k + 1))
            m.d.comb += self.y[group].eq(self.a[group] & copy.replicate(4))
        return m


def test_copies_are_named_marked_and_load_together():
    m = Module()
    value = Signal(3)
    copies = replicated_register(m, value, copies=3, name="factor")
    assert [c.name for c in copies] == ["factor_replica_0", "factor_replica_1",
                                        "factor_replica_2"]
    assert all(c.attrs == {REPLICA_ATTRIBUTE: 1} and c.shape() == value.shape()
               for c in copies)

    dut = _Gates()

    async def testbench(ctx):
        ctx.set(dut.a, (1 << 4 * COPIES) - 1)
        ctx.set(dut.enable, 1)
        assert ctx.get(dut.y) == 0       # a register: the copies follow a cycle later
        await ctx.tick()
        assert ctx.get(dut.y) == (1 << 4 * COPIES) - 1
        ctx.set(dut.enable, 0)
        await ctx.tick()
        assert ctx.get(dut.y) == 0

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(testbench)
    sim.run()


@pytest.mark.parametrize("reset_less", [False, True], ids=["reset", "reset-less"])
@pytest.mark.parametrize("through", ["replicated_register", "lane_copies"])
def test_reset_less_copies_ignore_a_reset(reset_less, through):
    """Under a ``ResetInserter`` the copies reset with the value by default; ``reset_less``
    ones load the value as it was before the reset, and follow it from the cycle after."""
    m = Module()
    value = Signal(4, init=0)
    if through == "lane_copies":
        copies = lane_copies(m, value, None, copies=2, name="factor", replicate=True,
                             reset_less=reset_less)
    else:
        copies = replicated_register(m, value, copies=2, name="factor", reset_less=reset_less)
    m.d.sync += value.eq(value + 3)
    reset = Signal()
    dut = ResetInserter(reset)(m)

    async def testbench(ctx):
        seen = []
        for pulse in (0, 0, 1, 0, 0):
            ctx.set(reset, pulse)
            await ctx.tick()
            seen.append((ctx.get(value), [ctx.get(c) for c in copies]))
        before = 6 if reset_less else 0   # what the copies load with the reset
        assert seen == [(3, [0, 0]), (6, [3, 3]), (0, [before] * 2), (3, [0, 0]),
                        (6, [3, 3])]

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(testbench)
    sim.run()


@pytest.mark.parametrize("reset_less", [False, True], ids=["reset", "reset-less"])
def test_word_of_line_select_copies_ignore_a_reset_when_reset_less(reset_less):
    """Under a ``ResetInserter`` the select's copies clear with a reset by default, and with
    ``reset_less`` keep choosing the word the select was to move to."""
    m = Module()
    line, select, next_select = Signal(512), Signal(4), Signal(4)
    m.d.sync += select.eq(next_select)
    word = word_of_line(m, line, next_select, select, name="w", replicate=True,
                        reset_less=reset_less)
    reset = Signal()
    dut = ResetInserter(reset)(m)

    async def testbench(ctx):
        ctx.set(line, sum((k * 0x1111_1111) << (32 * k) for k in range(16)))
        ctx.set(next_select, 5)
        await ctx.tick()
        assert ctx.get(word) == 5 * 0x1111_1111
        ctx.set(next_select, 9)
        ctx.set(reset, 1)
        await ctx.tick()
        assert ctx.get(select) == 0
        assert ctx.get(word) == (9 * 0x1111_1111 if reset_less else 0)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(testbench)
    sim.run()


@pytest.mark.parametrize("replicate", [False, True])
def test_word_of_line_chooses_the_selected_word(replicate):
    """Each word of a line, chosen by a select that moves every cycle (the copies follow the
    select's next value, so they equal it in every cycle)."""
    m = Module()
    line, select, next_select = Signal(512), Signal(4), Signal(4)
    m.d.sync += select.eq(next_select)
    word = word_of_line(m, line, next_select, select, name="w", replicate=replicate)
    words = [(0x1234_5678 * (k + 1) ^ (k << 28)) & 0xFFFF_FFFF for k in range(16)]
    order = [3, 15, 0, 7, 7, 12, 1, 9]

    async def testbench(ctx):
        ctx.set(line, sum(w << (32 * k) for k, w in enumerate(words)))
        for chosen in order:
            ctx.set(next_select, chosen)
            await ctx.tick()
            assert ctx.get(select) == chosen
            assert ctx.get(word) == words[chosen], chosen

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(testbench)
    sim.run()


def test_lane_copies_are_the_register_itself_without_replicate():
    m = Module()
    current, next_value = Signal(2), Signal(2)
    assert lane_copies(m, next_value, current, copies=3, name="x", replicate=False) \
        == [current] * 3
    replicas = lane_copies(m, next_value, current, copies=3, name="x", replicate=True)
    assert [r.name for r in replicas] == ["x_replica_0", "x_replica_1", "x_replica_2"]


def test_staged_copies_follow_the_value_two_cycles_late_through_their_groups():
    """Each copy holds the value of two cycles before, from its own group's register (a
    value held a cycle is then what a replicated register holds)."""
    m = Module()
    value = Signal(4)
    copies = staged_copies(m, value, copies=6, groups=3, name="factor")
    assert [c.name for c in copies] == [f"factor_replica_{k}" for k in range(6)]
    assert all(c.attrs == {REPLICA_ATTRIBUTE: 1} for c in copies)
    sequence = [5, 9, 9, 0, 15, 3]

    async def testbench(ctx):
        seen = []
        for v in [*sequence, 0]:
            ctx.set(value, v)
            await ctx.tick()   # the groups load `v`; the copies, the value before it
            seen.append([ctx.get(c) for c in copies])
        assert seen == [[0] * 6] + [[v] * 6 for v in sequence]

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(testbench)
    sim.run()
    # Consumers 0-1 share group 0, 2-3 group 1, 4-5 group 2.
    groups = {c.name: str(stmt.rhs) for stmt in m._statements["sync"]
              for c in copies if stmt.lhs is c}
    assert groups == {f"factor_replica_{k}": f"(sig factor_group_replica_{k // 2})"
                      for k in range(6)}


@pytest.mark.parametrize("reset_less", [False, True], ids=["reset", "reset-less"])
def test_staged_copies_ignore_a_reset_when_reset_less(reset_less):
    """Under a ``ResetInserter`` both stages clear with a reset by default; with
    ``reset_less`` the copies keep holding the value of two cycles before through it."""
    m = Module()
    value, reset = Signal(4), Signal()
    copies = staged_copies(m, value, copies=4, groups=2, name="factor", reset_less=reset_less)
    dut = ResetInserter(reset)(m)

    async def testbench(ctx):
        seen = []
        for v, pulse in [(7, 0), (7, 0), (7, 1), (7, 0), (7, 0)]:
            ctx.set(value, v)
            ctx.set(reset, pulse)
            await ctx.tick()
            seen.append(ctx.get(copies[3]))
        assert seen == ([0, 7, 7, 7, 7] if reset_less else [0, 7, 0, 0, 7])

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(testbench)
    sim.run()


def test_staged_copies_need_groups_that_split_the_copies():
    with pytest.raises(ValueError, match=r"^Copies \(16\) must split evenly into groups "
                                         r"\(3\)$"):
        staged_copies(Module(), Signal(), copies=16, groups=3, name="x")
    with pytest.raises(ValueError, match=r"^Replica count must be a positive integer, not 0$"):
        staged_copies(Module(), Signal(), copies=16, groups=0, name="x")


@pytest.mark.parametrize("copies", [0, -1, 2.0, None, True])
@pytest.mark.parametrize("replicate", [False, True])
def test_bad_replica_count(copies, replicate):
    message = rf"^Replica count must be a positive integer, not {copies!r}$"
    with pytest.raises(ValueError, match=message):
        replicated_register(Module(), Signal(), copies=copies, name="x")
    with pytest.raises(ValueError, match=message):
        lane_copies(Module(), Signal(), Signal(), copies=copies, name="x", replicate=replicate)


@pytest.mark.skipif(not open_toolchain_available(), reason="YoWASP toolchain not installed")
@pytest.mark.parametrize(("keep", "flip_flops"), [(False, 1), (True, COPIES)])
def test_yosys_keeps_the_copies_apart(tmp_path, keep, flip_flops):
    (tmp_path / "top.il").write_text(rtlil.convert(_Gates(), name="top"))
    (tmp_path / "top.ys").write_text("\n".join([
        "read_rtlil top.il", *([KEEP_REPLICAS_SCRIPT] if keep else []),
        "synth_ecp5 -top top", "tee -q -o stat.json stat -json", ""]))
    env = open_toolchain_env()
    subprocess.run([env["YOSYS"], "-q", "top.ys"], cwd=tmp_path, env=env, check=True)
    cells = json.loads((tmp_path / "stat.json").read_text())["modules"]["\\top"][
        "num_cells_by_type"]
    assert cells["TRELLIS_FF"] == flip_flops
