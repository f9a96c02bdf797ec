"""The thread count of one-token passes: measured between one thread and all of them, the faster kept, measured again
later (``app/engine/one_token_threads.py``). Pure logic: the pass times are given."""

from __future__ import annotations

from app.engine.one_token_threads import BLOCK, MARGIN, RECHECK, TRIALS, OneTokenThreads


def _measure(pace: OneTokenThreads, seconds: dict[int, float]) -> list[int]:
    """Run one-token passes costing ``seconds[count]`` until the pace chooses; the counts it asked for, in order."""
    asked = []
    while pace.measuring:
        count = pace.next_count()
        asked.append(count)
        pace.observe(count, seconds[count])
        assert len(asked) <= 4 * TRIALS, asked
    return asked


def test_one_thread_is_kept_where_a_one_token_pass_is_faster_with_it() -> None:
    pace = OneTokenThreads(2)
    asked = _measure(pace, {1: 0.006, 2: 0.0073})  # the scaled demo on the 2-core EPYC: 166 against 137 tok/s
    assert pace.chosen == 1 and pace.next_count() == 1
    assert asked.count(1) == asked.count(2) == TRIALS
    # in blocks, alternating, so that a trend in the times (a growing context) falls on both counts alike
    assert asked[:2 * BLOCK] == [2] * BLOCK + [1] * BLOCK


def test_all_threads_are_kept_where_they_are_faster_or_one_thread_barely_wins() -> None:
    faster_with_all = OneTokenThreads(4)
    _measure(faster_with_all, {1: 0.030, 4: 0.012})  # a big model's pass waits on memory: every core helps
    assert faster_with_all.chosen == 4
    barely = OneTokenThreads(2)
    _measure(barely, {1: 0.0100, 2: 0.0100 * (1.0 + MARGIN / 2)})
    assert barely.chosen == 2  # llama-server's default, kept unless one thread clearly wins


def test_the_median_decides_so_one_stalled_pass_does_not() -> None:
    pace = OneTokenThreads(2)
    stalled = True
    while pace.measuring:
        count = pace.next_count()
        seconds = 0.006 if count == 1 else 0.0073
        if count == 1 and stalled:  # the first pass at one thread met another job's turn on the core
            seconds, stalled = 0.5, False
        pace.observe(count, seconds)
    assert pace.chosen == 1


def test_a_choice_is_measured_again_after_recheck_passes() -> None:
    pace = OneTokenThreads(2)
    _measure(pace, {1: 0.006, 2: 0.0073})
    for _ in range(RECHECK - 1):
        pace.observe(pace.next_count(), 0.006)
    assert pace.chosen == 1
    pace.observe(pace.next_count(), 0.006)
    assert pace.measuring  # the load may have changed: both counts are timed again
    _measure(pace, {1: 0.020, 2: 0.008})  # now another job slows the lone thread
    assert pace.chosen == 2


def test_one_decode_thread_leaves_nothing_to_choose() -> None:
    pace = OneTokenThreads(1)
    assert not pace.measuring and pace.next_count() == 1
    pace.observe(1, 0.01)
    assert pace.chosen is None and pace.next_count() == 1


def test_a_pinned_count_is_kept_through_any_timings_and_rechecks() -> None:
    pace = OneTokenThreads(4, pinned=1)
    assert not pace.measuring and pace.chosen == 1
    for _ in range(RECHECK + 10):  # however slow the lone thread runs, and past the re-check
        pace.observe(pace.next_count(), 0.5)
    assert pace.next_count() == 1 and not pace.measuring
    assert OneTokenThreads(2, pinned=8).next_count() == 2  # never more than the decode threads
