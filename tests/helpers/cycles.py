"""Cyclic garbage, as a worker thread makes it: what crosses Python's collection thresholds."""

from __future__ import annotations

from typing import Any


def make_cyclic_garbage(count: int) -> None:
    """``count`` lists that each hold themselves, dropped at once: only a cycle collection frees them."""
    for _ in range(count):
        garbage: list[Any] = []
        garbage.append(garbage)
