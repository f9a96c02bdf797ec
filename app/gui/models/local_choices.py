"""Your own model files in the chat's model selector: their items, the files a chosen one loads, the modes it has.

The window's selector lists the demo model, the downloaded releases, then these (``app.models.local_models``), keyed
by the file's path like the releases. A file the chat cannot use (moved, another architecture, a hub-hash
mismatch) is listed greyed with the reason; the verification state is part of every label, so a file that is
not publisher-signed never reads as if it were.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox

from app.core.units import format_bytes
from app.models import local_models
from app.models.local_models import LocalModel
from app.release.hub_hash import LABELS

SetEnabled = Callable[[QComboBox, int, bool], None]


def find(key: str | None) -> LocalModel | None:
    return local_models.find(key) if key else None


def add_items(box: QComboBox, set_enabled: SetEnabled) -> None:
    """Append an item per added file: ``name · Q4_K_M · 15.3 GiB · hub hash matches``."""
    from app.gui.models.local_models_panel import distinct_names

    models = local_models.load_registry()
    names = distinct_names([m.path for m in models])  # two target.gguf files show their folders
    for model in models:
        if box.findData(model.key) >= 0:  # a downloaded release's file: listed already, as the release
            continue
        facts = model.facts
        box.addItem(f"{names[model.path]} · {facts.quantization} · {format_bytes(facts.size_bytes)} · "
                    f"{LABELS[model.state]}", model.key)
        row = box.count() - 1
        sidecar = model.sidecar_d2t.name if model.sidecar_d2t else "none (Models page: Make FastMTP sidecar…)"
        tip = f"{model.path}\nYour own file ({LABELS[model.state]})\nFastMTP d2t sidecar: {sidecar}"
        if not model.offered:
            tip = f"Not offered: {model.problem}\n\n{tip}"
            set_enabled(box, row, False)
        box.setItemData(row, tip, Qt.ItemDataRole.ToolTipRole)


def files(key: str | None) -> tuple[Path, Path | None, Path | None] | None:
    """Target, d2t sidecar and full sidecar of the added file ``key``; None when it is not one (or not offered)."""
    model = find(key)
    if model is None or not model.offered:
        return None
    return model.path, model.sidecar_d2t, model.sidecar_full


def offered(key: str | None) -> bool:
    model = find(key)
    return model is not None and model.offered


def lacks_mtp_head(key: str | None) -> bool:
    """An added file without an MTP head: the embedded drafting mode has nothing to draft with."""
    model = find(key)
    return model is not None and not model.facts.mtp_head


NO_SIDECAR = "This model has no FastMTP d2t sidecar yet: make one on the Models page (Make FastMTP sidecar…)."
NO_MTP_HEAD = "This model has no MTP head (it was converted without its nextn layer): chat with drafting off."
