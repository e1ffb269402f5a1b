"""Runs a design in Amaranth's simulator until its testbenches return, with a deadline.

``Simulator.run_until(deadline)`` simulates every cycle up to the deadline, also after the
testbenches returned, and ``Simulator.run()`` never stops on a design that hangs. A test
whose design finishes in 2,000 cycles would pay for all of a 50,000-cycle deadline with the
first, and hang the suite with the second; :func:`simulate` stops at whichever comes first.
"""

from amaranth.sim import Simulator

__all__ = ["WriteMemory", "simulate", "start"]


def simulate(dut, *testbenches, processes=(), background=(), deadline: int,
             period: float = 1e-6, check: bool = True) -> bool:
    """Simulate ``dut`` with a clock of ``period`` seconds until every one of ``testbenches``
    has returned, or until ``deadline`` cycles have passed.

    ``processes`` (``add_process``) and ``background`` (background testbenches) run alongside
    and are simply stopped at the end. A testbench still waiting at the deadline means the
    design hangs: an ``AssertionError``, or with ``check=False`` a return value of ``False``
    for a caller that reports the hang in its own words (``True`` when every testbench
    returned). An exception raised in any of them propagates.
    """
    if deadline < 1:
        raise ValueError(f"deadline must be at least one cycle, not {deadline}")
    sim = Simulator(dut)
    sim.add_clock(period)
    for process in processes:
        sim.add_process(process)
    for testbench in background:
        sim.add_testbench(testbench, background=True)
    returned = []

    def counted(testbench):
        async def run(ctx):
            await testbench(ctx)
            returned.append(testbench)
        return run

    for testbench in testbenches:
        sim.add_testbench(counted(testbench))
    expired = []

    async def watchdog(ctx):
        await ctx.delay(deadline * period)
        expired.append(True)

    sim.add_testbench(watchdog, background=True)
    # advance() is False once only background work is left: every testbench has returned.
    while not expired and sim.advance():
        pass
    if check:
        assert len(returned) == len(testbenches), (
            f"{len(testbenches) - len(returned)} of {len(testbenches)} testbenches still waiting "
            f"after {deadline} cycles: the design hangs")
    return len(returned) == len(testbenches)


async def start(ctx, dut, **inputs):
    """Set ``dut``'s ``inputs`` (member name to value) and pulse its ``start`` for a cycle."""
    for name, value in inputs.items():
        ctx.set(getattr(dut, name), value)
    ctx.set(dut.start, 1)
    await ctx.tick()
    ctx.set(dut.start, 0)


class WriteMemory:
    """The AW, W and B channels of a memory that takes beats with random back-pressure and
    answers each accepted address with an OKAY response after a random delay (``draw``, a
    seeded ``random.Random``). ``serve`` is a process; what it took is kept in
    :attr:`addresses` and :attr:`data` (``address`` and ``data`` pick the values out of the
    payloads), and :attr:`awaiting` holds the addresses not answered yet."""

    def __init__(self, draw, *, aw, w, b, address=lambda payload: payload,
                 data=lambda payload: payload, answer_chance=0.3):
        self._draw, self._aw, self._w, self._b = draw, aw, w, b
        self._address, self._data, self._answer_chance = address, data, answer_chance
        self.addresses, self.data, self.awaiting = [], [], []

    async def serve(self, ctx):
        aw, w, b, draw = self._aw, self._w, self._b, self._draw
        while True:
            ctx.set(aw.ready, int(draw.random() < 0.5))
            ctx.set(w.ready, int(draw.random() < 0.5))
            answer = bool(self.awaiting) and draw.random() < self._answer_chance
            ctx.set(b.valid, int(answer))
            _, _, aw_ok, aw_valid, aw_payload, w_ok, w_valid, w_payload = await ctx.tick().sample(
                aw.ready, aw.valid, aw.payload, w.ready, w.valid, w.payload)
            if aw_ok and aw_valid:
                self.addresses.append(self._address(aw_payload))
                self.awaiting.append(self.addresses[-1])
            if w_ok and w_valid:
                self.data.append(self._data(w_payload))
            if answer:
                self.awaiting.pop(0)
