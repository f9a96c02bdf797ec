"""Each app process writes its own engine log, so a second app or test run beside it cannot rotate away the lines a
crash report reads; logs of processes that have ended are pruned to the newest few."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.engine import client as engine_client
from app.engine.client import EngineClient


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FASTMTP_CACHE_DIR", str(tmp_path))
    return tmp_path


def _never_running_pids(count: int) -> list[int]:
    """Pids above the kernel's pid_max: no process can have them."""
    try:
        pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    except OSError:
        pid_max = 4_194_304
    return [pid_max + 1 + n for n in range(count)]


def test_the_log_is_named_for_this_process(cache: Path) -> None:
    client = EngineClient()
    assert client.log_path == cache / "logs" / f"engine-{os.getpid()}.log"
    assert client.previous_log_path.name == f"engine-{os.getpid()}.log.1"


def test_a_second_process_gets_a_log_of_its_own(cache: Path) -> None:
    code = "from app.engine.client import EngineClient; print(EngineClient().log_path)"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "FASTMTP_CACHE_DIR": str(cache)}, cwd=Path(__file__).parents[3])
    assert Path(other.stdout.strip()) != EngineClient().log_path


def test_logs_of_ended_processes_are_pruned_and_running_ones_kept(cache: Path) -> None:
    logs = cache / "logs"
    logs.mkdir()
    keep = engine_client._KEEP_ENDED_LOGS * 2
    ended = []
    for age, pid in enumerate(_never_running_pids(keep + 4)):
        path = logs / f"engine-{pid}.log"
        path.write_text("llama.cpp said something\n")
        os.utime(path, (1_000_000 + age, 1_000_000 + age))
        ended.append(path)
    mine = logs / f"engine-{os.getpid()}.log"
    mine.write_text("this run\n")
    parent = logs / f"engine-{os.getppid()}.log"  # a running process: never pruned, however old
    parent.write_text("a running app\n")
    os.utime(parent, (1, 1))
    other = logs / "llama-server-1-2.log"  # not an engine log: not ours to prune
    other.write_text("x\n")
    engine_client._prune_ended_logs(logs)
    assert mine.exists() and parent.exists() and other.exists()
    assert [path.exists() for path in ended] == [False] * 4 + [True] * keep  # the oldest ended ones go
