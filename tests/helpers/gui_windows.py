"""The GUI tests' common setup: a Models page that downloads from a test server, and the main window opened in a
drafting mode. Imported only by GUI test modules (each sets ``QT_QPA_PLATFORM`` before Qt loads)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from app.chats.history import HistoryStore
from app.gui.main import MainWindow
from app.gui.models.models_page import ModelsPage
from app.settings.app_settings import Settings
from tests.helpers.release_server import ReleaseServer
from tests.helpers.waits import HANG_MS

WAIT_MS = HANG_MS  # a hang guard: every wait ends as soon as its condition holds (tests/helpers/waits.py)


def mirrored_models_page(qtbot: QtBot, server: ReleaseServer) -> Iterator[ModelsPage]:
    """The body of a ``page`` fixture: the Models page, shown, with the test server added as a mirror through its
    own mirror settings; afterwards its work is stopped and waited for, so no download outlives the test."""
    widget = ModelsPage(detect_gpu=False)
    widget.show()
    widget.mirror_url.setText(server.url(""))
    qtbot.mouseClick(widget.add_mirror_button, Qt.MouseButton.LeftButton)
    yield widget
    widget.shutdown()
    qtbot.waitUntil(lambda: widget.ops.idle, timeout=WAIT_MS)
    widget.close()
    widget.deleteLater()


@contextmanager
def open_window(qtbot: QtBot, store: HistoryStore, mode: str | None = None, settings: Settings | None = None,
                show: bool = True) -> Iterator[MainWindow]:
    """The main window on ``store``, in drafting ``mode`` (a model selector key; None keeps the default, Auto),
    shown unless ``show`` is False; closed when the block ends, whatever happened in it."""
    win = MainWindow(history=store, settings=settings)
    qtbot.addWidget(win)
    if mode is not None:
        win.model_selector.restore_mode(mode)
    if show:
        win.show()
    try:
        yield win
    finally:
        win.close()


def send_and_wait(qtbot: QtBot, win: MainWindow, text: str) -> dict[str, Any]:
    """Send ``text`` through the chat page and wait for the engine's ``done`` event, which is returned."""
    done: list[dict[str, Any]] = []
    win.bridge.done.connect(done.append)
    win.chat_page.send(text)
    qtbot.waitUntil(lambda: bool(done), timeout=WAIT_MS)
    win.bridge.done.disconnect(done.append)
    return done[0]
