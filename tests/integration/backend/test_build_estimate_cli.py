"""``backend build`` says how long it will take before it starts, and remembers how long it took."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from app.backend.registry import BackendManifest


def test_the_build_says_its_estimate_first_and_the_next_one_learns_from_it(
        tmp_path: Path, patched_backend: BackendManifest) -> None:
    env = {**os.environ, "FASTMTP_DATA_DIR": str(tmp_path / "data"), "FASTMTP_CONFIG_DIR": str(tmp_path / "config")}

    def build() -> list[dict[str, object]]:
        done = subprocess.run([sys.executable, "-m", "app", "backend", "build", "--cpu", "--json"], env=env,
                              capture_output=True, text=True, timeout=900, check=False)
        assert done.returncode == 0, done.stderr
        return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]

    first = build()
    assert first[0]["kind"] == "estimate" and first[0]["basis"] == "cached"  # the session's tree is in the cache
    assert first[-1]["kind"] == "result"
    history = json.loads((tmp_path / "data" / "build-times.json").read_text())
    assert [(r["flavor"], r["cached"]) for r in history] == [("cpu", True)] and history[0]["seconds"] > 0
    second = build()
    assert second[0]["basis"] == "measured" and second[0]["seconds"] == history[0]["seconds"]
