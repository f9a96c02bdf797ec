"""The built-in demo model, written on first use: the app's default model (English: it introduces the app and
stops) and, in its ``words`` language, the self-test's and the benchmarks' subject."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import numpy.typing as npt

from app.gguftools.demo_model import DEMO_SHAPES, DemoModel, Language, Size, read_demo_table, write_demo_model
from app.gguftools.sidecar import read_d2t_ids

# what the demo model is, said on the first-run card and above its chat (issue 29 item 10)
DEMO_NATURE = ("Whatever you ask, the demo model answers with the same short passage about FastMTP Chat: it is "
               "table-driven, not a language model, and shows the app, the live speed HUD and the drafting at work.")

_MARKER = "demo.json"
# bumped when the writer changes what a demo model is, so a cached older one is written again
# (2: the 27b follows the word table; its constant-weight predecessor emitted one token forever;
#  3: the language, English by default, stored in the GGUF)
_FORMAT = 3


def ensure_demo_model(folder: Path, size: Size = "tiny", acceptance: float = 0.9, seed: int = 0,
                      language: Language = "english") -> DemoModel:
    """The demo model in ``folder``; written (seconds for ``tiny``) unless the same one is already there.

    ``english`` is the chat demo; benchmarks and the self-test ask for ``words``, which never stops.
    """
    from app.gguftools.vocab import qwen35_vocab_path

    wanted = {"size": size, "acceptance": acceptance, "seed": seed, "language": language, "format": _FORMAT}
    marker = folder / _MARKER
    target = folder / "target.gguf"
    try:
        if json.loads(marker.read_text()) == wanted and target.is_file():
            return DemoModel(target, folder / "sidecar-full.gguf", folder / "sidecar-d2t.gguf", size,
                             DEMO_SHAPES[size], read_demo_table(target))
    except (OSError, ValueError):
        pass
    marker.unlink(missing_ok=True)
    folder.mkdir(parents=True, exist_ok=True)
    demo = write_demo_model(folder, qwen35_vocab_path(), size=size, acceptance=acceptance, seed=seed,
                            language=language)
    marker.write_text(json.dumps(wanted) + "\n")
    return demo


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
