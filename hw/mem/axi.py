"""AXI4 memory-mapped interface signatures (manager's view).

Members use the AXI signal names flat (``araddr``, ``arvalid``, ...), so a port named ``axi``
becomes ``axi__araddr`` etc. in Verilog and binds directly with cocotbext-axi:
``AxiBus.from_prefix(dut, "axi_")`` (its separator ``_`` plus Amaranth's trailing ``_``).
Only INCR bursts are used; ``arsize``/``awsize`` are always the full data width.
"""

from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["AXI4LiteSignature", "AXI4Signature"]

_VALID_DATA_WIDTHS = (32, 64, 128, 256, 512, 1024)


class AXI4Signature(wiring.Signature):
    """AXI4 manager port: AR/R/AW/W/B channels, INCR bursts, no locks, QoS or regions.

    Parameters (keyword-only): ``addr_width`` (12..64), ``data_width`` (32..1024, a power of
    two), ``id_width`` (1..16). ``len`` is 8 bits (up to 256 beats).
    """

    def __init__(self, *, addr_width=48, data_width=512, id_width=8):
        if not isinstance(addr_width, int) or not 12 <= addr_width <= 64:
            raise ValueError(f"Address width must be an integer in 12..64, not {addr_width!r}")
        if data_width not in _VALID_DATA_WIDTHS:
            raise ValueError(
                f"Data width must be one of {', '.join(map(str, _VALID_DATA_WIDTHS))}, "
                f"not {data_width!r}")
        if not isinstance(id_width, int) or not 1 <= id_width <= 16:
            raise ValueError(f"ID width must be an integer in 1..16, not {id_width!r}")
        self._addr_width, self._data_width, self._id_width = addr_width, data_width, id_width
        strb = data_width // 8
        super().__init__({
            "arid": Out(id_width), "araddr": Out(addr_width), "arlen": Out(8),
            "arsize": Out(3), "arburst": Out(2), "arvalid": Out(1), "arready": In(1),
            "rid": In(id_width), "rdata": In(data_width), "rresp": In(2), "rlast": In(1),
            "rvalid": In(1), "rready": Out(1),
            "awid": Out(id_width), "awaddr": Out(addr_width), "awlen": Out(8),
            "awsize": Out(3), "awburst": Out(2), "awvalid": Out(1), "awready": In(1),
            "wdata": Out(data_width), "wstrb": Out(strb), "wlast": Out(1),
            "wvalid": Out(1), "wready": In(1),
            "bid": In(id_width), "bresp": In(2), "bvalid": In(1), "bready": Out(1),
        })

    @property
    def addr_width(self):
        return self._addr_width

    @property
    def data_width(self):
        return self._data_width

    @property
    def id_width(self):
        return self._id_width

    @property
    def bytes_per_beat(self):
        return self._data_width // 8

    @property
    def size_code(self):
        """``arsize``/``awsize`` value for full-width beats (log2 of bytes per beat)."""
        return (self._data_width // 8).bit_length() - 1

    def __eq__(self, other):
        return (isinstance(other, AXI4Signature) and
                (self.addr_width, self.data_width, self.id_width) ==
                (other.addr_width, other.data_width, other.id_width))

    def __repr__(self):
        return (f"AXI4Signature(addr_width={self.addr_width}, data_width={self.data_width}, "
                f"id_width={self.id_width})")


class AXI4LiteSignature(wiring.Signature):
    """AXI4-Lite manager port (registers / CXL.io BAR), 32- or 64-bit data."""

    def __init__(self, *, addr_width=16, data_width=32):
        if not isinstance(addr_width, int) or not 4 <= addr_width <= 64:
            raise ValueError(f"Address width must be an integer in 4..64, not {addr_width!r}")
        if data_width not in (32, 64):
            raise ValueError(f"Data width must be 32 or 64, not {data_width!r}")
        self._addr_width, self._data_width = addr_width, data_width
        super().__init__({
            "araddr": Out(addr_width), "arprot": Out(3), "arvalid": Out(1), "arready": In(1),
            "rdata": In(data_width), "rresp": In(2), "rvalid": In(1), "rready": Out(1),
            "awaddr": Out(addr_width), "awprot": Out(3), "awvalid": Out(1), "awready": In(1),
            "wdata": Out(data_width), "wstrb": Out(data_width // 8), "wvalid": Out(1),
            "wready": In(1),
            "bresp": In(2), "bvalid": In(1), "bready": Out(1),
        })

    @property
    def addr_width(self):
        return self._addr_width

    @property
    def data_width(self):
        return self._data_width

    def __eq__(self, other):
        return (isinstance(other, AXI4LiteSignature) and
                (self.addr_width, self.data_width) == (other.addr_width, other.data_width))

    def __repr__(self):
        return f"AXI4LiteSignature(addr_width={self.addr_width}, data_width={self.data_width})"
