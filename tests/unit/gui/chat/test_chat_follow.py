"""The transcript follows a streaming reply while the user is at the bottom, and only then.

A real ``ChatView``, shown offscreen with a saved conversation taller than the window, fed token events
shaped like the engine's (``piece``, ``provenance``, ``stats``) through the view's own render timer.
"""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

from collections.abc import Iterator
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QTextCursor
from pytestqt.qtbot import QtBot

from app.chats.history import StoredMessage
from app.gui.chat.chat_view import ChatView

WAIT_MS = 5_000  # waits end as soon as the condition holds
TOKENS = 300


def _long_view(qtbot: QtBot) -> ChatView:
    view = ChatView()
    qtbot.addWidget(view)
    view.resize(700, 500)
    view.show()
    qtbot.waitExposed(view)
    words = "a line of an earlier message that takes some room in the transcript " * 6
    saved = [StoredMessage(i, 1, "user" if i % 2 == 0 else "assistant", f"message {i}: {words}", None, 0.0)
             for i in range(30)]
    view.show_conversation(saved)
    bar = view.transcript.verticalScrollBar()
    qtbot.waitUntil(lambda: bar.maximum() > 3 * view.transcript.viewport().height(), timeout=WAIT_MS)
    qtbot.waitUntil(lambda: bar.value() == bar.maximum(), timeout=WAIT_MS)
    return view


def _event(i: int) -> dict[str, Any]:
    piece = f"w{i} " + ("\n\n" if i % 4 == 3 else "")  # words, with a paragraph break now and then
    return {"kind": "token", "piece": piece, "provenance": "draft" if i % 3 else "target",
            "stats": {"generated": i + 1}}


def _end_in_view(view: ChatView) -> bool:
    cursor = QTextCursor(view.transcript.document())
    cursor.movePosition(QTextCursor.MoveOperation.End)
    return view.transcript.viewport().rect().contains(view.transcript.cursorRect(cursor).center())


def _feed(qtbot: QtBot, view: ChatView, start: int, stop: int, chunk: int = 10) -> Iterator[int]:
    """Feed tokens ``start..stop`` in chunks; after each chunk the render timer has drawn its last word."""
    for first in range(start, stop, chunk):
        last = min(first + chunk, stop)
        for i in range(first, last):
            view.append_token(_event(i))
        qtbot.waitUntil(lambda last=last: f"w{last - 1} " in view.transcript_text() + " ", timeout=WAIT_MS)
        yield last


def test_at_the_bottom_the_view_follows_every_update_of_a_long_stream(qtbot: QtBot) -> None:
    view = _long_view(qtbot)
    bar = view.transcript.verticalScrollBar()
    view.begin_reply()
    grown_from = bar.maximum()
    for _ in _feed(qtbot, view, 0, TOKENS):
        qtbot.waitUntil(lambda: bar.value() == bar.maximum() and _end_in_view(view), timeout=WAIT_MS)
        assert not view.jump_button.isVisible()
    assert bar.maximum() > grown_from + view.transcript.viewport().height()  # the reply ran past the fold
    view.finish_reply({"kind": "done", "text": "", "stop_reason": "length", "stats": {"generated": TOKENS}})
    qtbot.waitUntil(lambda: bar.value() == bar.maximum() and _end_in_view(view), timeout=WAIT_MS)


def test_scrolled_up_the_view_stays_put_and_offers_a_jump_to_latest(qtbot: QtBot) -> None:
    view = _long_view(qtbot)
    bar = view.transcript.verticalScrollBar()
    view.begin_reply()
    for _ in _feed(qtbot, view, 0, 20):
        pass
    bar.setValue(bar.maximum() - 400)  # the user scrolls up to read something
    held = bar.value()
    qtbot.waitUntil(view.jump_button.isVisible, timeout=WAIT_MS)
    assert view.jump_button.text() == "Jump to latest ↓"
    grown_from = bar.maximum()
    for _ in _feed(qtbot, view, 20, TOKENS):
        assert bar.value() == held
        assert view.jump_button.isVisible()
    assert bar.maximum() > grown_from + view.transcript.viewport().height()  # the reply ran on below
    view.finish_reply({"kind": "done", "text": "", "stop_reason": "length", "stats": {"generated": TOKENS}})
    qtbot.waitUntil(lambda: not view._live.pacer.timer.isActive(), timeout=WAIT_MS)
    assert bar.value() == held and view.jump_button.isVisible()  # the reply's end does not jump either
    bar.setValue(bar.maximum())  # scrolling back down to the bottom by hand hides the button
    qtbot.waitUntil(lambda: not view.jump_button.isVisible(), timeout=WAIT_MS)


def test_jump_to_latest_scrolls_down_hides_itself_and_following_resumes(qtbot: QtBot) -> None:
    view = _long_view(qtbot)
    bar = view.transcript.verticalScrollBar()
    view.begin_reply()
    for _ in _feed(qtbot, view, 0, 20):
        pass
    bar.setValue(bar.maximum() // 2)
    held = bar.value()
    qtbot.waitUntil(view.jump_button.isVisible, timeout=WAIT_MS)
    for _ in _feed(qtbot, view, 20, 150):
        assert bar.value() == held
    qtbot.mouseClick(view.jump_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: bar.value() == bar.maximum() and _end_in_view(view), timeout=WAIT_MS)
    assert not view.jump_button.isVisible()
    for _ in _feed(qtbot, view, 150, TOKENS):
        qtbot.waitUntil(lambda: bar.value() == bar.maximum() and _end_in_view(view), timeout=WAIT_MS)
        assert not view.jump_button.isVisible()
