"""Built-in self-test: a board design that checks real hardware against build-time results.

Structure, one job per module:

- :mod:`.check`      :class:`Check`: a device under test with an input and an output stream,
                     the stimulus words and the expected result words.
- :mod:`.runner`     :class:`CheckRunner` feeds the checks of one device from a ROM and
                     compares their results with a second ROM; :class:`SelfTest` runs a list
                     of checks in turn, one runner per device.
- :mod:`.fp_checks`  checks of the FP32 lane units (``hw.fp.FPLanes``) with operands and
                     NumPy ``float32`` results computed at build time.
- :mod:`.axi_bram`   :class:`~.axi_bram.AxiBram`, an AXI4 memory in block RAM (PMEM stand-in).
- :mod:`.emb_dut`    :class:`~.emb_dut.EngineUnderTest`: the embedding engine on that memory,
                     driven by CONFIG / COMMAND / READ steps.
- :mod:`.emb_checks` the engine's checks: LOOKUP, then UPDATE + readback + LOOKUP, against
                     ``sw_model`` results computed at build time.
- :mod:`.uart`,
  :mod:`.message`    a minimal 8N1 transmitter and a line writer.
- :mod:`.top`        :class:`BISTSystem` (checks + LEDs + report line, simulable) and
                     :class:`BISTBoardTop` (its pins on a board).

The board shows pass, fail, busy and a heartbeat on its LEDs and prints, once a second::

    BIST PASS compared=0x005B errors=0x0000

Extension point: any block with a command stream in and a result stream out becomes a check.
Checks may share one device (the same ``dut`` object), which then keeps its state from one
check to the next. For the embedding engine (implemented in :mod:`.emb_checks`), the device
under test is a small adapter component around it:

- ``i`` carries steps: CONFIG (descriptors, regions, learning rate), COMMAND (``LOOKUP``,
  ``UPDATE``) and READ (a burst of lines from memory);
- ``o`` carries what comes back: one completion status per command, one word per line read;
- the engine's AXI4 port goes to :class:`~.axi_bram.AxiBram`, whose block RAM is initialised
  at build time with the tables, indices, offsets, weights and gradient drawn with
  ``sw_model.data``'s generators;
- ``expected`` is the golden model's output for the same commands, bit-exact (the workload
  has no NaN; elsewhere use :func:`.fp_checks.fp32_lanes_match`, so NaNs compare as NaNs).

A LOOKUP check, then an UPDATE check followed by a LOOKUP of the updated rows, exercise the
whole path; one command may yield many result words, and a check's timeout turns a hung
engine into counted errors instead of a silent board. Add such checks to the list a design
passes to :class:`BISTBoardTop` (see ``boards.synth.DESIGNS``).
"""

from .check import Check, exact_match
from .runner import CheckRunner, SelfTest
from .top import BISTBoardTop, BISTSystem

__all__ = ["BISTBoardTop", "BISTSystem", "Check", "CheckRunner", "SelfTest", "exact_match"]
