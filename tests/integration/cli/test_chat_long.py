"""The terminal chat of a long conversation (issue 34): the issue's own run, `chat --ctx 512` with eight questions,
now answers every one (the oldest turns are trimmed, and it says so); a cut reply goes on with /continue to
exactly the reply one longer cap gives; "stop at the limit" refuses with the figures and /new carries the last
exchange into a new chat; the status line carries the context meter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from app.backend.registry import BackendManifest
from tests.helpers.demo_copies import DemoCopies

QUESTIONS = [f"Question {i}: tell me about the table of the demo, in detail please." for i in range(8)]


def chat(*args: str, lines: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app", "chat", *args], input="\n".join([*lines, "/quit"]) + "\n",
                          capture_output=True, text=True, env=dict(os.environ), check=False, timeout=900)


def test_eight_questions_in_a_512_token_context_all_get_answers(patched_backend: BackendManifest, tmp_path: Path,
                                                                 default_demo: DemoCopies) -> None:
    demo = default_demo.copy_to(tmp_path / "demo")
    proc = chat("--model", str(demo.target), "--ctx", "512", "--max-tokens", "120", "--temp", "0",
                lines=QUESTIONS)
    assert proc.returncode == 0, proc.stderr
    assert "error:" not in proc.stderr, proc.stderr
    assert proc.stdout.count("assistant>") == 8
    summaries = [line for line in proc.stderr.splitlines() if "tokens/pass" in line]
    assert len(summaries) == 8 and all("/ 512 tokens" in line for line in summaries)  # the meter
    assert "no longer in the model's context" in proc.stderr  # it trimmed, and said so


def test_continue_gives_the_reply_one_longer_cap_gives(patched_backend: BackendManifest, tmp_path: Path,
                                                       default_demo: DemoCopies) -> None:
    demo = default_demo.copy_to(tmp_path / "demo")
    common = ("--model", str(demo.target), "--draft", str(demo.sidecar_d2t), "--mtp", "sidecar", "--temp", "0")
    proc = chat(*common, "--max-tokens", "12", lines=["Hello!", "/continue", "/continue"])
    assert proc.returncode == 0, proc.stderr
    assert "cut by the reply cap; /continue" in proc.stderr
    pieces = [part.split("\n", 1)[0] for part in proc.stdout.split("assistant> ")[1:]]
    assert len(pieces) == 3
    whole = subprocess.run([sys.executable, "-m", "app", "generate", *common, "--max-tokens", "36", "--prompt",
                            "Hello!", "--json"], capture_output=True, text=True, env=dict(os.environ), check=False,
                           timeout=900)
    assert whole.returncode == 0, whole.stderr
    assert "".join(pieces) == json.loads(whole.stdout)["text"]


def test_stop_at_the_limit_refuses_with_the_figures_and_new_carries_the_last_exchange(
        patched_backend: BackendManifest, tmp_path: Path, default_demo: DemoCopies) -> None:
    demo = default_demo.copy_to(tmp_path / "demo")
    proc = chat("--model", str(demo.target), "--ctx", "512", "--max-tokens", "120", "--temp", "0", "--overflow",
                "stop", lines=[*QUESTIONS, "/new", "And now?"])
    assert proc.returncode == 0, proc.stderr
    assert "reached the context limit" in proc.stderr and "of 512 tokens" in proc.stderr
    assert "/new starts a new chat carrying the last exchange" in proc.stderr
    refused = proc.stderr.count("reached the context limit")
    assert 1 <= refused <= len(QUESTIONS) - 2  # some questions were answered first, then it stopped
    # after /new, "And now?" was answered: the last reply line is not empty
    assert proc.stdout.rstrip().split("assistant> ")[-1].strip()
