"""Counts in words: "1 run", "3 runs", so no label reads "1 run(s)"."""

from __future__ import annotations


def noun(n: int, word: str, many: str | None = None) -> str:
    """``word`` for one, ``many`` (default: ``word`` + "s") for any other count, zero included."""
    return word if n == 1 else (many if many is not None else word + "s")


def plural(n: int, word: str, many: str | None = None) -> str:
    """The count and its noun: ``plural(1, "run")`` is "1 run", ``plural(3, "run")`` is "3 runs"."""
    return f"{n} {noun(n, word, many)}"
