"""A CXL.mem requester (the host) for cocotb: tags, concurrent requests, a memory scoreboard.

It needs only the four message channels of the device under test, by their Amaranth names
(``m2s_req__valid``/``__ready``/``__payload``, ``m2s_rwd__...``, ``s2m_ndr__...``,
``s2m_drs__...``, optionally behind a ``prefix``), and packs messages with the RTL's own
layouts (``tb.host.messages``)::

    host = CxlMemHost(dut, seed=cocotb.RANDOM_SEED, drs_pause=0.3, ndr_pause=0.3)
    await host.write(hpa, bytes(64))            # MemWr, returns once its NDR Cmp arrived
    await host.write(hpa, data, byte_enable=m)  # MemWrPtl
    line = await host.read(hpa)                 # MemRd: bytes, or CxlMemError on NXM/poison

Any number of coroutines may call it at once. Each request holds a tag from a pool until its
completion arrives (MemSpecRd, which has none, until it is accepted), so no tag is reused
while in flight; a completion with an unknown tag, on the wrong channel, or twice, fails the
test. The S2M channels sink responses with seeded random ``ready`` pauses, the M2S channels
insert seeded random idle cycles. When nothing is in flight the host sleeps instead of
acting every clock cycle, so it costs nothing between commands.

The scoreboard (on by default) records every write in the order the device accepted it and
checks that each read returns exactly the line as those writes left it (bytes never written
through this host are not checked; ``preload`` and ``forget`` adjust that). This is the
ordering rule of ``hw/cxl/frontend.py`` (per line, acceptance order); if the device accepts a
Req and an RwD in the same cycle, either order is allowed.
"""

import itertools
import random
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import cocotb
from cocotb.simtime import get_sim_time
from cocotb.triggers import Event, First, RisingEdge

from hw.cxl.messages import LINE_BYTES, DRSOpcode, M2SReqOpcode, M2SRwDOpcode, NDROpcode
from tb.host.messages import DrsResponse, NdrResponse, pack_req, pack_rwd, parse_drs, parse_ndr

__all__ = ["CxlMemError", "CxlMemHost", "MemoryScoreboard"]

ALL_BYTES = (1 << LINE_BYTES) - 1


class CxlMemError(Exception):
    """A read completed with MemData-NXM or poisoned data."""

    def __init__(self, hpa: int, response: DrsResponse):
        kind = "poisoned data" if response.poison else getattr(
            response.opcode, "name", response.opcode)
        super().__init__(f"read of {hpa:#x} returned {kind} (tag {response.tag:#x})")
        self.hpa, self.response = hpa, response


def _never_pause() -> Iterator[int]:
    return itertools.repeat(0)


def _pauses(seed: int, busy: float) -> Iterator[int]:
    if not 0.0 <= busy < 1.0:
        raise ValueError(f"pause probability must be in [0, 1), not {busy!r}")
    if busy == 0:
        return _never_pause()
    draw = random.Random(seed)
    return (int(draw.random() < busy) for _ in itertools.count())


@dataclass
class _Outgoing:
    bits: int
    on_accept: Callable[[int], None]


class _Driver:
    """Drives one M2S channel from a queue; calls ``on_accept(time)`` at each handshake."""

    def __init__(self, clock, valid, ready, payload, idle: Iterator[int]):
        self._clock, self._valid, self._ready, self._payload = clock, valid, ready, payload
        self._idle = idle
        self._queue: deque[_Outgoing] = deque()
        self._wake = Event()
        self._valid.value = 0
        cocotb.start_soon(self._run())

    def send(self, item: _Outgoing) -> None:
        self._queue.append(item)
        self._wake.set()

    async def _run(self):
        edge = RisingEdge(self._clock)
        while True:
            if not self._queue:
                self._valid.value = 0
                self._wake.clear()
                await self._wake.wait()
            if next(self._idle):        # an idle cycle before this message
                self._valid.value = 0
                await edge
                continue
            item = self._queue.popleft()
            self._payload.value = item.bits
            self._valid.value = 1
            while True:
                await edge
                if self._ready.value:
                    break
            item.on_accept(get_sim_time("step"))
            self._valid.value = 0


class _Sink:
    """Takes every message of one S2M channel, with ``ready`` paused by ``pauses``; sleeps
    while ``expecting()`` is false and no message is offered."""

    def __init__(self, clock, valid, ready, payload, pauses: Iterator[int],
                 on_message: Callable[[int], None], expecting: Callable[[], bool]):
        self._clock, self._valid, self._ready, self._payload = clock, valid, ready, payload
        self._pauses, self._on_message, self._expecting = pauses, on_message, expecting
        self.wake = Event()
        self._ready.value = 1
        cocotb.start_soon(self._run())

    async def _run(self):
        edge = RisingEdge(self._clock)
        while True:
            if not self._expecting() and not self._valid.value:
                self._ready.value = 1
                self.wake.clear()
                # Woken by a new request, or by a message nobody asked for (checked below).
                await First(RisingEdge(self._valid), self.wake.wait())
            ready = not next(self._pauses)
            self._ready.value = int(ready)
            await edge
            if ready and self._valid.value:
                self._on_message(int(self._payload.value))


@dataclass
class _Pending:
    kind: str                 # "read", "write", "invalidate"
    hpa: int
    done: Event = field(default_factory=Event)
    response: DrsResponse | NdrResponse | None = None
    expectation: object = None


class CxlMemHost:
    """CXL.mem requester on a DUT's M2S/S2M message channels.

    ``tags``: the pool of tags to use (default 0..255; any subset of 0..65535), handed out in
    a seeded random order. ``req_idle``/``rwd_idle``: probability of an idle cycle before
    each M2S message; ``ndr_pause``/``drs_pause``: probability that S2M ``ready`` is low in a
    cycle. ``ld_id`` goes into every request. ``scoreboard``: a :class:`MemoryScoreboard`,
    ``True`` for a new one (default), or ``None``.
    """

    def __init__(self, dut, *, prefix="", clock=None, seed=0, tags=range(256), ld_id=0,
                 req_idle=0.0, rwd_idle=0.0, ndr_pause=0.0, drs_pause=0.0, scoreboard=True):
        def port(channel, name):
            return getattr(dut, f"{prefix}{channel}__{name}")

        clock = clock if clock is not None else dut.clk
        self.ld_id = ld_id
        self.scoreboard = MemoryScoreboard() if scoreboard is True else scoreboard
        self._draw = random.Random(seed)
        self._free_tags = list(tags)
        if not self._free_tags or not all(0 <= t < 1 << 16 for t in self._free_tags):
            raise ValueError("tags must be a non-empty collection of 16-bit values")
        self._tag_freed = Event()
        self._pending: dict[int, _Pending] = {}
        self._expecting = {"ndr": 0, "drs": 0}
        self.completions = {"ndr": 0, "drs": 0}
        self.peak_outstanding = 0
        self._drivers = {
            channel: _Driver(clock, port(channel, "valid"), port(channel, "ready"),
                             port(channel, "payload"), _pauses(seed * 4 + k, idle))
            for k, (channel, idle) in enumerate((("m2s_req", req_idle), ("m2s_rwd", rwd_idle)))}
        self._sinks = {
            kind: _Sink(clock, port(f"s2m_{kind}", "valid"), port(f"s2m_{kind}", "ready"),
                        port(f"s2m_{kind}", "payload"), _pauses(seed * 4 + 2 + k, pause),
                        getattr(self, f"_on_{kind}"), lambda kind=kind: self._expecting[kind] > 0)
            for k, (kind, pause) in enumerate((("ndr", ndr_pause), ("drs", drs_pause)))}

    # --- public API -----------------------------------------------------------------------

    @property
    def outstanding(self) -> int:
        return len(self._pending)

    async def read(self, hpa: int, length: int = LINE_BYTES, *,
                   opcode=M2SReqOpcode.MEM_RD) -> bytes:
        """Read ``length`` bytes (whole lines, one request each, concurrently)."""
        lines = _lines(hpa, length)
        if len(lines) == 1:
            return self._data_or_error(hpa, await self.read_response(hpa, opcode=opcode))
        tasks = [cocotb.start_soon(self.read_response(a, opcode=opcode)) for a in lines]
        return b"".join([self._data_or_error(a, await t) for a, t in zip(lines, tasks,
                                                                          strict=True)])

    async def read_response(self, hpa: int, *, opcode=M2SReqOpcode.MEM_RD,
                            **fields) -> DrsResponse:
        """One MemRd/MemRdData; the whole DRS, NXM and poison included."""
        response = await self._request("m2s_req", "read", hpa, lambda tag: pack_req(
            opcode, hpa, tag, ld_id=self.ld_id, **fields))
        return response

    async def write(self, hpa: int, data: bytes, *, byte_enable: int | None = None,
                    poison: bool = False, track: bool = True) -> NdrResponse | list:
        """MemWr per line (``byte_enable``: one line, MemWrPtl). Returns once every Cmp has
        arrived: the data is then persistent and visible to later reads. ``track=False``
        keeps the write out of the scoreboard (for writes the device is expected to drop)."""
        lines = _lines(hpa, len(data))
        if byte_enable is not None and len(lines) != 1:
            raise ValueError("byte_enable needs exactly one line of data")
        chunks = [data[k:k + LINE_BYTES] for k in range(0, len(data), LINE_BYTES)]
        if len(lines) == 1:
            return await self.write_line(hpa, data, byte_enable=byte_enable, poison=poison,
                                         track=track)
        tasks = [cocotb.start_soon(self.write_line(a, c, poison=poison, track=track))
                 for a, c in zip(lines, chunks, strict=True)]
        return [await t for t in tasks]

    async def write_line(self, hpa: int, line: bytes, *, byte_enable: int | None = None,
                         poison: bool = False, track: bool = True, **fields) -> NdrResponse:
        opcode = M2SRwDOpcode.MEM_WR if byte_enable is None else M2SRwDOpcode.MEM_WR_PTL
        record = (line, ALL_BYTES if byte_enable is None else byte_enable) \
            if track and not poison else None
        return await self._request("m2s_rwd", "write", hpa, lambda tag: pack_rwd(
            opcode, hpa, tag, line, byte_enable=byte_enable, poison=poison, ld_id=self.ld_id,
            **fields), write=record)

    async def invalidate(self, hpa: int, *, non_temporal: bool = False) -> NdrResponse:
        """MemInv / MemInvNT: one NDR Cmp."""
        opcode = M2SReqOpcode.MEM_INV_NT if non_temporal else M2SReqOpcode.MEM_INV
        return await self._request("m2s_req", "invalidate", hpa, lambda tag: pack_req(
            opcode, hpa, tag, ld_id=self.ld_id))

    async def spec_read(self, hpa: int) -> None:
        """MemSpecRd: no completion; returns once the device accepted it."""
        await self._request("m2s_req", None, hpa, lambda tag: pack_req(
            M2SReqOpcode.MEM_SPEC_RD, hpa, tag, ld_id=self.ld_id))

    async def send_raw(self, channel: str, build: Callable[[int], int]) -> int:
        """Send ``build(tag)`` on ``"m2s_req"``/``"m2s_rwd"`` expecting no completion (for
        reserved opcodes and empty slots); returns the tag, released once accepted."""
        return await self._request(channel, None, 0, build, return_tag=True)

    async def idle(self) -> None:
        """Wait until no request is in flight."""
        while self._pending:
            self._tag_freed.clear()
            await self._tag_freed.wait()

    # --- machinery ------------------------------------------------------------------------

    def _data_or_error(self, hpa, response):
        if response.opcode != DRSOpcode.MEM_DATA or response.poison:
            raise CxlMemError(hpa, response)
        return response.data

    async def _acquire_tag(self) -> int:
        while not self._free_tags:
            self._tag_freed.clear()
            await self._tag_freed.wait()
        return self._free_tags.pop(self._draw.randrange(len(self._free_tags)))

    def _release_tag(self, tag):
        self._free_tags.append(tag)
        self._tag_freed.set()

    async def _request(self, channel, kind, hpa, build, *, write=None, return_tag=False):
        tag = await self._acquire_tag()
        response_channel = {"read": "drs", "write": "ndr", "invalidate": "ndr"}.get(kind)
        pending = _Pending(kind, hpa)
        accepted = Event()

        def on_accept(time):
            if self.scoreboard is not None:
                if write is not None:
                    self.scoreboard.write_accepted(hpa, *write, time)
                elif kind == "write":
                    self.scoreboard.forget(hpa)    # untracked data: stop checking the line
                elif kind == "read":
                    pending.expectation = self.scoreboard.read_accepted(hpa, time)
            accepted.set()

        if response_channel is not None:
            assert tag not in self._pending, f"tag {tag:#x} reused while in flight"
            self._pending[tag] = pending
            self._expecting[response_channel] += 1
            self.peak_outstanding = max(self.peak_outstanding, len(self._pending))
            self._sinks[response_channel].wake.set()
        self._drivers[channel].send(_Outgoing(build(tag), on_accept))
        await accepted.wait()
        if response_channel is None:
            self._release_tag(tag)
            return tag if return_tag else None
        await pending.done.wait()
        self._release_tag(tag)
        if kind == "read" and self.scoreboard is not None:
            response = pending.response
            if response.opcode == DRSOpcode.MEM_DATA and not response.poison:
                self.scoreboard.check(hpa, pending.expectation, response.data)
        return pending.response

    def _complete(self, channel, tag, response):
        pending = self._pending.get(tag)
        if pending is None:
            raise AssertionError(f"S2M {channel.upper()} with tag {tag:#x} that no request "
                                 f"is waiting for: {response}")
        want = "drs" if pending.kind == "read" else "ndr"
        if want != channel:
            raise AssertionError(f"{pending.kind} of {pending.hpa:#x} (tag {tag:#x}) completed "
                                 f"on S2M {channel.upper()}: {response}")
        del self._pending[tag]
        self._expecting[channel] -= 1
        self.completions[channel] += 1
        pending.response = response
        pending.done.set()

    def _on_ndr(self, bits):
        response = parse_ndr(bits)
        if response.opcode != NDROpcode.CMP or not response.valid:
            raise AssertionError(f"unexpected NDR {response}")
        self._complete("ndr", response.tag, response)

    def _on_drs(self, bits):
        response = parse_drs(bits)
        if not response.valid:
            raise AssertionError(f"DRS with its Valid bit clear: {response}")
        self._complete("drs", response.tag, response)


def _lines(hpa: int, length: int) -> list[int]:
    if hpa % LINE_BYTES or length <= 0 or length % LINE_BYTES:
        raise ValueError(f"accesses are whole 64-byte lines: address {hpa:#x}, length {length}")
    return list(range(hpa, hpa + length, LINE_BYTES))


class MemoryScoreboard:
    """The contents each read may return, from writes in device acceptance order, per line.

    Bytes never written (nor preloaded) are unknown and not checked. Writes accepted in the
    same simulation step as a read may or may not be visible to it.
    """

    def __init__(self):
        self._lines: dict[int, _LineHistory] = {}
        self.checked = 0

    def _line(self, hpa) -> "_LineHistory":
        return self._lines.setdefault(hpa - hpa % LINE_BYTES, _LineHistory())

    def preload(self, hpa: int, data: bytes) -> None:
        """Declare the current contents of whole lines (e.g. memory initialised directly)."""
        for k, a in enumerate(_lines(hpa, len(data))):
            self._line(a).set(data[k * LINE_BYTES:(k + 1) * LINE_BYTES])

    def forget(self, hpa: int, length: int = LINE_BYTES) -> None:
        """Stop checking lines changed behind the host's back."""
        for a in _lines(hpa - hpa % LINE_BYTES, length):
            self._lines.pop(a, None)

    def write_accepted(self, hpa, line, byte_enable, time):
        self._line(hpa).write(line, byte_enable, time)

    def read_accepted(self, hpa, time):
        return self._line(hpa).candidates(time)

    def check(self, hpa, expectation, data):
        if expectation is None:
            return
        for contents, known in expectation:
            if all(not known >> k & 1 or contents[k] == data[k] for k in range(LINE_BYTES)):
                self.checked += 1
                return
        contents, known = expectation[-1]
        wrong = [k for k in range(LINE_BYTES) if known >> k & 1 and contents[k] != data[k]]
        raise AssertionError(
            f"read of {hpa:#x} returned {data.hex()}, expected {contents.hex()} "
            f"(bytes {wrong[:8]} differ; {len(expectation)} acceptable version(s))")


class _LineHistory:
    def __init__(self):
        self.contents = bytearray(LINE_BYTES)
        self.known = 0
        self._same_step: list[tuple[int, bytes, int]] = []   # writes of the latest step

    def set(self, data):
        self.contents[:] = data
        self.known = ALL_BYTES
        self._same_step.clear()

    def _settle(self, time):
        """Apply the writes accepted before ``time``."""
        while self._same_step and self._same_step[0][0] < time:
            _, data, byte_enable = self._same_step.pop(0)
            for k in range(LINE_BYTES):
                if byte_enable >> k & 1:
                    self.contents[k] = data[k]
            self.known |= byte_enable

    def write(self, data, byte_enable, time):
        self._settle(time)
        self._same_step.append((time, bytes(data), byte_enable))

    def candidates(self, time):
        self._settle(time)
        if not self.known and not self._same_step:
            return None
        versions, contents, known = [], bytearray(self.contents), self.known
        versions.append((bytes(contents), known))
        for _, data, byte_enable in self._same_step:   # same step: may or may not count
            for k in range(LINE_BYTES):
                if byte_enable >> k & 1:
                    contents[k] = data[k]
            known |= byte_enable
            versions.append((bytes(contents), known))
        return versions
