"""``quickstart``: the reply from the English demo through the chat engine with d2t drafting, and the same reply
decoded plainly, alternating after a warm-up, with the verdict that was measured (run as a user runs it:
``python -m app``); and its verdict refusing noisy and unequal samples (no engine: the replies are given)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.backend.registry import BackendManifest
from app.cli.quickstart import ROUNDS, measure, speedup_note
from app.engine.speculative import Reply
from app.engine.stats import ReplyStats
from app.engine.verdict import Condition, Sample, compare
from app.gguftools.bpe import encode_ascii
from app.gguftools.demo_model import DEMO_PASSAGE
from app.gguftools.tokenizer import load_tokenizer
from app.gguftools.vocab import qwen35_vocab_path
from installers.smoke import check_quickstart

REPLY_TOKENS = len(encode_ascii(load_tokenizer(qwen35_vocab_path()), DEMO_PASSAGE)) + 1  # and <|im_end|>


def quickstart(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app", "quickstart", *args], capture_output=True, text=True,
                          env=dict(os.environ), check=False, timeout=900)


def test_json_reports_the_drafted_reply_and_the_measured_speedup(patched_backend: BackendManifest) -> None:
    proc = quickstart("--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout)
    assert result["backend_id"] == patched_backend.id and Path(result["model"]).is_file()
    assert (result["reply"], result["reply_tokens"], result["stop_reason"]) == (DEMO_PASSAGE, REPLY_TOKENS, "eos")
    assert result["same_as_plain"] is True  # drafting is lossless
    assert 0.8 <= result["draft_acceptance"] <= 1.0
    assert 1.5 < result["tokens_per_pass"] <= 4.0  # depth 3: at most 4 tokens per target pass
    assert result["draft_tps"] > 0 and result["plain_tps"] > 0
    assert result["speedup"] == pytest.approx(result["draft_tps"] / result["plain_tps"])
    verdict = result["verdict"]  # medians of the alternating replies after the warm-up, greedy, at depth 3
    assert verdict["samples"] == [ROUNDS, ROUNDS] and verdict["rounds"] == ROUNDS and verdict["missing"] == []
    assert (result["sampling"], result["depth"], verdict["sampling"]) == ("greedy", "depth 3", "greedy")
    assert result["plain_tps"] == verdict["a_median"] and result["draft_tps"] == verdict["b_median"]
    assert verdict["outcome"] in ("faster", "slower", "no clear difference")
    assert result["note"].startswith(f"d2t drafting against plain decoding: {result['speedup']:.2f}x, "
                                     f"{verdict['outcome']} (median")
    assert check_quickstart(result, patched_backend.id)  # what the packaging smoke test asks of it


def test_text_names_both_speeds_and_a_cut_reply(patched_backend: BackendManifest) -> None:
    proc = quickstart("--max-tokens", "24", "--message", "Who are you?")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "you:       Who are you?" in out
    assert "assistant: Hello there - I am FastMTP Chat" in out and "would give!" not in out
    assert "24 tokens (stopped: length) with FastMTP d2t drafting at depth 3:" in out
    assert f"(median of {ROUNDS} replies, greedy)" in out
    assert "the same reply without drafting:" in out and "the same text" in out
    assert "d2t drafting against plain decoding: " in out


OFF = Condition("off", "", "greedy", "demo.gguf")
D2T = Condition("d2t", "depth 3", "greedy", "demo.gguf")


def _samples(off: list[float], d2t: list[float], warm: bool = True) -> list[Sample]:
    return [Sample(c, tps, 2 * i + k, warm) for i, pair in enumerate(zip(off, d2t, strict=True))
            for k, (c, tps) in enumerate(zip((OFF, D2T), pair, strict=True))]


def test_the_note_gives_the_verdict_and_says_why_when_drafting_does_not_pay() -> None:
    slow = speedup_note(compare(_samples([100, 101, 99], [64, 65, 63]), "off", "d2t"))
    assert slow.startswith("d2t drafting against plain decoding: 0.64x, slower (median 64 against 100 tok/s over 3 "
                           "alternating replies each, greedy)")
    assert "on this small CPU model drafting does not pay" in slow and "on a 27B model on a GPU it does" in slow
    even = speedup_note(compare(_samples([100, 104, 99], [101, 98, 103]), "off", "d2t"), on_gpu=True)
    assert "1.01x, no clear difference" in even and "tiny demo model" in even
    fast = speedup_note(compare(_samples([40, 41, 39], [100, 98, 99]), "off", "d2t"))
    assert fast == "d2t drafting against plain decoding: 2.48x, faster (median 99 against 40 tok/s over 3 " \
                   "alternating replies each, greedy)"


def test_the_note_refuses_a_verdict_from_noisy_or_unequal_samples() -> None:
    one = speedup_note(compare(_samples([27], [21]), "off", "d2t"))  # one cold reply per mode, as before
    assert one.startswith("Not enough comparable samples yet") and "off has 1 of 3 samples" in one
    cold = speedup_note(compare(_samples([27, 28, 26], [21, 20, 22], warm=False), "off", "d2t"))
    assert "0 of 3 samples after a warm-up" in cold
    deeper = [Sample(Condition("d2t", "depth 1", "greedy", "demo.gguf"), 50.0, 9)]
    other_depth = speedup_note(compare(_samples([40, 41, 39], [100, 98, 99]) + deeper, "off", "d2t"))
    assert "d2t (depth 1) has 1 of 3 samples" in other_depth and "3 samples of d2t at another depth" in other_depth
    hot = [Sample(Condition("off", "", "temperature 0.7", "demo.gguf"), 30.0, 9)]
    assert "6 samples at other sampling than temperature 0.7" in \
        speedup_note(compare(_samples([40, 41, 39], [100, 98, 99]) + hot, "off", "d2t"))


def test_quickstart_warms_up_each_mode_then_alternates() -> None:
    asked: list[str] = []
    speeds = iter([5.0, 1.0, 40.0, 100.0, 41.0, 98.0, 39.0, 99.0])  # the warm-ups first (not counted)

    def reply(name: str) -> tuple[Reply, str]:
        asked.append(name)
        # a reply of 65 tokens whose 64 after the first took 64 / speed seconds
        stats = ReplyStats(generated=65, first_token_at=0.0, last_token_at=64 / next(speeds))
        return Reply(stats=stats), f"text of {name}"

    last, samples = measure(reply, ROUNDS, {"off": OFF, "d2t": D2T})
    assert asked == ["off", "d2t"] * (1 + ROUNDS)
    assert [(s.condition.mode, round(s.tps)) for s in samples] == [("off", 40), ("d2t", 100), ("off", 41),
                                                                    ("d2t", 98), ("off", 39), ("d2t", 99)]
    assert all(s.warm and s.tokens == 65 for s in samples) and last["d2t"][1] == "text of d2t"
    assert compare(samples, "off", "d2t").outcome == "faster"
