"""The self-test as a board design: checks, status LEDs and a UART report line."""

from amaranth import Cat, Elaboratable, Module, Mux, Signal
from amaranth.lib import io, wiring
from amaranth.lib.wiring import Out

from ..clocking import system_clock
from .message import MessageWriter, hex_digit, text
from .runner import COUNT_WIDTH, SelfTest
from .uart import UARTTransmitter

__all__ = ["CLOCK_LIMITS", "LED_MEANINGS", "REPORT_FORMAT", "BISTBoardTop", "BISTSystem"]


# What each bit of BISTSystem.leds shows.
LED_MEANINGS = ("pass", "fail", "busy", "heartbeat")

# Fastest clock the self-test runs at, per FPGA family; faster board clocks are divided down
# (boards.clocking). ECP5: the 16-lane self-test reaches about 41 MHz at speed grade 6 with the
# compare unpipelined, more with it; UltraScale+: a third of the Alveo's 300 MHz. Families not
# listed run at the board clock (Agilex 7: 100 MHz).
CLOCK_LIMITS = {"ecp5": 50e6, "ultrascaleplus": 100e6}

# The UART line, with counts in hexadecimal.
REPORT_FORMAT = "BIST {verdict} compared=0x{compared:04X} errors=0x{errors:04X}\r\n"


def _report_chars(verdict_pass, compared, errors):
    def word(pass_text, fail_text):
        return [Mux(verdict_pass, p, f)
                for p, f in zip(text(pass_text), text(fail_text), strict=True)]

    def hex_field(value):
        return [hex_digit(value[4 * k:4 * k + 4]) for k in reversed(range(COUNT_WIDTH // 4))]

    return [*text("BIST "), *word("PASS", "FAIL"), *text(" compared=0x"), *hex_field(compared),
            *text(" errors=0x"), *hex_field(errors), *text("\r\n")]


class BISTSystem(wiring.Component):
    """Runs the checks from reset, shows the outcome on LEDs and reports it over a UART.

    Once the checks are done, the line of :data:`REPORT_FORMAT` is sent, and again every
    ``report_interval_cycles`` so a terminal opened late still sees it.

    Parameters
    ----------
    checks : list of Check
        See :class:`boards.bist.check.Check`.
    uart_divisor : int
        Clock cycles per UART bit.
    report_interval_cycles : int
        Cycles between two report lines.
    heartbeat_cycles : int
        Half-period of the heartbeat LED, which shows the clock is running.

    Members
    -------
    leds : Out(4)
        See :data:`LED_MEANINGS`.
    uart_tx : Out(1)
        The UART line (8N1).
    """
    leds: Out(len(LED_MEANINGS))
    uart_tx: Out(1, init=1)

    def __init__(self, checks, *, uart_divisor, report_interval_cycles, heartbeat_cycles):
        for name, value in (("Report interval", report_interval_cycles),
                            ("Heartbeat half-period", heartbeat_cycles)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer of cycles, not {value!r}")
        self.self_test = SelfTest(checks)
        self.uart = UARTTransmitter(divisor=uart_divisor)
        self.report_interval_cycles = report_interval_cycles
        self.heartbeat_cycles = heartbeat_cycles
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        m.submodules.self_test = self_test = self.self_test
        m.submodules.uart = uart = self.uart

        chars = _report_chars(self_test.passed, self_test.compared, self_test.errors)
        m.submodules.writer = writer = MessageWriter(length=len(chars))
        for index, char in enumerate(chars):
            m.d.comb += writer.chars[index].eq(char)
        wiring.connect(m, writer.o, uart.i)
        m.d.comb += self.uart_tx.eq(uart.tx)

        until_report = Signal(range(self.report_interval_cycles))
        with m.If(self_test.done):
            with m.If(until_report == 0):
                with m.If(~writer.busy):
                    m.d.comb += writer.send.eq(1)
                    m.d.sync += until_report.eq(self.report_interval_cycles - 1)
            with m.Else():
                m.d.sync += until_report.eq(until_report - 1)

        heartbeat = Signal()
        beat_count = Signal(range(self.heartbeat_cycles))
        with m.If(beat_count == 0):
            m.d.sync += [heartbeat.eq(~heartbeat), beat_count.eq(self.heartbeat_cycles - 1)]
        with m.Else():
            m.d.sync += beat_count.eq(beat_count - 1)

        m.d.comb += self.leds.eq(Cat(self_test.passed, self_test.done & ~self_test.passed,
                                     self_test.busy, heartbeat))
        return m


def _led_ports(platform):
    """The board's status LED ports, in :data:`LED_MEANINGS` order, as many as it has.

    Plain ``led`` resources come first; a board with only RGB LEDs (ECPIX-5) shows pass in
    green, fail in red and busy in blue on its first RGB LED, and the heartbeat in green on
    the second.
    """
    leds = []
    for number in range(len(LED_MEANINGS)):
        if ("led", number) in platform.resources:
            leds.append(platform.request("led", number, dir="-"))
    if leds:
        return leds
    rgb = []
    for number in range(2):
        if ("rgb_led", number) in platform.resources:
            rgb.append(platform.request("rgb_led", number, dir="-"))
    if not rgb:
        return []
    ports = [rgb[0].g, rgb[0].r, rgb[0].b]
    if len(rgb) > 1:
        ports.append(rgb[1].g)
    return ports


class BISTBoardTop(Elaboratable):
    """:class:`BISTSystem` on a board: the default clock, the status LEDs, the UART's TX.

    Parameters
    ----------
    make_checks : callable
        Returns the list of checks; called at elaboration (a component is elaborated once).
    baud_rate : int
        UART speed.
    max_clock_frequency : float or None
        Fastest clock to run at; ``None`` takes the family's entry of :data:`CLOCK_LIMITS`
        (or ``clock_frequency`` when that is given).
    clock_frequency : float or None
        Run at this frequency (a PLL may multiply the board clock up); ``None`` runs at the
        board clock, slowed down to the limit.
    """
    def __init__(self, *, make_checks, baud_rate=115200, max_clock_frequency=None,
                 clock_frequency=None):
        if not callable(make_checks):
            raise TypeError(f"make_checks must be callable, not {make_checks!r}")
        if not isinstance(baud_rate, int) or baud_rate <= 0:
            raise ValueError(f"Baud rate must be a positive integer, not {baud_rate!r}")
        if clock_frequency is not None and (not isinstance(clock_frequency, (int, float)) or
                                            clock_frequency <= 0):
            raise ValueError(f"Clock frequency must be None or a positive number of Hz, not "
                             f"{clock_frequency!r}")
        self._make_checks = make_checks
        self._baud_rate = baud_rate
        self._max_clock_frequency = max_clock_frequency
        self._clock_frequency = clock_frequency

    def elaborate(self, platform):
        m = Module()
        limit = self._max_clock_frequency
        if limit is None and self._clock_frequency is not None:
            limit = self._clock_frequency
        if limit is None:
            limit = CLOCK_LIMITS.get(getattr(platform, "family", None), float("inf"))
        frequency = system_clock(m, platform, max_frequency=limit,
                                 frequency=self._clock_frequency)
        m.submodules.bist = bist = BISTSystem(
            self._make_checks(),
            uart_divisor=round(frequency / self._baud_rate),
            report_interval_cycles=round(frequency),
            heartbeat_cycles=round(frequency / 2))

        for index, port in enumerate(_led_ports(platform)):
            m.submodules[f"led_{index}"] = led = io.Buffer("o", port)
            m.d.comb += led.o.eq(bist.leds[index])

        # A board without a fabric-reachable UART (see its platform) reports on LEDs only.
        if ("uart", 0) in platform.resources:
            uart = platform.request("uart", 0, dir="-")
            m.submodules.uart_tx = tx = io.Buffer("o", uart.tx)
            m.d.comb += tx.o.eq(bist.uart_tx)
        return m
