"""What one self-test is: a device under test, its stimulus and its expected results."""

from amaranth import Value
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import Flow

__all__ = ["Check", "exact_match"]


def exact_match(actual, expected):
    """Bit-for-bit equality: the default comparison of a :class:`Check`."""
    return actual == expected


def _require_stream(dut, name, flow):
    member = dut.signature.members[name] if name in dut.signature.members else None
    if (member is None or not member.is_signature or member.flow != flow or
            not isinstance(member.signature, stream.Signature)):
        raise TypeError(f"Device under test must have a member "
                        f"{name}: {flow.name}(stream.Signature(...))")


class Check:
    """One self-test run by :class:`boards.bist.runner.SelfTest`.

    The runner feeds ``stimulus`` into ``dut.i`` in order, honouring ``dut.i.ready``, and
    compares the payloads coming out of ``dut.o`` one by one with ``expected``. The two lists
    may differ in length (one command may yield many results). A result that does not arrive
    within ``timeout_cycles`` of the last activity counts as an error, as does every result
    beyond the expected ones, so a silent or babbling device fails.

    Parameters
    ----------
    name : str
        Shown in diagnostics.
    dut : wiring.Component
        Has ``i: In(stream.Signature(...))`` and ``o: Out(stream.Signature(...))``.
    stimulus, expected : sequence of int
        Payloads as unsigned integers of the payload widths (pack structured payloads with
        ``Const.cast(layout.const({...})).value``).
    match : callable
        ``match(actual, expected) -> Value`` tells whether a result is right; defaults to
        :func:`exact_match`. Use it where the contract allows several encodings (NaNs).
    timeout_cycles : int
        Idle cycles after which missing results are given up on.
    """
    def __init__(self, *, name, dut, stimulus, expected, match=exact_match,
                 timeout_cycles=1024):
        if not isinstance(name, str) or not name:
            raise TypeError(f"Check name must be a non-empty string, not {name!r}")
        if not isinstance(dut, wiring.Component):
            raise TypeError(f"Device under test must be a wiring.Component, not {dut!r}")
        _require_stream(dut, "i", Flow.In)
        _require_stream(dut, "o", Flow.Out)
        self.name = name
        self.dut = dut
        self.stimulus_width = len(Value.cast(dut.i.payload))
        self.expected_width = len(Value.cast(dut.o.payload))
        self.stimulus = self._validate_words("Stimulus", stimulus, self.stimulus_width)
        self.expected = self._validate_words("Expected result", expected, self.expected_width)
        if not callable(match):
            raise TypeError(f"Match must be callable, not {match!r}")
        if not isinstance(timeout_cycles, int) or timeout_cycles < 1:
            raise ValueError(f"Timeout must be a positive integer number of cycles, not "
                             f"{timeout_cycles!r}")
        self.match = match
        self.timeout_cycles = timeout_cycles

    @staticmethod
    def _validate_words(what, words, width):
        words = tuple(words)
        if not words:
            raise ValueError(f"{what} list must not be empty")
        for index, word in enumerate(words):
            if not isinstance(word, int) or not 0 <= word < (1 << width):
                raise ValueError(f"{what} {index} must be an unsigned integer of {width} "
                                 f"bits, not {word!r}")
        return words

    def __repr__(self):
        return (f"Check({self.name!r}, {len(self.stimulus)} stimulus words, "
                f"{len(self.expected)} expected words)")
