"""The HUD no longer covers the chat for good (issue 13, defect 6): it folds to a one-line pill and back, moves
to another corner by dragging it (it snaps to the nearest corner) or from its context menu, keeps the newest
text clear of it in every corner, and the window remembers its corner and fold across a restart.

A real ``ChatView`` offscreen fed engine-shaped token events, and real windows on a real history file.
"""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, QRect, Qt
from PySide6.QtGui import QTextCursor
from pytestqt.qtbot import QtBot

from app.chats.history import HistoryStore, StoredMessage
from app.gui.chat.chat_view import ChatView
from app.gui.chat.hud import CORNERS
from app.gui.main import MainWindow
from app.gui.shell import window_state

WAIT_MS = 5_000


def _view(qtbot: QtBot) -> ChatView:
    view = ChatView()
    qtbot.addWidget(view)
    view.resize(760, 520)
    view.show()
    qtbot.waitExposed(view)
    words = "an earlier message that takes some room in the transcript " * 5
    view.show_conversation([StoredMessage(i, 1, "user" if i % 2 == 0 else "assistant", f"message {i}: {words}",
                                          None, 0.0) for i in range(12)])
    return view


def _hud_rect(view: ChatView) -> QRect:
    """The HUD's rectangle in the transcript's viewport coordinates."""
    viewport = view.transcript.viewport()
    return QRect(viewport.mapFromGlobal(view.hud.mapToGlobal(QPoint(0, 0))), view.hud.size())


def _in_corner(view: ChatView, corner: str) -> bool:
    viewport = view.transcript.viewport().rect()
    hud = _hud_rect(view)
    near = 40  # the HUD sits a few pixels off the edges (and clear of the scroll bar)
    vertical = (hud.top() - viewport.top() < near if corner.startswith("top")
                else viewport.bottom() - hud.bottom() < near)
    horizontal = (hud.left() - viewport.left() < near if corner.endswith("left")
                  else viewport.right() - hud.right() < near)
    return vertical and horizontal


def _last_line(view: ChatView) -> QRect:
    """The last line of text, as wide as the text column (where its words can reach, however few it holds),
    in viewport coordinates."""
    block = view.transcript.document().lastBlock()
    while not block.text().strip():
        block = block.previous()
    layout = block.layout()
    line = layout.lineAt(layout.lineCount() - 1).rect().translated(layout.position()).toRect()
    return line.translated(-view.transcript.horizontalScrollBar().value(),
                           -view.transcript.verticalScrollBar().value())


def test_the_fold_button_makes_a_one_line_pill_and_back(qtbot: QtBot) -> None:
    view = _view(qtbot)
    hud = view.hud
    hud.show_stats({"rolling_tps": 41.5, "acceptance": 0.875, "accepted": 7, "drafted": 8, "tokens_per_pass": 3.2})
    qtbot.waitUntil(lambda: _in_corner(view, "top-right"), timeout=WAIT_MS)
    tall = hud.height()
    with qtbot.waitSignal(view.hud_placement_changed, timeout=WAIT_MS) as placed:
        qtbot.mouseClick(hud.collapse_button, Qt.MouseButton.LeftButton)
    assert placed.args == ["top-right", True]
    assert hud.collapsed and hud.pill.isVisible() and not hud.full.isVisible()
    qtbot.waitUntil(lambda: hud.height() < tall / 2, timeout=WAIT_MS)
    assert hud.height() <= 2 * hud.fontMetrics().height() + 16  # one line
    assert hud.pill.text() == "41.5 tok/s · 88% accepted · 3.20/pass · no model"
    hud.show_stats({"rolling_tps": 39.0})  # the pill stays live
    assert hud.pill.text().startswith("39.0 tok/s")
    root = view.transcript.document().rootFrame().frameFormat()
    assert root.topMargin() < tall  # the first message no longer waits below the tall panel
    with qtbot.waitSignal(view.hud_placement_changed, timeout=WAIT_MS) as placed:
        qtbot.mouseDClick(hud, Qt.MouseButton.LeftButton)  # a double click opens it again
    assert placed.args == ["top-right", False] and hud.full.isVisible() and not hud.pill.isVisible()


@pytest.mark.parametrize("target", ["bottom-left", "bottom-right", "top-left"])
def test_dragging_the_hud_snaps_it_to_the_nearest_corner(qtbot: QtBot, target: str) -> None:
    view = _view(qtbot)
    hud = view.hud
    qtbot.waitUntil(lambda: _in_corner(view, "top-right"), timeout=WAIT_MS)
    viewport = view.transcript.viewport().rect()
    start = QPoint(hud.width() // 2, 10)
    # most of the way to the other corner; the drop decides by where the HUD's centre is
    dx = -(viewport.width() - hud.width()) * 4 // 5 if target.endswith("left") else -10
    dy = (viewport.height() - hud.height()) * 4 // 5 if target.startswith("bottom") else 0
    with qtbot.waitSignal(view.hud_placement_changed, timeout=WAIT_MS) as placed:
        qtbot.mousePress(hud, Qt.MouseButton.LeftButton, pos=start)
        qtbot.mouseMove(hud, start + QPoint(dx, dy))
        qtbot.mouseRelease(hud, Qt.MouseButton.LeftButton, pos=start + QPoint(dx, dy))
    expected = target if (dx, dy) != (-10, 0) else "top-right"
    assert placed.args == [expected, False] and view.hud_corner == expected
    qtbot.waitUntil(lambda: _in_corner(view, expected), timeout=WAIT_MS)


def test_the_context_menu_names_the_corners(qtbot: QtBot) -> None:
    view = _view(qtbot)
    menu = view.hud.placement_menu()
    labels = [action.text() for action in menu.actions() if action.text()]
    assert labels == ["Fold to one line", "Move to the top right corner", "Move to the top left corner",
                      "Move to the bottom right corner", "Move to the bottom left corner"]
    with qtbot.waitSignal(view.hud_placement_changed, timeout=WAIT_MS) as placed:
        next(a for a in menu.actions() if a.text() == "Move to the bottom left corner").trigger()
    assert placed.args == ["bottom-left", False]
    qtbot.waitUntil(lambda: _in_corner(view, "bottom-left"), timeout=WAIT_MS)


@pytest.mark.parametrize("corner", CORNERS)
def test_the_newest_text_is_never_under_the_hud(qtbot: QtBot, corner: str) -> None:
    view = _view(qtbot)
    view.set_hud_placement(corner, collapsed=False)
    qtbot.waitUntil(lambda: _in_corner(view, corner), timeout=WAIT_MS)
    view.begin_reply()
    for i in range(120):
        view.append_token({"kind": "token", "piece": f"word{i} ", "provenance": "draft" if i % 3 else "target",
                           "stats": {"generated": i + 1, "rolling_tps": 20.0}})
    qtbot.waitUntil(lambda: "word119" in view.transcript_text(), timeout=WAIT_MS)
    bar = view.transcript.verticalScrollBar()
    qtbot.waitUntil(lambda: bar.value() == bar.maximum(), timeout=WAIT_MS)
    line = _last_line(view)
    assert line.width() > view.transcript.viewport().width() // 2  # a whole line of words
    assert not line.intersects(_hud_rect(view))  # following at the bottom: the newest line shows
    bar.setValue(0)
    cursor = QTextCursor(view.transcript.document())
    first = view.transcript.cursorRect(cursor)
    cursor.movePosition(QTextCursor.MoveOperation.EndOfLine)
    first = first.united(view.transcript.cursorRect(cursor))
    assert not first.intersects(_hud_rect(view))  # scrolled to the top: the first line shows


def test_the_window_remembers_the_hud_corner_and_fold_across_a_restart(qtbot: QtBot, tmp_path: Path) -> None:
    path = tmp_path / "history.sqlite3"
    store = HistoryStore(path)
    win = MainWindow(history=store)
    qtbot.addWidget(win)
    win.show()
    qtbot.mouseClick(win.chat_page.chat.hud.collapse_button, Qt.MouseButton.LeftButton)
    next(a for a in win.chat_page.chat.hud.placement_menu().actions()
         if a.text() == "Move to the bottom left corner").trigger()
    assert window_state.load().hud_corner == "bottom-left"  # saved at once: a killed app keeps it too
    win.close()
    store.close()
    assert (window_state.load().hud_corner, window_state.load().hud_collapsed) == ("bottom-left", True)

    again_store = HistoryStore(path)
    again = MainWindow(history=again_store)
    qtbot.addWidget(again)
    try:
        # until restored
        assert (again.chat_page.chat.hud_corner, again.chat_page.chat.hud.collapsed) == ("top-right", False)
        again.restore_state()
        again.show()
        assert (again.chat_page.chat.hud_corner, again.chat_page.chat.hud.collapsed) == ("bottom-left", True)
        qtbot.waitUntil(lambda: _in_corner(again.chat_page.chat, "bottom-left"), timeout=WAIT_MS)
    finally:
        again.close()
        again_store.close()
