"""Counts read as English: one run, two runs, no "run(s)"."""

from __future__ import annotations

import pytest

from app.core.words import noun, plural


@pytest.mark.parametrize(("n", "expected"), [(0, "0 runs"), (1, "1 run"), (2, "2 runs"), (21, "21 runs")])
def test_plural_adds_an_s_except_for_one(n: int, expected: str) -> None:
    assert plural(n, "run") == expected


def test_plural_takes_an_irregular_form() -> None:
    assert plural(1, "variant pass", "variant passes") == "1 variant pass"
    assert plural(3, "variant pass", "variant passes") == "3 variant passes"


def test_noun_is_the_word_alone() -> None:
    assert noun(1, "conversation") == "conversation"
    assert noun(5, "conversation") == "conversations"
