"""``bench prompt``'s arithmetic and report, on synthetic samples (no backend, no server)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from app.bench.prompt import (
    OURS_N_BATCH,
    SERVER_N_BATCH,
    SERVER_N_UBATCH,
    TARGET_RATIO,
    PromptResult,
    Row,
    Sample,
    Variant,
    default_variants,
    make_prompt,
    ours,
    process_cpu_seconds,
    upstream,
)
from app.engine.config import EngineConfig


def _row(variant: Variant, length: int, seconds: list[float], split: tuple[float, float | None] | None = None) -> Row:
    samples = [Sample(s, *(split or (None, None))) for s in seconds]
    return Row(variant, length, samples)


def _result() -> PromptResult:
    rows = [
        # 512 tokens: ours 1.0 / 1.1 / 0.9 s -> median 512 tok/s; llama-server 0.8 / 1.0 / 1.0 -> median 512 tok/s
        _row(ours(), 512, [1.0, 1.1, 0.9], (0.9, None)),
        _row(upstream(), 512, [0.8, 1.0, 1.0]),
        _row(ours(draft=True), 512, [1.25, 1.25, 1.25], (1.0, 0.2)),
        _row(upstream(draft=True), 512, [1.0, 1.0, 1.0]),
        _row(ours(1024), 512, [0.8, 0.8, 0.8]),
        _row(ours(256), 512, [2.0, 2.0, 2.0]),
        # 2048 tokens: ours 4 s, llama-server 5 s
        _row(ours(), 2048, [4.0, 4.0, 4.0]),
        _row(upstream(), 2048, [5.0, 5.0, 5.0]),
        _row(ours(1024), 2048, [5.0, 5.0, 5.0]),
    ]
    return PromptResult(rows, 3, 1, 4096, "synthetic", "test", (1.0, 1.5))


def test_the_variants_are_each_engine_at_its_defaults_then_our_other_batch_sizes() -> None:
    variants = default_variants([256, OURS_N_BATCH, 2048], server_ubatches=[512, 1024])
    assert variants == [ours(), ours(draft=True), upstream(), upstream(draft=True), upstream(n_ubatch=1024),
                        ours(256), ours(2048)]
    assert default_variants([], draft=False, upstream_too=False) == [ours()]
    assert EngineConfig(Path("target.gguf")).n_batch == OURS_N_BATCH  # the engine's default, whatever it becomes
    assert (upstream().n_batch, upstream().n_ubatch) == (SERVER_N_BATCH, SERVER_N_UBATCH) == (2048, 512)
    assert ours(1024).n_ubatch == 1024  # ours: n_ubatch = n_batch
    assert ours().label == f"ours off, n_batch {OURS_N_BATCH}"
    assert upstream(draft=True).label == "llama-server d2t sidecar, -b 2048 -ub 512"
    assert ours().is_default and upstream().is_default and not ours(1024).is_default
    assert not upstream(n_ubatch=1024).is_default


def test_the_ratio_is_of_the_medians_against_llama_server_drafting_the_same_way() -> None:
    result = _result()
    off = result.row(ours(), 512)
    assert off is not None
    assert off.tps == pytest.approx(512.0)  # median of 512/1.0, 512/1.1, 512/0.9
    assert result.vs_upstream(off) == pytest.approx(1.0)  # 512 / 512
    # each run: ours / llama-server measured side by side in that run
    assert result.vs_upstream_runs(off) == pytest.approx([0.8, 1.0 / 1.1, 1.0 / 0.9])
    d2t = result.row(ours(draft=True), 512)
    assert d2t is not None and result.upstream_peer(d2t) == result.row(upstream(draft=True), 512)
    assert result.vs_upstream(d2t) == pytest.approx(0.8)  # 1.25 s against 1.0 s
    # our other batch sizes are set against llama-server's defaults too, and against ours at the default
    wide = result.row(ours(1024), 512)
    assert wide is not None
    assert result.vs_upstream(wide) == pytest.approx(512 / 0.8 / 512)
    assert result.vs_default(wide) == pytest.approx(1.0 / 0.8)
    assert result.vs_default(off) is None
    server = result.row(upstream(), 512)
    assert server is not None and result.vs_upstream(server) is None and result.upstream_peer(server) is None
    long = result.row(ours(), 2048)
    assert long is not None and result.vs_upstream(long) == pytest.approx(5.0 / 4.0)


def test_the_draft_cost_is_the_extra_time_over_drafting_off_at_the_same_batch_sizes() -> None:
    result = _result()
    d2t, server_d2t, off = (result.row(v, 512) for v in (ours(draft=True), upstream(draft=True), ours()))
    assert d2t is not None and server_d2t is not None and off is not None
    assert result.draft_cost(d2t) == pytest.approx(1.25 - 1.0)  # 1.25 s against the off row's median 1.0 s
    assert result.draft_cost(server_d2t) == pytest.approx(1.0 / (512 / 512.0) - 1.0)
    assert result.draft_cost(off) is None
    # ours: the split of the prompt time
    assert d2t.samples[0].host == pytest.approx(0.05)
    assert off.samples[0].host == pytest.approx(0.1)
    assert Sample(1.0).host is None
    assert result.draft_cost(d2t, cpu=True) is None  # no CPU times in these samples
    timed = PromptResult([Row(ours(), 512, [Sample(2.0, cpu_seconds=1.0)]),
                          Row(ours(draft=True), 512, [Sample(2.0, cpu_seconds=1.1)])], 1, 1, 4096, "m", "d")
    timed_d2t = timed.row(ours(draft=True), 512)
    assert timed_d2t is not None and timed.draft_cost(timed_d2t) == pytest.approx(0.0)
    assert timed.draft_cost(timed_d2t, cpu=True) == pytest.approx(0.1)
    assert "+0.0% (+10.0% CPU)" in timed.markdown()


def test_the_ratio_per_cpu_second_leaves_out_the_waits_for_a_core() -> None:
    # wall: ours 2.0 s against 1.0 s (another job took the core); CPU: 1.0 s against 1.0 s
    rows = [Row(ours(), 512, [Sample(2.0, 0.95, None, 1.0), Sample(1.0, 0.95, None, 1.0)]),
            Row(upstream(), 512, [Sample(1.0, cpu_seconds=1.0), Sample(1.0, cpu_seconds=1.25)]),
            Row(ours(1024), 512, [Sample(1.0, cpu_seconds=1.1), Sample(1.0, cpu_seconds=1.1)])]
    result = PromptResult(rows, 2, 1, 4096, "m", "d")
    off = result.row(ours(), 512)
    assert off is not None and off.cpu_tps == pytest.approx(512.0) and off.tps == pytest.approx((256 + 512) / 2)
    assert result.vs_upstream_cpu(off) == pytest.approx(512.0 / ((512 + 409.6) / 2))
    assert result.vs_upstream(off) == pytest.approx(0.75)
    assert result.best_n_batch(512) == 1024 and result.best_n_batch(512, cpu=True) == OURS_N_BATCH
    data = result.to_dict()
    assert data["best_n_batch_cpu"] == {"512": OURS_N_BATCH}
    assert data["rows"][0]["prompt_tps_cpu_runs"] == [512.0, 512.0]
    assert "(0.900x per CPU second)" not in result.markdown()
    assert f"per CPU second); our fastest n_batch here: 1024 ({OURS_N_BATCH} per CPU second)" in result.markdown()
    # without CPU times (another system), the columns say so and the ratio is None
    assert _result().vs_upstream_cpu(_result().rows[0]) is None


def test_the_best_batch_size_and_the_target_per_prompt_length() -> None:
    result = _result()
    assert result.best_n_batch(512) == 1024
    assert result.best_n_batch(2048) == OURS_N_BATCH
    assert result.target_met(512) is True  # exactly 1.0x
    assert result.target_met(2048) is True
    slow = PromptResult([_row(ours(), 512, [1.0]), _row(upstream(), 512, [0.9])], 1, 1, 4096, "m", "d")
    assert TARGET_RATIO == 0.95
    assert slow.target_met(512) is False  # ours 512 tok/s, llama-server 569 tok/s: 0.9x
    assert "0.900x, below the 0.95x target" in slow.markdown()
    alone = PromptResult([_row(ours(), 512, [1.0])], 1, 1, 4096, "m", "d")
    assert alone.target_met(512) is None and alone.best_n_batch(512) == OURS_N_BATCH


def test_the_report_holds_every_row_and_says_whether_the_target_is_met() -> None:
    result = _result()
    data = json.loads(json.dumps(result.to_dict()))
    assert data["prompt_lengths"] == [512, 2048] and data["runs"] == 3 and data["threads"] == 1
    assert data["best_n_batch"] == {"512": 1024, "2048": OURS_N_BATCH}
    assert data["target_met"] == {"512": True, "2048": True}
    assert len(data["rows"]) == len(result.rows)
    first = data["rows"][0]
    assert set(first) >= {"variant", "engine", "draft", "n_batch", "n_ubatch", "prompt_tokens", "prompt_tps_median",
                          "prompt_tps_runs", "median_ms", "min_ms", "max_ms", "vs_upstream", "vs_upstream_runs",
                          "vs_default_n_batch", "draft_cost", "target_native_ms", "draft_native_ms", "host_ms"}
    assert first["median_ms"] == 1000.0 and first["min_ms"] == 900.0 and first["max_ms"] == 1100.0
    assert first["target_native_ms"] == 900.0 and first["host_ms"] == 100.0
    d2t = next(r for r in data["rows"] if r["engine"] == "ours" and r["draft"] == "d2t")
    assert d2t["draft_cost"] == 0.25 and d2t["draft_native_ms"] == 200.0
    text = result.markdown()
    table = [line for line in text.splitlines() if line.startswith("| ")]
    assert len(table) == 1 + len(result.rows)  # the header and one line per row
    assert all(line.count("|") == table[0].count("|") for line in table)
    assert f"| 512 | ours off, n_batch {OURS_N_BATCH} | 512.0 | 1000 (900-1100) | **1.000x** |" in text
    assert "+25.0%" in text
    assert "- 2048 tokens: ours" in text and "1.250x, meets the 0.95x target" in text
    assert "our fastest n_batch here: 1024" in text


def test_the_prompts_are_the_same_every_time_and_plain_text_ids() -> None:
    prompt = make_prompt(512, 248320)
    assert len(prompt) == 512 and prompt == make_prompt(512, 248320)
    assert all(1000 <= t < 150_000 for t in prompt)
    assert make_prompt(2048, 248320)[:512] != prompt  # each length its own draw
    assert all(0 <= t < 3000 for t in make_prompt(64, 3000))


def test_a_process_cpu_time_is_read_from_proc_where_there_is_one() -> None:
    assert process_cpu_seconds(None) is None
    if not Path(f"/proc/{os.getpid()}/stat").exists():
        assert process_cpu_seconds(os.getpid()) is None
        return
    before = process_cpu_seconds(os.getpid())
    assert before is not None and before >= 0.0
    assert process_cpu_seconds(2**22 + 12345) is None  # beyond pid_max: no such process
