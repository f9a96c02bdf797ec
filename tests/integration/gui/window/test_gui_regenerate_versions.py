"""Regenerate keeps the earlier replies as versions (like LM Studio): the reply's header shows ‹ 3/3 ›, its
arrows switch to another version, which the next message goes on from (what the engine is sent), a reopened
chat still shows the version picked, and regenerating keeps the reader's place rather than jumping to the top.

The real window offscreen on a real SQLite history, the real engine on the demo model; the arrows are clicked
through the view's own link handler, as a click on the anchor is.
"""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

from typing import Any

import pytest
from PySide6.QtCore import QUrl
from pytestqt.qtbot import QtBot

from app.chats.history import HistoryStore
from app.engine.chat_template import Message
from app.engine.config import ChatOptions
from app.gguftools.demo_model import DemoModel
from app.gui.main import MainWindow
from tests.helpers.demo_copies import DemoCopies
from tests.helpers.gui_windows import WAIT_MS, open_window, send_and_wait
from tests.helpers.module_folders import ModuleFolders

PADDING = " ".join(["The keeper climbed the stairs to light the lamp before the storm came in."] * 12)


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders, default_demo: DemoCopies) -> DemoModel:
    return default_demo.copy_to(module_tmp.mktemp("versions-demo"))


def _click(win: MainWindow, link: str) -> None:
    """A click on a transcript link: the anchor's URL handed to the view's handler, as Qt does."""
    win.chat_page.chat.activate_link(QUrl(link))


def _regenerate_and_wait(qtbot: QtBot, win: MainWindow) -> dict[str, Any]:
    """The last reply's "regenerate" link, then the new version's ``done``."""
    done: list[dict[str, Any]] = []
    win.bridge.done.connect(done.append)
    _click(win, f"regenerate:{len(win.chat_page.chat.entries) - 1}")
    qtbot.waitUntil(lambda: bool(done), timeout=WAIT_MS)
    win.bridge.done.disconnect(done.append)
    return done[0]


def test_regenerate_keeps_versions_to_switch_between_and_go_on_from(qtbot: QtBot, store: HistoryStore,
                                                                     patched_backend: object,
                                                                     demo: DemoModel) -> None:
    chat = store.create_conversation("lighthouses")
    for turn in range(3):  # enough text that the transcript scrolls
        store.add_message(chat, "user", f"Tell me about lighthouse {turn}.")
        store.add_message(chat, "assistant", PADDING, {"generated": 150, "decode_tps": 9.0})
    with open_window(qtbot, store) as win:
        win.resize(900, 520)
        page, view = win.chat_page, win.chat_page.chat
        sent: list[list[Message]] = []  # what the engine was asked, request by request
        generate = win.bridge.generate

        def recording(messages: list[Message], options: ChatOptions, conversation: str | None = None) -> None:
            sent.append(list(messages))
            generate(messages, options, conversation)

        win.bridge.generate = recording  # type: ignore[method-assign]
        win.loading.use_demo(demo)
        qtbot.waitUntil(lambda: page.ready, timeout=WAIT_MS)
        page.open_conversation(chat)
        send_and_wait(qtbot, win, "Name a colour.")
        first = view.entries[-1].message_id
        assert first is not None and view.entries[-1].versions == 1
        assert "1/1" not in view.transcript_text()  # one version: no arrows

        _regenerate_and_wait(qtbot, win)
        assert sent[-1][-1] == Message("user", "Name a colour.")  # up to the user's message, no old reply
        assert view.entries[-1].version == 2 and view.entries[-1].versions == 2

        bar = view.transcript.verticalScrollBar()
        view.scroll_to_latest()
        assert bar.maximum() > 0 and bar.value() == bar.maximum()
        seen: list[int] = []
        bar.valueChanged.connect(seen.append)
        _regenerate_and_wait(qtbot, win)
        bar.valueChanged.disconnect(seen.append)
        assert seen and min(seen) > 0  # never back at the top: the place kept, then the new reply followed
        assert bar.value() == bar.maximum()

        versions = store.versions(first)
        assert len(versions) == 3 and [m.role for m in store.messages(chat)][-2:] == ["user", "assistant"]
        index = len(view.entries) - 1
        assert view.entries[index].message_id == versions[2].id
        assert "‹ 3/3 ›" in view.transcript_text()
        assert len(store.messages(chat)) == 8  # the padding, the question and one (the shown) version

        bar.setValue(bar.maximum() // 2)  # the reader scrolled up a little: switching keeps that place
        place = bar.value()
        _click(win, f"older:{index}")
        assert bar.value() == place
        entry = view.entries[index]
        assert (entry.version, entry.versions, entry.message_id) == (2, 3, versions[1].id)
        assert entry.text == versions[1].content and "‹ 2/3 ›" in view.transcript_text()
        assert store.messages(chat)[-1].id == versions[1].id  # the history goes on from it

        send_and_wait(qtbot, win, "Another?")
        assert sent[-1][-2:] == [Message("assistant", versions[1].content), Message("user", "Another?")]
        assert [m.id for m in store.messages(chat)][7] == versions[1].id

        page.new_chat()
        page.open_conversation(chat)  # reopened: still the version picked, with its arrows
        entry = view.entries[index]
        assert (entry.version, entry.versions, entry.message_id) == (2, 3, versions[1].id)
        assert "‹ 2/3 ›" in view.transcript_text()
        _click(win, f"newer:{index}")
        assert view.entries[index].version == 3 and store.messages(chat)[7].id == versions[2].id
