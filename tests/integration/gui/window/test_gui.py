"""The desktop window against the real engine: streamed replies, the HUD, stop, errors in words."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt, QThread, QUrl
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from app.chats.history import HistoryStore
from app.engine.chat_template import Message
from app.engine.config import ChatOptions, EngineConfig
from app.gguftools.demo_model import DemoModel
from app.gui.chat.chat_view import DRAFT_TINT
from app.gui.chat.messages import STOP_WORDS
from app.gui.main import MainWindow
from app.gui.shell.ops import Report, run_in_background
from tests.helpers.demo_copies import DemoCopies
from tests.helpers.module_folders import ModuleFolders
from tests.helpers.waits import HANG_MS

WAIT_MS = HANG_MS  # a hang guard: every wait ends as soon as its condition holds (tests/helpers/waits.py)


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders, default_demo: DemoCopies) -> DemoModel:
    return default_demo.copy_to(module_tmp.mktemp("gui-demo"))


@pytest.fixture(scope="module")
def history_path(module_tmp: ModuleFolders) -> Path:
    return module_tmp.mktemp("gui-history") / "history.sqlite3"


@pytest.fixture(scope="module")
def window(qapp: QApplication, request: pytest.FixtureRequest, patched_backend: object,
           demo: DemoModel, history_path: Path) -> Iterator[MainWindow]:
    """One window (one engine process) for the module: loading the engine is the slow part."""
    win = MainWindow(history=HistoryStore(history_path))
    win.model_selector.restore_mode("sidecar-d2t")  # these tests are about drafting (Auto, the default, measures)
    win.show()
    win.loading.use_demo(demo)
    QtBot(request).waitUntil(lambda: win.chat_page.ready, timeout=WAIT_MS)
    yield win
    win.close()
    win.history.close()


def _squash(text: str) -> str:
    return " ".join(text.split())


def _send(qtbot: QtBot, win: MainWindow, text: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    tokens: list[dict[str, Any]] = []
    done: list[dict[str, Any]] = []
    win.bridge.token.connect(tokens.append)
    win.bridge.done.connect(done.append)
    win.chat_page.chat.input.setPlainText(text)
    qtbot.keyClick(win.chat_page.chat.input, Qt.Key.Key_Return)
    return tokens, done


def test_background_op_reports_progress_and_result_on_the_gui_thread(qtbot: QtBot) -> None:
    gui = QApplication.instance()
    assert gui is not None
    seen: list[tuple[object, bool]] = []
    results: list[int] = []
    worker_threads: list[int] = []

    def work(report: Report) -> int:
        worker_threads.append(threading.get_ident())
        for i in range(3):
            report(i)
        return 42

    def on_progress(value: object) -> None:
        seen.append((value, QThread.currentThread() is gui.thread()))

    run_in_background(work, results.append, on_progress=on_progress)
    qtbot.waitUntil(lambda: results == [42], timeout=WAIT_MS)
    assert seen == [(0, True), (1, True), (2, True)]
    assert worker_threads and worker_threads[0] != threading.get_ident()

    failures: list[Exception] = []

    def fail(_report: Report) -> None:
        raise ValueError("no")

    run_in_background(fail, lambda _r: None, failures.append)
    qtbot.waitUntil(lambda: len(failures) == 1, timeout=WAIT_MS)
    assert str(failures[0]) == "no"


def test_a_sent_message_streams_the_engines_reply_with_live_hud(qtbot: QtBot, window: MainWindow) -> None:
    tokens, done = _send(qtbot, window, "Hello there, who are you?")
    qtbot.waitUntil(lambda: bool(done), timeout=WAIT_MS)
    reply = done[0]
    assert reply["kind"] == "done" and reply["text"].strip()
    assert [t["token"] for t in tokens] == reply["tokens"]
    assert window.chat_page.chat.entries[-1].role == "assistant"
    assert window.chat_page.chat.entries[-1].text.strip() == reply["text"].strip()
    assert _squash(reply["text"]) in _squash(window.chat_page.chat.transcript_text())
    tps = re.search(r"([\d.]+) tok/s", window.chat_page.chat.hud.tps.text())
    assert tps is not None and float(tps.group(1)) > 0
    assert re.match(r"\d+%", window.chat_page.chat.hud.acceptance.text())
    assert "FastMTP d2t" in window.chat_page.chat.hud.mode.text()
    assert window.chat_page.chat.send_button.isEnabled() and not window.chat_page.chat.stop_button.isEnabled()
    # the draft-acceptance overlay: tokens that came from accepted drafts are tinted, and only while on
    assert "draft" in reply["provenance"]
    assert _tinted_characters(window) > 0
    window.chat_page.chat.show_drafts.setChecked(False)
    assert _tinted_characters(window) == 0
    window.chat_page.chat.show_drafts.setChecked(True)


def _tinted_characters(win: MainWindow) -> int:
    count = 0
    block = win.chat_page.chat.transcript.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fragment = it.fragment()
            if fragment.charFormat().background().color() == DRAFT_TINT:
                count += fragment.length()
            it += 1
        block = block.next()
    return count


def test_stop_cancels_mid_reply_and_keeps_the_partial_text(qtbot: QtBot, window: MainWindow,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(window.chat_page, "options", ChatOptions(max_tokens=1500))
    stop_after = 5
    tokens: list[dict[str, Any]] = []

    def press_stop(event: dict[str, Any]) -> None:
        tokens.append(event)
        if len(tokens) == stop_after:
            qtbot.mouseClick(window.chat_page.chat.stop_button, Qt.MouseButton.LeftButton)

    window.bridge.token.connect(press_stop)
    done: list[dict[str, Any]] = []
    window.bridge.done.connect(done.append)
    window.chat_page.chat.input.setPlainText("Tell me a long story.")
    qtbot.keyClick(window.chat_page.chat.input, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: bool(done), timeout=WAIT_MS)
    assert done[0]["stop_reason"] == "cancelled"
    assert stop_after <= len(done[0]["tokens"]) < 1500
    partial = window.chat_page.chat.entries[-1].text
    assert partial.strip() and _squash(partial) in _squash(window.chat_page.chat.transcript_text())
    assert "cancelled" in window.chat_page.chat.transcript_text()
    assert not window.chat_page.banner.isVisible()


def test_an_engine_error_is_shown_in_words(qtbot: QtBot, window: MainWindow, demo: DemoModel) -> None:
    window.chat_page.load(EngineConfig(demo.target, mode="sidecar", draft=demo.target, n_ctx=2048))
    qtbot.waitUntil(window.chat_page.banner.isVisible, timeout=WAIT_MS)
    shown = window.chat_page.banner.text.text()
    assert "sidecar" in shown.lower() and len(shown.split()) > 4
    assert not window.chat_page.ready
    window.loading.reload()  # the selector's own mode loads again and the banner goes away
    qtbot.waitUntil(lambda: window.chat_page.ready, timeout=WAIT_MS)
    assert not window.chat_page.banner.isVisible()


def test_a_sent_chat_is_saved_with_its_stats_and_reopens_after_a_restart(
        qtbot: QtBot, window: MainWindow, history_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    qtbot.mouseClick(window.chat_page.sidebar.new_button, Qt.MouseButton.LeftButton)  # earlier tests left a chat open
    assert window.chat_page.conversation_id is None and window.chat_page.chat.entries == []
    assert not window.chat_page.chat.transcript_text().strip()
    text = "Please tell me about the lighthouse keeper and her cat."
    _tokens, done = _send(qtbot, window, text)
    qtbot.waitUntil(lambda: bool(done), timeout=WAIT_MS)
    reply = done[0]
    conv_id = window.chat_page.conversation_id
    assert conv_id is not None
    assert window.chat_page.sidebar.conversation_ids()[0] == conv_id
    title = window.chat_page.sidebar.list.item(0).text()
    assert title.startswith("Please tell me about the lighthouse") and len(title) <= 40
    stored = window.history.messages(conv_id)
    assert [(m.role, m.content) for m in stored[:1]] == [("user", text)]
    assert [m.role for m in stored] == ["user", "assistant"]
    assert stored[1].content.strip() == reply["text"].strip()
    assert stored[1].stats == {**reply["stats"], "stop_reason": reply["stop_reason"]}

    # an app restart: a new window on the same history file lists the chat and shows it when picked
    restarted = MainWindow(history=HistoryStore(history_path))
    qtbot.addWidget(restarted)
    try:
        assert restarted.chat_page.sidebar.conversation_ids()[0] == conv_id
        assert restarted.chat_page.sidebar.list.item(0).text() == title
        assert restarted.chat_page.chat.entries == []
        restarted.chat_page.sidebar.list.setCurrentRow(0)
        assert restarted.chat_page.conversation_id == conv_id
        assert [e.role for e in restarted.chat_page.chat.entries] == ["user", "assistant"]
        shown = _squash(restarted.chat_page.chat.transcript_text())
        assert _squash(reply["text"]) in shown and _squash(text) in shown
        assert restarted.chat_page.chat.entries[-1].footer == window.chat_page.chat.entries[-1].footer
        assert "tok/s" in shown and STOP_WORDS.get(str(reply["stop_reason"]), "") in shown
        # the next message goes on with that conversation: the engine gets all of it
        sent: list[list[Message]] = []
        monkeypatch.setattr(restarted.chat_page, "ready", True)
        monkeypatch.setattr(restarted.bridge, "generate", lambda messages, *_rest: sent.append(messages))
        restarted.chat_page.send("And what is the cat called?")
        assert [(m.role, m.content) for m in sent[0][1:]] == [
            ("user", text), ("assistant", stored[1].content), ("user", "And what is the cat called?")]
        assert sent[0][0].role == "system"
        # the next reply's row is there from its start, saved as it streams, not complete yet
        assert [(m.role, m.complete) for m in window.history.messages(conv_id)] == [
            ("user", True), ("assistant", True), ("user", True), ("assistant", False)]
    finally:
        restarted.history.close()


def test_search_filters_the_conversations_and_new_chat_starts_empty(qtbot: QtBot, tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "history.sqlite3")
    lighthouse = store.create_conversation("Lighthouse keepers")
    store.add_message(lighthouse, "user", "Who keeps the light?")
    store.add_message(lighthouse, "assistant", "The keeper does.",
                      {"generated": 4, "decode_tps": 12.5, "acceptance": 0.5, "stop_reason": "stop"})
    bread = store.create_conversation("Sourdough")
    store.add_message(bread, "user", "How do I feed a starter?")
    win = MainWindow(history=store)
    qtbot.addWidget(win)
    assert win.chat_page.sidebar.conversation_ids() == [bread, lighthouse]  # newest first
    qtbot.keyClicks(win.chat_page.sidebar.search, "starter")  # message text matches too
    assert win.chat_page.sidebar.conversation_ids() == [bread]
    win.chat_page.sidebar.search.setText("LIGHTHOUSE")
    assert win.chat_page.sidebar.conversation_ids() == [lighthouse]
    win.chat_page.sidebar.search.setText("no such thing")
    assert win.chat_page.sidebar.conversation_ids() == []
    win.chat_page.sidebar.search.clear()
    assert win.chat_page.sidebar.conversation_ids() == [bread, lighthouse]

    win.chat_page.sidebar.list.setCurrentRow(1)
    assert win.chat_page.conversation_id == lighthouse
    shown = win.chat_page.chat.transcript_text()
    assert "The keeper does." in shown and "12.5 tok/s" in shown and "acceptance 50%" in shown
    qtbot.mouseClick(win.chat_page.sidebar.new_button, Qt.MouseButton.LeftButton)
    assert win.chat_page.conversation_id is None and win.chat_page.chat.entries == [] and \
        not win.chat_page.chat.transcript_text().strip()
    assert win.chat_page.sidebar.list.currentRow() == -1
    assert win.chat_page.sidebar.conversation_ids() == [bread, lighthouse]  # nothing saved until a message is sent
    store.close()


def test_the_bare_command_opens_the_desktop_app(monkeypatch: pytest.MonkeyPatch) -> None:
    import app.gui.main
    from app import cli

    monkeypatch.setattr(app.gui.main, "run", lambda: 7)
    assert cli.main([]) == 7


def test_pages_are_added_to_the_switcher_and_shown_when_picked(qtbot: QtBot, tmp_path: Path) -> None:
    from PySide6.QtWidgets import QLabel

    store = HistoryStore(tmp_path / "history.sqlite3")
    win = MainWindow(history=store)
    qtbot.addWidget(win)
    assert win.page_names()[0] == "Chat" and win.current_page() == "Chat"
    models = QLabel("models")
    win.add_page("Models", models)
    win.add_page("Backend", QLabel("backend"))
    assert win.page_names()[:3] == ["Chat", "Models", "Backend"]
    win.nav.setCurrentRow(1)
    assert win.pages.currentWidget() is models and win.current_page() == "Models"
    replacement = QLabel("models, again")
    win.add_page("Models", replacement)  # same name: replaced in place
    assert win.page_names().count("Models") == 1
    win.show_page("Models")
    assert win.pages.currentWidget() is replacement
    win.show_page("Chat")
    assert win.pages.currentWidget().isAncestorOf(win.chat_page.chat)
    store.close()


def test_thinking_switch_regenerate_and_edit_resend_against_the_engine(
        qtbot: QtBot, window: MainWindow) -> None:
    qtbot.mouseClick(window.chat_page.sidebar.new_button, Qt.MouseButton.LeftButton)
    window.chat_page.thinking_box.setChecked(False)  # per chat: sent to the engine, saved with the chat
    assert window.chat_page.options.thinking is False
    _tokens, done = _send(qtbot, window, "First question about lighthouses")
    qtbot.waitUntil(lambda: bool(done), timeout=WAIT_MS)
    conv_id = window.chat_page.conversation_id
    assert conv_id is not None and window.history.get(conv_id).settings["thinking"] is False
    hud = window.chat_page.chat.hud
    assert re.match(r"\d+ tok/s", hud.prompt_tps.text()) and re.match(r"\d+ ms", hud.first_token.text())
    assert len(hud.sparkline.values) > 1
    first_reply = window.history.messages(conv_id)[-1]
    assert first_reply.complete and first_reply.content.strip() == done[0]["text"].strip()

    # regenerate: the last reply is replaced, in the view and in the history
    window.chat_page.chat.activate_link(QUrl(f"regenerate:{len(window.chat_page.chat.entries) - 1}"))
    qtbot.waitUntil(lambda: len(done) == 2, timeout=WAIT_MS)
    stored = window.history.messages(conv_id)
    assert [m.role for m in stored] == ["user", "assistant"] and stored[1].created > first_reply.created
    assert [e.role for e in window.chat_page.chat.entries] == ["user", "assistant"]

    # edit-and-resend: the edited message and a new reply are shown; the old ones stay a version (issue 36 item 9)
    window.chat_page.chat.activate_link(QUrl("edit:0"))
    assert window.chat_page.chat.input.toPlainText() == "First question about lighthouses"
    window.chat_page.chat.input.setPlainText("A better question about ships")
    qtbot.keyClick(window.chat_page.chat.input, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: len(done) == 3, timeout=WAIT_MS)
    stored = window.history.messages(conv_id)
    assert [(m.role, m.content) for m in stored][:1] == [("user", "A better question about ships")]
    assert [m.role for m in stored] == ["user", "assistant"] and stored[1].complete
    assert "First question" not in window.chat_page.chat.transcript_text()
    assert [v.content for v in window.history.versions(stored[0].id)] == ["First question about lighthouses",
                                                                          "A better question about ships"]

    # reopening the chat restores its thinking switch
    window.chat_page.thinking_box.setChecked(True)
    window.chat_page.open_conversation(conv_id)
    assert window.chat_page.thinking_box.isChecked() is True
    window.chat_page.thinking_box.setChecked(False)
    window.chat_page.open_conversation(conv_id)
    assert window.chat_page.thinking_box.isChecked() is False and window.chat_page.options.thinking is False
    window.chat_page.thinking_box.setChecked(True)


def test_an_engine_killed_mid_reply_keeps_the_streamed_text_and_restarts(
        qtbot: QtBot, window: MainWindow, monkeypatch: pytest.MonkeyPatch) -> None:
    import signal

    monkeypatch.setattr(window.chat_page, "options", ChatOptions(max_tokens=1500))
    qtbot.mouseClick(window.chat_page.sidebar.new_button, Qt.MouseButton.LeftButton)
    tokens: list[dict[str, Any]] = []

    def kill_after_some(event: dict[str, Any]) -> None:
        tokens.append(event)
        if len(tokens) == 40:  # past the first partial save (every 32 tokens)
            pid = window.bridge._client.pid
            assert pid is not None
            os.kill(pid, signal.SIGKILL)

    window.bridge.token.connect(kill_after_some)
    window.chat_page.chat.input.setPlainText("Tell me a very long story.")
    qtbot.keyClick(window.chat_page.chat.input, Qt.Key.Key_Return)
    qtbot.waitUntil(window.chat_page.banner.isVisible, timeout=WAIT_MS)
    window.bridge.token.disconnect(kill_after_some)
    assert "SIGKILL" in window.chat_page.banner.text.text() and window.chat_page.banner.restart_button.isVisible()
    partial = window.chat_page.chat.entries[-1].text
    assert len(tokens) >= 40 and partial.strip()
    assert _squash(partial)[:40] in _squash(window.chat_page.chat.transcript_text())
    conv_id = window.chat_page.conversation_id
    assert conv_id is not None
    saved = window.history.messages(conv_id)[-1]
    assert saved.role == "assistant" and not saved.complete and saved.content == partial
    qtbot.mouseClick(window.chat_page.banner.restart_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: window.chat_page.ready, timeout=WAIT_MS)
    assert not window.chat_page.banner.isVisible()
    _tokens, done = _send(qtbot, window, "Are you back?")
    qtbot.waitUntil(lambda: bool(done), timeout=WAIT_MS)
    assert done[0]["text"].strip()


def test_drafting_banner_explains_missing_drafts_and_break_even(demo: DemoModel) -> None:
    from app.engine.breakeven import break_even_acceptance, drafting_warning

    sidecar = EngineConfig(demo.target, mode="sidecar", draft=demo.sidecar_d2t, draft_depth=3)
    assert drafting_warning(sidecar, {"generated": 40, "drafted": 0}) is not None
    assert "no tokens were drafted" in str(drafting_warning(sidecar, {"generated": 40, "drafted": 0}))
    assert drafting_warning(EngineConfig(demo.target, mode="off"), {"generated": 40, "drafted": 0}) is None
    even = break_even_acceptance(0.5, 3)  # drafting takes half the time: a pass must yield 2 tokens
    assert even is not None and abs((1 - even ** 4) / (1 - even) - 2.0) < 1e-6
    slow = {"generated": 64, "drafted": 60, "acceptance": 0.2, "draft_time_share": 0.5, "tokens_per_pass": 1.2}
    warning = drafting_warning(sidecar, slow)
    assert warning is not None and "below break-even" in warning and "20%" in warning
    fine = {**slow, "acceptance": 0.9, "tokens_per_pass": 3.4}
    assert drafting_warning(sidecar, fine) is None


def test_settings_page_saves_the_file_and_switches_the_theme(qtbot: QtBot, tmp_path: Path) -> None:
    from app.gui.shell.palette import DARK, LIGHT
    from app.settings import app_settings

    store = HistoryStore(tmp_path / "history.sqlite3")
    win = MainWindow(history=store)
    qtbot.addWidget(win)
    assert win.page_names()[-1] == "Settings"
    win.show_page("Settings")
    page = win.settings_page
    page.context_size.setValue(8192)
    page.draft_depth.setValue(5)
    page.theme.setCurrentText("dark")
    qtbot.mouseClick(page.save_button, Qt.MouseButton.LeftButton)
    saved = app_settings.load()
    assert (saved.context_size, saved.draft_depth, saved.theme) == (8192, 5, "dark")
    assert win.chat_page.chat.colors is DARK
    page.theme.setCurrentText("light")
    page.save()
    assert win.chat_page.chat.colors is LIGHT
    app_settings.save(app_settings.Settings())
    store.close()


def test_settings_page_forgets_the_learned_depths(qtbot: QtBot, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The button next to "Adaptive depth" empties the depth memory, as `depth-memory forget` does."""
    from app.core.paths import depth_memory_dir
    from app.engine.config import EngineConfig
    from app.engine.depth_memory import DepthMemory, key_for
    from app.gui.settings.settings_page import SettingsPage
    from app.settings.app_settings import Settings

    # a data folder of its own: the suite's earlier replies leave depth-memory records in the session's
    monkeypatch.setenv("FASTMTP_DATA_DIR", str(tmp_path / "data"))
    target = tmp_path / "target.gguf"
    target.write_bytes(b"t")
    memory = DepthMemory(depth_memory_dir())
    memory.remember(key_for(EngineConfig(target, adaptive=True), "backend", 2), {"version": 1})
    page = SettingsPage(Settings())
    qtbot.addWidget(page)
    qtbot.mouseClick(page.forget_depths, Qt.MouseButton.LeftButton)
    assert memory.entries() == [] and "1 model setup" in page.note.text()
    qtbot.mouseClick(page.forget_depths, Qt.MouseButton.LeftButton)
    assert "nothing remembered" in page.note.text()


def test_export_and_import_chats_from_the_window(qtbot: QtBot, tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "history.sqlite3")
    conv = store.create_conversation("Tides")
    store.add_message(conv, "user", "Why are there two tides a day?")
    store.add_message(conv, "assistant", "The **Moon** and the Earth's rotation.", {"decode_tps": 10.0})
    win = MainWindow(history=store)
    qtbot.addWidget(win)
    win.chat_page.open_conversation(conv)
    assert win.chat_page.transfer.export_chats(tmp_path / "tides.md", "md") == 1
    assert "# Tides" in (tmp_path / "tides.md").read_text()
    assert win.chat_page.transfer.export_chats(tmp_path / "all.json", "json", current=False) == 1
    created = win.chat_page.transfer.import_chats(tmp_path / "all.json")
    assert len(created) == 1 and win.chat_page.sidebar.conversation_ids()[0] == created[0]
    assert [m.content for m in store.messages(created[0])] == [m.content for m in store.messages(conv)]
    (tmp_path / "bad.json").write_text("{}")
    assert win.chat_page.transfer.import_chats(tmp_path / "bad.json") == [] and win.chat_page.banner.isVisibleTo(win)
    store.close()


def test_hud_shows_the_depth_adaptive_chose_for_the_latest_round(qtbot: QtBot, demo: DemoModel) -> None:
    from app.engine.stats import ReplyStats
    from app.gui.chat.hud import Hud

    hud = Hud()
    qtbot.addWidget(hud)
    hud.set_config(EngineConfig(demo.target, mode="sidecar", draft=demo.sidecar_d2t, draft_depth=8, adaptive=True))
    assert hud.one_line(hud.mode) == "FastMTP d2t · depth ≤8 adaptive"
    stats = ReplyStats()
    stats.depth = 5
    hud.show_stats(stats.to_dict())
    assert hud.one_line(hud.mode) == "FastMTP d2t · depth 5 of ≤8 adaptive"
    hud.set_config(EngineConfig(demo.target, mode="sidecar", draft=demo.sidecar_d2t, draft_depth=3))
    hud.show_stats(stats.to_dict())  # a fixed depth is the depth: the round's figure changes nothing
    assert hud.one_line(hud.mode) == "FastMTP d2t · depth 3"
