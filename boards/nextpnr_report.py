"""Reads the JSON report that ``nextpnr-ecp5 --report FILE`` writes.

nextpnr's ``docs/report.md`` defines the file as::

    {"utilization": {BEL_TYPE: {"used": N, "available": N}, ...},
     "fmax": {CLOCK_NET: {"achieved": MHz, "constraint": MHz}, ...},
     "critical_paths": [...]}

We keep the four resource kinds that matter on ECP5, under their usual names, and the Fmax of
every clock. Clock nets promoted to global routing carry a ``$glbnet$`` prefix, which is
dropped so a clock keeps the name it has in the design.
"""

import json
import math
from pathlib import Path

__all__ = ["ECP5_RESOURCES", "load_report", "summarise_report"]


# Our name -> nextpnr's BEL type on ECP5.
ECP5_RESOURCES = {
    "LUT4": "TRELLIS_COMB",     # one LUT4 (plus carry) per COMB bel; two per SLICE
    "FF": "TRELLIS_FF",
    "EBR": "DP16KD",            # 18 Kibit block RAM
    "DSP": "MULT18X18D",
}

_GLOBAL_NET_PREFIX = "$glbnet$"


def load_report(path):
    """Parse the report file at ``path``."""
    return json.loads(Path(path).read_text())


def _clock_name(net):
    return net[len(_GLOBAL_NET_PREFIX):] if net.startswith(_GLOBAL_NET_PREFIX) else net


def summarise_report(report):
    """The Fmax per clock and the ECP5 utilisation found in a parsed report.

    Returns a dictionary::

        {"fmax_mhz": {clock: achieved}, "target_mhz": {clock: constraint},
         "timing_met": bool,
         "utilization": {"LUT4": {"used": N, "available": N}, "FF": ..., "EBR": ..., "DSP": ...}}

    A resource kind the design does not use may be missing from nextpnr's table; it is reported
    as used 0 of the ``available`` nextpnr gives, or of ``None`` when nextpnr gives none.
    """
    if not isinstance(report, dict):
        raise TypeError(f"Report must be a dict parsed from nextpnr's JSON, not {report!r}")
    for key in ("utilization", "fmax"):
        if key not in report:
            raise ValueError(f"Report has no {key!r} section; was it written by "
                             f"nextpnr --report?")

    fmax_mhz, target_mhz = {}, {}
    for net, figures in sorted(report["fmax"].items()):
        clock = _clock_name(net)
        fmax_mhz[clock] = round(float(figures["achieved"]), 2)
        target_mhz[clock] = round(float(figures["constraint"]), 2)

    utilization = {}
    for name, bel_type in ECP5_RESOURCES.items():
        figures = report["utilization"].get(bel_type, {"used": 0, "available": None})
        utilization[name] = {"used": int(figures["used"]),
                             "available": (None if figures["available"] is None
                                           else int(figures["available"]))}

    timing_met = all(fmax_mhz[clock] >= target_mhz[clock] or math.isclose(
        fmax_mhz[clock], target_mhz[clock]) for clock in fmax_mhz)
    return {
        "fmax_mhz": fmax_mhz,
        "target_mhz": target_mhz,
        "timing_met": timing_met,
        "utilization": utilization,
    }
