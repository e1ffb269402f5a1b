"""HDM decoders of a CXL 2.0 Type-3 endpoint: host physical (HPA) <-> device physical (DPA).

The mirror of ``hw/cxl/hdm.py``, in plain Python (one address) and NumPy (many). The formulas
are those of ``research/dlrm_cxl.md`` B.1.6: QEMU ``cxl_type3_dpa()`` for the walk over several
decoders with DPA skip, Linux ``cxl_calculate_dpa_offset()`` / ``cxl_calculate_hpa_offset()`` for
the power-of-two and the 3/6/12-way offsets.

Registers (CXL 2.0 section 8.2.5.12): base, size and DPA skip carry only bits [51:28], so they
are multiples of 256 MiB; IG encodes the interleave granularity ``256 B << IG`` (0..6 for an
endpoint: 256 B .. 16 KiB); IW encodes the ways: 0..4 -> 1, 2, 4, 8, 16 and 8, 9, 10 -> 3, 6, 12.

Decoding, for decoders in index order::

    dpa_base = 0
    for each decoder i:
        if not committed: stop (no hit)          # later decoders' DPA bases would be undefined
        dpa_base += skip_i
        if base_i <= HPA < base_i + size_i: hit decoder i with DPA = dpa_base + dpa_offset
        dpa_base += size_i / ways_i

With ``G = hpa_offset >> (8 + IG)`` (the granule number), the granule's target position is
``G mod ways`` and the device keeps granule ``G div ways``. A hit whose position is not this
device's ``position`` is not this device's memory: the front end answers it like a miss (NXM),
so both are reported. The device never sees such addresses on a correctly routed fabric.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "GRANULE", "GRANULE_SHIFT", "HPA_LIMIT", "IW_WAYS", "Decoder", "HdmDecoderSet",
    "Translation", "dpa_offset", "granularity_of", "hpa_offset", "iw_of", "position_of",
    "ways_of",
]

HPA_WIDTH = 52
HPA_LIMIT = 1 << HPA_WIDTH
#: Base, size and skip registers hold bits [51:28] only.
GRANULE_SHIFT = 28
GRANULE = 1 << GRANULE_SHIFT
#: IW encoding -> number of ways.
IW_WAYS = {0: 1, 1: 2, 2: 4, 3: 8, 4: 16, 8: 3, 9: 6, 10: 12}
MAX_IG = 6


def ways_of(iw: int) -> int:
    if iw not in IW_WAYS:
        raise ValueError(f"Interleave ways encoding (IW) must be one of "
                         f"{', '.join(map(str, IW_WAYS))}, not {iw!r}")
    return IW_WAYS[iw]


def iw_of(ways: int) -> int:
    for iw, w in IW_WAYS.items():
        if w == ways:
            return iw
    raise ValueError(f"Interleave ways must be one of 1, 2, 3, 4, 6, 8, 12, 16, not {ways!r}")


def granularity_of(ig: int) -> int:
    if not isinstance(ig, int) or not 0 <= ig <= MAX_IG:
        raise ValueError(f"Interleave granularity encoding (IG) must be in 0..{MAX_IG}, "
                         f"not {ig!r}")
    return 256 << ig


def _ig_of(granularity: int) -> int:
    for ig in range(MAX_IG + 1):
        if 256 << ig == granularity:
            return ig
    raise ValueError(f"Interleave granularity must be a power of two in 256..16384 bytes, "
                     f"not {granularity!r}")


def _split(iw: int) -> tuple[int, bool]:
    """(k, by_three): ways = 2**k, or 3 * 2**k for the 3/6/12-way encodings."""
    return (iw - 8, True) if iw >= 8 else (iw, False)


def dpa_offset(hpa_off: int, ig: int, iw: int) -> int:
    """Linux ``cxl_calculate_dpa_offset``: drop the interleave bits above the granule."""
    k, by_three = _split(iw)
    low = hpa_off & ((1 << (8 + ig)) - 1)
    upper = hpa_off >> (8 + ig + k)
    if by_three:
        upper //= 3
    return (upper << (8 + ig)) | low


def position_of(hpa_off: int, ig: int, iw: int) -> int:
    """Target position of the granule holding ``hpa_off``: ``(hpa_off >> (8 + IG)) mod ways``."""
    return (hpa_off >> (8 + ig)) % ways_of(iw)


def hpa_offset(dpa_off: int, ig: int, iw: int, position: int) -> int:
    """Linux ``cxl_calculate_hpa_offset``: the inverse of :func:`dpa_offset` for ``position``."""
    k, by_three = _split(iw)
    low = dpa_off & ((1 << (8 + ig)) - 1)
    upper = dpa_off >> (8 + ig)
    if by_three:
        granule = (((upper * 3) << k) + position)
    else:
        granule = (upper << k) | position
    return (granule << (8 + ig)) | low


@dataclass(frozen=True)
class Decoder:
    """One endpoint HDM decoder, in bytes. ``size`` is the HPA window of the whole interleave
    set; this device holds ``size / ways`` bytes of it."""

    base: int
    size: int
    ig: int = 0
    iw: int = 0
    position: int = 0
    skip: int = 0
    committed: bool = True

    def __post_init__(self):
        ways = ways_of(self.iw)
        granularity_of(self.ig)
        for name in ("base", "size", "skip"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"Decoder {name} must be an integer, not {value!r}")
        if not 0 <= self.base < HPA_LIMIT or self.base % GRANULE:
            raise ValueError(f"Decoder base must be a multiple of 256 MiB below 2**52, "
                             f"not {self.base:#x}")
        if self.size < 0 or self.size % (ways * GRANULE):
            raise ValueError(f"Decoder size must be a non-negative multiple of ways x 256 MiB "
                             f"({ways} x 256 MiB), not {self.size:#x}")
        if self.base + self.size > HPA_LIMIT:
            raise ValueError(f"Decoder window {self.base:#x} + {self.size:#x} ends above 2**52")
        if not 0 <= self.skip < HPA_LIMIT or self.skip % GRANULE:
            raise ValueError(f"DPA skip must be a multiple of 256 MiB below 2**52, "
                             f"not {self.skip:#x}")
        if not isinstance(self.position, int) or not 0 <= self.position < ways:
            raise ValueError(f"Position must be in 0..{ways - 1} for {ways} ways, "
                             f"not {self.position!r}")

    @classmethod
    def make(cls, *, base: int, size: int, ways: int = 1, granularity: int = 256,
             position: int = 0, skip: int = 0, committed: bool = True) -> Decoder:
        """The same decoder from ways and granularity in plain numbers."""
        return cls(base=base, size=size, ig=_ig_of(granularity), iw=iw_of(ways),
                   position=position, skip=skip, committed=committed)

    @property
    def ways(self) -> int:
        return IW_WAYS[self.iw]

    @property
    def granularity(self) -> int:
        return 256 << self.ig

    @property
    def dpa_size(self) -> int:
        """Bytes of this device's memory the decoder maps."""
        return self.size // self.ways

    def contains(self, hpa: int) -> bool:
        return self.base <= hpa < self.base + self.size


@dataclass(frozen=True)
class Translation:
    """Result of decoding one HPA. ``hit``: a usable decoder's window holds it; ``target``: its
    granule's position is this device's; ``dpa`` is set only when both hold."""

    hit: bool
    target: bool
    decoder: int | None = None
    position: int | None = None
    dpa: int | None = None

    @property
    def nxm(self) -> bool:
        """Not this device's memory: the front end answers MemData-NXM / drops the write."""
        return not (self.hit and self.target)


class HdmDecoderSet:
    """The decoders of one endpoint, in index order, with the global HDM Decoder Enable."""

    def __init__(self, decoders: Sequence[Decoder], *, enable: bool = True):
        self.decoders = tuple(decoders)
        for d in self.decoders:
            if not isinstance(d, Decoder):
                raise TypeError(f"Decoders must be Decoder objects, not {d!r}")
        self.enable = bool(enable)
        # Decoders after the first uncommitted one never decode (QEMU stops the walk there).
        self.usable = 0
        if self.enable:
            while self.usable < len(self.decoders) and self.decoders[self.usable].committed:
                self.usable += 1
        self.dpa_bases = []
        dpa_base = 0
        for d in self.decoders:
            dpa_base += d.skip
            self.dpa_bases.append(dpa_base)
            dpa_base += d.dpa_size

    def forward(self, hpa: int) -> Translation:
        """HPA -> DPA."""
        if not isinstance(hpa, int) or not 0 <= hpa < HPA_LIMIT:
            raise ValueError(f"HPA must be an integer in [0, 2**52), not {hpa!r}")
        for index in range(self.usable):
            d = self.decoders[index]
            if d.contains(hpa):
                off = hpa - d.base
                position = position_of(off, d.ig, d.iw)
                if position != d.position:
                    return Translation(True, False, index, position)
                dpa = self.dpa_bases[index] + dpa_offset(off, d.ig, d.iw)
                return Translation(True, True, index, position, dpa)
        return Translation(False, False)

    def inverse(self, dpa: int) -> int | None:
        """DPA -> the HPA that this device's decoders map to it, or None (skipped or unmapped
        device memory)."""
        for index in range(self.usable):
            d = self.decoders[index]
            start = self.dpa_bases[index]
            if start <= dpa < start + d.dpa_size:
                return d.base + hpa_offset(dpa - start, d.ig, d.iw, d.position)
        return None

    def forward_array(self, hpas) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Vectorised :meth:`forward`: ``(dpa, hit, target)`` arrays; ``dpa`` is 0 where
        ``hit & target`` is false."""
        hpa = np.asarray(hpas, dtype=np.uint64)
        if hpa.size and int(hpa.max()) >= HPA_LIMIT:
            raise ValueError("HPAs must be below 2**52")
        dpa = np.zeros(hpa.shape, dtype=np.uint64)
        hit = np.zeros(hpa.shape, dtype=bool)
        target = np.zeros(hpa.shape, dtype=bool)
        for index in range(self.usable):
            d = self.decoders[index]
            inside = ~hit & (hpa >= np.uint64(d.base)) & (hpa < np.uint64(d.base + d.size))
            off = hpa - np.uint64(d.base)
            k, by_three = _split(d.iw)
            granule = off >> np.uint64(8 + d.ig)
            upper = granule >> np.uint64(k)
            if by_three:
                position = ((upper % np.uint64(3)) << np.uint64(k)) | (
                    granule & np.uint64((1 << k) - 1))
                upper = upper // np.uint64(3)
            else:
                position = granule & np.uint64((1 << k) - 1)
            low = off & np.uint64((1 << (8 + d.ig)) - 1)
            mine = inside & (position == np.uint64(d.position))
            value = np.uint64(self.dpa_bases[index]) + ((upper << np.uint64(8 + d.ig)) | low)
            dpa = np.where(mine, value, dpa)
            target |= mine
            hit |= inside
        return dpa, hit, target
