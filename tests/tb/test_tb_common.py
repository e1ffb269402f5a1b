"""The testbenches' shared helpers that need no simulator (tb/common.py)."""

import itertools

import pytest

from tb.common import draw_until, pause_pattern


def test_draw_until_returns_the_first_accepted_draw():
    values = iter([1, 3, 4, 6])
    calls = itertools.count()

    def draw():
        next(calls)
        return next(values)

    assert draw_until(draw, lambda value: value % 2 == 0, "is even") == 4
    assert next(calls) == 3  # the draws after the accepted one are not made


def test_draw_until_gives_up_after_its_attempts():
    calls = itertools.count()

    def draw():
        next(calls)
        return 1

    with pytest.raises(AssertionError, match=r"^no draw of 5 is even$"):
        draw_until(draw, lambda value: value % 2 == 0, "is even", attempts=5)
    assert next(calls) == 5


def test_draw_until_needs_an_attempt():
    with pytest.raises(ValueError, match=r"^attempts must be at least 1, not 0$"):
        draw_until(lambda: 0, lambda value: True, "anything", attempts=0)


def test_pause_pattern_repeats_with_its_seed():
    first = list(itertools.islice(pause_pattern(7, 0.5), 64))
    assert first == list(itertools.islice(pause_pattern(7, 0.5), 64))
    assert 0 < sum(first) < 64
    with pytest.raises(ValueError, match=r"^busy must be in \[0, 1\), not 1\.0$"):
        pause_pattern(7, 1.0)
