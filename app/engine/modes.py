"""The drafting modes: their names, and which kind of sidecar a file is."""

from __future__ import annotations

from typing import Literal

from app.release.catalog import load_catalog


def sidecar_kind(name: str) -> Literal["d2t", "full"]:
    """What a sidecar file is, from its name: the catalog's sidecar (``…-FastMTP-32K.gguf``) and names with
    ``d2t`` or ``32K`` are the trimmed d2t sidecar; names with ``full``, and any other, a full sidecar."""
    lowered = name.lower()
    if "full" not in lowered and (name == load_catalog().sidecar.file or "d2t" in lowered or "32k" in lowered):
        return "d2t"
    return "full"
