"""The status text never moves the layout (issue 13, defect 10): "Loading the model…" and the longer "waiting"
status leave the top bar's controls, the sidebar and the chat where they were (the chat does not re-wrap). The
status lives in the window's status bar, where even the waiting text fits at 1024 wide; what does not fit is
elided, and the whole text stays readable in the tooltip."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

from pathlib import Path

import pytest
from PySide6.QtCore import QRect
from PySide6.QtWidgets import QApplication, QWidget
from pytestqt.qtbot import QtBot

from app.chats.history import HistoryStore
from app.gui.chat.chat_page import WAITING_STATUS
from app.gui.main import MainWindow
from app.settings.app_settings import Settings


def _geometries(win: MainWindow) -> dict[str, QRect]:
    QApplication.processEvents()  # the layout request a new text posts
    QApplication.processEvents()
    selector, page = win.model_selector, win.chat_page
    widgets: dict[str, QWidget] = {"model": selector.model_box, "mode": selector.mode_box,
                                   "thinking": page.thinking_box,
                                   "chat settings": page.chat_settings_button, "sidebar": page.sidebar,
                                   "transcript": page.chat.transcript, "input": page.chat.input}
    return {name: QRect(w.mapTo(win, w.rect().topLeft()), w.size()) for name, w in widgets.items()}


@pytest.mark.parametrize("width", [1180, 1024])
def test_a_long_status_changes_nothing_else_and_is_elided_with_a_tooltip(qtbot: QtBot, tmp_path: Path,
                                                                         width: int) -> None:
    store = HistoryStore(tmp_path / "history.sqlite3")
    win = MainWindow(history=store, settings=Settings(first_run_done=True))
    qtbot.addWidget(win)
    win.resize(width, 700)
    win.show()
    qtbot.waitExposed(win)
    try:
        win.status.setText("Ready")
        before = _geometries(win)
        window_size = win.size()
        for text in ("Loading the model…", WAITING_STATUS, "Engine error: the model did not load; your message is "
                     "back in the box", "Ready"):
            win.status.setText(text)
            assert _geometries(win) == before, text
            assert win.size() == window_size
            assert win.status.text() == text  # the whole text, for code and for the tooltip
        win.status.setText(WAITING_STATUS)
        QApplication.processEvents()
        assert win.status.displayed_text() == WAITING_STATUS  # the status bar has the window's width: it fits
        assert win.status.isVisible() and win.status.width() > width // 2
        long = "Engine error: " + "the model file /very/long/path/to/a/models/folder/" * 8
        win.status.setText(long)
        assert _geometries(win) == before and win.size() == window_size
        shown = win.status.displayed_text()
        assert shown != long and shown.endswith("…")  # more than the window is wide: elided
        assert win.status.toolTip() == long and win.status.text() == long
        assert win.status.fontMetrics().horizontalAdvance(shown) <= win.status.width()
    finally:
        win.close()
        store.close()
