"""Formal proofs of the checkpoint engine's ordering rules (SymbiYosys, smtbmc + z3).

    python -m hw.ckpt.formal [--depth N] [--mode bmc|prove] [--mutants-only | --no-mutants]

See :mod:`hw.ckpt.formal.harness` for what is proved and :mod:`hw.ckpt.formal.mutants` for the
broken variants that must fail.
"""

from .run import DEFAULT_DEPTH, Outcome, check, main

__all__ = ["DEFAULT_DEPTH", "Outcome", "check", "main"]
