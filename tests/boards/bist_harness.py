"""Simulating a BISTSystem to its first UART report line (shared by the self-test tests)."""

from boards.bist.top import LED_MEANINGS, BISTSystem
from tb.pysim import simulate

__all__ = ["UART_DIVISOR", "decode_uart_line", "run_bist"]

UART_DIVISOR = 4


def decode_uart_line(samples, divisor):
    """Decode 8N1 frames from per-cycle samples of a UART line."""
    chars, index = [], 0
    while index < len(samples):
        if samples[index] == 0:  # start bit: sample each data bit in its middle
            middle = index + divisor // 2
            bits = [samples[middle + divisor * (bit + 1)] for bit in range(8)]
            if middle + divisor * 9 >= len(samples):
                break
            chars.append(chr(sum(bit << n for n, bit in enumerate(bits))))
            index = middle + divisor * 9
        else:
            index += 1
    return "".join(chars)


def run_bist(checks, *, max_cycles=20_000):
    """Simulate a BISTSystem until its first report line is complete.

    Returns ``(line, leds)`` where ``leds`` maps LED_MEANINGS to values at the end.
    """
    dut = BISTSystem(checks, uart_divisor=UART_DIVISOR, report_interval_cycles=1 << 14,
                     heartbeat_cycles=8)
    outcome = {}

    async def testbench(ctx):
        samples = []
        for _ in range(max_cycles):
            await ctx.tick()
            samples.append(ctx.get(dut.uart_tx))
            # Decode only once the line has started and is idle again (decoding is O(n)).
            if (samples[-1] == 0 and "start" not in outcome):
                outcome["start"] = len(samples) - 1
            if ("start" in outcome and samples[-40:].count(0) == 0 and
                    "\n" in decode_uart_line(samples[outcome["start"]:], UART_DIVISOR)):
                break
        outcome["line"] = decode_uart_line(samples, UART_DIVISOR)
        leds = ctx.get(dut.leds)
        outcome["leds"] = {name: (leds >> bit) & 1 for bit, name in enumerate(LED_MEANINGS)}

    simulate(dut, testbench, deadline=max_cycles + 1)  # the testbench stops at max_cycles
    return outcome["line"], outcome["leds"]
