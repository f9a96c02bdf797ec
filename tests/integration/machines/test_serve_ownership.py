"""``serve --stop`` / ``--status`` believe ``serve.json`` only while the process it names holds, in its own
environment, the secret its server was started with: a forged record naming a live unrelated process (its pid, start
time and command line copied, a token it does not hold), a record without a token, and pids that would signal a
process group, every process, init, or nothing at all, are refused in words and nothing is signalled.
Real processes (``sleep`` children of this test), the real CLI in a subprocess; the hostile pids run inside a
private PID namespace (``unshare``, root) so that a regression could reach nothing outside it."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.machines import serve

linux = pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads /proc")


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "FASTMTP_CACHE_DIR": str(tmp_path / "cache"), "FASTMTP_CONFIG_DIR": str(tmp_path / "config"),
            "FASTMTP_DATA_DIR": str(tmp_path / "data"), "PYTHON_KEYRING_BACKEND": "keyrings.alt.file.PlaintextKeyring"}


TOKEN = "t" * 10 + "0123456789abcdefghijklmnopqrstuvwxyzABCDEF"


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A process that is not a server of ours: no secret in its environment."""
    proc = subprocess.Popen(["sleep", "300"], env={k: v for k, v in os.environ.items() if k != serve.TOKEN_ENV})
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


@pytest.fixture
def ours() -> Iterator[subprocess.Popen[bytes]]:
    """A stand-in for a detached server of ours: started with the secret in its environment, as ``serve`` does."""
    proc = subprocess.Popen(["sleep", "300"], env={**os.environ, serve.TOKEN_ENV: TOKEN})
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _write_state(env: dict[str, str], **fields: Any) -> Path:
    path = Path(env["FASTMTP_CONFIG_DIR"]) / "serve.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"url": "http://127.0.0.1:8080", **fields}), encoding="utf-8")
    return path


def _app(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, env=env, timeout=120)


def _identity(pid: int) -> dict[str, Any]:
    """What the old proof copied: the start time and command line anyone can read from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return {"start": fields[19], "cmdline": Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]}


@linux
def test_a_forged_record_naming_another_process_is_refused_and_nothing_signalled(
        env: dict[str, str], sleeper: subprocess.Popen[bytes]) -> None:
    # everything the old proof checked, copied; and a well-formed token the process does not hold
    path = _write_state(env, pid=sleeper.pid, token=TOKEN, **_identity(sleeper.pid))
    stopped = _app(env, "serve", "--stop", "--json")
    assert stopped.returncode == 0, stopped.stderr
    answer = json.loads(stopped.stdout)
    assert answer["stopped"] is False and "not a server this app started" in answer["stale"]
    assert "Traceback" not in stopped.stderr
    assert sleeper.poll() is None  # alive: it was never signalled
    assert not path.exists()

    _write_state(env, pid=sleeper.pid, token=TOKEN)
    status = _app(env, "serve", "--status")
    assert status.returncode == 0, status.stderr
    assert "No detached server is running" in status.stdout and "forged" in status.stdout
    assert sleeper.poll() is None


@linux
def test_a_record_of_a_process_holding_another_token_is_refused(env: dict[str, str],
                                                               ours: subprocess.Popen[bytes]) -> None:
    _write_state(env, pid=ours.pid, token=TOKEN[::-1])
    answer = json.loads(_app(env, "serve", "--stop", "--json").stdout)
    assert answer["stopped"] is False
    assert ours.poll() is None


def test_a_record_without_a_token_is_set_aside_in_words(env: dict[str, str], sleeper: subprocess.Popen[bytes]) -> None:
    path = _write_state(env, pid=sleeper.pid, start="1", cmdline=["sleep", "300"])  # an older version's record
    answer = json.loads(_app(env, "serve", "--stop", "--json").stdout)
    assert answer["stopped"] is False and "secret" in answer["stale"] and "stop it by hand" in answer["stale"]
    assert sleeper.poll() is None
    assert not path.exists() and path.with_name("serve.json.bad").exists()


@linux
def test_a_server_of_ours_is_stopped_and_reported(env: dict[str, str], ours: subprocess.Popen[bytes]) -> None:
    path = _write_state(env, pid=ours.pid, token=TOKEN)

    status = json.loads(_app(env, "serve", "--status", "--json").stdout)
    assert status["running"] is True and status["server"]["pid"] == ours.pid
    assert "token" not in status["server"]  # the secret is never printed

    stopped = _app(env, "serve", "--stop", "--json")
    assert stopped.returncode == 0, stopped.stderr
    assert json.loads(stopped.stdout)["stopped"] is True
    assert ours.wait(timeout=30) == -signal.SIGTERM
    assert not path.exists()


def test_the_server_gets_its_secret_in_its_environment_not_its_command_line(tmp_path: Path) -> None:
    plan = serve.ServePlan(target=tmp_path / "m.gguf")
    server = serve.make_server(plan, tmp_path / "llama-server", "key")
    try:
        assert server.owner_token and re.fullmatch(r"[A-Za-z0-9_-]{43}", server.owner_token)
        assert server._env()[serve.TOKEN_ENV] == server.owner_token
        assert server.owner_token not in " ".join(server.cmd)
        assert serve.make_server(plan, tmp_path / "llama-server", "key").owner_token != server.owner_token
    finally:
        server.client.close()


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare")
@pytest.mark.parametrize("pid", [0, -1, 1, 12345678901234567890, "1234", 2**22 + 1, 4.0, None, True])
def test_pids_that_no_server_of_ours_can_have_signal_nothing(env: dict[str, str], pid: Any) -> None:
    path = _write_state(env, pid=pid, token=TOKEN)
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
