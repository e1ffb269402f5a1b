"""Formal proofs of the checkpoint engine's ordering rules (SymbiYosys, smtbmc + z3).

    python -m hw.ckpt.formal [--depth N] [--mode prove|bmc] [--mutants-only | --no-mutants]

By default: a cover task (every ordering event is reachable), the unbounded proof of the
ordering by k-induction (``--mode bmc``: bounded to ``--depth`` cycles only), and a bounded
check of each mutant, which must fail. See :mod:`hw.ckpt.formal.harness` for what is proved
and :mod:`hw.ckpt.formal.mutants` for the broken variants.
"""

from .run import DEFAULT_DEPTH, DEFAULT_MODE, Outcome, check, main

__all__ = ["DEFAULT_DEPTH", "DEFAULT_MODE", "Outcome", "check", "main"]
