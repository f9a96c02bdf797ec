"""The window in a long conversation (issue 34), on the real engine and the built-in demo at a 512-token context:
the context meter follows the replies; a reply cut by its cap gets Continue, which extends the same saved message
with exactly the text one longer cap gives (also after the chat is reopened, from its text); a chat longer than
the context keeps going and says the oldest turns were left out; "stop at the limit" stops with the figures and
its button opens a new chat carrying the last exchange, the unanswered message back in the box."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from app.chats.history import HistoryStore
from app.gguftools.demo_model import DemoModel
from app.gui.main import MainWindow
from app.settings.app_settings import Settings
from app.settings.chat_settings import ChatSettings
from tests.helpers.demo_copies import DemoCopies
from tests.helpers.gui_windows import open_window
from tests.helpers.module_folders import ModuleFolders
from tests.helpers.waits import HANG_MS

WAIT_MS = HANG_MS  # a hang guard: every wait ends as soon as its condition holds (tests/helpers/waits.py)
GREEDY = ChatSettings(thinking=False, temperature=0.0, max_tokens=12)
QUESTION = "Tell me about lighthouses, and then about the sea."


@pytest.fixture(scope="module")
def window(qapp: QApplication, request: pytest.FixtureRequest, patched_backend: object, default_demo: DemoCopies,
           module_tmp: ModuleFolders) -> Iterator[MainWindow]:
    demo: DemoModel = default_demo.copy_to(module_tmp.mktemp("long-chat-demo"))
    store = HistoryStore(module_tmp.mktemp("long-chat-history") / "history.sqlite3")
    with open_window(QtBot(request), store, "sidecar-d2t", Settings(context_size=512)) as win:
        win.loading.use_demo(demo)
        QtBot(request).waitUntil(lambda: win.chat_page.ready, timeout=WAIT_MS)
        yield win
    store.close()


def _reply(qtbot: QtBot, win: MainWindow, act: Any) -> dict[str, Any]:
    """Do ``act()`` and wait for the reply's end (``done`` or ``error``)."""
    ended: list[dict[str, Any]] = []
    win.bridge.done.connect(ended.append)
    win.bridge.error.connect(ended.append)
    try:
        act()
        qtbot.waitUntil(lambda: bool(ended), timeout=WAIT_MS)
    finally:
        win.bridge.done.disconnect(ended.append)
        win.bridge.error.disconnect(ended.append)
    return ended[0]


def _last(win: MainWindow) -> Any:
    conversation = win.chat_page.conversation_id
    assert conversation is not None
    return win.history.messages(conversation)[-1]


def test_continue_extends_the_same_reply_to_what_a_longer_cap_gives(qtbot: QtBot, window: MainWindow) -> None:
    page = window.chat_page
    page.new_chat()
    page.set_chat_settings(replace(GREEDY, max_tokens=36))
    longer = _reply(qtbot, window, lambda: page.send(QUESTION))
    assert longer["kind"] == "done"
    expected = _last(window).content

    page.new_chat()
    page.set_chat_settings(GREEDY)
    cut = _reply(qtbot, window, lambda: page.send(QUESTION))
    assert cut["stop_reason"] == "length"
    assert page.cut_notice.isVisible() and "reply cap (12 tokens" in page.cut_notice.text.text()
    assert page.meter.text() == f"{cut['stats']['context_used']} / 512 tokens"
    first = _last(window)
    for _ in range(2):  # 12 + 12 + 12 = 36 tokens
        more = _reply(qtbot, window, lambda: qtbot.mouseClick(page.cut_notice.continue_button,
                                                              Qt.MouseButton.LeftButton))
        assert more["kind"] == "done" and more["stats"]["prompt_tokens"] <= 1  # nothing read again
    conversation = page.conversation_id
    assert conversation is not None
    messages = window.history.messages(conversation)
    assert [m.role for m in messages] == ["user", "assistant"] and messages[-1].id == first.id  # one reply, extended
    assert messages[-1].content == expected and messages[-1].complete
    assert page.chat.entries[-1].text.strip() == expected.strip()


def test_a_reopened_cut_reply_offers_continue_and_goes_on_from_its_text(qtbot: QtBot, window: MainWindow) -> None:
    page = window.chat_page
    page.new_chat()
    page.set_chat_settings(GREEDY)
    _reply(qtbot, window, lambda: page.send("Hello there, how are you?"))
    conversation = page.conversation_id
    assert conversation is not None
    page.new_chat()
    assert not page.cut_notice.isVisible() and page.meter.text() == "0 / 512 tokens"
    page.open_conversation(conversation)
    assert page.cut_notice.isVisible()  # from the saved reply's stats
    before = _last(window).content
    page.stream.tokens = (None, [])  # as after a restart of the window: only the text is left
    more = _reply(qtbot, window, page.continue_reply)
    assert more["kind"] == "done" and more["stats"]["generated"] > 0
    after = _last(window).content
    assert after.startswith(before) and len(after) > len(before)


def test_a_chat_longer_than_the_context_keeps_going_and_says_what_was_left_out(qtbot: QtBot,
                                                                               window: MainWindow) -> None:
    page = window.chat_page
    page.new_chat()
    page.set_chat_settings(replace(GREEDY, max_tokens=60))
    ends = [_reply(qtbot, window, lambda i=i: page.send(f"Question {i}: {QUESTION}")) for i in range(8)]
    assert all(end["kind"] == "done" for end in ends), [end.get("message") for end in ends]
    assert max(end["stats"]["trimmed_turns"] for end in ends) > 0
    assert page.trim_note.isVisible() or ends[-1]["stats"]["trimmed_turns"] == 0
    assert any(end["stats"]["trimmed_turns"] for end in ends[-3:])
    shown = [end for end in ends if end["stats"]["trimmed_turns"]][-1]
    assert "oldest turn" in page.trim_note.text.text() or shown is not ends[-1]
    used = ends[-1]["stats"]["context_used"]
    assert 0 < used <= 512 and page.meter.text() == f"{used} / 512 tokens"


def test_stop_at_the_limit_offers_a_new_chat_carrying_the_last_exchange(qtbot: QtBot, window: MainWindow) -> None:
    page = window.chat_page
    page.new_chat()
    page.set_chat_settings(replace(GREEDY, max_tokens=60, overflow="stop"))
    end: dict[str, Any] = {}
    sent = 0
    while sent < 12:
        end = _reply(qtbot, window, lambda s=sent: page.send(f"Question {s}: {QUESTION}"))
        sent += 1
        if end["kind"] == "error":
            break
    assert end["kind"] == "error" and end["policy"] == "stop" and end["context"] == 512
    assert page.limit_banner.isVisible() and "context limit" in page.limit_banner.text.text()
    assert not page.banner.isVisible()
    assert page.chat.entries[-1].role == "user"  # no empty reply left under the refused message
    old = page.conversation_id
    assert old is not None
    answered = [m for m in window.history.messages(old) if m.role == "assistant"][-1]
    page.chat.input.setPlainText("")
    qtbot.mouseClick(page.limit_banner.new_chat_button, Qt.MouseButton.LeftButton)
    assert page.conversation_id not in (None, old)
    new_id = page.conversation_id
    assert new_id is not None
    carried = window.history.messages(new_id)
    assert [m.role for m in carried] == ["user", "assistant"] and carried[-1].content == answered.content
    assert page.chat.input.toPlainText() == f"Question {sent - 1}: {QUESTION}"  # the unanswered one, back
    assert not page.limit_banner.isVisible()
    again = _reply(qtbot, window, lambda: page.send("And now?"))
    assert again["kind"] == "done"
