"""Chats → Export / Import: the open chat or all chats written as Markdown or JSON, and a JSON export's chats added
to the history (a damaged or hostile file is refused in the banner, nothing added)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from PySide6.QtWidgets import QFileDialog, QWidget

from app.chats.history import HistoryError, HistoryStore, read_export
from app.gui.chat.banners import Banner


def _chats(count: int) -> str:
    return f"{count} chat{'s' if count != 1 else ''}"


class ChatTransfer:
    """Export and import for the Chat page: ``current`` gives the open chat's id (None: a new, unsaved chat),
    ``notice`` says what was done in the status bar, ``refresh`` shows imported chats in the list."""

    def __init__(self, history: HistoryStore, current: Callable[[], int | None], banner: Banner,
                 notice: Callable[[str], None], refresh: Callable[[], None], dialog_parent: QWidget) -> None:
        self.history = history
        self.current = current
        self.banner = banner
        self.notice = notice
        self.refresh = refresh
        self.dialog_parent = dialog_parent

    def export_chats(self, path: Path, fmt: str, current: bool = True) -> int:
        """Write this chat (or all chats) to ``path`` as Markdown (``md``) or JSON; returns how many."""
        open_id = self.current()
        ids = ([open_id] if open_id is not None else []) if current else [c.id for c in self.history.conversations()]
        if fmt == "json":
            path.write_text(json.dumps(self.history.export_json(ids), indent=2) + "\n", encoding="utf-8")
        else:
            path.write_text("\n\n---\n\n".join(self.history.export_markdown(i) for i in ids) + "\n",
                            encoding="utf-8")
        self.notice(f"Exported {_chats(len(ids))} to {path.name}")
        return len(ids)

    def import_chats(self, path: Path) -> list[int]:
        """Add the chats of a JSON export; errors are shown in the banner."""
        try:
            created = self.history.import_json(read_export(path))
        except HistoryError as exc:
            self.banner.show_error({"message": f"{path.name} could not be imported: {exc.message}",
                                    "advice": exc.advice})
            return []
        self.refresh()
        self.notice(f"Imported {_chats(len(created))}")
        return created

    def export_dialog(self, fmt: str, current: bool) -> None:
        """Chats → Export …: ask where, then ``export_chats``."""
        if current and self.current() is None:
            self.notice("Nothing to export: this chat has no messages yet")
            return
        suffix = "Markdown (*.md)" if fmt == "md" else "JSON (*.json)"
        name, _ = QFileDialog.getSaveFileName(self.dialog_parent, "Export chats", f"chats.{fmt}", suffix)
        if name:
            self.export_chats(Path(name), fmt, current)

    def import_dialog(self) -> None:
        """Chats → Import chats from JSON…: ask which file, then ``import_chats``."""
        name, _ = QFileDialog.getOpenFileName(self.dialog_parent, "Import chats", "", "JSON (*.json)")
        if name:
            self.import_chats(Path(name))
