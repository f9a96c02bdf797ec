"""``generate``'s outside values are bounded before anything loads (issue 37 item 8): ``--messages`` goes through
the bounded regular-file reader (a device, a FIFO, 200,000-deep JSON, a list of non-objects: words, exit 1, no hang,
no traceback), and thread, batch, context and GPU-layer counts out of llama.cpp's range are refused in words (exit
2) by the CLI and again by the native layer before its first call. The real CLI in a child process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest

from app.core import engine_limits
from app.core.errors import FastMTPError, ModelLoadError
from app.native.handles import Context, Model

REPO_ROOT = Path(__file__).resolve().parents[3]


def _generate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app", "generate", "--model", "/no/such/model.gguf", *args],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def _messages_cases(tmp_path: Path) -> list[tuple[Path, str]]:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200_000 + "]" * 200_000)
    strings = tmp_path / "strings.json"
    strings.write_text('["hi", "there"]')
    wrong = tmp_path / "wrong.json"
    wrong.write_text('[{"role": "user", "content": ["x"]}]')
    return [(Path("/dev/zero"), "a device"), (fifo, "a pipe (FIFO)"), (deep, "nested too deeply"),
            (strings, "not a list of objects"), (wrong, "not text"), (tmp_path / "none.json", "there is no file")]


def test_messages_files_that_are_not_a_list_of_messages_end_in_words(tmp_path: Path) -> None:
    for path, words in _messages_cases(tmp_path):
        done = _generate("--messages", str(path))
        assert done.returncode == 1, (path, done.stderr)
        assert "is not a JSON list of {role, content} messages" in done.stderr and words in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


@pytest.mark.parametrize(("flag", "value"), [("--threads", "100000"), ("--threads", "-3"), ("--batch", "0"),
                                             ("--batch", "10000000"), ("--gpu-layers", "10000000000"),
                                             ("--gpu-layers", "-2"), ("--threads", "9" * 400), ("--ctx", "9" * 400)])
def test_counts_out_of_range_are_refused_in_words(flag: str, value: str) -> None:
    done = _generate("--prompt", "hi", flag, value)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and f"argument {flag}" in done.stderr


def test_the_shared_check_and_the_native_layer_refuse_before_llama_cpp(tmp_path: Path) -> None:
    with pytest.raises(FastMTPError, match="the thread count 100000 is outside") as caught:
        engine_limits.check_engine_numbers(100_000, 512, 4096, 0)
    assert caught.value.exit_code == 2
    assert engine_limits.engine_number_problems(n_threads=0, n_batch=512, n_ctx=4096, n_gpu_layers=-1) == []
    assert "a 400-digit number" in engine_limits.engine_number_problems(n_gpu_layers=10**399)[0]
    model_file = tmp_path / "m.gguf"
    model_file.write_bytes(b"GGUF")
    with pytest.raises(ModelLoadError, match="GPU layer count"):  # refused before the backend is even loaded
        Model(model_file, n_gpu_layers=10**10)
    with pytest.raises(ModelLoadError, match="thread count"):  # refused before the model is touched
        Context(cast(Any, None), n_threads=100_000)
    assert engine_limits.threads_max() <= engine_limits.THREADS_CEILING
