"""Checkpoint logic of the TrainingCXL device: batch-aware undo logging on lookup, batch flags
and commit records in the order of DESIGN.md section 4, MLP snapshot records, recovery and
GPF drain.

* :mod:`.engine`     :class:`CheckpointEngine`, the component the device instantiates;
* :mod:`.layouts`    the persistent layout (superblock, commit record, flags, log groups,
                     snapshot records), the command-side enums and Python pack/unpack;
* :mod:`.sequencer`  the UPDATE ordering (seal, flag, gated in-place writes, commit): the
                     formally checked part;
* :mod:`.join`       one memory port for the engine's traffic and the own writes;
* :mod:`.tap`        log entries from the lookup's own reads (no extra read), deduplicated;
* :mod:`.log_writer` entries packed into 8-line groups of a log area;
* :mod:`.formal`     ``python -m hw.ckpt.formal``: the proofs and their broken variants.

Testbenches: ``tb/ckpt`` (Verilator: training with power failures; ``python -m tb.ckpt.crash``
is the crash campaign, ``python -m tb.ckpt.bench`` the overhead benchmark); unit tests in
``tests/hw/test_ckpt_*.py``.
"""

from .engine import CheckpointEngine, counters_layout
from .layouts import CheckpointError, CheckpointPhase, LogMode

__all__ = [
    "CheckpointEngine", "CheckpointError", "CheckpointPhase", "LogMode", "counters_layout",
]
