"""The Qwen tokenizer the app carries: the sdist's file byte for byte, unpacked without the network."""

from __future__ import annotations

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
