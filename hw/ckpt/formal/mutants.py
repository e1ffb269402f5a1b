"""Deliberately broken checkpoint engines: each drops exactly one ordering rule, and the formal
check must find the violation (the negative half of ``python -m hw.ckpt.formal``). A bounded
check (``bmc``) of the ordering properties alone finds each within a few cycles of reset."""

from amaranth.hdl import Const

from hw.ckpt.sequencer import UpdateSequencer

__all__ = ["MUTANTS"]


class EarlyFlag(UpdateSequencer):
    """Writes the batch flag once the log is issued, without waiting for its B responses."""

    def _flag_may_be_written(self, log_drained, log_persistent):
        return log_drained


class EarlyWrites(UpdateSequencer):
    """Lets in-place writes through as soon as the flag is issued."""

    def _engine_writes_open(self, flag_persistent):
        return Const(1)


class EarlyCommit(UpdateSequencer):
    """Writes the commit record without waiting for the in-place writes' B responses."""

    def _commit_may_be_written(self, engine_finished, engine_writes_persistent):
        return engine_finished


MUTANTS = {"early_flag": EarlyFlag, "early_writes": EarlyWrites, "early_commit": EarlyCommit}
