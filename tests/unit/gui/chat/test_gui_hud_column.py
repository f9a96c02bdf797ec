"""The HUD stands beside the text column, never over it, and is opaque (first-hour issue, smaller edges): at the
window sizes we design for the HUD's rectangle and the transcript's text column (wherever it is scrolled) do not
meet, in either side's corners, folded or not; and its panel hides what is behind it in the dark theme.

Real windows offscreen on a real history file, with a conversation long enough to scroll.
"""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

import pytest
from PySide6.QtCore import QPoint, QRect
from PySide6.QtGui import QColor, QImage, QTextCursor
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from app.chats.history import HistoryStore
from app.gui.chat.chat_view import ChatView
from app.gui.shell import theme
from app.settings.app_settings import Settings
from tests.helpers.gui_windows import open_window

WAIT_MS = 10_000
WORDS = "an earlier message that takes some room in the transcript and wraps over several lines " * 4


def _hud_rect(view: ChatView) -> QRect:
    """The HUD's rectangle in the transcript viewport's coordinates."""
    viewport = view.transcript.viewport()
    return QRect(viewport.mapFromGlobal(view.hud.mapToGlobal(QPoint(0, 0))), view.hud.size())


def _text_column(view: ChatView) -> QRect:
    """Where text can be drawn, as tall as the viewport (scrolling moves text only up and down)."""
    fmt = view.transcript.document().rootFrame().frameFormat()  # its side margins replace the document's
    viewport = view.transcript.viewport().rect()
    left = round(fmt.leftMargin())
    right = round(viewport.width() - fmt.rightMargin())
    return QRect(left, 0, right - left, viewport.height())


def _lines(view: ChatView) -> list[QRect]:
    """Each line of text shown (from its first character's cursor to its last's), in viewport coordinates."""
    lines = []
    cursor = QTextCursor(view.transcript.document())
    block = view.transcript.document().begin()
    while block.isValid():
        layout = block.layout()
        for i in range(layout.lineCount()):
            line = layout.lineAt(i)
            cursor.setPosition(block.position() + line.textStart())
            first = view.transcript.cursorRect(cursor)
            cursor.setPosition(block.position() + line.textStart() + max(0, line.textLength() - 1))
            lines.append(first.united(view.transcript.cursorRect(cursor)))
        block = block.next()
    shown = view.transcript.viewport().rect()
    return [line.intersected(shown) for line in lines if line.intersects(shown)]


def _settled(view: ChatView) -> bool:
    """The HUD shows in its place over the transcript (a folded one in a strip above or below the viewport)."""
    hud = QRect(view.transcript.mapFromGlobal(view.hud.mapToGlobal(QPoint(0, 0))), view.hud.size())
    return view.hud.isVisible() and view.transcript.rect().contains(hud)


@pytest.mark.parametrize("size", [(1024, 700), (1366, 768)])
@pytest.mark.parametrize("corner", ["top-right", "bottom-left"])
@pytest.mark.parametrize("collapsed", [False, True])
def test_the_hud_never_covers_the_text_column(qtbot: QtBot, store: HistoryStore, size: tuple[int, int],
                                              corner: str, collapsed: bool) -> None:
    conversation = store.create_conversation("long")
    for i in range(14):
        store.add_message(conversation, "user" if i % 2 == 0 else "assistant", f"message {i}: {WORDS}")
    with open_window(qtbot, store, show=False) as win:
        win.resize(*size)
        win.show()
        qtbot.waitExposed(win)
        win.chat_page.open_conversation(conversation)
        view = win.chat_page.chat
        view.set_hud_placement(corner, collapsed)
        view.hud.show_stats({"rolling_tps": 123.4, "acceptance": 0.875, "accepted": 7, "drafted": 8,
                             "tokens_per_pass": 3.2, "prompt_tps": 1234.0, "time_to_first_token": 0.25})
        bar = view.transcript.verticalScrollBar()
        qtbot.waitUntil(lambda: _settled(view) and bar.maximum() > 0, timeout=WAIT_MS)
        qtbot.waitUntil(lambda: not _hud_rect(view).intersects(_text_column(view)), timeout=WAIT_MS)
        column = _text_column(view)
        assert column.width() >= view.transcript.viewport().width() // 2  # still a real column of text
        for value in (0, bar.maximum() // 2, bar.maximum()):  # wherever it is scrolled: no line under the HUD
            bar.setValue(value)
            # the document lays a long text out in steps: wait for the lines to reach their places
            qtbot.waitUntil(lambda: not any(line.intersects(_hud_rect(view)) for line in _lines(view)),
                            timeout=WAIT_MS)


def test_the_hud_is_opaque_in_the_dark_theme(qtbot: QtBot, store: HistoryStore) -> None:
    app = QApplication.instance()
    assert isinstance(app, QApplication)
    with open_window(qtbot, store, settings=Settings(theme="dark")) as win:
        win.apply_settings(Settings(theme="dark"))
        hud = win.chat_page.chat.hud
        qtbot.waitUntil(hud.isVisible, timeout=WAIT_MS)
        image = QImage(hud.size(), QImage.Format.Format_ARGB32)
        image.fill(QColor(255, 0, 255))  # magenta behind it: a see-through panel lets it show
        hud.render(image)
        background = image.pixelColor(4, hud.height() // 2)  # inside the panel's left padding
        assert background.alpha() == 255
        assert (background.red(), background.green(), background.blue()) == (24, 28, 36)
    theme.apply(app, "light")
