"""cocotb tests of the UPDATE engine against ``sw_model.sparse_sgd_update``, bit for bit.

Memory is cocotbext-axi's ``AxiRam`` with random pauses on all five channels (back-pressure on
AR/AW/W, delayed R and B responses). After every command the whole memory image is compared:
updated rows must equal the golden model's, everything else (guard bytes around tables,
buffers, rows not looked up) must be untouched. A bad command must leave memory exactly as it
was. Counters are checked for exact increments.
"""

import functools

import cocotb
import numpy as np
from cocotb.triggers import ReadOnly, RisingEdge, SimTimeoutError, with_timeout
from cocotbext.axi import AxiBus, AxiRam

from hw.emb.layouts import ErrorCode, Opcode, PoolingMode, counters_layout, status_layout
from sim.rtl import design_from_env, sidecar_from_env
from tb.common import draw_until, pause_pattern, reset, rng, start_clock
from tb.emb.update_scenarios import (
    LINE,
    MEMORY_BYTES,
    corrupted,
    expected_counters,
    expected_image,
    expected_status,
    random_scenario,
)


class Harness:
    """The engine, its memory, and one method per command."""

    def __init__(self, dut, *, busy=0.3, seed=0):
        self.dut = dut
        props = sidecar_from_env()["properties"]
        self.params = design_from_env().params
        self.addr_width = props["addr_width"]
        self.max_tables = props["max_tables"]
        self.max_dim = props["max_dim"]
        self.num_regions = props["num_regions"]
        self.capacity = props["max_unique_rows"]
        self.ram = AxiRam(AxiBus.from_prefix(dut, "axi_"), dut.clk, dut.rst, size=MEMORY_BYTES)
        self.set_pauses(busy, seed)
        self.poisoned_reads: set[int] = set()
        self.poisoned_writes: set[int] = set()
        self._install_faults()
        self.updates = 0
        self.busy_cycles = 0

    def set_pauses(self, busy: float, seed: int) -> None:
        channels = [self.ram.read_if.ar_channel, self.ram.read_if.r_channel,
                    self.ram.write_if.aw_channel, self.ram.write_if.w_channel,
                    self.ram.write_if.b_channel]
        for number, channel in enumerate(channels):
            if busy:
                channel.set_pause_generator(pause_pattern(seed * 8 + number, busy))
            else:  # clearing the generator leaves the last pause value in force
                channel.clear_pause_generator()
                channel.pause = False

    def _install_faults(self) -> None:
        """Lines listed in ``poisoned_reads``/``poisoned_writes`` answer SLVERR."""
        read, write = self.ram.read_if._read, self.ram.write_if._write

        async def faulty_read(address, length):
            if address // LINE * LINE in self.poisoned_reads:
                raise OSError("poisoned line")
            return await read(address, length)

        async def faulty_write(address, data):
            if address // LINE * LINE in self.poisoned_writes:
                raise OSError("poisoned line")
            return await write(address, data)

        self.ram.read_if._read = faulty_read
        self.ram.write_if._write = faulty_write

    async def start(self) -> None:
        start_clock(self.dut)
        self.dut.cmd__valid.value = 0
        self.dut.done__ready.value = 1
        await reset(self.dut)

    def counters(self) -> dict:
        value = counters_layout().from_bits(self.dut.counters.value.to_unsigned())
        return {name: int(getattr(value, name)) for name in
                ("busy_cycles", "rows_read", "bytes_read", "bytes_written", "stall_cycles")}

    async def execute(self, scenario, *, timeout_cycles=None) -> dict:
        """Load memory, run the command, return its status (as ints) and counter increments."""
        dut = self.dut
        self.ram.write(0, bytes(scenario.image))
        dut.tables.value = scenario.descriptor_bits(self.addr_width, self.max_tables)
        dut.regions.value = scenario.region_bits(self.addr_width, self.num_regions)
        dut.lr.value = int(np.float32(scenario.lr).view(np.uint32))
        before = self.counters()
        if timeout_cycles is None:
            work = scenario.occurrence_lines() + 4 * len(scenario.indices) + 64
            timeout_cycles = 20_000 + 60 * work
        dut.cmd__payload.value = scenario.command_bits(self.addr_width)
        dut.cmd__valid.value = 1
        while True:
            await ReadOnly()
            accepted = bool(dut.cmd__ready.value)
            await RisingEdge(dut.clk)
            if accepted:
                break
        dut.cmd__valid.value = 0
        try:
            await with_timeout(RisingEdge(dut.done__valid), timeout_cycles * 10, "ns")
        except SimTimeoutError:
            progress = {name: value - before[name] for name, value in self.counters().items()}
            raise AssertionError(f"no status after {timeout_cycles} cycles; counters moved by "
                                 f"{progress}; expected {self._expectation(scenario)}; "
                                 f"bus {self._bus_state()}") from None
        status = status_layout().from_bits(dut.done__payload.value.to_unsigned())
        await RisingEdge(dut.clk)  # the status is taken (ready is always high)
        after = self.counters()
        result = {name: getattr(status, name) for name in
                  ("opcode", "batch", "error", "table", "bag", "position")}
        result["counters"] = {name: after[name] - before[name] for name in after}
        return result

    def _bus_state(self) -> str:
        names = ("arvalid", "arready", "araddr", "rvalid", "rready", "awvalid", "awready",
                 "wvalid", "wready", "bvalid", "bready")
        return " ".join(f"{name}={getattr(self.dut, 'axi__' + name).value}" for name in names)

    def _expectation(self, scenario):
        if expected_status(scenario, max_tables=self.max_tables,
                           max_dim=self.max_dim)["error"] != ErrorCode.NONE:
            return "an error status"
        return expected_counters(scenario, expected_image(scenario, self.capacity)[1])

    def memory(self, length: int) -> bytes:
        return self.ram.read(0, length)

    async def check_update(self, scenario, *, label="") -> dict:
        """Run a valid command and compare all of memory and the counters."""
        expected, chunks = expected_image(scenario, self.capacity)
        result = await self.execute(scenario)
        assert result["error"] == ErrorCode.NONE, f"{label}: engine reported {result}"
        assert result["batch"] == scenario.batch and result["opcode"] == Opcode.UPDATE
        _compare_images(self.memory(len(expected)), expected, scenario, label)
        counts = result["counters"]
        for name, value in expected_counters(scenario, chunks).items():
            assert counts[name] == value, f"{label}: counter {name} {counts[name]} != {value}"
        assert counts["stall_cycles"] <= counts["busy_cycles"]
        updates = counts["rows_read"]
        self.updates += updates
        self.busy_cycles += counts["busy_cycles"]
        self.dut._log.info(
            "%s: %d tables dims %s, %d bags, %d occurrences, %d chunks, %d row updates, "
            "%d busy cycles (%.1f per row update)", label, len(scenario.tables),
            scenario.dims, scenario.bags, len(scenario.indices), len(chunks), updates,
            counts["busy_cycles"], counts["busy_cycles"] / max(updates, 1))
        return result

    async def check_rejected(self, scenario, *, label="") -> dict:
        """Run a command the engine must refuse; memory must not change at all."""
        expected = expected_status(scenario, max_tables=self.max_tables, max_dim=self.max_dim)
        assert expected["error"] != ErrorCode.NONE, f"{label}: scenario is not bad"
        result = await self.execute(scenario)
        got = {name: result[name] for name in expected}
        assert got == expected, f"{label}: status {got} != expected {expected}"
        assert result["counters"]["bytes_written"] == 0, f"{label}: the engine wrote"
        _compare_images(self.memory(len(scenario.image)), scenario.image, scenario, label)
        self.dut._log.info("%s: rejected with %s as expected", label, expected)
        return result


def _compare_images(got: bytes, expected: bytes, scenario, label: str) -> None:
    if got == expected:
        return
    got_words = np.frombuffer(got, dtype=np.uint32)
    want_words = np.frombuffer(bytes(expected), dtype=np.uint32)
    differ = np.flatnonzero(got_words != want_words)
    # NaN results need only agree in being NaN (DESIGN.md section 3).
    as_float = got_words[differ].view(np.float32), want_words[differ].view(np.float32)
    real = differ[~(np.isnan(as_float[0]) & np.isnan(as_float[1]))]
    if not real.size:
        return
    where = []
    for word in real[:8]:
        address = int(word) * 4
        owner = "guard/buffer"
        for t, (base, table) in enumerate(zip(scenario.table_bases, scenario.tables,
                                              strict=True)):
            if base <= address < base + table.nbytes:
                row, column = divmod((address - base) // 4, table.shape[1])
                owner = f"table {t} row {row} column {column}"
        where.append(f"0x{address:x} ({owner}): got 0x{int(got_words[word]):08x} "
                     f"expected 0x{int(want_words[word]):08x}")
    raise AssertionError(f"{label}: {real.size} words differ, first: " + "; ".join(where))


def _busy(generator) -> float:
    return float(generator.choice([0.0, 0.2, 0.5, 0.8]))


@cocotb.test()
async def random_batches(dut):
    """Seeded random commands: dims 16..128, 1..max tables, mixed modes, Zipf duplicates."""
    draw = rng(1)
    harness = Harness(dut, busy=0.3, seed=1)
    await harness.start()
    for number in range(8):
        harness.set_pauses(_busy(draw), number)
        scenario = random_scenario(draw, max_tables=harness.max_tables,
                                   dims=[d for d in (16, 32, 64, 128) if d <= harness.max_dim])
        await harness.check_update(scenario, label=f"random {number}")
    dut._log.info("random batches: %.1f busy cycles per row update on average",
                  harness.busy_cycles / max(harness.updates, 1))


def _distinct_rows(scenario):
    """The (table, row) pairs the command updates."""
    bags = scenario.bags
    return len({(table, int(row)) for table in range(len(scenario.tables))
                for row in scenario.indices[scenario.offsets[table * bags]:
                                            scenario.offsets[(table + 1) * bags]]})


@cocotb.test()
async def chunking(dut):
    """Far more distinct rows than the on-chip capacity, hot rows recurring across chunks
    (each re-read must see the previous chunk's write), slow write responses."""
    draw = rng(2)
    harness = Harness(dut)
    await harness.start()
    capacity = harness.capacity
    for number, (b_busy, dims) in enumerate([(0.8, (16,)), (0.5, (64, 128)), (0.9, (32,))]):
        harness.set_pauses(0.3, 100 + number)
        harness.ram.write_if.b_channel.set_pause_generator(pause_pattern(number, b_busy))
        # Drawn again until it has more than two chunks of distinct rows (a one-table draw
        # with short bags may not).
        scenario = draw_until(
            functools.partial(
                random_scenario, draw, max_tables=min(2, harness.max_tables),
                dims=[d for d in dims if d <= harness.max_dim] or [16],
                rows=(capacity * 3, capacity * 8), bags=(4, 8), bag_length=(4, 12), zipf=1.2),
            lambda scenario: _distinct_rows(scenario) > 2 * capacity,
            "has more than two chunks of distinct rows")
        result = await harness.check_update(scenario, label=f"chunking {number}")
        assert result["counters"]["rows_read"] >= _distinct_rows(scenario) > 2 * capacity


@cocotb.test()
async def repeated_rows(dut):
    """One row over and over (back-to-back accumulation into one buffer line), every mode,
    empty bags, and commands with no index at all."""
    draw = rng(3)
    harness = Harness(dut, busy=0.0)
    await harness.start()
    for mode in PoolingMode:
        scenario = random_scenario(draw, max_tables=1, dims=(16,), rows=(1, 1),
                                   bags=(3, 3), bag_length=(5, 9), modes=(mode,))
        await harness.check_update(scenario, label=f"one row, {mode.name}")
    harness.set_pauses(0.5, 3)
    scenario = random_scenario(draw, max_tables=harness.max_tables, rows=(2, 3),
                               bags=(2, 4), bag_length=(0, 12),
                               dims=[d for d in (16, 32, 64, 128) if d <= harness.max_dim])
    await harness.check_update(scenario, label="few rows")
    for bags in (0, 3):
        scenario = random_scenario(draw, max_tables=min(2, harness.max_tables), dims=(16,),
                                   bags=(bags, bags), bag_length=(0, 0))
        result = await harness.check_update(scenario, label=f"no indices, {bags} bags")
        assert result["counters"]["bytes_written"] == 0


def _bad_scenarios(harness, draw):
    """(label, scenario) for every kind of bad input, each built from a valid command."""
    base = random_scenario(draw, max_tables=min(3, harness.max_tables), dims=(16, 32),
                           rows=(20, 40), bags=(3, 5), bag_length=(1, 6), specials=False)
    count = len(base.tables)
    last = count - 1
    cases = [
        ("not an UPDATE", corrupted(base, opcode=Opcode.LOOKUP)),
        ("no tables", corrupted(base, table_count=0)),
        ("too many tables", corrupted(base, table_count=harness.max_tables + 1)),
        ("dim 0", corrupted(base, descriptor_overrides={last: {"dim": 0}})),
        ("dim 24", corrupted(base, descriptor_overrides={last: {"dim": 24}})),
        ("dim above max", corrupted(
            base, descriptor_overrides={0: {"dim": harness.max_dim + 16}})),
        ("table misaligned", corrupted(
            base, descriptor_overrides={last: {"base": base.table_bases[last] + 4}})),
        ("table past its region", corrupted(
            base, descriptor_overrides={last: {"rows": 100_000}})),
        ("table outside every region", corrupted(
            base, descriptor_overrides={0: {"base": 0}})),
        ("table region disabled", corrupted(
            base, regions=[(b, s, 0) if r == 0 else (b, s, e)
                           for r, (b, s, e) in enumerate(base.regions)])),
    ]
    for name in ("indices", "offsets", "output"):
        cases.append((f"{name} misaligned", corrupted(
            base, addresses={**base.addresses, name: base.addresses[name] + 8})))
        cases.append((f"{name} outside every region", corrupted(
            base, addresses={**base.addresses, name: 0x40})))
    weighted_modes = [PoolingMode.WEIGHTED, *base.modes[1:]]
    cases.append(("weights misaligned (a WEIGHTED table)", corrupted(
        base, modes=weighted_modes,
        addresses={**base.addresses, "weights": base.addresses["weights"] + 4})))

    def offsets_with(position, value):
        offsets = base.offsets.copy()
        offsets[position] = value
        return corrupted(base, offsets=offsets)

    entries = len(base.offsets)
    total = len(base.indices)
    middle = entries // 2
    cases += [
        ("offsets[0] not 0", offsets_with(0, 1)),
        ("offsets decrease", offsets_with(middle, int(base.offsets[middle - 1]) - 1
                                          if base.offsets[middle - 1] else 0)),
        ("an offset past the end", offsets_with(middle, total + 5)),
        ("last offset short", offsets_with(entries - 1, total - 1)),
        ("num_indices above the last offset", corrupted(base, num_indices=total + 3)),
        ("bags 0 but indices", corrupted(base, bags=0, offsets=base.offsets[:1].copy())),
    ]
    for label, position in (("first", 0), ("middle", total // 2), ("last", total - 1)):
        indices = base.indices.copy()
        table = int(np.searchsorted(base.offsets[::base.bags], position, side="right")) - 1
        indices[position] = base.tables[table].shape[0] + int(draw.integers(0, 3))
        cases.append((f"index out of range ({label} position)", corrupted(base,
                                                                          indices=indices)))
    # Several problems at once: the first in the documented order wins.
    indices = base.indices.copy()
    indices[0] = 1_000_000
    cases.append(("offsets error after an index error", corrupted(
        base, indices=indices, offsets=offsets_with(entries - 1, total + 1).offsets)))
    cases.append(("dim error before a region error", corrupted(
        base, descriptor_overrides={0: {"base": 0}, last: {"dim": 8}})))
    return base, cases


@cocotb.test()
async def bad_inputs(dut):
    """Every bad input ends with its exact status and leaves memory untouched; the engine
    then still runs a good command."""
    draw = rng(4)
    harness = Harness(dut, busy=0.3, seed=4)
    await harness.start()
    base, cases = _bad_scenarios(harness, draw)
    for label, scenario in cases:
        await harness.check_rejected(scenario, label=label)
    # A zero-length buffer is never checked; weights are ignored without a WEIGHTED table.
    harmless = corrupted(base, modes=[m if m != PoolingMode.WEIGHTED else PoolingMode.SUM
                                      for m in base.modes],
                         addresses={**base.addresses, "weights": 0x13})
    await harness.check_update(harmless, label="weights address ignored")
    await harness.check_update(base, label="good command after the bad ones")


@cocotb.test()
async def bus_errors(dut):
    """SLVERR on an index read (no row modified), on a row read and on a row write; the
    engine reports BUS_ERROR once the bus is quiet and then runs a good command."""
    draw = rng(5)
    harness = Harness(dut, busy=0.3, seed=5)
    await harness.start()
    scenario = random_scenario(draw, max_tables=2, dims=(32,), rows=(30, 60), bags=(3, 5),
                               bag_length=(2, 6), specials=False)

    harness.poisoned_reads = {scenario.addresses["indices"]}
    result = await harness.execute(scenario)
    assert result["error"] == ErrorCode.BUS_ERROR, result
    assert (result["table"], result["bag"], result["position"]) == (0, 0, 0)
    assert result["counters"]["bytes_written"] == 0
    _compare_images(harness.memory(len(scenario.image)), scenario.image, scenario, "index read")

    # The first row of the first chunk; its first line is poisoned.
    first_row = scenario.table_bases[0] + int(scenario.indices[0]) * scenario.dims[0] * 4
    for kind in ("read", "write"):
        harness.poisoned_reads = {first_row} if kind == "read" else set()
        harness.poisoned_writes = {first_row} if kind == "write" else set()
        result = await harness.execute(scenario)
        assert result["error"] == ErrorCode.BUS_ERROR, (kind, result)
        assert (result["table"], result["bag"], result["position"]) == (0, 0, 0)
        if kind == "read":  # the line read as SLVERR (zeros) must not be written back
            assert harness.memory(first_row + LINE)[first_row:] == \
                bytes(scenario.image[first_row:first_row + LINE]), "the faulty line was written"
        dut._log.info("row %s error reported as BUS_ERROR", kind)

    harness.poisoned_reads, harness.poisoned_writes = set(), set()
    await harness.check_update(scenario, label="good command after bus errors")


@cocotb.test()
async def throughput(dut):
    """Cycles per row update without memory stalls, for a fixed shape (one table of dim 64,
    1000 rows, 16 bags of 8 lookups, Zipf rows): measured and logged, and bounded so that a
    slowdown shows up. Lines moved on the bus are the unavoidable work; each chunk adds a fixed
    overhead (pipelines draining, the previous chunk's write responses)."""
    draw = rng(6)
    harness = Harness(dut, busy=0.0)
    await harness.start()
    for _ in range(2):
        candidate = random_scenario(draw, max_tables=1, dims=(64,), rows=(1000, 1000),
                                    bags=(16, 16), bag_length=(8, 8), zipf=1.1,
                                    specials=False)
        result = await harness.check_update(candidate, label="throughput")
        counts = result["counters"]
        lines = (counts["bytes_read"] + counts["bytes_written"]) // LINE
        chunks = -(-counts["rows_read"] // harness.capacity)
        dut._log.info("throughput: %d busy cycles for %d lines moved (%.2f lines per cycle), "
                      "%.1f cycles per row update, %.1f per lookup", counts["busy_cycles"],
                      lines, lines / counts["busy_cycles"],
                      counts["busy_cycles"] / counts["rows_read"],
                      counts["busy_cycles"] / len(candidate.indices))
        assert counts["busy_cycles"] <= 2 * lines + 80 * chunks
