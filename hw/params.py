"""Parameter checks shared by the blocks of every package.

A module of its own, importing nothing, so that any block can use them: :mod:`hw.emb.lookup`
imports most of the blocks (``hw.mem``'s among them), which therefore cannot import from it.
"""

__all__ = ["check_bool"]


def check_bool(name, value):
    """Validate a yes/no parameter (a ``bool``, not any truthy value)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, not {value!r}")
    return value
