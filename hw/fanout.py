"""Registers copied per consumer, so that no single flip-flop drives a whole 512-bit datapath.

On an FPGA a register that selects or feeds all 16 FP32 lanes is one net spread over the die,
to lanes whose DSPs sit in different columns: on the ECP5 boards such nets took 10-14 ns of
routing alone. Loading the same value into one register per lane splits that net in 16, each
placed next to its lane.

Synthesis merges flip-flops with the same inputs, which would undo this. Every copy therefore
carries :data:`REPLICA_ATTRIBUTE`, and the board builds (:func:`boards.build.prepare_plan`) run
:data:`KEEP_REPLICAS_SCRIPT`, which marks the flip-flops that drive such wires ``keep``. In
simulation the copies are ordinary registers with the same value.
"""

from amaranth.hdl import Signal

__all__ = ["KEEP_REPLICAS_SCRIPT", "LANE_GROUPS", "REPLICA_ATTRIBUTE", "WORD_SELECT_COPIES",
           "lane_copies", "replicated_register", "staged_copies", "word_of_line"]

#: Copies of a word's select in :func:`word_of_line` with ``replicate``: each chooses 4 of a
#: 32-bit word's bits.
WORD_SELECT_COPIES = 8

#: Group copies between a register and the 16 FP lanes' copies of it in :func:`staged_copies`
#: (four lanes a group).
LANE_GROUPS = 4

#: Wire attribute of every copy made by :func:`replicated_register`.
REPLICA_ATTRIBUTE = "trainingcxl_replica"

#: Yosys command (after reading the design, before ``synth_*``): the ``$dff`` cells whose
#: output is a replica wire are kept, so ``opt_merge`` does not fold the copies into one.
KEEP_REPLICAS_SCRIPT = f"setattr -set keep 1 a:{REPLICA_ATTRIBUTE} %ci1:+$dff[Q] t:$dff %i"


def replicated_register(m, value, *, copies, name, domain="sync", reset_less=False):
    """``copies`` registers, each loaded with ``value`` every cycle of ``domain``: the same
    timing as one register ``r.eq(value)``, for ``copies`` groups of consumers. Returns the
    list of registers, named ``<name>_replica_<k>``.

    With ``reset_less`` the copies take no reset (the domain's, or a ``ResetInserter``'s): in
    the cycle after a reset they hold ``value`` as it was in the reset's cycle. Yosys does not
    fold a reset into a kept flip-flop (:data:`KEEP_REPLICAS_SCRIPT`), so a reset is a LUT of
    its own in front of each copy, behind ``value``'s logic: without one, a copy loads
    ``value``'s net itself."""
    _check_copies(copies)
    replicas = []
    for k in range(copies):
        replica = Signal.like(value, name=f"{name}_replica_{k}", reset_less=reset_less,
                              attrs={REPLICA_ATTRIBUTE: 1})
        m.d[domain] += replica.eq(value)
        replicas.append(replica)
    return replicas


def lane_copies(m, next_value, current, *, copies, name, replicate, domain="sync",
                reset_less=False):
    """What the register ``current`` holds, once per consumer: with ``replicate``,
    ``copies`` registers loaded from ``next_value`` (what ``current`` holds one cycle later,
    so every copy equals ``current``; ``reset_less`` as for :func:`replicated_register`);
    without it, ``current`` itself ``copies`` times."""
    _check_copies(copies)
    if replicate:
        return replicated_register(m, next_value, copies=copies, name=name, domain=domain,
                                   reset_less=reset_less)
    return [current] * copies


def staged_copies(m, value, *, copies, groups, name, domain="sync", reset_less=False):
    """``copies`` registers holding ``value`` as it was two cycles before, each loaded from
    one of ``groups`` registers that load ``value`` (consumer ``k`` from group
    ``k * groups // copies``): two nets of about half the distance where
    :func:`replicated_register` has one across all consumers. For a value that stays put
    the cycle before it is used (a stream payload held a cycle), they hold what
    ``replicated_register(m, value)`` would. Named ``<name>_group_replica_<g>`` and
    ``<name>_replica_<k>``, all marked as replicas; ``reset_less`` as for
    :func:`replicated_register`, for both stages."""
    _check_copies(copies)
    _check_copies(groups)
    if copies % groups:
        raise ValueError(f"Copies ({copies}) must split evenly into groups ({groups})")
    firsts = replicated_register(m, value, copies=groups, name=f"{name}_group", domain=domain,
                                 reset_less=reset_less)
    replicas = []
    for k in range(copies):
        replica = Signal.like(value, name=f"{name}_replica_{k}", reset_less=reset_less,
                              attrs={REPLICA_ATTRIBUTE: 1})
        m.d[domain] += replica.eq(firsts[k * groups // copies])
        replicas.append(replica)
    return replicas


def _check_copies(copies):
    if isinstance(copies, bool) or not isinstance(copies, int) or copies < 1:
        raise ValueError(f"Replica count must be a positive integer, not {copies!r}")


def word_of_line(m, line, next_select, select, *, name, replicate, width=32,
                 reset_less=False):
    """The ``width``-bit word ``select`` of ``line``. With ``replicate`` each group of its
    bits is chosen by a copy of the select of its own (:func:`lane_copies`, loaded from
    ``next_select``; ``reset_less`` as there), so that one register does not spread over
    every bit's multiplexer (a 16-way choice of a 512-bit line is 32 of them)."""
    selects = lane_copies(m, next_select, select, copies=WORD_SELECT_COPIES, name=name,
                          replicate=replicate, reset_less=reset_less)
    bits = width // WORD_SELECT_COPIES
    word = Signal(width, name=f"{name}_word")
    for copy, chosen in enumerate(selects):
        group = slice(copy * bits, (copy + 1) * bits)
        m.d.comb += word[group].eq(line.word_select(chosen, width)[group])
    return word
