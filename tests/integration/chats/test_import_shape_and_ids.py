"""History import stays within its cap in memory, not only in bytes (issue 37 item 8): a 250 MiB export of ``[]``
repeated (80 million lists once parsed) is refused in words before it is parsed, with the process's peak memory
measured in a child; and conversation ids beyond SQLite's integer range are refused in words by show, delete,
rename, pin, unpin and export, never an OverflowError."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.core.regular_files import json_shape_problem
from tests.helpers import peak_rss

REPO_ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "FASTMTP_DATA_DIR": str(tmp_path / "data"), "FASTMTP_CONFIG_DIR": str(tmp_path / "config"),
            "FASTMTP_CACHE_DIR": str(tmp_path / "cache")}


def test_a_250_mib_export_of_empty_lists_is_refused_before_parsing(tmp_path: Path, env: dict[str, str]) -> None:
    bomb = tmp_path / "bomb.json"
    with bomb.open("wb") as out:
        out.write(b'{"version": 1, "conversations": [')
        chunk = b"[]," * (1 << 20)
        for _ in range(250 // 3):
            out.write(chunk)
        out.write(b"[]]}")
    assert bomb.stat().st_size > 240 << 20
    done = peak_rss.run(["history", "import", str(bomb)], as_limit_mib=2048, env=env, timeout=300)
    assert done.returncode in range(1, 5), done.stderr
    assert "lists and objects" in done.stderr and "nothing was imported" in done.stderr
    assert "Traceback" not in done.stderr and "MemoryError" not in done.stderr
    assert done.peak_mib < 1024, done.peak_mib  # the file once or twice, never the gigabytes of its parse


def test_the_shape_check_skips_text_and_counts_structure() -> None:
    assert json_shape_problem(b'["a,b,[{", 1, {"x": [1, 2]}]', 3, 100) is None  # brackets in text do not count
    assert json_shape_problem(b'["a,b,[{", 1, {"x": [1, 2]}]', 2, 100) is not None
    assert json_shape_problem(b"[1, 2, 3, 4]", 10, 3) is not None
    assert json_shape_problem(b'["\\"],[[[["]', 1, 10) is None  # an escaped quote does not end the string


@pytest.mark.parametrize("args", [["show", "99999999999999999999"], ["delete", "9223372036854775808"],
                                  ["rename", "99999999999999999999", "x"], ["pin", "99999999999999999999"],
                                  ["unpin", "-1"], ["export", "1", "99999999999999999999"], ["show", "\u00b2"]])
def test_ids_beyond_sqlite_are_refused_in_words(env: dict[str, str], args: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", "app", "history", *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "a conversation id is a whole number from 1 to 9223372036854775807" in done.stderr
    assert "Traceback" not in done.stderr
