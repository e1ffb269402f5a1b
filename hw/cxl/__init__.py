"""CXL.mem front end (CXL 2.0, 68B-flit mode, at the message level): message layouts, the HDM
decoder (HPA -> DPA) and the HDM-H request flows onto an AXI4 memory port.

The 68-byte flit packer (CRC 1F053h), the link layer and CXL.cache are not implemented.
"""

from .divide import DivideBy3
from .frontend import COUNTERS, ERRORS, CxlMemFrontEnd, protected_region_layout, status_layout
from .hdm import HDM_DECODER, HDM_RESULT, HdmDecoder, decoder_fields
from .messages import (
    M2S_REQ,
    M2S_RWD,
    M2S_RWD_HEADER,
    S2M_DRS,
    S2M_DRS_HEADER,
    S2M_NDR,
    DevLoad,
    DRSOpcode,
    M2SReqOpcode,
    M2SRwDOpcode,
    MetaField,
    MetaValue,
    NDROpcode,
    SnpType,
)

__all__ = [
    "COUNTERS", "ERRORS", "HDM_DECODER", "HDM_RESULT", "M2S_REQ", "M2S_RWD", "M2S_RWD_HEADER",
    "S2M_DRS", "S2M_DRS_HEADER", "S2M_NDR", "CxlMemFrontEnd", "DRSOpcode", "DevLoad",
    "DivideBy3", "HdmDecoder", "M2SReqOpcode", "M2SRwDOpcode", "MetaField", "MetaValue",
    "NDROpcode", "SnpType", "decoder_fields", "protected_region_layout", "status_layout",
]
