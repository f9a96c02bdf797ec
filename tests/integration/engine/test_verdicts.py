"""One definition of decode speed and honest verdicts (issue 26).

Decode tok/s is ``(tokens - 1) / (time of the last token - time of the first)`` in one place
(``app.engine.stats.decode_tps``), and every place that shows a speed goes through it. Every comparison (the
HUD's "does drafting pay here", ``quickstart``, ``bench matrix`` and so the Benchmark page) goes through
``app.engine.verdict.compare``: fed noisy and unequal samples (other sampling, other depth, one sample, no
warm-up, overlapping spreads, not alternating) it refuses a verdict and says what is missing; with enough
same-condition samples it gives the right one. No timing here: the samples are given; the last test runs ``bench
matrix`` on the real engine to see its runs interleaved and judged.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.bench import spec
from app.bench.matrix import MatrixResult, run_order
from app.engine import stats, verdict
from app.engine.config import EngineConfig, SamplingParams
from app.engine.stats import ReplyStats, decode_tps, describe_depth, describe_sampling, pooled_decode_tps
from app.engine.verdict import Condition, Sample, SampleLog, alternating_rounds, compare
from app.gui.benchmark.benchmark_page import vs_off_text, vs_off_tooltip
from app.machines import remote_client as remote
from tests.helpers.demo_copies import DemoCopies

# ------------------------------------------------------------------------------------------ the one definition


def test_decode_speed_counts_the_tokens_after_the_first_over_the_time_from_the_first_to_the_last() -> None:
    assert decode_tps(11, 2.0) == 5.0  # 10 tokens came in the 2 s after the first one
    assert decode_tps(1, 2.0) == 0.0 and decode_tps(0, 0.0) == 0.0 and decode_tps(5, 0.0) == 0.0
    # a reply's figure does not include its prompt or its wait for the first token
    reply = ReplyStats(generated=11, prompt_seconds=9.0, decode_seconds=7.0, first_token_at=100.0,
                       last_token_at=102.0)
    assert reply.decode_span_seconds == 2.0 and reply.decode_tps == 5.0
    assert reply.to_dict()["decode_tps"] == 5.0 and reply.to_dict()["decode_span_seconds"] == 2.0
    # several replies pooled: every reply's tokens after its first over the sum of the spans
    assert pooled_decode_tps([(11, 2.0), (21, 3.0), (1, 0.0)]) == pytest.approx(30 / 5.0)


def test_the_engine_stamps_its_tokens_and_states_the_sampling_and_depth() -> None:
    reply = ReplyStats()
    assert reply.decode_tps == 0.0 and reply.rolling_tps == 0.0
    for _ in range(5):
        reply.record_token()
    assert reply.first_token_at is not None and reply.last_token_at is not None
    assert reply.decode_span_seconds == reply.last_token_at - reply.first_token_at
    assert reply.decode_tps == decode_tps(5, reply.decode_span_seconds)
    assert describe_sampling(SamplingParams()) == "greedy"
    assert describe_sampling(SamplingParams(temperature=0.7)) == "temperature 0.7"
    target = Path("t.gguf")
    assert describe_depth(EngineConfig(target)) == "no drafting"
    assert describe_depth(EngineConfig(target, mode="embedded", draft_depth=3)) == "depth 3"
    assert describe_depth(EngineConfig(target, mode="embedded", draft_depth=8, adaptive=True)) == \
        "adaptive depth ≤8"


def test_every_speed_shown_goes_through_the_one_definition() -> None:
    assert vars(spec)["pooled_decode_tps"] is stats.pooled_decode_tps
    assert vars(remote)["decode_tps"] is stats.decode_tps
    sample = spec.Sample()
    sample.add_reply(11, 2.0)
    sample.add_reply(11, 3.0)
    assert sample.tps == pytest.approx(20 / 5.0)
    streamed = remote.RemoteStats("box", first=10.0, last=12.0, generated=9)
    assert streamed.decode_tps == decode_tps(9, 2.0)


# ------------------------------------------------------------------------------------------ verdicts


def cond(mode: str, depth: str = "", sampling: str = "greedy", model: str = "m.gguf",
         threads: int | None = 2) -> Condition:
    return Condition(mode, depth if mode != "off" else "", sampling, model, threads)


def alternate(a: list[float], b: list[float], a_cond: Condition, b_cond: Condition, warm: bool = True,
              start: int = 0) -> list[Sample]:
    """A/B/A/B: a sample of each side per round."""
    samples = []
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        samples.append(Sample(a_cond, x, start + 2 * i, warm, load=1.5))
        samples.append(Sample(b_cond, y, start + 2 * i + 1, warm, load=1.5))
    return samples


OFF, D2T = cond("off"), cond("d2t", "depth 3")


def test_enough_alternating_same_condition_samples_give_the_right_verdict() -> None:
    faster = compare(alternate([36.0, 37.5, 36.8], [44.0, 45.2, 43.1], OFF, D2T), "off", "d2t")
    assert faster.outcome == "faster" and faster.decided
    assert faster.a_median == 36.8 and faster.b_median == 44.0 and faster.ratio == pytest.approx(44.0 / 36.8)
    assert faster.spread("a") == (36.0, 37.5) and faster.spread("b") == (43.1, 45.2) and faster.load == 1.5
    assert faster.sentence().startswith("d2t (depth 3) is faster than off: 1.20x, median 44.0 tok/s (43.1-45.2) "
                                        "against 36.8 (36.0-37.5), 3 and 3 samples alternating, greedy, load 1.5")
    slower = compare(alternate([36.0, 37.5, 36.8], [30.0, 31.2, 29.1], OFF, D2T), "off", "d2t")
    assert slower.outcome == "slower" and slower.ratio is not None and slower.ratio < 1
    assert slower.short() == f"{slower.ratio:.2f}x, slower"


def test_overlapping_spreads_are_no_clear_difference_not_a_winner() -> None:
    close = compare(alternate([36.0, 39.5, 37.0], [38.0, 41.0, 39.0], OFF, D2T), "off", "d2t")
    assert close.outcome == "no clear difference"  # d2t's median is 5% higher, but 38.0 < 39.5
    assert close.sentence().startswith("No clear difference between d2t (depth 3) and off: 1.05x")


def test_one_sample_a_side_is_refused_with_what_is_missing() -> None:
    one = compare(alternate([27.0], [21.0], OFF, D2T), "off", "d2t")  # the HUD's old "does not pay" case
    assert one.outcome == "not enough" and not one.decided and one.ratio == pytest.approx(21 / 27)
    assert one.missing == ("off has 1 of 3 samples", "d2t (depth 3) has 1 of 3 samples")
    assert one.sentence().startswith("Not enough comparable samples yet to compare d2t (depth 3) with off")
    assert one.short() == "measuring: off 1/3, d2t (depth 3) 1/3"
    assert compare([], "off", "d2t").missing == ("no sample of off or d2t yet",)


def test_samples_at_other_sampling_are_left_out() -> None:
    # three greedy rounds, then the chat's temperature: the latest sampling is compared, the greedy ones left out
    greedy = alternate([100.0, 101.0, 99.0], [120.0, 121.0, 119.0], OFF, D2T)
    hot = alternate([36.0], [35.0], cond("off", sampling="temperature 0.7"),
                    cond("d2t", "depth 3", sampling="temperature 0.7"), start=10)
    mixed = compare(greedy + hot, "off", "d2t")
    assert mixed.outcome == "not enough" and mixed.sampling == "temperature 0.7"
    assert "6 samples at other sampling than temperature 0.7" in mixed.left_out
    assert mixed.a_tps == (36.0,) and mixed.b_tps == (35.0,)
    # a side measured greedy against a side at temperature 0.7 is no comparison at all
    unequal = alternate([100.0, 101.0, 99.0], [35.0, 36.0, 34.0], OFF, cond("d2t", "depth 3", "temperature 0.7"))
    assert compare(unequal, "off", "d2t").outcome == "not enough"


def test_samples_at_another_depth_are_left_out() -> None:
    # bench matrix at k=1/2 and quickstart at k=3 measured different things
    shallow = alternate([40.0, 41.0], [50.0, 51.0], OFF, cond("d2t", "depth 1"))
    deep = alternate([40.5], [44.0], OFF, D2T, start=10)
    mixed = compare(shallow + deep, "off", "d2t")
    assert mixed.outcome == "not enough" and mixed.b == "d2t (depth 3)" and mixed.b_tps == (44.0,)
    assert "2 samples of d2t at another depth than depth 3" in mixed.left_out
    assert "d2t (depth 3) has 1 of 3 samples" in mixed.missing


def test_samples_without_a_warm_up_are_refused() -> None:
    cold = compare(alternate([36.0, 37.5, 36.8], [44.0, 45.2, 43.1], OFF, D2T, warm=False), "off", "d2t")
    assert cold.outcome == "not enough"
    assert cold.missing == ("off has 0 of 3 samples after a warm-up",
                            "d2t (depth 3) has 0 of 3 samples after a warm-up")
    assert "3 samples of off taken before a warm-up" in cold.left_out


def test_samples_taken_one_side_after_the_other_are_refused() -> None:
    blocks = [Sample(OFF, 36.0 + i, i) for i in range(3)] + [Sample(D2T, 44.0 + i, 3 + i) for i in range(3)]
    refused = compare(blocks, "off", "d2t")
    assert refused.outcome == "not enough" and refused.rounds == 1
    assert refused.missing == ("they were taken in 1 alternating round, not 3 (A/B/A/B)",)
    assert alternating_rounds(list("abbaba")) == 3 and alternating_rounds(list("aaabbb")) == 1
    assert alternating_rounds(list("abab")) == 2


def test_another_model_or_thread_count_is_not_compared() -> None:
    other = alternate([36.0, 37.5, 36.8], [44.0, 45.2, 43.1], OFF, D2T)
    latest = Sample(cond("off", threads=4), 50.0, 100)
    refused = compare([*other, latest], "off", "d2t")
    assert refused.outcome == "not enough" and "6 samples with another model or thread count" in refused.left_out


def test_the_sample_log_counts_no_short_reply_and_warms_up_on_each_models_first() -> None:
    log = SampleLog()
    assert log.add(OFF, 36.0, tokens=verdict.MIN_TOKENS - 1) is None  # too short to tell anything
    first = log.add(OFF, 30.0, tokens=64)
    assert first is not None and not first.warm  # the model's first reply: the warm-up
    for i in range(3):
        log.add(OFF, 36.0 + i / 10, tokens=64)
        log.add(D2T, 44.0 + i / 10, tokens=64)
    judged = log.compare("off", "d2t")
    assert judged.outcome == "faster" and judged.a_tps == (36.0, 36.1, 36.2)
    assert "1 sample of off taken before a warm-up" in judged.left_out
    again = Sample.from_dict(log.samples[1].to_dict())
    assert again == log.samples[1]


# ------------------------------------------------------------------------------------------ bench matrix's summary

OFF_V = spec.Variant("ours", "off")
D2T_V = spec.Variant("ours", "sidecar", "d2t", 3)
EMB_V = spec.Variant("ours", "embedded", None, 2)


def run_sample(tps: float, order: int, warm: bool = True) -> spec.Sample:
    """One run of a variant: one reply whose 64 tokens after the first took 64 / tps seconds."""
    return spec.Sample(generated=65, decode_seconds=64 / tps, spans=[(65, 64 / tps)], order=order,
                       after_warm_up=warm)


def matrix(rows: dict[spec.Variant, list[tuple[float, int]]], warm: bool = True) -> MatrixResult:
    return MatrixResult([spec.Row(v, "document", [run_sample(t, o, warm) for t, o in samples])
                         for v, samples in rows.items()], 64, 3, "m.gguf", "test", threads=2)


def verdicts(result: MatrixResult) -> dict[str, dict[str, object] | None]:
    return {row["variant"]: row["verdict"] for row in result.to_dict()["rows"]}


def test_bench_matrix_interleaves_its_variants_run_by_run() -> None:
    variants = [OFF_V, EMB_V, D2T_V]
    orders = [run_order(variants, r) for r in range(3)]
    assert orders == [[OFF_V, EMB_V, D2T_V], [EMB_V, D2T_V, OFF_V], [D2T_V, OFF_V, EMB_V]]
    # the order in which the samples were taken still makes three rounds of off against each variant
    taken = [v for order in orders for v in order]
    for variant in (EMB_V, D2T_V):
        assert alternating_rounds([str(v) for v in taken if v in (OFF_V, variant)]) == 3


def test_bench_matrix_gives_a_verdict_per_drafting_row_from_interleaved_runs() -> None:
    result = matrix({OFF_V: [(40.0, 0), (41.0, 5), (39.0, 7)], EMB_V: [(44.0, 1), (52.0, 3), (47.0, 8)],
                     D2T_V: [(60.0, 2), (61.0, 4), (59.0, 6)]})
    found = verdicts(result)
    assert found["off"] is None
    d2t = found["d2t sidecar k=3"]
    assert d2t is not None and d2t["outcome"] == "faster" and d2t["ratio"] == pytest.approx(60 / 40)
    assert d2t["a_spread"] == (39.0, 41.0) and d2t["sampling"] == "greedy" and d2t["rounds"] == 3
    embedded = found["embedded k=2"]
    assert embedded is not None and embedded["outcome"] == "faster"  # 44-52 against 39-41
    assert result.to_dict()["rows"][2]["decode_tps_median"] == 60.0  # the one definition: 64 tokens over 64/60 s
    table = result.markdown()
    assert "**Against off** (greedy, 3 interleaved runs" in table
    assert "| d2t sidecar k=3 | document | d2t (depth 3) is faster than off: 1.50x" in table


def test_bench_matrix_refuses_a_verdict_from_one_run_blocks_no_warm_up_or_overlap() -> None:
    one = verdicts(matrix({OFF_V: [(40.0, 0)], D2T_V: [(60.0, 1)]}))["d2t sidecar k=3"]
    assert one is not None and one["outcome"] == "not enough"
    assert one["missing"] == ["off has 1 of 3 samples", "d2t (depth 3) has 1 of 3 samples"]
    assert vs_off_text(one) == "1.50x? needs 4 more runs"  # the Benchmark page's cell
    assert vs_off_tooltip(one).startswith("d2t at depth 3 vs drafting off: needs 2 more runs with d2t at depth 3 "
                                          "and 2 with drafting off, in turn. Not enough comparable samples")
    blocks = verdicts(matrix({OFF_V: [(40.0, 0), (41.0, 1), (39.0, 2)],
                              D2T_V: [(60.0, 3), (61.0, 4), (59.0, 5)]}))["d2t sidecar k=3"]
    assert blocks is not None and blocks["outcome"] == "not enough" and blocks["rounds"] == 1
    assert vs_off_text(blocks) == "1.50x? needs 3 more runs"  # 1 more d2t (half a round), then 2 off in turn
    cold = verdicts(matrix({OFF_V: [(40.0, 0), (41.0, 2), (39.0, 4)], D2T_V: [(60.0, 1), (61.0, 3), (59.0, 5)]},
                           warm=False))["d2t sidecar k=3"]
    assert cold is not None and cold["outcome"] == "not enough"
    assert "off has 0 of 3 samples after a warm-up" in cold["missing"]
    close = verdicts(matrix({OFF_V: [(40.0, 0), (45.0, 2), (39.0, 4)],
                             D2T_V: [(44.0, 1), (41.0, 3), (46.0, 5)]}))["d2t sidecar k=3"]
    assert close is not None and close["outcome"] == "no clear difference"
    assert vs_off_text(close) == f"{close['ratio']:.2f}x, no clear gain"  # the HUD's words


@pytest.mark.usefixtures("patched_backend")
def test_bench_matrix_on_the_engine_interleaves_and_judges_from_three_runs(tmp_path: Path,
                                                                           default_demo: DemoCopies) -> None:
    demo = default_demo.copy_to(tmp_path / "demo")
    done = subprocess.run([sys.executable, "-m", "app", "bench", "matrix", "--target", str(demo.target), "--d2t",
                           str(demo.sidecar_d2t), "--modes", "off,d2t", "--depths", "2", "--tokens", "8",
                           "--out", str(tmp_path / "out"), "--json"], capture_output=True, text=True, timeout=900,
                          env=os.environ.copy(), check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    events = [json.loads(line) for line in done.stdout.splitlines()]
    order = [e["message"].split(": ", 1)[1] for e in events if e["kind"] == "progress" and " done" not in
             e["message"] and e["message"].startswith("run ")]
    assert order == ["off", "d2t sidecar k=2", "d2t sidecar k=2", "off", "off", "d2t sidecar k=2"]  # rotating
    result = events[-1]
    assert result["kind"] == "result" and result["runs"] == 3  # three interleaved runs by default
    rows = {row["variant"]: row for row in result["rows"]}
    assert rows["off"]["verdict"] is None and len(rows["off"]["decode_tps_runs"]) == 3
    verdict = rows["d2t sidecar k=2"]["verdict"]
    assert verdict["samples"] == [3, 3] and verdict["rounds"] == 3 and verdict["sampling"] == "greedy"
    assert verdict["outcome"] in ("faster", "slower", "no clear difference") and verdict["missing"] == []
    assert "**Against off** (greedy, 3 interleaved runs" in (tmp_path / "out" / "matrix.md").read_text()
