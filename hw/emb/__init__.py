"""Near-memory embedding compute: table-batched lookup with pooling, and the sparse update."""

from .lookup import LookupEngine

__all__ = ["LookupEngine"]
