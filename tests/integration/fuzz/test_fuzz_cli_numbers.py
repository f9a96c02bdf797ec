"""Issue 37 item 4 and 11: CLI numbers of the right type and the wrong size (NaN, infinities, negative, far past
any consumer's range) end in words with exit 1-4, in-process through ``app.cli.main``, before any model loads or
any server is asked; and the window still starts on a settings folder full of damaged files (``window --check``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.cli import main
from tests.helpers.cli_in_process import run_cli

ROOT = Path(__file__).resolve().parents[3]
HOSTILE = ["nan", "inf", "-inf", "-1", "1e999", "99999999999999999999999", "-99999999999999999999", "5000000000"]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    for name, sub in (("FASTMTP_DATA_DIR", "data"), ("FASTMTP_CONFIG_DIR", "config"), ("FASTMTP_CACHE_DIR", "cache"),
                      ("HOME", "home")):
        (tmp_path / sub).mkdir(parents=True, exist_ok=True)
        monkeypatch.setenv(name, str(tmp_path / sub))
    monkeypatch.chdir(tmp_path)
    yield tmp_path




def snapshot(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


@pytest.mark.parametrize("flag", ["--temp", "--top-p", "--min-p", "--repeat-penalty", "--max-tokens",
                                  "--thinking-budget", "--top-k", "--seed"])
def test_sampling_numbers_to_a_remote_server_are_refused_in_our_words_before_it_is_asked(
        home: Path, capsys: pytest.CaptureFixture[str], flag: str) -> None:
    main(["remote", "add", "box", "http://127.0.0.1:9"])  # port 9: nothing listens, and nothing is asked
    capsys.readouterr()
    for value in HOSTILE:
        if flag in ("--max-tokens", "--thinking-budget", "--top-k", "--seed") and value in ("nan", "inf", "-inf",
                                                                                             "1e999"):
            continue  # not an int: argparse refuses it (exit 2), tested below
        code, text = run_cli(capsys, "generate", "--remote", "box", "--prompt", "hi", flag, value, allow_success=False)
        if value == "5000000000" and flag in ("--temp", "--top-p", "--min-p", "--repeat-penalty", "--seed"):
            assert code in (2, 3), (flag, value, text)  # within range for some; refused or the server is absent
            continue
        assert code == 2 and flag in text and "JSON" not in text and "cannot be reached" not in text, (flag, text)


def test_remote_test_refuses_a_reply_cap_past_any_context(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["remote", "add", "box", "http://127.0.0.1:9"])
    capsys.readouterr()
    code, text = run_cli(capsys, "remote", "test", "box", "--max-tokens", "5000000000", allow_success=False)
    assert code == 2 and "--max-tokens 5000000000 is outside" in text and "Timer" not in text


COMMANDS = [
    ["generate", "--model", "m.gguf", "--prompt", "hi", "--threads"],
    ["generate", "--model", "m.gguf", "--prompt", "hi", "--ctx"],
    ["generate", "--model", "m.gguf", "--prompt", "hi", "--batch"],
    ["generate", "--model", "m.gguf", "--prompt", "hi", "--gpu-layers"],
    ["generate", "--model", "m.gguf", "--prompt", "hi", "--depth"],
    ["generate", "--model", "m.gguf", "--prompt", "hi", "--p-min"],
    ["generate", "--model", "m.gguf", "--prompt", "hi", "--temp"],
    ["generate", "--model", "m.gguf", "--prompt", "hi", "--max-tokens"],
    ["models", "fit", "--vram-gib"],
    ["models", "fit", "--context"],
    ["context", "--model", "m.gguf", "--memory-gib"],
    ["history", "show"],
    ["history", "delete"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:1] + c[-1:]))
def test_numbers_of_any_size_end_in_words_with_exit_1_to_4(home: Path, capsys: pytest.CaptureFixture[str],
                                                           command: list[str]) -> None:
    (home / "m.gguf").write_bytes(b"GGUF")  # not a model: whatever gets past the numbers stops at the file, in words
    before = snapshot(home)
    for value in HOSTILE:
        run_cli(capsys, *command, value, allow_success=False)
    written = snapshot(home) - before
    assert all(p.split(os.sep)[0] in ("data", "config", "cache", "home") for p in written), written


def test_the_window_starts_on_a_settings_folder_of_damaged_files(tmp_path: Path) -> None:
    """``window --check`` in a child, offscreen: settings with numbers past every range, a FIFO, a link to /dev/zero
    and deep nesting where state files belong; the window comes up and says what it set aside."""
    config, data, cache = tmp_path / "config", tmp_path / "data", tmp_path / "cache"
    for folder in (config, data, cache):
        folder.mkdir()
    (config / "settings.json").write_text(json.dumps({
        "gpu_layers": 10**10, "threads": 3 * 10**9, "p_min": 10**400, "context_size": -(10**30),
        "serve_port": 10**20, "state_cache_mb": 10**30, "draft_depth": 10**9, "theme": ["dark"],
        "models_dir": {"x": 1}, "overflow_policy": 7}))
    (config / "window-state.json").write_text("[" * 200_000)
    os.mkfifo(config / "local-models.json")
    (data / "build-times.json").symlink_to("/dev/zero")
    (data / "update-floor.json").write_text('{"a": NaN}')
    os.mkfifo(data / "history.sqlite3")
    env = {**os.environ, "FASTMTP_CONFIG_DIR": str(config), "FASTMTP_DATA_DIR": str(data),
           "FASTMTP_CACHE_DIR": str(cache), "HOME": str(tmp_path), "QT_QPA_PLATFORM": "offscreen"}
    done = subprocess.run([sys.executable, "-m", "app", "window", "--check"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    shown = json.loads(done.stdout.strip().splitlines()[-1])
    assert shown, done.stdout
    assert (data / "history.sqlite3").is_file() and list(data.glob("history.sqlite3.damaged-*"))  # moved aside


@pytest.mark.parametrize(("flag", "value"), [("--temp", "nan"), ("--top-p", "-1"), ("--p-min", "nan"),
                                             ("--p-min", "5"), ("--max-tokens", "5000000000"), ("--seed", "-1")])
def test_local_generate_refuses_sampling_numbers_before_it_reads_the_model(
        home: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str) -> None:
    (home / "m.gguf").write_bytes(b"GGUF")  # would be refused as damaged, had the numbers not been refused first
    code, text = run_cli(capsys, "generate", "--model", "m.gguf", "--prompt", "hi", flag, value, allow_success=False)
    assert code == 2 and flag in text and "damaged" not in text, text
