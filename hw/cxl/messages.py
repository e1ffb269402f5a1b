"""CXL.mem messages at the message level: CXL 2.0, 68-byte-flit mode.

One ``data.StructLayout`` per message class, with the field widths of the CXL 2.0 68B-flit
column of ``research/dlrm_cxl.md`` B.1.1 (CXL 1.1 Tables 22/27 and CXL 3.x Tables 3-34, 3-40,
3-49 and 3-52, cross-checked against ``scalable-arch/interfaces`` ``CXL2_MEM_PKG.sv``, which
follows "CXL specification 2020 (Revision 2.0)", and ``SamVOIntel/pyCXL``). Encodings are those
of B.1.2. Fields are listed from bit 0 up in the order the open-source models agree on; the
exact bit positions inside a flit slot (H4/H5/G4/G5) are the flit packer's business, not
these layouts' (B.1.4 marks them unconfirmed).

=============  ======  ============================================================
message        bits    fields (width)
=============  ======  ============================================================
M2S Req        87      valid 1, opcode 4, snp_type 3, meta_field 2, meta_value 2,
                       tag 16, address 47 (Address[51:5]), ld_id 4, tc 2, reserved 6
M2S RwD        87      valid 1, opcode 4, snp_type 3, meta_field 2, meta_value 2,
 header                tag 16, address 46 (Address[51:6]), poison 1, ld_id 4,
                       reserved 6, tc 2
M2S RwD        663     header 87, data 512, byte_enable 64 (used by MemWrPtl only)
S2M NDR        30      valid 1, opcode 3, meta_field 2, meta_value 2, tag 16, ld_id 4,
                       dev_load 2
S2M DRS        40      valid 1, opcode 3, meta_field 2, meta_value 2, tag 16, poison 1,
 header                ld_id 4, dev_load 2, reserved 9
S2M DRS        552     header 40, data 512
=============  ======  ============================================================

Data is one 64-byte line, byte ``k`` in bits ``[8k+7:8k]`` (little-endian, as on AXI); byte
enable bit ``k`` covers byte ``k``. The 68B flit carries it as four 16-byte slots, and carries
a MemWrPtl's enables in an extra BE slot (B.1.4); at the message level they travel together.

Channels and credits (B.1.3)
----------------------------
Each message class is a ``lib.stream`` channel, one message per transfer:
``m2s_req: In(stream.Signature(M2S_REQ))``, ``m2s_rwd: In(stream.Signature(M2S_RWD))``,
``s2m_ndr: Out(stream.Signature(S2M_NDR))``, ``s2m_drs: Out(stream.Signature(S2M_DRS))``.
On the link, flow control is by credits, per message: ReqCrd for M2S Req, DataCrd for M2S
RwD (and, in the other direction, S2M DRS), RspCrd for S2M NDR. Here ``ready`` stands for
credit availability: a receiver asserts ``ready`` exactly when it could have returned a credit
for one more message of that class. A flit layer in front of these ports would hold
received messages in buffers sized by the credits it advertised and return a credit each time
a message is taken.

The requester pre-allocates space for every NDR and DRS it can receive, so on a real link
responses always sink. The design therefore assumes only that **the requester takes every
S2M message eventually, whatever the state of its own M2S channels** (no response waits for a
request to be accepted); it does not assume that S2M ``ready`` is always high, so a flit packer
or a host model may pause it. The ``valid`` field inside each message is the message's own
Valid bit from the flit slot; the stream's ``valid`` is the handshake. A message whose Valid bit
is 0 is an empty slot, which an unpacker would not forward.
"""

from amaranth.hdl import Cat, Const, Value, unsigned
from amaranth.lib import data, enum

__all__ = [
    "DATA_BITS", "HPA_WIDTH", "LINE_BYTES", "M2S_REQ", "M2S_RWD", "M2S_RWD_HEADER", "S2M_DRS",
    "S2M_DRS_HEADER", "S2M_NDR", "DRSOpcode", "DevLoad", "M2SReqOpcode", "M2SRwDOpcode",
    "MetaField", "MetaValue", "NDROpcode", "SnpType", "struct_value",
]

#: One cacheline: the only data size of CXL.mem.
LINE_BYTES = 64
DATA_BITS = 8 * LINE_BYTES
#: Host physical addresses are 52 bits in CXL 2.0 (Address[51:x] in every M2S message).
HPA_WIDTH = 52


class M2SReqOpcode(enum.Enum, shape=4):
    """M2S Req MemOpcode (B.1.2). CXL 1.1 lacked MemSpecRd and MemClnEvct; the TEE opcodes
    exist only in 256B flits and are left out."""
    MEM_INV = 0b0000
    MEM_RD = 0b0001
    MEM_RD_DATA = 0b0010
    MEM_RD_FWD = 0b0011
    MEM_WR_FWD = 0b0100
    MEM_SPEC_RD = 0b1000
    MEM_INV_NT = 0b1001
    MEM_CLN_EVCT = 0b1010


class M2SRwDOpcode(enum.Enum, shape=4):
    """M2S RwD MemOpcode (B.1.2). BIConflict (0100b) needs 256B flits and is left out."""
    MEM_WR = 0b0001
    MEM_WR_PTL = 0b0010


class NDROpcode(enum.Enum, shape=3):
    """S2M NDR opcode (B.1.2). A Type-3 HDM-H device completes every write with Cmp."""
    CMP = 0b000
    CMP_S = 0b001
    CMP_E = 0b010


class DRSOpcode(enum.Enum, shape=3):
    """S2M DRS opcode (B.1.2). MemData-NXM ("non-existent memory": data all ones, poison if
    enabled) is listed in the CXL 3.x table our sources quote; DESIGN.md section 5 asks for it
    and this device uses it for reads that decode to no memory."""
    MEM_DATA = 0b000
    MEM_DATA_NXM = 0b001


class MetaField(enum.Enum, shape=2):
    META0_STATE = 0b00
    EXTENDED_META_STATE = 0b01  # CXL 3.x; reserved in 1.1
    NO_OP = 0b11


class MetaValue(enum.Enum, shape=2):
    """Meta0-State values. For HDM-H in a Type-3 device their meaning is host-specific."""
    INVALID = 0b00
    ANY = 0b10
    SHARED = 0b11


class SnpType(enum.Enum, shape=3):
    NO_OP = 0b000
    SNP_DATA = 0b001
    SNP_CUR = 0b010
    SNP_INV = 0b011


class DevLoad(enum.Enum, shape=2):
    """Device load reported in every NDR and DRS, for the host's QoS throttling."""
    LIGHT = 0b00
    OPTIMAL = 0b01
    MODERATE_OVERLOAD = 0b10
    SEVERE_OVERLOAD = 0b11


#: M2S Req, 87 bits (CXL 2.0 68B: B.1.1 "M2S Req" table, 2.0 column). Address[5] is carried
#: but unused here ("provisioned for future usages such as critical chunk first", CXL 1.1).
M2S_REQ = data.StructLayout({
    "valid": unsigned(1),
    "opcode": M2SReqOpcode,
    "snp_type": SnpType,
    "meta_field": MetaField,
    "meta_value": MetaValue,
    "tag": unsigned(16),
    "address": unsigned(47),    # Address[51:5]
    "ld_id": unsigned(4),       # logical device of a multi-logical device (MLD)
    "tc": unsigned(2),          # traffic class
    "reserved": unsigned(6),
})

#: M2S RwD header, 87 bits (B.1.1 "M2S RwD": 68B column, TRP absent, LD-ID present).
M2S_RWD_HEADER = data.StructLayout({
    "valid": unsigned(1),
    "opcode": M2SRwDOpcode,
    "snp_type": SnpType,
    "meta_field": MetaField,
    "meta_value": MetaValue,
    "tag": unsigned(16),
    "address": unsigned(46),    # Address[51:6]
    "poison": unsigned(1),      # the write data is poisoned
    "ld_id": unsigned(4),
    "reserved": unsigned(6),
    "tc": unsigned(2),
})

#: M2S RwD: header, one line of data, and the 64 byte enables of MemWrPtl (ignored for MemWr).
M2S_RWD = data.StructLayout({
    "header": M2S_RWD_HEADER,
    "data": unsigned(DATA_BITS),
    "byte_enable": unsigned(LINE_BYTES),
})

#: S2M NDR (no data response), 30 bits (B.1.1 "S2M NDR", 68B column: LD-ID and DevLoad, no
#: reserved bits).
S2M_NDR = data.StructLayout({
    "valid": unsigned(1),
    "opcode": NDROpcode,
    "meta_field": MetaField,
    "meta_value": MetaValue,
    "tag": unsigned(16),
    "ld_id": unsigned(4),
    "dev_load": DevLoad,
})

#: S2M DRS (data response) header, 40 bits (B.1.1 "S2M DRS", 68B column).
S2M_DRS_HEADER = data.StructLayout({
    "valid": unsigned(1),
    "opcode": DRSOpcode,
    "meta_field": MetaField,
    "meta_value": MetaValue,
    "tag": unsigned(16),
    "poison": unsigned(1),
    "ld_id": unsigned(4),
    "dev_load": DevLoad,
    "reserved": unsigned(9),
})

#: S2M DRS: header and one line of data.
S2M_DRS = data.StructLayout({
    "header": S2M_DRS_HEADER,
    "data": unsigned(DATA_BITS),
})


def struct_value(layout: data.StructLayout, fields: dict) -> Value:
    """A whole ``layout`` value as one expression: ``fields`` maps names to values, enum
    members or nested dicts; absent fields are 0.

    Why not assign field by field: Yosys writes the constant fields of a combinationally
    assigned struct as ``always @*`` blocks that read nothing, and Verilator never runs those
    (warning ALWNEVER), so the constants would be 0 in simulation. One full-width assignment
    becomes a plain ``assign``.
    """
    unknown = set(fields) - {name for name, _ in layout}
    if unknown:
        raise KeyError(f"{sorted(unknown)} are not fields of {layout!r}")
    parts = []
    for name, field in layout:   # StructLayout fields are contiguous, in offset order
        value = fields.get(name, 0)
        if isinstance(value, dict):
            value = struct_value(field.shape, value)
        value = Value.cast(value).as_unsigned()
        if len(value) < field.width:
            value = Cat(value, Const(0, field.width - len(value)))
        parts.append(value[:field.width])
    return Cat(*parts)
