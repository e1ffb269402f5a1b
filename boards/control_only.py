"""Builds that measure the engines' control alone: every FP lane a register chain.

The FP lanes of the ``emb`` design are a third of its LUTs and most of its DSPs, and their
timing is measured on its own (the ``fp_*`` blocks of :mod:`boards.blocks`). To see what the
rest of an engine (its command state, validators, windows, walkers, routers) allows, and to
build that in a third of the time, :func:`control_only` swaps every :class:`~hw.fp.FPLanes`
for a stand-in with the same ports and latency: lane ``k``'s result is ``a[k] ^ b[k]``
through ``latency`` registers, and the tag and ``o.valid`` are delayed alike. Every engine
then issues, waits and counts cycle for cycle as with the real lanes; only the units' logic,
DSPs and routing are gone.

Such a bitstream is for timing only: its self-test fails, as the results are not sums and
products. ``python -m boards.synth --board ulx3s-85f --control-only`` builds one and marks its
``summary.json`` with ``"control_only": true``.
"""

import contextlib

from amaranth.hdl import Module

from hw.fp.common import delay
from hw.fp.lanes import FPLanes

__all__ = ["control_only", "register_chain_lanes"]


def register_chain_lanes(lanes, platform):
    """The stand-in's elaboration of ``lanes`` (an :class:`~hw.fp.FPLanes`): its ports, its
    :attr:`~hw.fp.FPLanes.latency`, no arithmetic."""
    m = Module()
    results = lanes.o.payload.result if lanes.tag_width else lanes.o.payload
    for index in range(lanes.lanes):
        m.d.comb += results[index].eq(delay(
            m, lanes.i.payload.a[index] ^ lanes.i.payload.b[index], lanes.latency,
            name=f"lane_{index}", reset_less=True))
    m.d.comb += lanes.o.valid.eq(delay(m, lanes.i.valid, lanes.latency, name="valid"))
    if lanes.tag_width:
        m.d.comb += lanes.o.payload.tag.eq(
            delay(m, lanes.i.payload.tag, lanes.latency, name="tag", reset_less=True))
    return m


@contextlib.contextmanager
def control_only():
    """Within the block, every :class:`~hw.fp.FPLanes` elaborates as its stand-in
    (:func:`register_chain_lanes`); on leaving it, even by an exception, as itself again."""
    original = FPLanes.elaborate
    FPLanes.elaborate = register_chain_lanes
    try:
        yield
    finally:
        FPLanes.elaborate = original
