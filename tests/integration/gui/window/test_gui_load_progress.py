"""A model load the person can watch, without dead time: while the demo loads, the chat page shows
"Loading <file> … N%", and the chat list stays usable (an old chat can be opened and read); a message waiting
for the load goes back into its own chat's box when another chat is opened, and a streaming reply still locks the list.
The real engine on the demo model."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from app.chats.history import HistoryStore
from app.gguftools.demo_model import DemoModel
from tests.helpers.demo_copies import DemoCopies
from tests.helpers.gui_windows import WAIT_MS, open_window, send_and_wait
from tests.helpers.module_folders import ModuleFolders


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders, default_demo: DemoCopies) -> DemoModel:
    return default_demo.copy_to(module_tmp.mktemp("load-progress-demo"))


def test_the_load_shows_its_progress_and_the_chat_list_stays_usable(qtbot: QtBot, tmp_path: Path,
                                                                      patched_backend: object,
                                                                      demo: DemoModel) -> None:
    store = HistoryStore(tmp_path / "history.sqlite3")
    old = store.create_conversation("An old chat")
    store.add_message(old, "user", "what was said before")
    with open_window(qtbot, store) as win:
        page = win.chat_page
        seen: list[dict[str, Any]] = []
        opened_during_load: list[int | None] = []

        def on_progress(event: dict[str, Any]) -> None:
            # connected after the page's own slot: the bar shows this event already
            seen.append({"event": event, "sidebar": page.sidebar.isEnabled(), "bar": page.load_bar.isVisible(),
                         "value": page.load_bar.value(), "text": page.load_bar.text(), "ready": page.ready})
            if not opened_during_load:  # browse an old chat mid-load, as the person would
                page.open_conversation(old)
                opened_during_load.append(page.conversation_id)

        win.bridge.load_progress.connect(on_progress)
        loaded: list[dict[str, Any]] = []
        win.bridge.loaded.connect(loaded.append)
        win.loading.use_demo(demo)
        page.chat.input.setPlainText("sent while loading")
        qtbot.keyClick(page.chat.input, Qt.Key.Key_Return)  # waits for the load (the waiting message)
        qtbot.waitUntil(lambda: bool(loaded), timeout=WAIT_MS)

        assert seen, "the load reported no progress"
        assert all(s["sidebar"] for s in seen)  # the chat list was usable all through the load
        assert all(s["bar"] and not s["ready"] for s in seen)
        assert all(0 <= s["value"] <= 100 for s in seen)
        last = seen[-1]
        assert last["text"] == f"Loading {last['event']['file']} … {last['value']}%"
        assert last["event"]["fraction"] == pytest.approx(1.0) and last["value"] == 100
        assert any(s["event"]["file"] == demo.target.name for s in seen)

        # the old chat opened mid-load is shown; the message meant for the chat left went back into that chat's
        # box, unsent (each chat keeps its own unsent text: it does not follow the person into the old chat)
        assert opened_during_load == [old] and page.conversation_id == old
        assert "what was said before" in page.chat.transcript_text()
        assert "sent while loading" not in page.chat.transcript_text()
        assert page.chat.input.toPlainText() == ""
        assert page.drafts.of(None) == "sent while loading"
        assert [(m.role, m.content) for m in store.messages(old)] == [("user", "what was said before")]
        page.new_chat()  # back in the chat it was written for: there it is
        assert page.chat.input.toPlainText() == "sent while loading"

        assert not page.load_bar.isVisible() and page.sidebar.isEnabled() and page.ready

        # a streaming reply still locks the list (its chat must stay open)
        during_reply: list[bool] = []
        win.bridge.tokens.connect(lambda _batch: during_reply.append(page.sidebar.isEnabled()))
        page.chat.input.clear()
        send_and_wait(qtbot, win, "and now a reply")
        assert during_reply and not any(during_reply)
        assert page.sidebar.isEnabled()
    store.close()
