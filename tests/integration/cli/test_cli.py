"""The headless commands as a script would use them: JSON out, clear errors, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.backend.registry import BackendManifest
from app.core import defaults
from app.gguftools.demo_model import DRAFT_VOCAB
from tests.helpers.demo_copies import DemoCopies


def run_app(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True,
                          env=dict(os.environ), check=False, timeout=900)


def test_bench_draft_head_reports_both_heads(patched_backend: BackendManifest) -> None:
    proc = run_app("bench", "draft-head", "--size", "tiny", "--runs", "3", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout)
    assert result["variants"]["full"]["head_rows"] == 248320
    assert result["variants"]["d2t"]["head_rows"] == 32768
    assert all(v["step_ms"] > v["head_ms"] > 0 for v in result["variants"].values())


def test_gguf_inspect_json_and_a_truncated_file(tmp_path: Path, default_demo: DemoCopies) -> None:
    demo = default_demo.copy_to(tmp_path / "demo")
    proc = run_app("gguf", "inspect", str(demo.sidecar_d2t), "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    n_draft = DRAFT_VOCAB.get(demo.size, defaults.DRAFT_VOCAB)
    assert (report["kind"], report["d2t_length"], report["output_shape"]) == (
        "mtp_sidecar_d2t", n_draft, [demo.shape.n_embd, n_draft])
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(demo.sidecar_d2t.read_bytes()[:1_000_000])
    proc = run_app("gguf", "inspect", str(cut), "--json")
    assert proc.returncode == 1
    error = json.loads(proc.stdout)
    assert error["error"] == "GGUFError" and "cut.gguf" in error["message"]


@pytest.mark.parametrize("argv", [["backend", "build", "--cuda-arch", "nine"], ["gguf"], ["nonsense"]])
def test_bad_command_lines_are_usage_errors(argv: list[str]) -> None:
    proc = run_app(*argv)
    assert proc.returncode == 2
    assert "usage:" in proc.stderr


def test_demo_model_command_writes_all_three_files(tmp_path: Path, qwen_vocab_path: Path) -> None:
    proc = run_app("demo-model", "--out", str(tmp_path / "d"), "--acceptance", "0.8", "--seed", "3", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert all(Path(data[key]).is_file() for key in ("target", "sidecar_full", "sidecar_d2t"))
    assert data["acceptance_table"] == pytest.approx(0.8, abs=0.01)


def test_terminal_chat_answers_each_line_with_a_status_summary(patched_backend: BackendManifest,
                                                               tmp_path: Path, default_demo: DemoCopies) -> None:
    demo = default_demo.copy_to(tmp_path / "chat-demo")
    proc = subprocess.run([sys.executable, "-m", "app", "chat", "--model", str(demo.target), "--draft",
                           str(demo.sidecar_d2t), "--mtp", "sidecar", "--max-tokens", "12"],
                          input="Hello!\n/reset\nAgain?\n/quit\n", capture_output=True, text=True,
                          env=dict(os.environ), check=False, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("assistant>") == 2
    summaries = [line for line in proc.stderr.splitlines() if "tokens/pass" in line]
    assert len(summaries) == 2 and all("acceptance" in line and "depth 3" in line for line in summaries)


def test_generate_json_has_tokens_text_provenance_and_stats(patched_backend: BackendManifest, tmp_path: Path,
                                                            default_demo: DemoCopies) -> None:
    demo = default_demo.copy_to(tmp_path / "gen-demo")
    proc = run_app("generate", "--model", str(demo.target), "--draft", str(demo.sidecar_d2t), "--mtp", "sidecar",
                   "--n-max", "2", "--prompt", "Hi", "--max-tokens", "20", "--temp", "0.8", "--seed", "4", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert len(out["tokens"]) == len(out["provenance"]) == 20 and out["stop_reason"] == "length"
    assert len(out["text"].split()) >= 10
    assert set(out["stats"]) >= {"decode_tps", "acceptance", "tokens_per_pass", "acceptance_by_position",
                                 "proposed", "python_ms_per_round", "depth"}
    assert out["stats"]["depth"] == 2
    assert out["stats"]["proposed"] >= out["stats"]["drafted"] >= out["stats"]["accepted"]
    flash = {}
    for setting in ("on", "off"):
        run = run_app("generate", "--model", str(demo.target), "--draft", str(demo.sidecar_d2t), "--mtp", "sidecar",
                      "--prompt", "Hi", "--max-tokens", "12", "--flash-attn", setting, "--json")
        assert run.returncode == 0, run.stderr
        flash[setting] = json.loads(run.stdout)["tokens"]
    assert flash["on"] == flash["off"]
    bad = run_app("generate", "--model", str(demo.target), "--mtp", "sidecar", "--prompt", "Hi")
    assert bad.returncode == 1 and "needs a draft sidecar" in bad.stderr


def test_bare_command_without_a_display_falls_back_to_the_terminal_quickstart(
        patched_backend: BackendManifest) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    proc = subprocess.run([sys.executable, "-m", "app"], capture_output=True, text=True, env=env, check=False,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "No display found" in proc.stderr
    assert "assistant: Hello there - I am FastMTP Chat" in proc.stdout
    assert "d2t drafting against plain decoding: " in proc.stdout  # the verdict of alternating replies
