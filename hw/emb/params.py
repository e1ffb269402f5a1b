"""Parameter checks shared by the embedding engines' blocks.

A module of its own so that any block can use them: :mod:`hw.emb.lookup` imports most of the
blocks, which therefore cannot import from it.
"""

__all__ = ["check_bool"]


def check_bool(name, value):
    """Validate a yes/no parameter (a ``bool``, not any truthy value)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, not {value!r}")
    return value
