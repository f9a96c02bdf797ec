"""``serve --stop`` / ``--status`` believe ``serve.json`` only while its pid is provably still the server it
recorded (start time and command line): a stale record naming a live unrelated process, and pids that would
signal a process group, every process, init, or nothing at all, are refused in words and nothing is signalled.
Real processes (``sleep`` children of this test), the real CLI in a subprocess; the hostile pids run inside a
private PID namespace (``unshare``, root) so that a regression could reach nothing outside it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.machines import serve


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "FASTMTP_CACHE_DIR": str(tmp_path / "cache"), "FASTMTP_CONFIG_DIR": str(tmp_path / "config"),
            "FASTMTP_DATA_DIR": str(tmp_path / "data"), "PYTHON_KEYRING_BACKEND": "keyrings.alt.file.PlaintextKeyring"}


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["sleep", "300"])
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _write_state(env: dict[str, str], **fields: Any) -> Path:
    path = Path(env["FASTMTP_CACHE_DIR"]) / "serve.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"url": "http://127.0.0.1:8080", **fields}), encoding="utf-8")
    return path


def _app(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, env=env, timeout=120)


def test_a_stale_record_naming_a_live_unrelated_process_is_not_signalled(env: dict[str, str],
                                                                         sleeper: subprocess.Popen[bytes]) -> None:
    identity = serve.process_identity(sleeper.pid)
    assert identity is not None
    path = _write_state(env, pid=sleeper.pid, start=str(int(identity["start"]) + 12345), cmdline=identity["cmdline"])

    status = _app(env, "serve", "--status")
    assert status.returncode == 0, status.stderr
    assert "No detached server is running" in status.stdout and "stale" in status.stdout
    assert not path.exists()

    _write_state(env, pid=sleeper.pid, start=identity["start"], cmdline=["/opt/llama-server", "--port", "8080"])
    stopped = _app(env, "serve", "--stop", "--json")
    assert stopped.returncode == 0, stopped.stderr
    answer = json.loads(stopped.stdout)
    assert answer["stopped"] is False and "stale" in answer["stale"]
    assert sleeper.poll() is None  # alive: it was never signalled
    assert not path.exists()


def test_a_matching_record_is_stopped_and_reported(env: dict[str, str], sleeper: subprocess.Popen[bytes]) -> None:
    identity = serve.process_identity(sleeper.pid)
    assert identity is not None and identity["cmdline"] == ["sleep", "300"]
    path = _write_state(env, pid=sleeper.pid, **identity)

    status = json.loads(_app(env, "serve", "--status", "--json").stdout)
    assert status["running"] is True and status["server"]["pid"] == sleeper.pid

    stopped = _app(env, "serve", "--stop", "--json")
    assert stopped.returncode == 0, stopped.stderr
    assert json.loads(stopped.stdout)["stopped"] is True
    assert sleeper.wait(timeout=30) == -signal.SIGTERM
    assert not path.exists()


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare")
@pytest.mark.parametrize("pid", [0, -1, 1, 12345678901234567890, "1234", 2**22 + 1, 4.0, None, True])
def test_pids_that_no_server_of_ours_can_have_signal_nothing(env: dict[str, str], pid: Any) -> None:
    path = _write_state(env, pid=pid, start="1", cmdline=["llama-server"])
    # Inside a private PID namespace: the shell is pid 1, its background sleep shares the CLI's process group, so
    # a kill(0), kill(-1) or kill(1) from the CLI would end the sleep (or be visible), and nothing outside.
    script = ('sleep 300 & s=$!; "$0" -m app serve --stop --json; rc=$?; '
              'if kill -0 $s 2>/dev/null; then echo ALIVE; kill $s; fi; exit $rc')
    done = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", script, sys.executable],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[-1] == "ALIVE"
    answer = json.loads("\n".join(lines[:-1]))
    assert answer["stopped"] is False and "damaged" in answer["stale"] and "pid" in answer["stale"]
    assert "Traceback" not in done.stderr
    assert not path.exists() and path.with_name("serve.json.bad").exists()


def test_check_pid_words() -> None:
    for bad, words in [(0, "not one a server"), (-1, "not one a server"), (1, "not one a server"),
                       (10**19, "not one a server"), ("12", "not a whole number"), (True, "not a whole number")]:
        with pytest.raises(ValueError, match=words):
            serve.check_pid(bad)
    assert serve.check_pid(os.getpid()) == os.getpid()
