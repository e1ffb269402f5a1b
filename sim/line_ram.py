"""The 512-bit line memory of the simulation-only memory models (:mod:`sim.pmem`,
:mod:`sim.axi_memory`).

Under Amaranth's simulator it is a ``lib.memory.Memory``. In Verilog emitted by
:func:`sim.rtl.emit` it is an instance of ``trainingcxl_line_ram`` (``sim/verilog/line_ram.v``,
which :mod:`sim.runner` hands to Verilator with every design): an Amaranth memory carries its
initial contents as a constant, which for a 4 MiB model means minutes of emission and about
10 MB of Verilog; the Verilog module zeroes its lines in a runtime loop instead. Both have
``lib.memory`` semantics: synchronous reads, ``w0`` byte-enabled, later write ports win on the
same line, and a read port can be transparent for ``w0``.
"""

import contextlib
import contextvars
from pathlib import Path

from amaranth.hdl import ClockSignal, Instance, Module, Signal
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

__all__ = ["LINE_BITS", "VERILOG_SOURCE", "LineRam", "external_storage"]

LINE_BITS = 512
VERILOG_SOURCE = Path(__file__).parent / "verilog" / "line_ram.v"
_READ_PORTS = 3

_external = contextvars.ContextVar("trainingcxl_line_ram_external", default=False)


@contextlib.contextmanager
def external_storage():
    """Within this block, :class:`LineRam` elaborates to the Verilog module (for emission)."""
    token = _external.set(True)
    try:
        yield
    finally:
        _external.reset(token)


class LineRam(wiring.Component):
    """``depth`` lines of 512 bits with three write ports and up to three read ports.

    Parameters (keyword-only)
    -------------------------
    depth : int
        Lines, at least 2.
    transparent : sequence of bool
        One entry per read port (1..3): whether it sees ``w0``'s bytes written in the same
        cycle (``transparent_for=(w0,)``).

    Members
    -------
    w0_addr, w0_en (64 byte enables), w0_data : ``In``
    w1_addr, w1_en, w1_data; w2_addr, w2_en, w2_data : ``In``
        Whole-line writes; on the same line ``w2`` beats ``w1`` beats ``w0``.
    r<k>_addr, r<k>_en (init 1) : ``In``; r<k>_data : ``Out(512)``
        Synchronous reads.
    """

    def __init__(self, *, depth, transparent):
        if not isinstance(depth, int) or isinstance(depth, bool) or depth < 2:
            raise ValueError(f"Depth must be an integer of at least 2, not {depth!r}")
        transparent = tuple(transparent)
        if not 1 <= len(transparent) <= _READ_PORTS or not all(
                isinstance(t, bool) for t in transparent):
            raise ValueError(f"Transparency must be 1 to {_READ_PORTS} booleans, one per read "
                             f"port, not {transparent!r}")
        self._depth = depth
        self._transparent = transparent
        self._addr_width = max(1, ceil_log2(depth))
        aw = self._addr_width
        members = {
            "w0_addr": In(aw), "w0_en": In(LINE_BITS // 8), "w0_data": In(LINE_BITS),
            "w1_addr": In(aw), "w1_en": In(1), "w1_data": In(LINE_BITS),
            "w2_addr": In(aw), "w2_en": In(1), "w2_data": In(LINE_BITS),
        }
        for k in range(len(transparent)):
            members.update({f"r{k}_addr": In(aw), f"r{k}_en": In(1, init=1),
                            f"r{k}_data": Out(LINE_BITS)})
        super().__init__(members)

    @property
    def depth(self):
        return self._depth

    @property
    def addr_width(self):
        return self._addr_width

    def elaborate(self, platform):
        m = Module()
        reads = range(len(self._transparent))
        if _external.get():
            ports = {"i_clk": ClockSignal("sync")}
            for name in ("w0", "w1", "w2"):
                ports[f"i_{name}_addr"] = getattr(self, f"{name}_addr")
                ports[f"i_{name}_en"] = getattr(self, f"{name}_en")
                ports[f"i_{name}_data"] = getattr(self, f"{name}_data")
            for k in range(_READ_PORTS):
                if k in reads:
                    ports[f"i_r{k}_addr"] = getattr(self, f"r{k}_addr")
                    ports[f"i_r{k}_en"] = getattr(self, f"r{k}_en")
                    ports[f"o_r{k}_data"] = getattr(self, f"r{k}_data")
                else:
                    ports[f"i_r{k}_addr"] = 0
                    ports[f"i_r{k}_en"] = 0
                    ports[f"o_r{k}_data"] = Signal(LINE_BITS, name=f"unused_r{k}_data")
            params = {"p_DEPTH": self._depth, "p_ADDR_WIDTH": self._addr_width}
            for k in range(_READ_PORTS):
                params[f"p_R{k}_TRANSPARENT"] = int(k in reads and self._transparent[k])
            m.submodules.lines = Instance("trainingcxl_line_ram", **params, **ports)
            return m

        m.submodules.lines = lines = memory.Memory(shape=LINE_BITS, depth=self._depth,
                                                   init=[])
        w0 = lines.write_port(granularity=8)
        w1 = lines.write_port()
        w2 = lines.write_port()
        for name, port in (("w0", w0), ("w1", w1), ("w2", w2)):
            m.d.comb += [port.addr.eq(getattr(self, f"{name}_addr")),
                         port.en.eq(getattr(self, f"{name}_en")),
                         port.data.eq(getattr(self, f"{name}_data"))]
        for k in reads:
            port = lines.read_port(transparent_for=(w0,) if self._transparent[k] else ())
            m.d.comb += [port.addr.eq(getattr(self, f"r{k}_addr")),
                         port.en.eq(getattr(self, f"r{k}_en")),
                         getattr(self, f"r{k}_data").eq(port.data)]
        return m

    def port(self, name):
        """``addr``/``en``/``data`` of port ``name`` (``"w0"``, ``"r1"``, ...) as one object, so
        code written for ``lib.memory`` ports reads the same."""
        return _Port(getattr(self, f"{name}_addr"), getattr(self, f"{name}_en"),
                     getattr(self, f"{name}_data"))


class _Port:
    __slots__ = ("addr", "data", "en")

    def __init__(self, addr, en, data):
        self.addr, self.en, self.data = addr, en, data
