"""Memory-mapped registers (the CXL.io BAR): a register map described once in Python, the
hardware bank behind AXI4-Lite, the Markdown reference and the host driver, all from that map.

amaranth-soc's CSR library is the natural choice, but it is not released on PyPI (the name
holds an empty placeholder) and this project installs only from PyPI; this package is the
small subset we need.
"""

from .bank import CsrBank
from .driver import RegisterDriver
from .map import Access, Field, Register, RegisterMap
from .reference import registers_markdown

__all__ = ["Access", "CsrBank", "Field", "Register", "RegisterDriver", "RegisterMap",
           "registers_markdown"]
