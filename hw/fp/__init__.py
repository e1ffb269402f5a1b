"""Pipelined IEEE-754 binary32 arithmetic: round to nearest even, subnormals kept.

:class:`FPAdd` (``a + b`` or ``a - b``) and :class:`FPMul` are single units; :class:`FPLanes`
puts several side by side behind one stream (16 lanes of binary32 fill a 64-byte line). All
are valid-only pipelines that accept one operation per cycle (folded lanes, one per ``fold``
cycles) and expose their depth as ``latency``; ``stages`` (keyword-only) trades depth for
clock speed, and each unit's ``CUTS`` table documents which datapath boundaries are
registered at every depth. The multiplier's
``dsp`` (keyword-only) picks how its partial products are built: ECP5 ``MULT18X18D`` cells with
their own registers, or Amaranth's ``*``; by default the platform decides (``*`` without one).

Non-NaN results are bit-identical to NumPy ``float32`` arithmetic; every NaN result is
:data:`QUIET_NAN`. ``tb.fp.vectors`` has the matching directed and random test vectors.
"""

from .add import ADD_OPERANDS, FPAdd
from .common import QUIET_NAN
from .lanes import FPLanes, fp_lanes_signature
from .mul import MUL_OPERANDS, FPMul

__all__ = ["ADD_OPERANDS", "MUL_OPERANDS", "QUIET_NAN", "FPAdd", "FPLanes", "FPMul",
           "fp_lanes_signature"]
