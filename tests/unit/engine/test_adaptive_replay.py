"""A bench decision log holds everything adaptive depth saw: replayed, it makes the same choices (tests/helpers/
adaptive_replay.py, the study that found issue 39's misranking on the machine's own rounds)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from app.engine import adaptive
from app.engine.adaptive import AdaptiveDepth, RoundTiming
from app.engine.depth_worker import DepthWorker
from tests.helpers.adaptive_replay import _decide, fixed_ratios, load_module, replay
from tests.helpers.adaptive_sim import DEMO, SCALED_EPYC_Q8, SCALED_XEON_2T, run_adaptive, run_with_worker


def _bench_log(runs: int = 2, tokens: int = 400) -> list[dict[str, Any]]:
    """Rows as ``bench spec`` writes them: each run one session, every later one started from the one before."""
    rows: list[dict[str, Any]] = []
    memory = None
    for run in range(1, runs + 1):
        adaptive = AdaptiveDepth(8)
        if memory is not None:
            assert adaptive.restore(memory)
        adaptive.log = []
        run_adaptive(SCALED_XEON_2T, DEMO, tokens, seed=run, adaptive=adaptive)  # its first draft step dearer
        for decision in adaptive.log:
            rows.append(json.loads(json.dumps({"variant": "adaptive", "run": run, "warm": adaptive.warm,
                                               "prompt_set": "document", **decision.to_dict()})))
        memory = adaptive.snapshot()
    return rows


def test_a_logged_session_replays_to_the_same_depths_and_rates_round_by_round() -> None:
    rows = _bench_log()
    assert any(row["warm"] for row in rows) and any(row["draft_steps"] > 0 for row in rows)
    assert all((row["first_step"] is not None) == (row["batch"] >= 3) for row in rows)
    result = replay(rows)
    assert result.rounds == len(rows)
    assert result.same == result.rounds  # every round: the draft steps' time is in the log now, the first one's too
    assert replay([{**row, "first_step": None} for row in rows]).same < len(rows)  # (read from their average)


def test_a_session_decided_a_round_ahead_replays_in_that_order() -> None:
    """With a spare core the engine's depth worker decides each round's depth while the round before it is verified,
    before that round is observed: its log replays round for round only in that order (the bench's logs at one
    thread on two cores), and it still does when a round's graph was built (the engine's ``built``, which the log
    keeps as the round not counted)."""
    learner = AdaptiveDepth(8)
    learner.log = []
    worker = DepthWorker(learner, overlap=True)
    try:
        run_with_worker(worker, SCALED_EPYC_Q8, DEMO, 400, 1, report_built=True)
    finally:
        worker.close()
    rows = [json.loads(json.dumps({"variant": "adaptive", "run": 1, "warm": False, "prompt_set": "document",
                                   **decision.to_dict()})) for decision in learner.log]
    assert len(rows) > 100
    assert replay(rows, ahead=True).same == len(rows)
    assert replay(rows).same < len(rows)


def test_a_changed_constant_replays_open_loop_and_its_predictions_differ() -> None:
    rows = _bench_log()
    copy = load_module(Path(adaptive.__file__), ["PROBE_EVERY=4"])  # a copy: the shipped module stays as it is
    changed = replay(rows, copy)
    assert copy.PROBE_EVERY == 4 and adaptive.PROBE_EVERY == 24
    assert changed.rounds == len(rows)
    assert changed.same < changed.rounds  # it would have chosen otherwise, yet every logged round was fed
    assert changed.ratios["document"] and len(changed.ratios["document"][0]) == 9
    assert replay(rows).same == len(rows)


def test_the_fixed_rows_give_each_depths_round_time_against_depth_2s() -> None:
    def row(engine: str, mode: str, depth: int, ms: float | None, adaptive: bool = False) -> dict[str, Any]:
        return {"engine": engine, "adaptive": adaptive, "mode": mode, "draft_depth": depth, "prompt_set": "document",
                "round_ms": ms}

    spec = {"rows": [row("ours", "off", 0, 6.0), row("ours", "d2t", 2, 10.0), row("ours", "d2t", 3, 12.0),
                     row("ours", "d2t", 8, 11.0, adaptive=True), row("llama-server", "d2t", 3, None)]}
    assert fixed_ratios(spec) == {"document": {0: 0.6, 2: 1.0, 3: 1.2}}


def test_a_depth_measured_before_a_change_keeps_the_depth_played_while_its_estimate_moves_on() -> None:
    """A real log (the Xeon, 512-token replies, the quiet phase's third run, 2026-12-07 09:38) from the code before the
    hold: the gauge crossed ``OWN_WEIGHT`` and depth 3's own rounds entered its estimate one by one; at round 529
    the estimates called for depth 2, which was visited first and read the same move (its estimate moved with depth
    3's), but depth 3's kept rising, and at round 538, eight rounds after the visit, depth 2 was played unmeasured
    again and ended the run (the next run started there and lost 4.8%). Replayed, every round before that one is
    decided as logged, and that one keeps depth 3: the depth played stays until the visit is ``CONFIRM_HOLD`` rounds
    old."""
    path = Path(__file__).parents[2] / "data" / "xeon-quiet-run3-2026-12-07.json.gz"
    with gzip.open(path, "rt") as file:
        fixture = json.load(file)
    rows: list[dict[str, Any]] = fixture["rows"]
    depth_at = AdaptiveDepth(8)
    assert depth_at.restore(fixture["record"])
    decided = {}
    for index, row in enumerate(rows):
        decided[row["round"]] = _decide(depth_at, rows, index)[0]
        depth_at._reference, depth_at._probing = row["reason"] in ("start", "best"), row["reason"] == "probe"
        depth_at.observe(row["depth"], row["tested"], row["accepted"], RoundTiming(
            row["seconds"], row["verify"], row["draft"], row["draft_steps"], row["batch"] - 1, not row["counted"],
            row["first_step"]))
    logged = {row["round"]: row for row in rows}
    assert all(decided[r] == logged[r]["depth"] for r in logged if r < 538)
    assert logged[529]["reason"] == "probe" and logged[529]["depth"] == 2  # the visit before the change
    assert logged[538]["reason"] == "best" and logged[538]["depth"] == 2 and decided[538] == 3
    assert depth_at.unit_moves >= 1
