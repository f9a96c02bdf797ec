"""``bench adaptive-load``'s report: per phase, every fixed depth's decode tok/s (the one definition, pooled over the
replies, the median over the runs), adaptive depth's against the fastest fixed depth of that phase (the median of the
runs' ratios), and the depths it chose; JSON and a markdown table. Real ``bench spec`` rows and samples, filled with
given replies (no engine)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from app.bench import spec
from app.bench.adaptive_load import YARDSTICK_ROUNDS, AdaptiveLoadResult, Phase, own_clock
from tests.helpers.cli_in_process import command_parser


def _row(variant: spec.Variant, tokens_per_second: float, depths: dict[int, int] | None = None) -> spec.Row:
    sample = spec.Sample(depths=Counter(depths or {}), warm=True if variant.adaptive else None)
    sample.add_reply(101, 100 / tokens_per_second)  # 100 tokens after the first
    return spec.Row(variant, "reasoning", [sample])


def _phase(name: str, busy: int, speeds: dict[int, float], adaptive: float, depths: dict[int, int],
           threads: int = 2) -> Phase:
    rows = [_row(spec.Variant("ours", "off"), speeds[0])]
    rows += [_row(spec.Variant("ours", "sidecar", "d2t", k), tps) for k, tps in speeds.items() if k]
    rows.append(_row(spec.Variant("ours", "sidecar", "d2t", 8, adaptive=True), adaptive, depths))
    return Phase(name, busy, 0.4, 1.6, 12.0, rows, threads)


def test_each_phase_sets_adaptive_depth_against_its_own_fastest_fixed_depth() -> None:
    phases = [_phase("quiet", 0, {0: 100.0, 1: 120.0, 2: 130.0, 3: 140.0}, 137.0, {3: 80, 4: 20}),
              _phase("loaded", 2, {0: 60.0, 1: 58.0, 2: 50.0, 3: 45.0}, 57.0, {0: 70, 1: 25, 3: 5}, threads=1),
              _phase("quiet again", 0, {0: 100.0, 1: 121.0, 2: 131.0, 3: 141.0}, 120.0, {0: 50, 3: 50})]
    result = AdaptiveLoadResult("small demo model", 48, [1, 2, 3], 8, phases, "2-core test CPU")
    data = result.to_dict()
    quiet, loaded, again = data["phases"]
    assert quiet["best_fixed_depth"] == 3 and quiet["adaptive_vs_best"] == round(137.0 / 140.0, 3)
    assert loaded["best_fixed_depth"] == 0 and loaded["adaptive_vs_best"] == 0.95  # drafting off is best loaded
    assert again["adaptive_vs_best"] == round(120.0 / 141.0, 3)
    assert loaded["adaptive_depths"] == {"0": 0.7, "1": 0.25, "3": 0.05} and loaded["busy_cores"] == 2
    assert (quiet["threads"], loaded["threads"]) == (2, 1)  # each phase's own count, measured as it began
    table = result.markdown()
    assert ("| phase | busy cores | threads | load/core | off | k=1 | k=2 | k=3 | adaptive ≤8 | "
            "vs best fixed (each run: c cold, w warm) |") in table
    assert ("| loaded | 2 | 1 | 0.40 | 60.0 | 58.0 | 50.0 | 45.0 | 57.0 | 0.950x (k=0) | 0: 70%, 1: 25%, 3: 5% |"
            in table)
    assert "indicative" in table


def test_the_runs_of_each_phase_are_named() -> None:
    """One run's best fixed depth is its luckiest; ``--runs`` takes several, and the report says how many."""
    phases = [_phase("quiet", 0, {0: 100.0, 1: 120.0}, 119.0, {1: 100})]
    one = AdaptiveLoadResult("scaled demo model", 128, [1], 8, phases, "2-core test CPU")
    three = AdaptiveLoadResult("scaled demo model", 128, [1], 8, phases, "2-core test CPU", runs=3)
    assert one.to_dict()["runs"] == 1 and "one interleaved run a phase" in one.markdown()
    assert three.to_dict()["runs"] == 3
    assert "3 interleaved runs a phase, decode tok/s the median over them" in three.markdown()


def test_each_runs_ratio_is_against_the_phases_fastest_fixed_depth_in_that_run() -> None:
    """Each run's own ratio is against the same fixed depth (the phase's fastest by median) in that run; the phase's
    ratio is their median (side by side), not the ratio of two medians, which may each come from another run; the
    runs show how far they spread on a shared machine, and which one started cold."""
    def row(variant: spec.Variant, speeds: list[float]) -> spec.Row:
        samples = []
        for index, tokens_per_second in enumerate(speeds):
            sample = spec.Sample(depths=Counter({3: 10}), warm=index > 0 if variant.adaptive else None)
            sample.add_reply(101, 100 / tokens_per_second)
            samples.append(sample)
        return spec.Row(variant, "reasoning", samples)

    rows = [row(spec.Variant("ours", "off"), [100.0, 100.0, 100.0]),
            row(spec.Variant("ours", "sidecar", "d2t", 2), [150.0, 190.0, 150.0]),  # fastest in one run only
            row(spec.Variant("ours", "sidecar", "d2t", 3), [180.0, 200.0, 160.0]),
            row(spec.Variant("ours", "sidecar", "d2t", 8, adaptive=True), [171.0, 200.0, 168.0])]
    phase = Phase("loaded", 2, 0.9, 0.9, 30.0, rows, 1)
    assert phase.best_fixed() == (3, 180.0)
    data = phase.to_dict()
    assert data["adaptive_vs_best_runs"] == [0.95, 1.0, 1.05]
    assert data["adaptive_vs_best"] == 1.0 and data["adaptive_vs_best_of_medians"] == 0.95  # 171 / 180
    table = AdaptiveLoadResult("scaled demo model", 128, [2, 3], 8, [phase], "2-core test CPU", runs=3).markdown()
    assert "| 1.000x (k=3; 0.950c, 1.000w, 1.050w) |" in table
    one_run = Phase("quiet", 0, 0.1, 0.1, 10.0, [spec.Row(r.variant, "reasoning", r.samples[:1]) for r in rows], 2)
    assert "| 0.950x (k=3) |" in AdaptiveLoadResult("scaled demo model", 128, [2, 3], 8, [one_run],
                                                    "2-core test CPU").markdown()


def _round(run: int, depth: int, reason: str, seconds: float, accepted: int,
           prompt_set: str = "reasoning") -> dict[str, Any]:
    """One line of a phase's decision log, as ``spec``'s log writes it (the fields the own clock reads)."""
    return {"variant": "d2t sidecar adaptive k<=8", "run": run, "prompt_set": prompt_set, "prompt": 0,
            "depth": depth, "reason": reason, "seconds": seconds, "accepted": accepted}


def test_adaptive_depths_choices_are_priced_on_its_own_clock_against_the_fastest_fixed_depth() -> None:
    """A run's rounds at other depths than the phase's fastest fixed one are priced against that depth's own rounds
    in the same run (seconds per token), by what chose them; a run that hardly played that depth says nothing, and
    the warm-up's rounds are not the run's."""
    log = [_round(1, 5, "start", 1.0, 0, prompt_set="warm-up")]  # a slow warm-up round: not counted
    log += [_round(1, 3, "best", 0.010, 2) for _ in range(30)]  # 3 tokens in 10 ms: 3.33 ms a token
    log += [_round(1, 4, "probe", 0.020, 3), _round(1, 4, "probe", 0.020, 3)]  # 4 tokens in 20 ms: 6.67 ms lost each
    log += [_round(1, 0, "explore", 0.005, 0), _round(1, 0, "explore", 0.005, 0)]  # 1.67 ms lost each
    log += [_round(1, 2, "best", 0.009, 1) for _ in range(4)]  # played depth 2: 2.33 ms lost each
    log += [_round(1, 1, "probe", 0.002, 0)]  # a visit faster than the yardstick: a gain (1.33 ms)
    log += [_round(2, 3, "best", 0.010, 2) for _ in range(YARDSTICK_ROUNDS - 1)] + [_round(2, 2, "best", 0.009, 1)]
    first, second = own_clock(log, 3)
    assert second is None  # 19 rounds at depth 3: too few to price the others against
    assert first is not None and first.depth == 3 and first.rounds == 39
    seconds = 30 * 0.010 + 2 * 0.020 + 2 * 0.005 + 4 * 0.009 + 0.002
    per_token = 0.010 / 3
    assert first.lost["visits"] == pytest.approx((2 * (0.020 - 4 * per_token) + (0.002 - per_token)) / seconds)
    assert first.lost["tries"] == pytest.approx(2 * (0.005 - per_token) / seconds)
    assert first.lost["played"] == pytest.approx(4 * (0.009 - 2 * per_token) / seconds)
    assert first.total == pytest.approx(sum(first.lost.values())) and 0.05 < first.total < 0.07

    phase = _phase("quiet", 0, {0: 100.0, 1: 120.0, 2: 130.0, 3: 140.0}, 137.0, {3: 80, 4: 20})
    phase.decisions = log
    data = phase.to_dict()
    assert data["own_clock_lost"] == round(first.total, 4)  # the one run that could be priced
    assert data["own_clock_runs"][1] is None and data["own_clock_runs"][0]["depth"] == 3
    table = AdaptiveLoadResult("scaled demo model", 128, [1, 2, 3], 8, [phase], "2-core test CPU").markdown()
    visits, tries, played = (f"{first.lost[k]:.1%}" for k in ("visits", "tries", "played"))
    assert (f"| quiet | k=3 | {first.total:.1%} | {first.total:.1%}, – | {visits} | {tries} | {played} |"
            in table)
    assert "own clock" in table


def test_no_decision_log_no_own_clock_table() -> None:
    """Without a decision log, or with runs too short to price, the report has no own-clock figures rather than
    made-up ones."""
    phase = _phase("quiet", 0, {0: 100.0, 1: 120.0}, 119.0, {1: 100})
    assert phase.to_dict()["own_clock_lost"] is None and phase.to_dict()["own_clock_runs"] == []
    assert "own clock" not in AdaptiveLoadResult("scaled demo model", 128, [1], 8, [phase], "c").markdown()
    phase.decisions = [_round(1, 1, "best", 0.01, 1) for _ in range(YARDSTICK_ROUNDS - 1)]  # too short to price
    assert phase.to_dict()["own_clock_runs"] == [None] and phase.to_dict()["own_clock_lost"] is None
    assert "own clock" not in AdaptiveLoadResult("scaled demo model", 128, [1], 8, [phase], "c").markdown()


def test_a_fixed_depth_far_behind_in_the_first_run_is_left_out_of_the_later_ones() -> None:
    """``spec.screened``: after the first run, a fixed variant more than the screen behind the fastest fixed one in
    every prompt set is not run again; adaptive rows stay whatever their speed. A phase reports such a depth from its
    one run, marked, and sets adaptive depth against the fastest of the depths run every time."""
    def sample(tokens_per_second: float) -> spec.Sample:
        made = spec.Sample()
        made.add_reply(101, 100 / tokens_per_second)
        return made

    off, k2, k3 = spec.Variant("ours", "off"), spec.Variant("ours", "sidecar", "d2t", 2), \
        spec.Variant("ours", "sidecar", "d2t", 3)
    adaptive = spec.Variant("ours", "sidecar", "d2t", 8, adaptive=True)
    measured = {off: {"reasoning": sample(80.0), "chat": sample(80.0)},
                k2: {"reasoning": sample(90.0), "chat": sample(150.0)},  # far behind in one set only: stays
                k3: {"reasoning": sample(120.0), "chat": sample(140.0)},
                adaptive: {"reasoning": sample(20.0), "chat": sample(20.0)}}
    assert spec.screened(measured, 0.15) == [off]
    assert spec.screened(measured, 0.5) == [] and spec.screened({k3: measured[k3]}, 0.15) == []

    def row(variant: spec.Variant, speeds: list[float]) -> spec.Row:
        return spec.Row(variant, "reasoning", [sample(tps) for tps in speeds])

    # drafting off ran once, at a speed above the others' medians (a fast first run): it is not the yardstick
    phase = Phase("quiet", 0, 0.1, 0.1, 10.0, [row(off, [200.0]), row(k2, [150.0, 150.0, 150.0]),
                                               row(k3, [180.0, 160.0, 170.0]), row(adaptive, [171.0, 160.0, 170.0])], 2)
    assert phase.screened() == [0] and phase.best_fixed() == (3, 170.0)
    data = phase.to_dict()
    assert data["screened_out"] == [0] and data["best_fixed_depth"] == 3
    assert data["adaptive_vs_best_runs"] == [0.95, 1.0, 1.0]
    assert data["replies"]["off"] == [[[101, 0.5]]] and len(data["replies"]["d2t sidecar k=3"]) == 3
    result = AdaptiveLoadResult("scaled demo model", 128, [2, 3], 8, [phase], "2-core test CPU", runs=3, screen=0.15)
    table = result.markdown()
    assert "| quiet | 0 | 2 | 0.10 | 200.0¹ | 150.0 | 170.0 | 170.0 |" in table
    assert "¹ the first run only: more than 15% slower than the fastest fixed depth in it" in table
    assert result.to_dict()["screen"] == 0.15
    everyone = Phase("quiet", 0, 0.1, 0.1, 10.0, phase.rows[1:], 2)
    assert everyone.screened() == [] and "¹" not in AdaptiveLoadResult(
        "scaled demo model", 128, [2, 3], 8, [everyone], "2-core test CPU", runs=3).markdown()


def test_the_screen_options_help_gives_the_default_the_benchmark_uses() -> None:
    """``--screen`` left out is None (the command line does not import the benchmark to read it): its help states the
    default, which must be ``SCREEN``."""
    from app.bench.adaptive_load import SCREEN

    command = command_parser("bench", "adaptive-load")
    option = next(a for a in command._actions if "--screen" in a.option_strings)
    assert option.default is None and option.help is not None and f"(default {SCREEN:g})" in option.help


def test_the_commands_defaults_are_the_shape_the_bar_is_measured_on() -> None:
    """``bench adaptive-load`` with no options runs what docs/benchmarks.md measures adaptive depth's 0.97x bar on:
    the built-in (scaled) demo, 512-token replies, two cores kept busy in the loaded phase, five runs. Its defaults
    once were a quick look (the small demo, 64 tokens, one busy core, three runs), whose verdict differs: on the Xeon
    its quiet phase read 0.957x where the measured shape read 0.981x-1.002x. Each option's help states its default."""
    command = command_parser("bench", "adaptive-load")
    args = command.parse_args([])
    assert (args.size, args.tokens, args.busy_cores, args.runs, args.acceptance) == ("scaled", 512, 2, 5, 0.8)
    for option in ("--size", "--tokens", "--busy-cores", "--runs"):
        action = next(a for a in command._actions if option in a.option_strings)
        assert action.help is not None and f"(default {action.default}" in action.help, option
    assert "--size small --tokens 64 --runs 3" in (command.description or "")  # the quick look, named
