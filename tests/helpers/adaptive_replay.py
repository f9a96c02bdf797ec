"""Replay a ``bench spec`` decision log through adaptive depth, no engine: a study of its estimates on real rounds.

``python -m tests.helpers.adaptive_replay OUT/adaptive-decisions.jsonl [adaptive.py] [NAME=VALUE ...]`` feeds every
logged round, in order, to a fresh ``AdaptiveDepth`` per run (a warm run restores what the run before it learned, as
the bench's depth memory does) and prints:

- fidelity: the rounds where the replay chose the logged depth with the logged predicted rates. With the module that
  wrote the log it is every round (the log keeps all a round's timings: its draft steps since 2026-12-05, and whether
  its verify pass built a graph, as the round not counted), in the order the engine decided them: a round ahead with
  a spare core (the depth worker; the bench at one thread on two cores), else turn by turn; both orders are tried
  and the one that reproduces more is studied (before 2026-12-06 neither was, and fidelity read 1 of 592); with a
  changed module or constants (a file, ``NAME=VALUE``) the depths part and the rest is open loop: the logged rounds are
  fed as they came, whatever the changed version would have chosen;
- what the estimates predicted a round at each depth to cost against depth 2's, median over the rounds, beside the
  same ratio measured by the fixed-depth rows of the bench's spec.json (their whole rounds, medians).

It is how issue 39's misranking was found: depth 3 predicted 1.3-1.45x as dear as depth 2 where the fixed runs
measured 1.15-1.24x. A study, not a test; tests/unit/engine/test_adaptive_replay.py holds the fidelity.
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from app.engine import adaptive as shipped


@dataclass
class Replay:
    rounds: int = 0
    same: int = 0  # rounds with the logged depth and rates
    ratios: dict[str, list[list[float]]] = field(default_factory=dict)  # by prompt set: c_k / c_2 per round


def load_module(path: Path | None, overrides: Iterable[str] = ()) -> ModuleType:
    """The adaptive module to replay through: the shipped one, or a copy of it from ``path``; ``NAME=VALUE``
    overrides set its constants (of the constant's own type)."""
    module = shipped
    if path is not None:
        spec = importlib.util.spec_from_file_location("adaptive_under_study", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
        spec.loader.exec_module(module)
    for override in overrides:
        name, value = override.split("=", 1)
        setattr(module, name, type(getattr(module, name))(value))
    return module


def replay(rows: list[dict[str, Any]], module: ModuleType = shipped, depth_limit: int = 8,
           ahead: bool = False) -> Replay:
    """Feed the logged rounds to ``module``'s ``AdaptiveDepth``, one per run, as the bench ran them. ``ahead``: in
    the order of the engine's depth worker with a spare core (``app/engine/depth_worker.py``), where each round's
    depth is decided before the round before it is observed (depth 1, depth 2, observe 1, depth 3, observe 2, ...);
    else turn by turn (depth 1, observe 1, depth 2, ...), the order without a spare core."""
    runs: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        runs.setdefault(int(row["run"]), []).append(row)
    result, memory = Replay(), None
    for run_rows in runs.values():
        adaptive = module.AdaptiveDepth(depth_limit)
        if memory is not None and any(row.get("warm") for row in run_rows):
            adaptive.restore(memory)

        decided = deque([_decide(adaptive, run_rows, 0)]) if ahead else deque()
        for index, row in enumerate(run_rows):
            if ahead:
                depth, rates = decided.popleft()
                decided.append(_decide(adaptive, run_rows, index + 1))  # decided while this round is verified
            else:
                depth, rates = _decide(adaptive, run_rows, index)
            result.rounds += 1
            result.same += depth == row["depth"] and rates == row["rates"]
            adaptive._reference = row["reason"] in ("start", "best")
            adaptive._probing = row["reason"] == "probe"
            if adaptive._known(2):
                costs = adaptive._costs()
                result.ratios.setdefault(row["prompt_set"], []).append([cost / costs[2] for cost in costs])
            made = row["batch"] - 1
            # whether the verify pass built its graph (the engine knows since our patch's graph pool), which decides
            # whether the round counts: the log keeps it as the round not counted
            built = not row["counted"]
            adaptive.observe(row["depth"], row["tested"], row["accepted"], module.RoundTiming(
                row["seconds"], row["verify"], row["draft"], row["draft_steps"], made, built,
                row.get("first_step")))  # (logs from before 2026-12-06's night: None, the steps' average stands in)
        memory = adaptive.snapshot()
    return result


def _decide(adaptive: Any, rows: list[dict[str, Any]], index: int) -> tuple[int, list[float]]:
    """The depth and rates ``adaptive`` decides for logged round ``index``. Open loop, the round played is the logged
    one: a round at the depth played (not a try or a visit) makes its depth the current one, as its decision did."""
    depth = adaptive.depth()
    adaptive._decided.clear()  # each observed round's flags are the logged ones (``replay``)
    rates = [round(rate, 3) for rate in adaptive.rates()]
    if index < len(rows) and rows[index]["reason"] in ("start", "best"):
        adaptive.current = rows[index]["depth"]
    return depth, rates


def fixed_ratios(spec: dict[str, Any]) -> dict[str, dict[int, float]]:
    """Per prompt set, each fixed depth's round time over depth 2's, from a spec.json's rows (depth 0: off)."""
    rounds: dict[str, dict[int, float]] = {}
    for row in spec["rows"]:
        if row["engine"] == "ours" and not row["adaptive"] and row.get("round_ms"):
            depth = 0 if row["mode"] == "off" else int(row["draft_depth"])
            rounds.setdefault(row["prompt_set"], {})[depth] = float(row["round_ms"])
    return {name: {k: ms / by_depth[2] for k, ms in sorted(by_depth.items())}
            for name, by_depth in rounds.items() if 2 in by_depth}


def main(argv: list[str]) -> None:
    log = Path(argv[0])
    path = Path(argv[1]) if len(argv) > 1 and "=" not in argv[1] else None
    overrides = [a for a in argv[1:] if "=" in a]
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    module = load_module(path, overrides)
    # a bench log does not say whether the engine decided each depth a round ahead (a spare core): both orders are
    # replayed, and the one that reproduces more of the log is studied
    result = max((replay(rows, module, ahead=ahead) for ahead in (False, True)), key=lambda r: r.same)
    print(f"fidelity: {result.same} of {result.rounds} rounds chose the logged depth with the logged rates")
    spec_file = log.parent / "spec.json"
    measured = fixed_ratios(json.loads(spec_file.read_text())) if spec_file.exists() else {}
    for name, ratios in result.ratios.items():
        predicted = " ".join(f"k{k} {statistics.median(r[k] for r in ratios):.3f}" for k in range(len(ratios[0])))
        truth = " ".join(f"k{k} {ratio:.3f}" for k, ratio in measured.get(name, {}).items())
        print(f"{name}: predicted round cost / depth 2's: {predicted}" + (f"; fixed runs: {truth}" if truth else ""))


if __name__ == "__main__":
    main(sys.argv[1:])
