"""Hardware that runs :class:`~boards.bist.check.Check`\\ s: ROM-fed stimulus, ROM-held
expectations, and counters of compared results and errors."""

from amaranth import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .check import Check

__all__ = ["COUNT_WIDTH", "CheckRunner", "SelfTest"]


# Counters are 16 bits: four hex digits on the UART, and far more than a board test needs.
COUNT_WIDTH = 16


class CheckRunner(wiring.Component):
    """Runs one check once ``start`` is seen high, then holds ``done``.

    The stimulus and the expected results live in two read-only memories initialised at
    build time (block RAM on an FPGA). Reads are synchronous; the stimulus port is enabled only
    when its output register is empty or being consumed, so ``stimulus`` is a proper stream
    (payload stable while ``valid & ~ready``). Results are always accepted.

    The runner does not hold the device under test: :class:`SelfTest` connects ``stimulus``
    and ``results`` to ``check.dut``, so several checks can run one after another on one
    device (and see the state the previous ones left).

    The runner finishes ``timeout_cycles`` after the last expected result (watching for extra,
    unexpected results meanwhile), or after ``timeout_cycles`` without any progress, in which
    case every missing result counts as an error.

    Members
    -------
    start : In(1)
        Begin (sampled every cycle until the check has started).
    done : Out(1)
        The check has finished; the counters are final.
    compared : Out(COUNT_WIDTH)
        Results received and compared.
    errors : Out(COUNT_WIDTH)
        Wrong, extra and missing results.
    stimulus : Out(stream.Signature(check.stimulus_width))
        To ``check.dut.i``; valid only while the check runs.
    results : In(stream.Signature(check.expected_width))
        From ``check.dut.o``; counted only while the check runs (``ready`` is always 1).
    """

    def __init__(self, check):
        if not isinstance(check, Check):
            raise TypeError(f"Check must be a Check, not {check!r}")
        limit = len(check.expected) + check.timeout_cycles
        if limit >= 1 << COUNT_WIDTH:
            raise ValueError(f"Check {check.name!r} could count {limit} errors, more than a "
                             f"{COUNT_WIDTH}-bit counter holds")
        self.check = check
        super().__init__({
            "start": In(1),
            "done": Out(1),
            "compared": Out(COUNT_WIDTH),
            "errors": Out(COUNT_WIDTH),
            "stimulus": Out(stream.Signature(check.stimulus_width)),
            "results": In(stream.Signature(check.expected_width)),
        })

    def elaborate(self, platform):
        m = Module()
        check = self.check
        dut_i, dut_o = self.stimulus, self.results
        n_stimulus, n_expected = len(check.stimulus), len(check.expected)

        m.submodules.stimulus_rom = stimulus_rom = Memory(
            shape=unsigned(check.stimulus_width), depth=n_stimulus, init=check.stimulus)
        m.submodules.expected_rom = expected_rom = Memory(
            shape=unsigned(check.expected_width), depth=n_expected, init=check.expected)
        stimulus_port = stimulus_rom.read_port()
        expected_port = expected_rom.read_port()

        started = Signal()
        m.d.sync += started.eq(started | self.start)
        active = Signal()
        m.d.comb += active.eq((started | self.start) & ~self.done)

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
        with m.If(advance):
            with m.If(active & (issued < n_stimulus)):
                m.d.sync += [in_valid.eq(1), issued.eq(issued + 1)]
            with m.Else():
                m.d.sync += in_valid.eq(0)

        # Results: the expected port always holds expected[received].
        m.d.comb += dut_o.ready.eq(1)
        out_fire = Signal()
        m.d.comb += out_fire.eq(dut_o.valid & active)
        received = Signal(range(n_expected + 1))
        all_received = received == n_expected
        idle = Signal(range(check.timeout_cycles + 1))
        finish = active & (idle == check.timeout_cycles)
        take = out_fire & ~finish
        m.d.comb += expected_port.addr.eq(Mux(take & ~all_received, received + 1, received))

        # One register stage between the ROM/DUT outputs and the wide comparison, so block RAM
        # clock-to-out and the compare logic are not in one path. Errors thus count one cycle
        # late, well before `finish` (at least `timeout_cycles` after the last result).
        staged_take = Signal()
        staged_extra = Signal()
        staged_actual = Signal(check.expected_width)
        staged_expected = Signal(check.expected_width)
        m.d.sync += [
            staged_take.eq(take),
            staged_extra.eq(all_received),
            staged_actual.eq(dut_o.payload),
            staged_expected.eq(expected_port.data),
        ]
        wrong = Signal()
        m.d.comb += wrong.eq(staged_take & (staged_extra |
                                            ~check.match(staged_actual, staged_expected)))
        missing = Mux(finish, n_expected - received, 0)
        m.d.sync += self.errors.eq(self.errors + wrong + missing)
        with m.If(take & ~all_received):
            m.d.sync += [received.eq(received + 1), self.compared.eq(self.compared + 1)]

        in_fire = dut_i.valid & dut_i.ready
        with m.If(active):
            with m.If((in_fire | out_fire) & ~all_received):
                m.d.sync += idle.eq(0)
            with m.Elif(~finish):
                m.d.sync += idle.eq(idle + 1)
        with m.If(finish):
            m.d.sync += self.done.eq(1)
        return m


class SelfTest(wiring.Component):
    """Runs a list of checks one after another, from reset.

    Checks may share a device under test (the same ``dut`` object): it is instantiated once
    and each check drives it in turn, so a later check sees the state an earlier one left.

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
        self.runners = [CheckRunner(check) for check in checks]
        self.expected_total = sum(len(check.expected) for check in checks)
        limit = sum(len(check.expected) + check.timeout_cycles for check in checks)
        if limit >= 1 << COUNT_WIDTH:
            raise ValueError(f"Checks could count {limit} errors, more than a "
                             f"{COUNT_WIDTH}-bit counter holds")
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        previous_done = Const(1)
        for index, runner in enumerate(self.runners):
            m.submodules[f"check_{index}"] = runner
            m.d.comb += runner.start.eq(previous_done)
            previous_done = runner.done

        # Each device once; its runners take turns (only the running one asserts valid).
        users = {}
        for runner in self.runners:
            users.setdefault(id(runner.check.dut), []).append(runner)
        for index, runners in enumerate(users.values()):
            dut = runners[0].check.dut
            m.submodules[f"dut_{index}"] = dut
            payload = 0
            for runner in runners:
                payload = payload | Mux(runner.stimulus.valid, runner.stimulus.payload, 0)
                m.d.comb += [
                    runner.stimulus.ready.eq(dut.i.ready),
                    runner.results.valid.eq(dut.o.valid),
                    runner.results.payload.eq(dut.o.payload),
                ]
            m.d.comb += [
                dut.i.valid.eq(Cat(runner.stimulus.valid for runner in runners).any()),
                dut.i.payload.eq(payload),
            ]
            if not isinstance(dut.o.ready, Const):
                m.d.comb += dut.o.ready.eq(1)
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
