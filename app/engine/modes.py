"""The drafting modes, in one place: their names, their words and chart colours, and which kind of sidecar a
file is.

Every table, chart, checkbox and sentence that names a mode takes its words from ``MODES`` (the Benchmark page,
``bench matrix``'s chart, Auto's summary, the HUD), so a mode is called the same everywhere and drawn in the
same colour in the window's chart and the exported PNG.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from app.core.errors import GGUFError
from app.gguftools.inspect import inspect_gguf
from app.release.catalog import load_catalog

DraftMode = Literal["off", "embedded", "full", "d2t"]
DRAFT_MODES: tuple[DraftMode, ...] = ("off", "embedded", "full", "d2t")
AUTO = "auto"  # not a mode of its own: Auto measures the others and uses the fastest


@dataclass(frozen=True)
class ModeInfo:
    """One drafting mode's words and colour.

    ``label``: short, for table cells, checkboxes and chart legends (``embedded head``); ``phrase``: inside a
    sentence (``Auto uses the embedded MTP head``); ``brief``: the HUD's mode line (``embedded MTP · depth 3``);
    ``colour``: its line in the depth charts (the window's and matplotlib's alike).
    """

    name: str
    label: str
    phrase: str
    brief: str
    colour: str


MODES: dict[str, ModeInfo] = {
    "off": ModeInfo("off", "off", "drafting off", "off (target only)", "#8a8f98"),
    "embedded": ModeInfo("embedded", "embedded head", "the embedded MTP head", "embedded MTP", "#4c78a8"),
    "full": ModeInfo("full", "full sidecar", "the full sidecar", "full sidecar", "#f58518"),
    "d2t": ModeInfo("d2t", "FastMTP d2t sidecar", "the FastMTP d2t sidecar", "FastMTP d2t", "#54a24b"),
}
AUTO_INFO = ModeInfo(AUTO, "Auto (measured)", "Auto", "Auto", "#333333")
FALLBACK_COLOUR = "#333333"  # a series the chart does not know (never drawn by our own runs)


def mode_label(mode: str) -> str:
    """The short label of ``mode``; an unknown name as itself (rows written by another version)."""
    info = MODES.get(mode)
    return info.label if info is not None else mode


def mode_colour(mode: str) -> str:
    """The chart colour of ``mode``."""
    info = MODES.get(mode)
    return info.colour if info is not None else FALLBACK_COLOUR


def sidecar_kind_from_name(name: str) -> Literal["d2t", "full"]:
    """A guess from the name alone, for a file that cannot be read: the catalog's sidecar (``…-FastMTP-32K.gguf``)
    and names with ``d2t`` or ``32K`` are the trimmed d2t sidecar; names with ``full``, and any other, full."""
    lowered = name.lower()
    if "full" not in lowered and (name == load_catalog().sidecar.file or "d2t" in lowered or "32k" in lowered):
        return "d2t"
    return "full"


def sidecar_kind(path: str | os.PathLike[str]) -> Literal["d2t", "full"]:
    """What a sidecar file is, from its contents: an MTP-only file with a ``d2t`` map (the trimmed draft
    vocabulary) is the d2t sidecar, one without it the full sidecar, as ``app.gguftools.inspect`` tells them
    apart (the header is read lazily and cached per unchanged file), so a renamed file is still what it is. A
    file that is neither (a whole model in a sidecar's place) or cannot be read is judged by its name
    (:func:`sidecar_kind_from_name`): the load then refuses it in words."""
    try:
        kind = inspect_gguf(path).kind
    except (GGUFError, OSError, ValueError):
        kind = "other"
    if kind == "mtp_sidecar_d2t":
        return "d2t"
    if kind == "mtp_sidecar_full":
        return "full"
    return sidecar_kind_from_name(Path(path).name)


def depth_series(summaries: list[dict[str, Any]], prompt_set: str) -> dict[str, list[tuple[int, float]]]:
    """For the depth charts (``bench matrix``'s PNG and the Benchmark page): per drafting mode, (depth, median
    tok/s) points of our own fixed-depth rows; ``off`` as one point at depth 0. Pure, so the GUI draws exactly
    what the command measured without importing the bench code."""
    series: dict[str, list[tuple[int, float]]] = {}
    for row in summaries:
        if row["prompt_set"] != prompt_set or row.get("adaptive") or row.get("engine", "ours") != "ours":
            continue
        mode = "off" if row["mode"] == "off" else (row["draft"] or "embedded")
        depth = 0 if mode == "off" else int(row["draft_depth"])
        series.setdefault(mode, []).append((depth, float(row["decode_tps_median"])))
    return {mode: sorted(points) for mode, points in series.items()}
