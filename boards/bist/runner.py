"""Hardware that runs :class:`~boards.bist.check.Check`\\ s: ROM-fed stimulus, ROM-held
expectations, and counters of compared results and errors."""

import itertools

from amaranth import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .check import Check, exact_match

__all__ = ["COMPARE_SLICE_BITS", "COUNT_WIDTH", "CheckRunner", "SelfTest"]


# Counters are 16 bits: four hex digits on the UART, and far more than a board test needs.
COUNT_WIDTH = 16

# Exact comparisons of wider results from a device that can hold them run this many bits a
# cycle (see CheckRunner.compare_beats).
COMPARE_SLICE_BITS = 128
# ... and a slice's comparison is registered in parts of this many bits before it is judged.
COMPARE_PART_BITS = 32


class CheckRunner(wiring.Component):
    """Runs the checks of one device under test, one after another, once ``start`` is seen
    high, then holds ``done``.

    The checks' stimulus and expected results live in two read-only memories, each check's
    words after the previous one's, initialised at build time (block RAM on an FPGA): one
    stimulus ROM, one expected-result ROM and one comparison per device, however many checks
    it runs. Reads are synchronous; the stimulus port is enabled only when its output
    register is empty or being consumed, so ``stimulus`` is a proper stream (payload stable
    while ``valid & ~ready``). Results are accepted at once, but while one is compared slice
    by slice (below).

    Results of more than :data:`COMPARE_SLICE_BITS` bits that are compared exactly
    (:func:`~.check.exact_match`), from a device whose ``o`` can wait (``o.ready`` is not
    constant), are compared a slice a cycle (:attr:`compare_beats`), with ``o.ready`` low
    meanwhile: the expected-result ROM is then a slice wide, and so is the comparison. On an
    ECP5 a 512-bit comparison next to its ROM's block RAMs was the one place the update
    engine's self-test did not route. Other results are compared whole, one per cycle.

    A check finishes ``timeout_cycles`` (its own) after its last expected result (watching for
    extra, unexpected results meanwhile), or after ``timeout_cycles`` without any progress, in
    which case every missing result counts as an error; the next check then starts with its
    own first stimulus word and expected result.

    Parameters
    ----------
    checks : Check or sequence of Check
        At least one; all of one device under test (the same ``dut`` object) and with the
        same ``match``.

    Members
    -------
    start : In(1)
        Begin (sampled every cycle until the first check has started).
    done : Out(1)
        The last check has finished; the counters are final.
    compared : Out(COUNT_WIDTH)
        Results received and compared.
    errors : Out(COUNT_WIDTH)
        Wrong, extra and missing results.
    stimulus : Out(stream.Signature(stimulus width))
        To the device's ``i``; valid only while a check runs.
    results : In(stream.Signature(result width))
        From the device's ``o``; counted only while a check runs (``ready`` is 1 but while a
        result is compared slice by slice).
    """

    def __init__(self, checks):
        checks = list(checks) if not isinstance(checks, Check) else [checks]
        if not checks:
            raise ValueError("Check runner needs at least one check")
        for check in checks:
            if not isinstance(check, Check):
                raise TypeError(f"Check must be a Check, not {check!r}")
        first = checks[0]
        for check in checks[1:]:
            if check.dut is not first.dut:
                raise ValueError(f"Checks {first.name!r} and {check.name!r} have different "
                                 f"devices under test; a runner runs the checks of one")
            if check.match is not first.match:
                raise ValueError(f"Checks {first.name!r} and {check.name!r} of one device "
                                 f"compare with different match functions")
        limit = sum(len(check.expected) + check.timeout_cycles for check in checks)
        if limit >= 1 << COUNT_WIDTH:
            names = ", ".join(repr(check.name) for check in checks)
            raise ValueError(f"Check{'s' if len(checks) > 1 else ''} {names} could count "
                             f"{limit} errors, more than a {COUNT_WIDTH}-bit counter holds")
        self.checks = tuple(checks)
        width = first.expected_width
        sliceable = (first.match is exact_match and width > COMPARE_SLICE_BITS
                     and width % COMPARE_SLICE_BITS == 0
                     and not isinstance(first.dut.o.ready, Const))
        self._compare_beats = width // COMPARE_SLICE_BITS if sliceable else 1
        super().__init__({
            "start": In(1),
            "done": Out(1),
            "compared": Out(COUNT_WIDTH),
            "errors": Out(COUNT_WIDTH),
            "stimulus": Out(stream.Signature(first.stimulus_width)),
            "results": In(stream.Signature(first.expected_width)),
        })

    @property
    def dut(self):
        return self.checks[0].dut

    @property
    def compare_beats(self):
        """Cycles a result's comparison takes: 1, or its width over
        :data:`COMPARE_SLICE_BITS` where it is compared a slice a cycle."""
        return self._compare_beats

    def elaborate(self, platform):
        m = Module()
        checks = self.checks
        dut_i, dut_o = self.stimulus, self.results
        stimulus_words = [word for check in checks for word in check.stimulus]
        expected_words = [word for check in checks for word in check.expected]
        n_stimulus, n_expected = len(stimulus_words), len(expected_words)

        m.submodules.stimulus_rom = stimulus_rom = Memory(
            shape=unsigned(checks[0].stimulus_width), depth=n_stimulus, init=stimulus_words)
        beats = self._compare_beats
        slice_width = checks[0].expected_width // beats
        # Slice b of result k at k * beats + b.
        expected_slices = [word >> (slice_width * b) & ((1 << slice_width) - 1)
                           for word in expected_words for b in range(beats)]
        m.submodules.expected_rom = expected_rom = Memory(
            shape=unsigned(slice_width), depth=n_expected * beats, init=expected_slices)
        stimulus_port = stimulus_rom.read_port()
        expected_port = expected_rom.read_port()

        # Where each check's words end in the ROMs, and its timeout.
        def ends(lengths):
            return list(itertools.accumulate(lengths))

        index = Signal(range(len(checks)))
        last_check = index == len(checks) - 1
        stimulus_end = Signal(range(n_stimulus + 1))
        expected_end = Signal(range(n_expected + 1))
        timeout = Signal(range(max(check.timeout_cycles for check in checks) + 1))
        with m.Switch(index):
            for k, (stimulus_stop, expected_stop) in enumerate(zip(
                    ends(len(check.stimulus) for check in checks),
                    ends(len(check.expected) for check in checks), strict=True)):
                with m.Case(k):
                    m.d.comb += [stimulus_end.eq(stimulus_stop), expected_end.eq(expected_stop),
                                 timeout.eq(checks[k].timeout_cycles)]

        started = Signal()
        m.d.sync += started.eq(started | self.start)
        active = Signal()
        m.d.comb += active.eq((started | self.start) & ~self.done)

        idle = Signal.like(timeout)
        # idle == timeout, kept as a register: `finish` is then a few flip-flops, not a
        # comparison, in front of the result ROM's address and the stimulus (a ULX3S build's
        # worst path, 14.5 ns). Every timeout is at least a cycle, so it is 0 when idle is.
        at_timeout = Signal()
        comparing = Signal()  # a result is being compared slice by slice
        settling = Signal()  # its last slice is still being compared
        finish = Signal()  # the running check is over
        m.d.comb += finish.eq(active & at_timeout & ~comparing & ~settling)

        # Stimulus: `issued` words have been read from the ROM into the port's data register.
        issued = Signal(range(n_stimulus + 1))
        in_valid = Signal()
        advance = ~in_valid | dut_i.ready
        m.d.comb += [
            stimulus_port.addr.eq(issued),
            stimulus_port.en.eq(advance),
            dut_i.valid.eq(in_valid),
            dut_i.payload.eq(stimulus_port.data),
        ]
        with m.If(finish):
            # A word the device did not take belongs to the check that is over.
            m.d.sync += [in_valid.eq(0), issued.eq(stimulus_end)]
        with m.Elif(advance):
            with m.If(active & (issued < stimulus_end)):
                m.d.sync += [in_valid.eq(1), issued.eq(issued + 1)]
            with m.Else():
                m.d.sync += in_valid.eq(0)

        # Results.
        m.d.comb += dut_o.ready.eq(~comparing)
        out_fire = Signal()
        m.d.comb += out_fire.eq(dut_o.valid & dut_o.ready & active)
        received = Signal(range(n_expected + 1))
        all_received = received == expected_end
        take = out_fire & ~finish
        next_received = Signal.like(received)
        with m.If(finish):
            m.d.comb += next_received.eq(expected_end)  # the next check's first result
        with m.Elif(take & ~all_received):
            m.d.comb += next_received.eq(received + 1)
        with m.Else():
            m.d.comb += next_received.eq(received)
        m.d.sync += received.eq(next_received)

        wrong = Signal()
        if beats == 1:
            # The expected port always holds expected[received]. One register stage between
            # the ROM/DUT outputs and the wide comparison, so block RAM clock-to-out and the
            # compare logic are not in one path. Errors thus count one cycle late, well before
            # `finish` (at least `timeout_cycles` after the last result).
            m.d.comb += expected_port.addr.eq(next_received)
            staged_take = Signal()
            staged_extra = Signal()
            staged_actual = Signal(checks[0].expected_width)
            staged_expected = Signal(checks[0].expected_width)
            m.d.sync += [
                staged_take.eq(take),
                staged_extra.eq(all_received),
                staged_actual.eq(dut_o.payload),
                staged_expected.eq(expected_port.data),
            ]
            m.d.comb += wrong.eq(staged_take & (
                staged_extra | ~checks[0].match(staged_actual, staged_expected)))
        else:
            # The result is held while its slices are compared with the ROM's, one a cycle;
            # each slice's address goes out the cycle before it is read. A slice and the
            # ROM's word are registered and compared the cycle after (`staged_*`), so neither
            # the block RAM's output nor the slice's multiplexer is in front of the 128-bit
            # comparison (a ULX3S build's path into the error count).
            beat = Signal(range(beats))
            held = Signal(checks[0].expected_width)
            held_index = Signal.like(received)
            held_extra = Signal()
            # The held result loads whenever no comparison runs, not only when a result is
            # taken: its 512 enables then come from `comparing` alone, not from behind the
            # device's `valid` and the check's timeout (a ULX3S build's paths into `held`).
            # What it loads with nothing taken is never compared.
            with m.If(~comparing):
                m.d.sync += [held.eq(dut_o.payload), held_index.eq(received),
                             held_extra.eq(all_received)]
            with m.If(take):
                m.d.comb += expected_port.addr.eq(received * beats)
                m.d.sync += [comparing.eq(1), beat.eq(0)]
            staged_valid = Signal()
            staged_last = Signal()
            staged_extra = Signal()
            staged_actual = Signal(slice_width)
            staged_expected = Signal(slice_width)
            m.d.sync += [
                staged_valid.eq(comparing),
                staged_last.eq(beat == beats - 1),
                staged_extra.eq(held_extra),
                staged_actual.eq(held.word_select(beat, slice_width)),
                staged_expected.eq(expected_port.data),
            ]
            with m.If(comparing):
                m.d.comb += expected_port.addr.eq(held_index * beats + beat + 1)
                with m.If(beat == beats - 1):
                    m.d.sync += comparing.eq(0)
                with m.Else():
                    m.d.sync += beat.eq(beat + 1)
            # The slice's comparison is registered by 32-bit parts, and judged the cycle
            # after: the 128-bit comparison then ends at flip-flops, not in front of the
            # error count's term (a ULX3S build's path, 15.0 ns).
            judged_valid = Signal()
            judged_last = Signal()
            judged_extra = Signal()
            parts = [Signal(name=f"part_differs_{k}")
                     for k in range(-(-slice_width // COMPARE_PART_BITS))]
            m.d.sync += [judged_valid.eq(staged_valid), judged_last.eq(staged_last),
                         judged_extra.eq(staged_extra)]
            for k, part in enumerate(parts):
                bits = slice(k * COMPARE_PART_BITS, (k + 1) * COMPARE_PART_BITS)
                m.d.sync += part.eq(staged_actual[bits] != staged_expected[bits])
            differs = Signal()  # an earlier slice of the judged result
            mismatch = Cat(*parts).any()
            with m.If(judged_valid):
                with m.If(judged_last):
                    m.d.sync += differs.eq(0)
                    m.d.comb += wrong.eq(judged_extra | differs | mismatch)
                with m.Else():
                    m.d.sync += differs.eq(differs | mismatch)
            # The check is not over while its last slice waits in the stages.
            m.d.comb += settling.eq(staged_valid | judged_valid)
        # The error count adds registered terms, so neither the comparison nor the timeout's
        # `finish` is in front of its adder. A wrong result counts a cycle after its
        # comparison, still no later than the `done` of its check (`finish` waits for the
        # staged comparison of the last slice, or for `timeout_cycles` >= 1 after a
        # single-beat result). `remaining` is a cycle old at `finish`, when `received` has
        # been still for those cycles.
        wrong_counted = Signal()
        remaining = Signal.like(received)
        m.d.sync += [wrong_counted.eq(wrong), remaining.eq(expected_end - received)]
        missing = Mux(finish, remaining, 0)
        m.d.sync += self.errors.eq(self.errors + wrong_counted + missing)
        with m.If(take & ~all_received):
            m.d.sync += self.compared.eq(self.compared + 1)

        in_fire = dut_i.valid & dut_i.ready
        with m.If(finish):
            m.d.sync += [idle.eq(0), at_timeout.eq(0)]
            with m.If(last_check):
                m.d.sync += self.done.eq(1)
            with m.Else():
                m.d.sync += index.eq(index + 1)
        with m.Elif(active):
            with m.If((in_fire | out_fire | comparing) & ~all_received):
                m.d.sync += [idle.eq(0), at_timeout.eq(0)]
            with m.Elif(~at_timeout):  # (held there while the last result is compared)
                m.d.sync += [idle.eq(idle + 1), at_timeout.eq(idle + 1 == timeout)]
        return m


class SelfTest(wiring.Component):
    """Runs a list of checks from reset, one device under test after another.

    Checks may share a device under test (the same ``dut`` object): it is instantiated once,
    with one :class:`CheckRunner` that runs its checks consecutively in the order given, so a
    later check sees the state an earlier one left. Devices run in the order of their first
    check.

    Members
    -------
    busy : Out(1)
        Checks are running.
    done : Out(1)
        All checks have finished.
    passed : Out(1)
        Done, no errors, and every expected result was compared.
    compared : Out(COUNT_WIDTH)
        Results compared, over all checks.
    errors : Out(COUNT_WIDTH)
        Wrong, extra and missing results, over all checks.
    """
    busy: Out(1)
    done: Out(1)
    passed: Out(1)
    compared: Out(COUNT_WIDTH)
    errors: Out(COUNT_WIDTH)

    def __init__(self, checks):
        checks = list(checks)
        if not checks:
            raise ValueError("Self-test needs at least one check")
        limit = sum(len(check.expected) + check.timeout_cycles for check in checks)
        if limit >= 1 << COUNT_WIDTH:
            raise ValueError(f"Checks could count {limit} errors, more than a "
                             f"{COUNT_WIDTH}-bit counter holds")
        by_device = {}
        for check in checks:
            by_device.setdefault(id(check.dut), []).append(check)
        self.runners = [CheckRunner(group) for group in by_device.values()]
        self.expected_total = sum(len(check.expected) for check in checks)
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        previous_done = Const(1)
        for index, runner in enumerate(self.runners):
            m.submodules[f"check_{index}"] = runner
            m.submodules[f"dut_{index}"] = dut = runner.dut
            m.d.comb += runner.start.eq(previous_done)
            m.d.comb += [dut.i.valid.eq(runner.stimulus.valid),
                         dut.i.payload.eq(runner.stimulus.payload),
                         runner.stimulus.ready.eq(dut.i.ready),
                         runner.results.valid.eq(dut.o.valid),
                         runner.results.payload.eq(dut.o.payload)]
            if not isinstance(dut.o.ready, Const):
                m.d.comb += dut.o.ready.eq(runner.results.ready)
            previous_done = runner.done
        last = self.runners[-1]
        # Registered totals: the report and LED logic then starts from flip-flops.
        compared = sum(runner.compared for runner in self.runners)
        errors = sum(runner.errors for runner in self.runners)
        m.d.sync += [
            self.done.eq(last.done),
            self.compared.eq(compared),
            self.errors.eq(errors),
            self.passed.eq(last.done & (errors == 0) & (compared == self.expected_total)),
        ]
        m.d.comb += self.busy.eq(~self.done)
        return m
