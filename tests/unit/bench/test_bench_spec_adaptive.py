"""``bench spec`` on adaptive rows: the fastest fixed depth beside them, the ratios, the depths chosen, and the
decision log drawn; no engine (synthetic samples and a synthetic log)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from app.bench.spec import Row, Sample, SpecResult, Variant, decision_charts


def _sample(tps: float, depths: dict[int, int] | None = None, cpu_tps: float | None = None) -> Sample:
    generated = int(tps * 10)
    return Sample(generated=generated, decode_seconds=10.0, passes=100, tested=80, proposed=90, accepted=60,
                  draft_native=1.0, verify_native=6.0, depths=Counter(depths or {}),
                  cpu_seconds=generated / cpu_tps if cpu_tps else 0.0, spans=[(generated + 1, 10.0)])


def _result() -> SpecResult:
    d2t = ("sidecar", "d2t")
    rows = [
        Row(Variant("ours", "off"), "document", [_sample(40), _sample(41), _sample(39)]),
        Row(Variant("ours", *d2t, 2), "document", [_sample(50), _sample(52), _sample(49)]),
        Row(Variant("ours", *d2t, 3), "document", [_sample(55, cpu_tps=60), _sample(51, cpu_tps=61),
                                                   _sample(56, cpu_tps=59)]),  # median 55, 60 per CPU second
        Row(Variant("ours", *d2t, 4), "document", [_sample(54, cpu_tps=63), _sample(56, cpu_tps=62),
                                                   _sample(50, cpu_tps=62)]),  # median 54, 62 per CPU second
        Row(Variant("ours", *d2t, 8, adaptive=True), "document",
            [_sample(54, {3: 10, 4: 80}, 61), _sample(55, {4: 90, 5: 10}, 62), _sample(53, {4: 100}, 63)]),
        Row(Variant("ours", "embedded", None, 3), "document", [_sample(70), _sample(70), _sample(70)]),
    ]
    return SpecResult(rows, 128, 3, "synthetic", "test")


def test_an_adaptive_row_is_set_against_the_fastest_fixed_depth_of_its_mode() -> None:
    result = _result()
    adaptive = next(r for r in result.rows if r.variant.adaptive)
    row = result.summary(adaptive)
    # the fastest d2t depth by median (k=3, 55), not the faster embedded row nor llama-server
    assert row["fastest_fixed"] == "d2t sidecar k=3" and row["fastest_fixed_tps_median"] == 55.0
    assert row["vs_fastest_fixed"] == pytest.approx(54 / 55, abs=1e-3)
    # run by run against that same depth (k=3) in that run, even where k=4 was faster in it (run 2): a run's
    # fastest depth is its luckiest; the ratio quoted is the median of these
    assert row["vs_fastest_fixed_runs"] == pytest.approx([54 / 55, 55 / 51, 53 / 56], abs=1e-3)
    assert row["vs_fastest_fixed_of_medians"] == pytest.approx(54 / 55, abs=1e-3)
    # in the decoding thread's CPU time the fastest fixed depth is k=4 (62 tokens per CPU second)
    assert row["decode_tps_cpu_median"] == 62.0 and row["fastest_fixed_cpu"] == "d2t sidecar k=4"
    assert row["vs_fastest_fixed_cpu"] == pytest.approx(1.0, abs=1e-3)
    assert row["depths"] == {"3": pytest.approx(10 / 290, abs=1e-3), "4": pytest.approx(270 / 290, abs=1e-3),
                             "5": pytest.approx(10 / 290, abs=1e-3)}
    fixed = result.summary(next(r for r in result.rows if r.variant.draft_depth == 3 and r.variant.draft == "d2t"))
    assert "fastest_fixed" not in fixed and "depths" not in fixed


def test_the_markdown_has_a_table_of_adaptive_against_the_fastest_fixed_depth() -> None:
    table = _result().markdown()
    assert "| adaptive variant | tok/s (median) | fastest fixed depth | its tok/s | ratio (median of the runs') |" \
        in table
    assert "| d2t sidecar adaptive k<=8 | 54.0 | d2t sidecar k=3 | 55.0 | 0.982x | 0.982, 1.078, 0.946 | " \
           "1.000x vs k=4 | 3: 3%, 4: 93%, 5: 3% |" in table
    assert json.loads(json.dumps(_result().to_dict()))["rows"][4]["vs_fastest_fixed"] == pytest.approx(0.982)


def test_each_run_says_whether_adaptive_started_cold_or_warm() -> None:
    """With a depth memory the first run starts cold and the later ones warm: the ratios are told apart."""
    result = _result()
    adaptive = next(r for r in result.rows if r.variant.adaptive)
    for sample, warm in zip(adaptive.samples, (False, True, True), strict=True):
        sample.warm = warm
    row = result.summary(adaptive)
    assert row["starts"] == ["cold", "warm", "warm"]
    assert row["vs_fastest_fixed_cold"] == pytest.approx(54 / 55, abs=1e-3)
    assert row["vs_fastest_fixed_warm"] == pytest.approx((55 / 51 + 53 / 56) / 2, abs=1e-3)
    assert "| 0.982x | 0.982c, 1.078w, 0.946w | " in result.markdown()
    fixed = result.summary(next(r for r in result.rows if r.variant.draft_depth == 3 and r.variant.draft == "d2t"))
    assert "starts" not in fixed


def test_a_ratio_between_variants_is_the_median_of_the_ratios_measured_side_by_side_in_each_run() -> None:
    """Each variant's median may come from another run: on the Xeon (2026-12-06) adaptive depth ran 0.990x, 0.991x and
    0.967x of fixed k=3 in three runs, and its median over k=3's median read 0.967x. The ratio quoted is the runs'."""
    d2t = ("sidecar", "d2t")
    off = Row(Variant("ours", "off"), "reasoning", [_sample(145.0), _sample(140.0), _sample(150.0)])
    fixed = Row(Variant("ours", *d2t, 3), "reasoning", [_sample(213.2), _sample(234.4), _sample(223.6)])
    adaptive = Row(Variant("ours", *d2t, 8, adaptive=True), "reasoning",
                   [_sample(211.1, {3: 90}), _sample(232.3, {3: 90}), _sample(216.3, {3: 90})])
    result = SpecResult([off, fixed, adaptive], 128, 3, "synthetic", "test")
    row = result.summary(adaptive)
    assert row["vs_fastest_fixed_runs"] == pytest.approx([0.990, 0.991, 0.967], abs=1e-3)
    assert row["vs_fastest_fixed"] == pytest.approx(0.990, abs=1e-3)
    assert row["vs_fastest_fixed_of_medians"] == pytest.approx(0.967, abs=1e-3)  # 216.3 / 223.6, both run 3's
    # vs off the same way: 213.2/145, 234.4/140, 223.6/150 -> 1.491 (the medians' ratio, 223.6/145, would be 1.542)
    assert result.summary(fixed)["vs_off"] == pytest.approx(1.491, abs=1e-3)


def test_an_adaptive_row_without_fixed_rows_has_no_comparison() -> None:
    result = SpecResult([Row(Variant("ours", "sidecar", "d2t", 8, adaptive=True), "document", [_sample(50)])],
                        128, 1, "synthetic", "test")
    assert "fastest_fixed" not in result.summary(result.rows[0])
    assert "adaptive variant" not in result.markdown()


def test_the_decisions_are_drawn_one_chart_per_adaptive_variant(tmp_path: Path) -> None:
    log = tmp_path / "adaptive-decisions.jsonl"
    lines = []
    for variant in ("d2t sidecar adaptive k<=8", "embedded adaptive k<=8"):
        for index in range(40):
            lines.append(json.dumps({
                "variant": variant, "run": 1 + index // 20, "prompt_set": "document", "prompt": index // 5,
                "round": index + 1, "depth": 3 + index % 3, "reason": ["best", "probe", "explore"][index % 3],
                "batch": 4 + index % 3, "tested": 2, "accepted": 1, "seconds": 0.05 + 0.001 * index,
                "verify": 0.04, "draft": 0.01, "predicted": None if index % 4 == 0 else 0.05, "load": 1.0,
                "counted": True, "rates": [10.0] * 9, "acceptance": [0.8] * 8}))
    log.write_text("\n".join(lines) + "\n")
    drawn = decision_charts(log, tmp_path)
    assert sorted(p.name for p in drawn) == ["adaptive-d2t-sidecar-adaptive-k-8.png",
                                             "adaptive-embedded-adaptive-k-8.png"]
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in drawn)
    assert decision_charts(tmp_path / "missing.jsonl", tmp_path) == []
