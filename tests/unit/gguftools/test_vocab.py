"""The Qwen tokenizer the app carries: the sdist's file byte for byte, unpacked without the network."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.backend import source
from app.core.errors import GGUFError
from app.core.hashing import sha256_file
from app.gguftools import vocab


def test_the_carried_vocab_is_the_sdists_own() -> None:
    shipped = vocab.qwen35_vocab_path()
    in_sdist = source.pristine_tree() / "vendor" / "llama.cpp" / "models" / vocab.VOCAB_NAME
    assert sha256_file(shipped) == sha256_file(in_sdist) == vocab.VOCAB_SHA256


def test_the_demo_model_is_written_offline_without_the_sdist(tmp_path: Path) -> None:
    """A fresh cache with no sdist, and no package index to reach: the demo model still gets its tokenizer."""
    env = dict(os.environ, FASTMTP_CACHE_DIR=str(tmp_path / "cache"), PIP_INDEX_URL="http://127.0.0.1:9/simple",
               PIP_NO_INDEX="1", FASTMTP_DATA_DIR=str(tmp_path / "data"))
    done = subprocess.run([sys.executable, "-m", "app", "demo-model", "--out", str(tmp_path / "demo"),
                           "--size", "tiny"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "demo" / "target.gguf").is_file() or any((tmp_path / "demo").glob("*.gguf"))
    assert not (tmp_path / "cache" / "sources").exists()  # nothing was fetched


def test_a_damaged_copy_in_the_cache_is_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FASTMTP_CACHE_DIR", str(tmp_path))
    first = vocab.qwen35_vocab_path()
    first.write_bytes(b"not a tokenizer")
    again = vocab.qwen35_vocab_path()
    assert again == first and sha256_file(again) == vocab.VOCAB_SHA256


def test_a_damaged_carried_copy_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    resources = tmp_path / "resources"
    (resources / "vocab").mkdir(parents=True)
    (resources / "vocab" / (vocab.VOCAB_NAME + ".xz")).write_bytes(b"\xfd7zXZ\x00 truncated")
    monkeypatch.setenv("FASTMTP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(vocab, "resources_dir", lambda: resources)
    with pytest.raises(GGUFError, match="damaged"):
        vocab.qwen35_vocab_path()
    assert not list((tmp_path / "cache" / "vocab").iterdir())  # no half-written file left
