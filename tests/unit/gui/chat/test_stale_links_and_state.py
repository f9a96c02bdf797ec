"""Issue 36, items 5 and 6: "regenerate" lives only under the last reply (a new message takes it off the reply
before it at once, and a stale click does nothing), and a window that does not remember (``bench window``,
screenshots) leaves the user's remembered window state as it was."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from pathlib import Path

from PySide6.QtCore import QUrl
from pytestqt.qtbot import QtBot

from app.chats.history import HistoryStore, StoredMessage
from app.gui.chat.chat_view import ChatView
from app.gui.main import MainWindow
from app.gui.shell import window_state


def _view(qtbot: QtBot) -> ChatView:
    view = ChatView()
    qtbot.addWidget(view)
    view.show_conversation([StoredMessage(0, 1, "user", "Name a colour.", None, 0.0),
                            StoredMessage(1, 1, "assistant", "Blue, like the sea.", None, 0.0)])
    return view


def test_a_new_message_takes_regenerate_off_the_reply_before_it(qtbot: QtBot) -> None:
    view = _view(qtbot)
    assert 'href="regenerate:1"' in view.transcript.toHtml()
    asked: list[bool] = []
    view.regenerate_requested.connect(lambda: asked.append(True))
    view.add_user("And another one?")
    html = view.transcript.toHtml()
    assert "regenerate:" not in html  # the reply is no longer the last: its link is gone at once
    assert 'href="copy:1"' in html and 'href="edit:2"' in html  # its other links (and the new message's) stay
    assert view.transcript_text().count("Blue, like the sea.") == 1 and "And another one?" in view.transcript_text()
    view.activate_link(QUrl("regenerate:1"))  # a stale click (e.g. from a copy of the old text) does nothing
    assert asked == []
    entry = view.begin_reply(3)
    view.append_tokens([{"piece": "Green.", "provenance": "target", "stats": {}}])
    view.finish_reply({"kind": "done", "text": "Green.", "stats": {}})
    assert entry.text == "Green." and 'href="regenerate:3"' in view.transcript.toHtml()
    view.activate_link(QUrl("regenerate:3"))
    assert asked == [True]
    view.truncate(3)  # the places of the later messages still line up after the header was redrawn
    assert "Green." not in view.transcript_text() and "And another one?" in view.transcript_text()


def test_a_window_that_does_not_remember_leaves_the_users_state(qtbot: QtBot, tmp_path: Path) -> None:
    path = window_state.state_path()
    saved = window_state.WindowState(drafting_mode="off", history="/the/users/history.sqlite3", conversation=7)
    window_state.save(saved)
    before = path.read_bytes()
    history = HistoryStore(tmp_path / "history.sqlite3")
    win = MainWindow(history=history, remembers=False)
    qtbot.addWidget(win)
    win.model_selector.restore_mode("sidecar-d2t")
    win.remember_state()
    win.close()
    history.close()
    assert path.read_bytes() == before
    remembering = MainWindow(history=HistoryStore(tmp_path / "other.sqlite3"))
    qtbot.addWidget(remembering)
    remembering.remember_state()
    assert path.read_bytes() != before  # the app's own window does remember
    remembering.close()
    remembering.history.close()


def test_footers_say_why_a_reply_ended_in_words() -> None:
    from app.gui.chat.messages import describe_reply

    stats = {"generated": 12, "decode_tps": 40.0}
    assert describe_reply({"stats": stats, "stop_reason": "eos"}) == "12 tokens · 40.0 tok/s"
    assert describe_reply({"stats": stats, "stop_reason": "length"}).endswith("· cut by the reply cap")
    assert describe_reply({"stats": stats, "stop_reason": "context_full"}).endswith("· cut: the context is full")
    assert describe_reply({"stats": stats, "stop_reason": "cancelled"}).endswith("· stopped (cancelled)")
