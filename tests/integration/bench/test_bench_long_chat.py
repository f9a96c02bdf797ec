"""``bench long-chat`` for real on the tiny demo: a chat long enough to be trimmed answers every turn, and chats
reopened after a worker restart take their state up from disk and reply as a read from scratch does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("patched_backend")


def test_a_long_chat_is_trimmed_without_a_failed_turn_and_reopens_from_disk(tmp_path: Path) -> None:
    out = tmp_path / "long-chat.json"
    record = tmp_path / "benchmarks.md"
    done = subprocess.run([sys.executable, "-m", "app", "bench", "long-chat", "--size", "tiny", "--ctx", "512",
                           "--turns", "8", "--max-tokens", "16", "--reread-every", "2", "--reopen-tokens", "200",
                           "--runs", "2", "--json", "--out", str(out), "--record", str(record)],
                          capture_output=True, text=True, check=False, timeout=600)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert json.loads(out.read_text()) == result
    assert (result["n_ctx"], result["overflow"], result["max_tokens"]) == (512, "trim", 16)

    turns = result["turns"]
    assert [t["turn"] for t in turns] == list(range(1, 9))
    assert all(t["stop_reason"] == "length" and t["reply_tokens"] == 16 for t in turns)  # no turn failed
    assert all(t["context_used"] <= t["context_size"] == 512 for t in turns)
    assert any(t["trimmed_turns"] > 0 for t in turns)  # the chat outgrew the context and went on
    assert turns[0]["state"] == "reread" and turns[1]["state"] == "kept" and turns[1]["reused_tokens"] > 0
    sampled = [t for t in turns if t["reread_ttft_s"] is not None]
    assert [t["turn"] for t in sampled] == [2, 4, 6, 8]
    # the re-read is the same prompt read from scratch, and greedy decoding gives the same reply
    assert all(t["reread_prompt_tokens"] == t["prompt_tokens"] + t["reused_tokens"] for t in sampled)
    assert all(t["reread_identical"] for t in sampled)

    reopens = result["reopens"]
    assert [r["run"] for r in reopens] == [1, 2] and [r["first"] for r in reopens] == ["restored", "re-read"]
    for r in reopens:
        assert (r["state"], r["state_source"]) == ("restored", "disk"), r
        assert r["chat_tokens"] >= 200 and r["identical"]
        assert r["reread_prompt_tokens"] == r["chat_tokens"] + r["prompt_tokens"]  # only the new turn was read
        assert r["ttft_s"] > 0 and r["reread_ttft_s"] > 0

    summary = result["summary"]
    assert summary["failed_turns"] == 0 and summary["turns_with_trim"] > 0
    assert summary["reopen_from_disk"] == 2 and summary["reopen_identical"] is True
    assert summary["kept_vs_reread"] > 0 and summary["reopen_vs_reread"] > 0
    files = result["state_files"]
    assert {f["conversation"] for f in files} >= {"long-chat", "reopen-1", "reopen-2"}
    assert all(f["tokens"] > 0 and f["bytes"] > 0 for f in files)
    assert summary["state_bytes_per_1000_tokens"] > 0

    text = record.read_text()
    assert text.startswith("\n## Long chats (issue 34; tiny demo model)") and "| reopen run |" in text
