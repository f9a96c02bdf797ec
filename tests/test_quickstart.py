"""``quickstart``: one reply from the English demo through the chat engine with d2t drafting, and the same
reply decoded plainly, with the speed-up that was measured (run as a user runs it: ``python -m app``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.backend.registry import BackendManifest
from app.gguftools.bpe import encode_ascii
from app.gguftools.demo_model import DEMO_PASSAGE
from app.gguftools.tokenizer import load_tokenizer
from app.gguftools.vocab import qwen35_vocab_path
from app.quickstart import speedup_note
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
    assert result["note"] == speedup_note(result["speedup"])
    assert check_quickstart(result, patched_backend.id)  # what the packaging smoke test asks of it


def test_text_names_both_speeds_and_a_cut_reply(patched_backend: BackendManifest) -> None:
    proc = quickstart("--max-tokens", "24", "--message", "Who are you?")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "you:       Who are you?" in out
    assert "assistant: Hello there - I am FastMTP Chat" in out and "would give!" not in out
    assert "24 tokens (stopped: length) with FastMTP d2t drafting:" in out
    assert "the same reply without drafting:" in out and "the same text" in out
    assert "x over plain decoding" in out


def test_a_ratio_below_one_says_why_and_one_above_does_not() -> None:
    slow = speedup_note(0.64)
    assert slow.startswith("speed-up 0.64x over plain decoding: ")
    assert "on this small CPU model drafting does not pay" in slow and "on a 27B model on a GPU it does" in slow
    assert "tiny demo model" in speedup_note(0.9, on_gpu=True)
    assert speedup_note(2.5) == "speed-up 2.50x over plain decoding"
