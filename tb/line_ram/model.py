"""Reference model of :class:`sim.line_ram.LineRam` and a seeded random workload, shared by the
Amaranth-simulator test (``tests/sim/test_line_ram.py``) and the Verilator one (here): both
implementations must give the reference's read data cycle for cycle."""

import random

DEPTH = 8          # few lines, so ports collide on the same line often
TRANSPARENT = (True, True, False)
BYTES = 64


def random_cycles(seed: int, count: int) -> list[dict]:
    """Port inputs per cycle: each write port enabled half the time, byte enables of w0
    random (all, none or a random mask), reads enabled three times in four."""
    draw = random.Random(seed)

    def byte_enables():
        choice = draw.random()
        return (1 << BYTES) - 1 if choice < 0.3 else 0 if choice < 0.5 else draw.getrandbits(BYTES)

    cycles = []
    for _ in range(count):
        cycle = {"w0_addr": draw.randrange(DEPTH), "w0_en": byte_enables(),
                 "w0_data": draw.getrandbits(512)}
        for port in ("w1", "w2"):
            cycle.update({f"{port}_addr": draw.randrange(DEPTH),
                          f"{port}_en": int(draw.random() < 0.5),
                          f"{port}_data": draw.getrandbits(512)})
        for k in range(len(TRANSPARENT)):
            cycle.update({f"r{k}_addr": draw.randrange(DEPTH),
                          f"r{k}_en": int(draw.random() < 0.75)})
        cycles.append(cycle)
    return cycles


class LineRamModel:
    """Lines start at zero; :meth:`step` is one rising edge."""

    def __init__(self, depth=DEPTH, transparent=TRANSPARENT):
        self.lines = [0] * depth
        self.transparent = transparent
        self.data = [0] * len(transparent)

    def _with_w0(self, value, cycle):
        for b in range(BYTES):
            if cycle["w0_en"] >> b & 1:
                mask = 0xFF << (8 * b)
                value = (value & ~mask) | (cycle["w0_data"] & mask)
        return value

    def step(self, cycle) -> list[int]:
        """Apply one cycle's inputs; return the read data visible after the edge."""
        for k, transparent in enumerate(self.transparent):
            if cycle[f"r{k}_en"]:
                addr = cycle[f"r{k}_addr"]
                value = self.lines[addr]
                if transparent and addr == cycle["w0_addr"]:
                    value = self._with_w0(value, cycle)
                self.data[k] = value
        addr = cycle["w0_addr"]
        self.lines[addr] = self._with_w0(self.lines[addr], cycle)
        for port in ("w1", "w2"):    # later ports win on the same line
            if cycle[f"{port}_en"]:
                self.lines[cycle[f"{port}_addr"]] = cycle[f"{port}_data"]
        return list(self.data)
