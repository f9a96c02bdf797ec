"""The real Qwen tokenizer GGUF, carried by the app itself (``resources/vocab/``), unpacked once into the cache.

The demo model (and so the backend self-test) takes its tokenizer from here, never from the network
or the sdist: a backend that is built or installed can be tested offline with what the app carries.
"""

from __future__ import annotations

import lzma
import os
import tempfile
from pathlib import Path

from app.core import paths
from app.core.errors import GGUFError
from app.core.hashing import sha256_file
from app.core.resources import resources_dir

VOCAB_NAME = "ggml-vocab-qwen35.gguf"
VOCAB_SHA256 = "63ed952ff338996cf0bdf24a7b10015124273f75c6dc9bb427356aa3f67ec62c"


def qwen35_vocab_path() -> Path:
    """The uncompressed tokenizer GGUF in the cache, checked against its pinned sha256."""
    target = paths.cache_dir() / "vocab" / VOCAB_NAME
    if target.is_file() and sha256_file(target) == VOCAB_SHA256:
        return target
    packed = resources_dir() / "vocab" / (VOCAB_NAME + ".xz")
    if not packed.is_file():
        raise GGUFError(f"The app's copy of the Qwen tokenizer ({packed}) is missing.",
                        "Reinstall the app; the file is part of its resources.")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=target.parent, prefix=".vocab-", delete=False) as tmp:
        try:
            with lzma.open(packed) as source:
                while chunk := source.read(1 << 20):
                    tmp.write(chunk)
        except (lzma.LZMAError, OSError) as exc:
            os.unlink(tmp.name)
            raise GGUFError(f"The app's copy of the Qwen tokenizer ({packed}) is damaged: {exc}",
                            "Reinstall the app.") from exc
    if sha256_file(Path(tmp.name)) != VOCAB_SHA256:
        os.unlink(tmp.name)
        raise GGUFError(f"The app's copy of the Qwen tokenizer ({packed}) does not match its pinned hash.",
                        "Reinstall the app.")
    os.replace(tmp.name, target)
    return target
