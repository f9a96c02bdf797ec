"""Issue 37 item 11: a model file replaced by another of the same size and mtime is a new file to the model pool
and to the GGUF header cache (its inode, or its ctime, differs)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from app.engine.model_pool import ModelSlot
from app.gguftools.header import FileCache, clear_caches, gguf_header
from app.gguftools.writer import kv_str, plan_array, write_gguf


def twin(path: Path, name: str) -> Path:
    """A GGUF whose size equals every other twin's: only ``general.name`` (same length) differs."""
    return write_gguf(path, "llama", [kv_str("general.name", name)], [plan_array("x", np.zeros(4, np.float32))])


def replace_keeping_size_and_mtime(path: Path, name: str) -> None:
    stamp = path.stat().st_mtime_ns
    other = twin(path.with_suffix(".new"), name)
    os.replace(other, path)
    os.utime(path, ns=(stamp, stamp))


def test_the_pool_sees_a_file_replaced_with_the_same_size_and_mtime(tmp_path: Path) -> None:
    path = twin(tmp_path / "m.gguf", "aaaa")
    before = ModelSlot.of(path, 0)
    replace_keeping_size_and_mtime(path, "bbbb")
    after = ModelSlot.of(path, 0)
    assert (after.size, after.mtime_ns) == (before.size, before.mtime_ns) and after != before
    assert ModelSlot.of(path, 0) == after  # unchanged since: the same slot


def test_the_header_cache_sees_it_too(tmp_path: Path) -> None:
    clear_caches()
    path = twin(tmp_path / "m.gguf", "aaaa")
    old = time.time_ns() - 10 * FileCache.RACY_NS  # old enough to be cached
    os.utime(path, ns=(old, old))
    assert gguf_header(path).value("general.name") == "aaaa"
    assert gguf_header(path).value("general.name") == "aaaa"  # from the cache
    replace_keeping_size_and_mtime(path, "bbbb")
    assert path.stat().st_mtime_ns == old
    assert gguf_header(path).value("general.name") == "bbbb"
    clear_caches()
