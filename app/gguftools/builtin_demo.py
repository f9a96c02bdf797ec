"""The built-in demo model, written on first use: the app's default model (English: it introduces the app and
stops) and, in its ``words`` language, the self-test's and the benchmarks' subject."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from app.core import folder_lock, settings_file
from app.core.errors import GGUFError
from app.gguftools.demo_model import DEMO_SHAPES, DemoModel, Language, Size, read_demo_table, write_demo_model
from app.gguftools.sidecar import read_d2t_ids

# what the demo model is, said on the first-run card and above its chat (issue 29 item 10)
DEMO_NATURE = ("Whatever you ask, the demo model answers with the same short passage about FastMTP Chat: it is "
               "table-driven, not a language model, so it shows speed, not intelligence. It is built with the real "
               "model's proportions, so drafting pays here for the same reason it does on Qwen3.8-27B.")

_MARKER = "demo.json"
# bumped when the writer changes what a demo model is, so a cached older one is written again
# (2: the 27b follows the word table; its constant-weight predecessor emitted one token forever;
#  3: the language, English by default, stored in the GGUF;
#  4: the chat demo is the "scaled" size, the real model's proportions; zero matrices are holes of a sparse file;
#  5: the scaled size's trunk and head are Q8_0, not F16: a verify pass of a few rows costs on a CPU more nearly
#     what it costs on a GPU)
_FORMAT = 5
DEFAULT_SIZE: Size = "scaled"


_FILES = ("target.gguf", "sidecar-full.gguf", "sidecar-d2t.gguf")
_GGUF_MAGIC = b"GGUF"


def ensure_demo_model(folder: Path, size: Size = DEFAULT_SIZE, acceptance: float = 0.9, seed: int = 0,
                      language: Language = "english") -> DemoModel:
    """The demo model in ``folder``; written (seconds) unless the same one is already there.

    ``english`` is the chat demo; benchmarks and the self-test ask for ``words``, which never stops. The default
    size is ``scaled``, the real model's proportions, so drafting pays on it as on the real model (``tiny`` is
    the quickest, for tests and the self-test).

    One writer at a time (two first uses at once, in two windows or a window and a command, must not write the
    same files): the folder's lock (``folder_lock``) is held while it is checked and written, the files are written
    in a private staging folder and renamed in, and the marker, which records each file's size, is written last,
    once the files are in place and read back. A damaged file beside a valid marker (wrong size, not a GGUF, no
    table) makes the marker void and the model is written again.
    """
    wanted = {"size": size, "acceptance": acceptance, "seed": seed, "language": language, "format": _FORMAT}
    found = _cached(folder, wanted, size)
    if found is not None:
        return found
    folder.parent.mkdir(parents=True, exist_ok=True)
    with folder_lock.locked(folder):
        found = _cached(folder, wanted, size)  # the writer we waited for may have written this very model
        if found is not None:
            return found
        return _write(folder, wanted, size, acceptance, seed, language)


def _write(folder: Path, wanted: dict[str, Any], size: Size, acceptance: float, seed: int,
           language: Language) -> DemoModel:
    """Write the model into a private staging folder, rename its files in, then the marker (the lock is held)."""
    from app.gguftools.vocab import qwen35_vocab_path

    marker = folder / _MARKER
    marker.unlink(missing_ok=True)
    folder.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".writing-", dir=folder))
    try:
        write_demo_model(staging, qwen35_vocab_path(), size=size, acceptance=acceptance, seed=seed,
                         language=language)
        for name in _FILES:
            os.replace(staging / name, folder / name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    record = {**wanted, "files": {name: (folder / name).stat().st_size for name in _FILES}}
    demo = _read(folder, size)
    if demo is None:
        raise GGUFError(f"The demo model just written in {folder} cannot be read back.",
                        f"Check the disk, delete {folder} and try again.")
    settings_file.write_json(marker, record)
    return demo


def _cached(folder: Path, wanted: dict[str, Any], size: Size) -> DemoModel | None:
    """The demo model already in ``folder`` when its marker says it is the one wanted and every file it records is
    still a regular file of the recorded size that reads as a demo model; None otherwise."""
    try:
        record = settings_file.read_json(folder / _MARKER)
    except settings_file.DamagedFile:
        return None
    if not isinstance(record, dict) or {k: v for k, v in record.items() if k != "files"} != wanted:
        return None
    sizes = record.get("files")
    if not isinstance(sizes, dict) or set(sizes) != set(_FILES):
        return None
    for name in _FILES:
        try:
            info = (folder / name).lstat()
        except OSError:
            return None
        if not stat.S_ISREG(info.st_mode) or type(sizes[name]) is not int or info.st_size != sizes[name]:
            return None
    return _read(folder, size)


def _read(folder: Path, size: Size) -> DemoModel | None:
    """The demo model in ``folder`` when each file starts as a GGUF and the target's table reads back."""
    try:
        for name in _FILES:
            with (folder / name).open("rb") as handle:
                if handle.read(len(_GGUF_MAGIC)) != _GGUF_MAGIC:
                    return None
        table = read_demo_table(folder / "target.gguf")
    except (OSError, ValueError, KeyError, TypeError, IndexError, GGUFError):
        return None
    if table is None:
        return None
    return DemoModel(folder / "target.gguf", folder / "sidecar-full.gguf", folder / "sidecar-d2t.gguf", size,
                     DEMO_SHAPES[size], table)


def d2t_ids(sidecar: Path) -> npt.NDArray[np.int64]:
    """The absolute target ids of a d2t sidecar's draft vocabulary."""
    ids = read_d2t_ids(sidecar)
    if ids is None:
        raise ValueError(f"{sidecar} has no d2t tensor")
    return ids


def table_prompt(demo: DemoModel, n: int = 8) -> list[int]:
    """A prompt of ``n`` consecutive table tokens, so greedy decoding continues the table (an ``english``
    table then ends its reply after ``len(cycle) - n`` tokens)."""
    assert demo.table is not None
    return list(demo.table.cycle[:n])


def table_agreement(demo: DemoModel, last_prompt_token: int, generated: list[int]) -> float:
    """Share of generated tokens that are exactly the table's greedy continuation."""
    assert demo.table is not None
    expected = demo.table.continuation(last_prompt_token, len(generated))
    return sum(a == b for a, b in zip(expected, generated, strict=True)) / max(len(generated), 1)
