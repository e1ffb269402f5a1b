"""Built-in self-test: a board design that checks real hardware against build-time results.

Structure, one job per module:

- :mod:`.check`      :class:`Check`: a device under test with an input and an output stream,
                     the stimulus words and the expected result words.
- :mod:`.runner`     :class:`CheckRunner` feeds one check from a ROM and compares its results
                     with a second ROM; :class:`SelfTest` runs a list of checks in turn.
- :mod:`.fp_checks`  checks of the FP32 lane units (``hw.fp.FPLanes``) with operands and
                     NumPy ``float32`` results computed at build time.
- :mod:`.uart`,
  :mod:`.message`    a minimal 8N1 transmitter and a line writer.
- :mod:`.top`        :class:`BISTSystem` (checks + LEDs + report line, simulable) and
                     :class:`BISTBoardTop` (its pins on a board).

The board shows pass, fail, busy and a heartbeat on its LEDs and prints, once a second::

    BIST PASS compared=0x0080 errors=0x0000

Extension point: any block with a command stream in and a result stream out becomes a check.
For the embedding engine, the device under test is a small adapter component around it:

- ``i`` carries commands (``LOOKUP(batch)``, ``UPDATE(batch)``, or raw CXL.mem requests);
- ``o`` carries what the engine answers (pooled vectors, completion records, read data);
- the adapter holds the table, the indices and offsets in memories initialised at build time
  from ``sw_model`` (a preset such as ``tiny``);
- ``expected`` is the golden model's output for the same commands, bit-exact (use
  :func:`.fp_checks.fp32_lanes_match` for float lanes, so NaNs compare as NaNs).

A LOOKUP check, then an UPDATE check followed by a LOOKUP of the updated rows, exercise the
whole path; one command may yield many result words, and a check's timeout turns a hung
engine into counted errors instead of a silent board. Add such checks to the list a design
passes to :class:`BISTBoardTop` (see ``boards.synth.DESIGNS``).
"""

from .check import Check, exact_match
from .runner import CheckRunner, SelfTest
from .top import BISTBoardTop, BISTSystem

__all__ = ["BISTBoardTop", "BISTSystem", "Check", "CheckRunner", "SelfTest", "exact_match"]
