"""Adaptive depth's bookkeeping on a thread of its own (``DepthWorker``), against the simulated machines of
tests/helpers/adaptive_sim.py: each round's observation meets the decision it was made under, the choices stay as
good as turn by turn, and what the thread does is settled before anyone reads the learner. The engine's use (replies
token-identical with adaptive depth) is in tests/integration/engine/test_engine.py."""

from __future__ import annotations

import pytest

from app.engine.adaptive import AdaptiveDepth, RoundTiming
from app.engine.depth_worker import DepthWorker
from tests.helpers.adaptive_sim import (
    DEMO,
    PROMPT_SET,
    SCALED_XEON,
    XEON,
    Machine,
    Totals,
    run_adaptive,
    run_with_worker,
)


def _run(worker: DepthWorker, machine: Machine = XEON, tokens: int = PROMPT_SET, seed: int = 1) -> Totals:
    """A session driven as the engine drives it: the depth, the verify pass (the thread's turn), the observation."""
    return run_with_worker(worker, machine, DEMO, tokens, seed)


def test_each_observation_meets_the_decision_it_was_made_under() -> None:
    # the thread decides the next round's depth before the round before it is observed: the learner keeps its
    # decisions in order, so each observation still takes its own round's (a visit is a visit, its log entry its own)
    adaptive = AdaptiveDepth(draft_depth=8)
    adaptive.log = []
    worker = DepthWorker(adaptive, overlap=True)
    totals = _run(worker)
    assert len(adaptive.log) == len(totals.depths)
    assert [d.depth for d in adaptive.log] == totals.depths
    assert all(d.batch == d.depth + 1 for d in adaptive.log)  # the round observed is the one decided
    assert len({d.depth for d in adaptive.log}) >= 3  # it did switch, so a pairing off by one would show
    assert adaptive.elapsed == pytest.approx(totals.seconds)  # settled: every round played is observed
    assert len(adaptive._decided) == 1  # and the next round's depth decided ahead
    worker.close()
    assert not adaptive._decided


def test_without_a_spare_core_it_is_turn_by_turn_exactly() -> None:
    adaptive = AdaptiveDepth(draft_depth=8)
    worker = DepthWorker(adaptive, overlap=False)
    totals = _run(worker)
    expected, _ = run_adaptive(XEON, DEMO, PROMPT_SET, seed=1)
    assert totals.depths == expected.depths and worker._thread is None


@pytest.mark.parametrize("machine", [XEON, SCALED_XEON], ids=lambda m: m.name)
def test_choosing_a_round_later_costs_nothing_a_round_would_notice(machine: Machine) -> None:
    # the thread's choice has seen every round but the one being played: as fast as turn by turn, and the same
    # choices on every run (the order of the work is fixed, whatever the thread's timing)
    for seed in (1, 2, 3):
        lagged = [_run(DepthWorker(AdaptiveDepth(draft_depth=8), overlap=True), machine, 2 * PROMPT_SET, seed)
                  for _ in range(2)]
        assert lagged[0].depths == lagged[1].depths
        turn_by_turn, _ = run_adaptive(machine, DEMO, 2 * PROMPT_SET, seed)
        rate = lagged[0].tokens / lagged[0].seconds
        assert rate >= 0.98 * turn_by_turn.tokens / turn_by_turn.seconds, (machine.name, seed)


class _Failing(AdaptiveDepth):
    def observe(self, depth: int, tested: int, accepted: int, timing: RoundTiming) -> None:
        if self.rounds > 5:
            raise RuntimeError("the learner broke")
        super().observe(depth, tested, accepted, timing)


def test_an_error_on_the_thread_is_raised_in_the_round_that_waits_for_it() -> None:
    worker = DepthWorker(_Failing(draft_depth=8), overlap=True)
    with pytest.raises(RuntimeError, match="the learner broke"):
        _run(worker)
    worker.close()  # the learner fails again on the round kept: logged, and the thread still ends
    assert worker._thread is None


def test_a_round_cut_short_is_forgotten_so_the_next_pair_up() -> None:
    adaptive = AdaptiveDepth(draft_depth=8)
    adaptive.log = []
    worker = DepthWorker(adaptive, overlap=True)
    _run(worker, tokens=60)
    worker.next_depth()  # a round starts ...
    worker.verify_starts()
    worker.abandon()  # ... and the reply fails before it is observed
    assert not adaptive._decided
    played = len(adaptive.log)
    totals = _run(worker, tokens=60, seed=2)
    assert [d.depth for d in adaptive.log[played:]] == totals.depths
    worker.close()
