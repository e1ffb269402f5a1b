"""Packing and unpacking of CXL.mem messages for testbenches, by the RTL's own layouts.

Pure Python (no cocotb), so Amaranth-simulator tests and cocotb host models share it. Packing
walks the ``data.StructLayout`` of ``hw/cxl/messages.py`` by field offsets, so any raw value fits
a field (reserved opcodes included) and nothing is written by hand twice.
"""

from dataclasses import dataclass
from enum import Enum

from amaranth.lib import data

from hw.cxl.messages import (
    HPA_WIDTH,
    LINE_BYTES,
    M2S_REQ,
    M2S_RWD,
    S2M_DRS,
    S2M_NDR,
    DRSOpcode,
    MetaField,
    MetaValue,
    NDROpcode,
    SnpType,
)

__all__ = ["DrsResponse", "NdrResponse", "pack", "pack_req", "pack_rwd", "parse_drs",
           "parse_ndr", "unpack"]

ALL_BYTES = (1 << LINE_BYTES) - 1


def pack(layout: data.StructLayout, fields: dict) -> int:
    """Raw bits of ``fields`` (nested dicts for nested structs; ints or enum members) in
    ``layout``; absent fields are 0. A value that does not fit its field is an error."""
    bits = 0
    for name, value in fields.items():
        field = layout[name]
        if isinstance(field.shape, data.StructLayout):
            value = pack(field.shape, value)
        elif isinstance(value, Enum):
            value = value.value
        value = int(value)
        if not 0 <= value < 1 << field.width:
            raise ValueError(f"{name}={value:#x} does not fit in {field.width} bits")
        bits |= value << field.offset
    return bits


def unpack(layout: data.StructLayout, bits: int) -> dict:
    """Raw field values of ``bits`` (nested dicts for nested structs), enums left as ints."""
    fields = {}
    for name, field in layout:
        value = (bits >> field.offset) & ((1 << field.width) - 1)
        fields[name] = unpack(field.shape, value) if isinstance(
            field.shape, data.StructLayout) else value
    return fields


def _line(hpa: int) -> int:
    if not isinstance(hpa, int) or not 0 <= hpa < 1 << HPA_WIDTH or hpa % LINE_BYTES:
        raise ValueError(f"HPA must be a 64-byte-aligned address below 2**52, not {hpa!r}")
    return hpa


def pack_req(opcode, hpa: int, tag: int, *, ld_id=0, valid=1, snp_type=SnpType.NO_OP,
             meta_field=MetaField.NO_OP, meta_value=MetaValue.INVALID, tc=0) -> int:
    """An M2S Req message (Address[51:5])."""
    return pack(M2S_REQ, {
        "valid": valid, "opcode": opcode, "snp_type": snp_type, "meta_field": meta_field,
        "meta_value": meta_value, "tag": tag, "address": _line(hpa) >> 5, "ld_id": ld_id,
        "tc": tc})


def pack_rwd(opcode, hpa: int, tag: int, line: bytes, *, byte_enable=None, poison=False,
             ld_id=0, valid=1, snp_type=SnpType.NO_OP, meta_field=MetaField.NO_OP,
             meta_value=MetaValue.INVALID, tc=0) -> int:
    """An M2S RwD message (Address[51:6]) with one line of data, little-endian."""
    if len(line) != LINE_BYTES:
        raise ValueError(f"write data must be {LINE_BYTES} bytes, not {len(line)}")
    return pack(M2S_RWD, {
        "header": {"valid": valid, "opcode": opcode, "snp_type": snp_type,
                   "meta_field": meta_field, "meta_value": meta_value, "tag": tag,
                   "address": _line(hpa) >> 6, "poison": int(poison), "ld_id": ld_id, "tc": tc},
        "data": int.from_bytes(line, "little"),
        "byte_enable": ALL_BYTES if byte_enable is None else byte_enable,
    })


def _enum(kind, value):
    try:
        return kind(value)
    except ValueError:
        return value   # a reserved encoding stays a plain int


@dataclass(frozen=True)
class NdrResponse:
    opcode: NDROpcode | int
    tag: int
    ld_id: int
    dev_load: int
    meta_field: int
    meta_value: int
    valid: int


@dataclass(frozen=True)
class DrsResponse:
    opcode: DRSOpcode | int
    tag: int
    ld_id: int
    dev_load: int
    poison: bool
    data: bytes
    meta_field: int
    meta_value: int
    valid: int


def parse_ndr(bits: int) -> NdrResponse:
    f = unpack(S2M_NDR, bits)
    return NdrResponse(_enum(NDROpcode, f["opcode"]), f["tag"], f["ld_id"], f["dev_load"],
                       f["meta_field"], f["meta_value"], f["valid"])


def parse_drs(bits: int) -> DrsResponse:
    f = unpack(S2M_DRS, bits)
    h = f["header"]
    return DrsResponse(_enum(DRSOpcode, h["opcode"]), h["tag"], h["ld_id"], h["dev_load"],
                       bool(h["poison"]), f["data"].to_bytes(LINE_BYTES, "little"),
                       h["meta_field"], h["meta_value"], h["valid"])
