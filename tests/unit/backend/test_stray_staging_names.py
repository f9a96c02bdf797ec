"""A stray staging folder whose name ends in a number no process can have (20 digits, a superscript digit) is
stale, not a crash (issue 37 item 8): ``backend list`` and every command that tidies the backends folder go on,
and the stray folder is removed; one named for a live process (this one) stays."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from app.core import processes

REPO_ROOT = Path(__file__).resolve().parents[3]


def test_stray_staging_names_are_stale_and_the_commands_go_on(tmp_path: Path) -> None:
    backends = tmp_path / "data" / "backends"
    stray = [backends / ".staging-unpack-99999999999999999999", backends / ".staging-build-\u00b2",
             backends / ".staging-unpack-0"]
    live = backends / f".staging-unpack-{os.getpid()}"
    for folder in [*stray, live]:
        folder.mkdir(parents=True)
    env = {**os.environ, "FASTMTP_DATA_DIR": str(tmp_path / "data"), "FASTMTP_CONFIG_DIR": str(tmp_path / "config"),
           "FASTMTP_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("FASTMTP_BACKEND_DIR", None)
    done = subprocess.run([sys.executable, "-m", "app", "backend", "list", "--json"], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert not any(folder.exists() for folder in stray)
    assert live.exists()  # a staging folder of a running process is left alone


def test_pid_numbers_outside_pid_t_are_no_process() -> None:
    for text in ["99999999999999999999", "\u00b2", "0", "-5", "", "12a", "2147483648"]:
        assert processes.parse_pid(text) is None, text
    assert processes.parse_pid(str(os.getpid())) == os.getpid()
    for pid in [0, -1, 2**31, 10**20]:
        assert processes.pid_alive(pid) is False, pid
    assert processes.pid_alive(os.getpid())
