"""The worker's load progress is throttled: a file's first report and its 1.0 always go out, in between at most one
report per ``PROGRESS_INTERVAL_S`` unless the fraction moved ``PROGRESS_STEP``."""

from __future__ import annotations

from itertools import pairwise

from app.engine.worker import PROGRESS_INTERVAL_S, PROGRESS_STEP, ProgressThrottle


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_many_small_steps_become_a_few_reports() -> None:
    sent: list[tuple[str, float]] = []
    clock = Clock()
    throttle = ProgressThrottle(lambda file, fraction: sent.append((file, fraction)), clock)
    for i in range(1001):  # a thousand tensors read in no time
        throttle("t.gguf", i / 1000)
    fractions = [f for _, f in sent]
    assert fractions[0] == 0.0 and fractions[-1] == 1.0
    assert len(fractions) <= 1 / PROGRESS_STEP + 2
    assert all(b - a >= PROGRESS_STEP - 1e-9 for a, b in pairwise(fractions[:-1]))  # the 1.0 may be closer


def test_time_lets_a_small_step_through_and_files_are_apart() -> None:
    sent: list[tuple[str, float]] = []
    clock = Clock()
    throttle = ProgressThrottle(lambda file, fraction: sent.append((file, fraction)), clock)
    throttle("t.gguf", 0.10)
    throttle("t.gguf", 0.11)  # too soon, too small
    clock.now += PROGRESS_INTERVAL_S
    throttle("t.gguf", 0.12)  # small, but a while later
    throttle("t.gguf", 0.12)  # no news
    throttle("d.gguf", 0.0)  # another file's first report
    throttle("t.gguf", 1.0)
    throttle("t.gguf", 1.0)  # its end once
    assert sent == [("t.gguf", 0.10), ("t.gguf", 0.12), ("d.gguf", 0.0), ("t.gguf", 1.0)]
