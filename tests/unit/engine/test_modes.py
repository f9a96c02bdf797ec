"""The drafting modes' one home (``app.engine.modes``): one set of words and colours, and a sidecar's kind read
from the file itself, so a renamed sidecar is still drafted with as what it is."""

from __future__ import annotations

import shutil
from pathlib import Path

from app.engine.modes import DRAFT_MODES, MODES, depth_series, mode_colour, mode_label, sidecar_kind
from app.gguftools.builtin_demo import ensure_demo_model
from tests.helpers.demo_copies import DemoCopies


def test_every_mode_has_its_words_and_a_colour_of_its_own() -> None:
    assert tuple(MODES) == DRAFT_MODES
    for mode in DRAFT_MODES:
        info = MODES[mode]
        assert info.name == mode and info.label and info.phrase and info.brief
        assert mode_label(mode) == info.label and mode_colour(mode) == info.colour
    assert len({info.colour for info in MODES.values()}) == len(MODES)  # the chart tells the lines apart
    assert mode_label("something new") == "something new"  # rows of another version still show


def test_a_sidecar_is_judged_by_its_contents_not_its_name(tmp_path: Path, default_demo: DemoCopies) -> None:
    demo = ensure_demo_model(default_demo.master).target.parent  # read in place: only the sidecars are copied
    misnamed_d2t = tmp_path / "sidecar-full.gguf"  # a name that says "full"
    misnamed_full = tmp_path / "sidecar-d2t-32K.gguf"  # a name that says "d2t"
    shutil.copyfile(demo / "sidecar-d2t.gguf", misnamed_d2t)
    shutil.copyfile(demo / "sidecar-full.gguf", misnamed_full)
    assert sidecar_kind(demo / "sidecar-d2t.gguf") == "d2t" and sidecar_kind(demo / "sidecar-full.gguf") == "full"
    assert sidecar_kind(misnamed_d2t) == "d2t" and sidecar_kind(misnamed_full) == "full"


def test_an_unreadable_sidecar_falls_back_to_its_name(tmp_path: Path) -> None:
    assert sidecar_kind(tmp_path / "missing-d2t.gguf") == "d2t"
    assert sidecar_kind(tmp_path / "missing-full.gguf") == "full"
    junk = tmp_path / "junk-32K.gguf"
    junk.write_bytes(b"not a gguf file at all")
    assert sidecar_kind(junk) == "d2t"


def test_the_depth_series_keeps_our_fixed_depth_rows_per_mode() -> None:
    rows = [{"prompt_set": "document", "mode": "off", "draft": None, "draft_depth": 0, "decode_tps_median": 10.0},
            {"prompt_set": "document", "mode": "sidecar", "draft": "d2t", "draft_depth": 2, "decode_tps_median": 14.0},
            {"prompt_set": "document", "mode": "sidecar", "draft": "d2t", "draft_depth": 1, "decode_tps_median": 12.0},
            {"prompt_set": "document", "mode": "embedded", "draft": None, "draft_depth": 1, "decode_tps_median": 11.0},
            {"prompt_set": "document", "mode": "embedded", "draft": None, "draft_depth": 3, "adaptive": True,
             "decode_tps_median": 99.0},
            {"prompt_set": "reasoning", "mode": "off", "draft": None, "draft_depth": 0, "decode_tps_median": 9.0}]
    assert depth_series(rows, "document") == {"off": [(0, 10.0)], "d2t": [(1, 12.0), (2, 14.0)],
                                              "embedded": [(1, 11.0)]}
