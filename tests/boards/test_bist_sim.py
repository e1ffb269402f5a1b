"""The self-test board design, simulated: verdict on the LEDs and the UART report line."""

import importlib.util
import random

import pytest
from amaranth import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator
from bist_harness import run_bist

from boards.bist.check import Check
from boards.bist.runner import COMPARE_SLICE_BITS, CheckRunner, SelfTest
from boards.bist.top import REPORT_FORMAT, BISTSystem

HAVE_FP = importlib.util.find_spec("hw.fp") is not None


class Incrementer(wiring.Component):
    """A toy device under test: ``o = i + 1`` through a one-entry buffer, accepting input only
    every other cycle, so the runner's stream handshake is exercised."""

    def __init__(self, *, width=8, silent=False, stall_on=None, stall_cycles=0):
        self.silent = silent
        self.stall_on = stall_on  # an input word after which it takes nothing for a while
        self.stall_cycles = stall_cycles
        super().__init__({"i": In(stream.Signature(width)), "o": Out(stream.Signature(width))})

    def elaborate(self, platform):
        m = Module()
        phase = Signal()
        m.d.sync += phase.eq(~phase)
        full = Signal()
        stall = Signal(range(self.stall_cycles + 1))
        m.d.comb += [self.i.ready.eq(phase & (~full | self.o.ready) & (stall == 0)),
                     self.o.valid.eq(full & ~self.silent)]
        with m.If(stall != 0):
            m.d.sync += stall.eq(stall - 1)
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += full.eq(0)
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [full.eq(1), self.o.payload.eq(self.i.payload + 1)]
            if self.stall_on is not None:
                with m.If(self.i.payload == self.stall_on):
                    m.d.sync += stall.eq(self.stall_cycles)
        return m


def incrementer_check(*, corrupt=None, silent=False, count=12, timeout_cycles=16):
    stimulus = [(7 * k + 3) % 256 for k in range(count)]
    expected = [(word + 1) % 256 for word in stimulus]
    if corrupt is not None:
        expected[corrupt] ^= 0x10
    return Check(name="incrementer", dut=Incrementer(silent=silent), stimulus=stimulus,
                 expected=expected, timeout_cycles=timeout_cycles)


def test_report_format():
    assert REPORT_FORMAT.format(verdict="PASS", compared=24, errors=0) == \
        "BIST PASS compared=0x0018 errors=0x0000\r\n"


def test_bist_passes_with_correct_expectations():
    line, leds = run_bist([incrementer_check(), incrementer_check(count=5)])
    assert line == REPORT_FORMAT.format(verdict="PASS", compared=17, errors=0)
    assert leds["pass"] == 1 and leds["fail"] == 0 and leds["busy"] == 0


def test_bist_fails_on_one_corrupted_expectation():
    line, leds = run_bist([incrementer_check(), incrementer_check(corrupt=3, count=5)])
    assert line == REPORT_FORMAT.format(verdict="FAIL", compared=17, errors=1)
    assert leds["pass"] == 0 and leds["fail"] == 1


@pytest.mark.parametrize("count", [1, 4])
def test_an_error_in_the_last_result_counts_with_a_short_timeout(count):
    # The comparison runs one register stage behind the results, and the runner finishes
    # `timeout_cycles` after the last one; the verdict must still include it. (2 cycles is
    # the shortest timeout that the incrementer's own pauses do not trip.)
    line, _ = run_bist([incrementer_check(count=count, timeout_cycles=2)])
    assert line == REPORT_FORMAT.format(verdict="PASS", compared=count, errors=0)
    line, _ = run_bist([incrementer_check(count=count, corrupt=count - 1, timeout_cycles=2)])
    assert line == REPORT_FORMAT.format(verdict="FAIL", compared=count, errors=1)


def verdict_at_done(checks, *, cycles_after=8, max_cycles=20_000):
    """Run a SelfTest; return (errors, passed) at the cycle `done` rises, and after it."""
    dut = SelfTest(checks)
    seen = []

    async def testbench(ctx):
        for _ in range(max_cycles):
            await ctx.tick()
            if ctx.get(dut.done):
                break
        for _ in range(cycles_after + 1):
            seen.append((ctx.get(dut.errors), ctx.get(dut.passed)))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(testbench)
    sim.run()
    return seen


@pytest.mark.parametrize("width", [8, 512])  # 512: compared a slice a cycle
@pytest.mark.parametrize(("silent", "corrupt"), [(False, None), (False, 3), (True, None)])
def test_the_verdict_is_final_when_done_rises(width, silent, corrupt):
    # The error count adds registered terms; the last of them (a wrong last result, the
    # results a silent device never sent) must be in it by the cycle `done` rises, which is
    # when the board's LEDs and report take the verdict.
    stimulus = [(7 * k + 3) % 256 for k in range(4)]
    expected = [word + 1 for word in stimulus]
    if corrupt is not None:
        expected[corrupt] ^= 0x10
    check = Check(name="last", dut=Incrementer(width=width, silent=silent), stimulus=stimulus,
                  expected=expected, timeout_cycles=2)
    seen = verdict_at_done([check])
    errors = 4 if silent else int(corrupt is not None)
    assert seen == [(errors, int(errors == 0))] * len(seen)


def shared_device_checks(*, second_expected):
    shared = Incrementer()
    return [Check(name="first", dut=shared, stimulus=[1, 2, 3], expected=[2, 3, 4],
                  timeout_cycles=16),
            incrementer_check(count=4),
            Check(name="second", dut=shared, stimulus=[9, 8], expected=second_expected,
                  timeout_cycles=16)]


def test_checks_can_share_a_device_under_test():
    line, _ = run_bist(shared_device_checks(second_expected=[10, 9]))
    assert line == REPORT_FORMAT.format(verdict="PASS", compared=9, errors=0)
    line, _ = run_bist(shared_device_checks(second_expected=[10, 10]))
    assert line == REPORT_FORMAT.format(verdict="FAIL", compared=9, errors=1)


@pytest.mark.parametrize("width", [8, 512])  # 512: compared a slice a cycle
@pytest.mark.parametrize(("late", "verdict"), [(0, "PASS"), (1, "FAIL")])
def test_a_check_waits_exactly_its_timeout(width, late, verdict):
    """The device stalls after its first word: the second result comes in time while the
    stall is shorter than the check's timeout (16 cycles of no activity after the first
    result, whose comparison a slice a cycle is activity too), and is missing a cycle later."""
    timeout = 16
    probe = Check(name="stall", dut=Incrementer(width=width), stimulus=[3], expected=[4],
                  timeout_cycles=timeout)
    beats = CheckRunner([probe]).compare_beats
    stall_cycles = timeout - 1 + (beats if beats > 1 else 0) + late
    dut = Incrementer(width=width, stall_on=3, stall_cycles=stall_cycles)
    line, _ = run_bist([Check(name="stall", dut=dut, stimulus=[3, 4], expected=[4, 5],
                              timeout_cycles=timeout)])
    compared = 2 if verdict == "PASS" else 1
    assert line == REPORT_FORMAT.format(verdict=verdict, compared=compared,
                                        errors=2 - compared)


@pytest.mark.parametrize("width", [8, 512])  # 512: compared a slice a cycle
@pytest.mark.parametrize(("stall_cycles", "stimulus", "expected"), [
    (0, [1, 2, 3], [2]),          # two extra results, counted while the first check times out
    (0, [1], [2, 7, 7]),          # two missing results, counted when it gives up on them
    # The device stalls after 0x40 for longer than the first check's timeout, so 5 and 6 are
    # never taken: the second check must send its own words, not those.
    (64, [0x40, 5, 6], [0x41, 6, 7]),
])
def test_a_check_that_goes_wrong_leaves_the_next_one_on_its_device_intact(
        width, stall_cycles, stimulus, expected):
    shared = Incrementer(width=width, stall_on=0x40 if stall_cycles else None,
                         stall_cycles=stall_cycles)
    checks = [Check(name="first", dut=shared, stimulus=stimulus, expected=expected,
                    timeout_cycles=16),
              Check(name="second", dut=shared, stimulus=[9, 8], expected=[10, 9],
                    timeout_cycles=16 + 2 * stall_cycles)]
    line, _ = run_bist(checks)
    assert line == REPORT_FORMAT.format(verdict="FAIL", compared=3, errors=2)


@pytest.mark.parametrize(("corrupt_bit", "corrupt_result", "timeout_cycles"), [
    (None, 3, 16), (0, 3, 16), (127, 3, 16), (128, 3, 16), (300, 3, 16), (511, 3, 16),
    # The last slice of the last result, with the shortest timeout the incrementer allows:
    # the check finishes the cycle after that slice's comparison; the verdict counts it.
    (511, 5, 2), (0, 5, 2)])
def test_wide_results_are_compared_a_slice_a_cycle(corrupt_bit, corrupt_result,
                                                   timeout_cycles):
    draw = random.Random(5)
    stimulus = [draw.getrandbits(512) for _ in range(6)]
    expected = [(word + 1) % (1 << 512) for word in stimulus]
    if corrupt_bit is not None:
        expected[corrupt_result] ^= 1 << corrupt_bit
    check = Check(name="wide", dut=Incrementer(width=512), stimulus=stimulus,
                  expected=expected, timeout_cycles=timeout_cycles)
    assert SelfTest([check]).runners[0].compare_beats == 512 // COMPARE_SLICE_BITS
    line, _ = run_bist([check])
    errors = 0 if corrupt_bit is None else 1
    assert line == REPORT_FORMAT.format(verdict="FAIL" if errors else "PASS", compared=6,
                                        errors=errors)


def test_only_exact_comparisons_of_a_device_that_can_wait_are_sliced():
    def loose(actual, expected):
        return actual[1:] == expected[1:]

    wide = Check(name="wide", dut=Incrementer(width=512), stimulus=[1], expected=[2])
    assert CheckRunner([wide]).compare_beats == 4
    assert CheckRunner([Check(name="loose", dut=Incrementer(width=512), stimulus=[1],
                              expected=[2], match=loose)]).compare_beats == 1
    assert CheckRunner([incrementer_check()]).compare_beats == 1
    if HAVE_FP:  # results that cannot wait (FP lanes: o.ready is constant)
        from hw.fp import FPLanes

        lanes = FPLanes(op="add", lanes=16)
        assert CheckRunner([Check(name="lanes", dut=lanes, stimulus=[1],
                                  expected=[2])]).compare_beats == 1


def test_a_device_has_one_runner_and_one_set_of_roms():
    shared = Incrementer()
    first = Check(name="first", dut=shared, stimulus=[1], expected=[2])
    other = incrementer_check(count=2)
    second = Check(name="second", dut=shared, stimulus=[5], expected=[6])
    self_test = SelfTest([first, other, second])
    assert [runner.checks for runner in self_test.runners] == [(first, second), (other,)]


def test_runner_takes_the_checks_of_one_device_with_one_match():
    first = incrementer_check()
    with pytest.raises(ValueError, match=r"^Check runner needs at least one check$"):
        CheckRunner([])
    with pytest.raises(ValueError, match=r"^Checks 'incrementer' and 'other' have different "
                                         r"devices under test; a runner runs the checks of "
                                         r"one$"):
        CheckRunner([first, Check(name="other", dut=Incrementer(), stimulus=[1],
                                  expected=[2])])
    with pytest.raises(ValueError, match=r"^Checks 'incrementer' and 'loose' of one device "
                                         r"compare with different match functions$"):
        CheckRunner([first, Check(name="loose", dut=first.dut, stimulus=[1], expected=[2],
                                  match=lambda actual, expected: actual[1:] == expected[1:])])


def test_bist_counts_missing_results_of_a_silent_device():
    line, leds = run_bist([incrementer_check(silent=True, count=6)])
    assert line == REPORT_FORMAT.format(verdict="FAIL", compared=0, errors=6)
    assert leds["fail"] == 1


def test_self_test_rejects_an_empty_check_list():
    with pytest.raises(ValueError, match=r"^Self-test needs at least one check$"):
        SelfTest([])


def test_check_validates_its_words():
    with pytest.raises(ValueError, match=r"^Stimulus 1 must be an unsigned integer of 8 bits, "
                                         r"not 256$"):
        Check(name="x", dut=Incrementer(), stimulus=[1, 256], expected=[2])
    with pytest.raises(ValueError, match=r"^Expected result list must not be empty$"):
        Check(name="x", dut=Incrementer(), stimulus=[1], expected=[])


def test_check_requires_stream_members():
    class NoStreams(wiring.Component):
        a: In(8)

        def elaborate(self, platform):
            return Module()

    with pytest.raises(TypeError, match=r"^Device under test must have a member "
                                        r"i: In\(stream.Signature\(...\)\)$"):
        Check(name="x", dut=NoStreams(), stimulus=[1], expected=[1])


@pytest.mark.skipif(not HAVE_FP, reason="hw.fp is not available")
@pytest.mark.parametrize("corrupt", [None, 5])
def test_bist_of_fp_lane_units(corrupt):
    from boards.bist.fp_checks import fp_lanes_check

    add = fp_lanes_check("add", lanes=2, vectors=6, seed=1, timeout_cycles=16)
    mul = fp_lanes_check("mul", lanes=2, vectors=6, seed=2, timeout_cycles=16)
    if corrupt is not None:
        expected = list(mul.expected)
        expected[corrupt] ^= 1  # one ulp off in lane 0 of one result
        mul = Check(name=mul.name, dut=type(mul.dut)(op="mul", lanes=2),
                    stimulus=mul.stimulus, expected=expected, match=mul.match,
                    timeout_cycles=16)
    line, leds = run_bist([add, mul])
    verdict, errors = ("PASS", 0) if corrupt is None else ("FAIL", 1)
    assert line == REPORT_FORMAT.format(verdict=verdict, compared=12, errors=errors)
    assert leds["pass"] == (corrupt is None)


def test_board_design_parameters_are_validated():
    from boards.bist.top import BISTBoardTop

    with pytest.raises(ValueError, match=r"^Report interval must be a positive integer of "
                                         r"cycles, not 0$"):
        BISTSystem([incrementer_check()], uart_divisor=4, report_interval_cycles=0,
                   heartbeat_cycles=1)
    with pytest.raises(TypeError, match=r"^make_checks must be callable, not \[\]$"):
        BISTBoardTop(make_checks=[])
    with pytest.raises(ValueError, match=r"^Baud rate must be a positive integer, not 0$"):
        BISTBoardTop(make_checks=list, baud_rate=0)


def test_runner_refuses_checks_that_could_overflow_its_counters():
    shared = Incrementer()
    long_wait = Check(name="long", dut=shared, stimulus=[1], expected=[2],
                      timeout_cycles=40_000)
    assert CheckRunner(long_wait).checks == (long_wait,)
    with pytest.raises(ValueError, match=r"^Checks 'long', 'again' could count 80002 errors, "
                                         r"more than a 16-bit counter holds$"):
        CheckRunner([long_wait, Check(name="again", dut=shared, stimulus=[1], expected=[2],
                                      timeout_cycles=40_000)])
