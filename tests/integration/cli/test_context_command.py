"""``python -m app context`` and ``--ctx auto`` (issue 34): the largest context a model fits on this machine with its
arithmetic, as JSON for scripts; a user's own ``--ctx`` that does not fit is warned about on stderr before the load.

Real processes on real GGUF files: the built-in demo, and a 27B-shaped header made sparse to a terabyte (it fits
no machine and takes no disk).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from gguf import LlamaFileType

from app.cli import build_parser
from app.cli.common import engine_config
from app.core import defaults
from app.gguftools.demo_model import DemoModel
from app.gguftools.qwen35 import ARCH, QWEN35_27B, hparams_kv
from app.gguftools.writer import plan_array, write_gguf
from app.models.context_size import FLOOR, check_context
from tests.helpers.demo_copies import DemoCopies
from tests.helpers.module_folders import ModuleFolders

ROOT = Path(__file__).resolve().parents[3]
KEYS = {"context", "auto", "fits", "limited_by", "trained_context", "target", "sidecar", "model_bytes",
        "sidecar_bytes", "kv_bytes_per_token", "kv_bytes", "recurrent_bytes", "overhead_bytes", "context_bytes",
        "needed_bytes", "memory_bytes", "usable_bytes", "device", "memory_source", "headroom_percent", "floor",
        "step", "summary", "formula", "warning"}


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders, default_demo: DemoCopies) -> DemoModel:
    return default_demo.copy_to(module_tmp.mktemp("ctx-cli-demo"))


@pytest.fixture(scope="module")
def huge(module_tmp: ModuleFolders) -> Path:
    path = write_gguf(module_tmp.mktemp("ctx-cli") / "huge.gguf", ARCH, hparams_kv(QWEN35_27B,
                      LlamaFileType.MOSTLY_Q4_K_M), [plan_array("pad", np.zeros(16, np.float32))])
    os.truncate(path, 1 << 40)
    return path


def app(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, check=False, env=os.environ.copy())


def test_context_json_gives_autos_figure_and_its_arithmetic(demo: DemoModel) -> None:
    done = app("context", "--model", str(demo.target), "--draft", str(demo.sidecar_d2t), "--memory-gib", "4",
               "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert set(data) == KEYS
    assert (data["context"], data["auto"], data["fits"], data["limited_by"]) == (8192, True, True, "trained")
    assert data["trained_context"] == 8192 and data["memory_bytes"] == 4 << 30 and data["memory_source"] == "given"
    assert data["device"] == "ram"  # --gpu-layers 0, as `chat` takes it
    assert data["model_bytes"] == demo.target.stat().st_size
    assert data["sidecar_bytes"] == demo.sidecar_d2t.stat().st_size
    assert data["needed_bytes"] == data["model_bytes"] + data["sidecar_bytes"] + data["context_bytes"]
    assert data["summary"].startswith("8,192 tokens: ") and "fits 4 GiB of available RAM" in data["summary"]
    assert any(line.startswith("KV per token = ") for line in data["formula"]) and data["warning"] is None

    measured = app("context", "--model", str(demo.target), "--json")  # this machine's RAM
    assert measured.returncode == 0, measured.stderr
    here = json.loads(measured.stdout)
    assert FLOOR <= here["context"] <= 8192 and here["memory_source"] != "given"


def test_context_text_and_a_value_that_does_not_fit(demo: DemoModel, huge: Path) -> None:
    done = app("context", "--model", str(demo.target), "--ctx", "4096", "--memory-gib", "4")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Your context: 4,096 tokens: ")
    per_token = json.loads(app("context", "--model", str(demo.target), "--ctx", "4096", "--memory-gib", "4",
                               "--json").stdout)["kv_bytes_per_token"]
    assert f"KV cache = {per_token} bytes x 4096 tokens" in done.stdout  # the text states the JSON's arithmetic

    done = app("context", "--model", str(huge), "--ctx", "32768", "--gpu-layers", "-1", "--memory-gib", "24", "--json")
    assert done.returncode == 0, done.stderr  # an answer, not a failure: scripts read "fits"
    data = json.loads(done.stdout)
    assert (data["context"], data["auto"], data["fits"], data["device"]) == (32768, False, False, "gpu")
    assert "32,768 tokens you chose may not fit" in data["warning"]
    assert "more than the 21.6 GiB usable" in data["warning"]


@pytest.mark.parametrize("args", [["--ctx", "-1"], ["--ctx", "lots"], ["--ctx", "100"], ["--ctx", "10000000"],
                                  ["--memory-gib", "-3"]])
def test_bad_values_are_usage_errors(demo: DemoModel, args: list[str]) -> None:
    done = app("context", "--model", str(demo.target), *args, "--json")
    assert done.returncode == 2 and "Traceback" not in done.stderr


def test_a_file_that_is_not_a_model_is_refused_in_words(tmp_path: Path) -> None:
    text = tmp_path / "notes.gguf"
    text.write_text("not a model")
    done = app("context", "--model", str(text), "--json")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert json.loads(done.stdout)["kind"]
    missing = app("context", "--model", str(tmp_path / "missing.gguf"), "--json")
    assert missing.returncode == 2 and "is not a file" in json.loads(missing.stdout)["message"]


def _engine_args(*extra: str) -> argparse.Namespace:
    return build_parser().parse_args(["generate", "--prompt", "hi", *extra])


def test_ctx_auto_is_resolved_when_the_engine_config_is_made(demo: DemoModel,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    args = _engine_args("--model", str(demo.target))
    assert args.ctx == defaults.CONTEXT_AUTO
    expected = check_context(0, demo.target)
    assert expected is not None and engine_config(args).n_ctx == expected.tokens
    assert engine_config(_engine_args("--model", str(demo.target), "--ctx", "auto")).n_ctx == expected.tokens
    assert engine_config(_engine_args("--model", str(demo.target), "--ctx", "3000")).n_ctx == 3000  # yours, kept
    assert capsys.readouterr().err == ""  # all of them fit: nothing to say


def test_a_ctx_that_does_not_fit_gets_a_note_on_stderr_before_the_load(huge: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    config = engine_config(_engine_args("--model", str(huge), "--ctx", "8192"))
    assert config.n_ctx == 8192  # the user's value is still what is loaded: the load says if llama.cpp cannot
    err = capsys.readouterr().err
    assert err.startswith("note: The context of 8,192 tokens you chose may not fit this machine: 8,192 tokens: ")
    assert "1024 GiB model" in err and "Auto would use 2,048 tokens" in err
    assert engine_config(_engine_args("--model", str(huge))).n_ctx == FLOOR  # Auto: the floor, and said so
    assert capsys.readouterr().err.startswith(f"note: Even {FLOOR:,} tokens, the smallest context Auto gives")
