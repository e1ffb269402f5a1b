"""Near-memory embedding compute: table-batched lookup with pooling, and the sparse update.

:class:`EmbeddingEngine` is the top (one command port, one AXI4 port); :class:`LookupEngine`
serves its LOOKUP commands (``hw/emb/update.py`` its UPDATE commands).
"""

from .engine import EmbeddingEngine
from .lookup import LookupEngine

__all__ = ["EmbeddingEngine", "LookupEngine"]
