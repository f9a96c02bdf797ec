"""Issue 13, defects 7 and 8: a fresh seed per reply (regenerate gives another reply) with a fixed seed as an
option; and the Models page's fit advice sized by the Settings page's context, the one the engine loads with.
"""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from app.chats.history import HistoryStore
from app.gguftools.demo_model import DemoModel
from app.gui.chat.chat_settings_dialog import ChatSettingsDialog
from app.gui.main import MainWindow
from app.gui.models.models_page import ModelsPage
from app.models.fit import fit
from app.settings.app_settings import Settings
from app.settings.chat_settings import ChatSettings
from tests.helpers.demo_copies import DemoCopies
from tests.helpers.module_folders import ModuleFolders

WAIT_MS = 60_000
# really random on the demo model (as test_engine's HOT); short replies keep the test quick
HOT = ChatSettings(thinking=False, temperature=8.0, top_k=8, top_p=1.0, min_p=0.0, max_tokens=24)


# ----------------------------------------------------------------------------- the seed mode, Qt-free


def test_random_mode_draws_a_fresh_seed_per_reply_and_fixed_mode_keeps_one() -> None:
    warm = ChatSettings(temperature=0.8)
    assert warm.seed_mode == "random"  # the default
    seeds = {warm.reply_seed() for _ in range(5)}
    assert len(seeds) == 5 and all(0 <= s < 2**31 for s in seeds)
    assert warm.options(seed=123).sampling.seed == 123
    fixed = replace(warm, seed_mode="fixed", seed=42)
    assert {fixed.reply_seed() for _ in range(5)} == {42}
    greedy = replace(warm, temperature=0.0)  # temperature 0 is deterministic: no draw
    assert {greedy.reply_seed() for _ in range(3)} == {greedy.seed}


def test_the_seed_mode_survives_the_history_and_old_plain_seeds_are_read() -> None:
    fixed = ChatSettings(temperature=0.8, seed_mode="fixed", seed=42)
    assert ChatSettings.from_conversation(fixed.system_prompt, json.loads(json.dumps(fixed.to_dict()))) == fixed
    prompt = ChatSettings().system_prompt
    # before the seed mode: the old hard-coded 1 is the random default, any other seed was the user's choice
    old_default = ChatSettings.from_conversation(prompt, {"temperature": 0.8, "seed": 1})
    assert (old_default.seed_mode, old_default.seed) == ("random", 1)
    old_chosen = ChatSettings.from_conversation(prompt, {"temperature": 0.8, "seed": 7})
    assert (old_chosen.seed_mode, old_chosen.seed) == ("fixed", 7)
    damaged = ChatSettings.from_conversation(prompt, {"seed_mode": "sometimes", "seed": -3})
    assert (damaged.seed_mode, damaged.seed) == ("random", 1)


def test_the_dialog_round_trips_the_seed_mode(qtbot: QtBot) -> None:
    fixed = ChatSettings(temperature=0.8, seed_mode="fixed", seed=4242)
    dialog = ChatSettingsDialog(fixed)
    qtbot.addWidget(dialog)
    assert dialog.seed_mode.currentData() == "fixed" and dialog.seed.isEnabled() and dialog.seed.value() == 4242
    assert dialog.result_settings() == fixed
    dialog.seed_mode.setCurrentIndex(dialog.seed_mode.findData("random"))
    assert not dialog.seed.isEnabled()
    assert dialog.result_settings() == replace(fixed, seed_mode="random")

    dialog = ChatSettingsDialog(ChatSettings())
    qtbot.addWidget(dialog)
    assert dialog.seed_mode.currentData() == "random" and not dialog.seed.isEnabled()
    dialog.seed_mode.setCurrentIndex(dialog.seed_mode.findData("fixed"))
    dialog.seed.setValue(99)
    assert dialog.result_settings() == replace(ChatSettings(), seed_mode="fixed", seed=99)


# ----------------------------------------------------------------------------- the fit advice's context


def test_the_fit_advice_uses_the_settings_context_and_follows_it(qtbot: QtBot, tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "history.sqlite3")
    win = MainWindow(history=store, settings=Settings(context_size=4096))
    qtbot.addWidget(win)
    page = win.models_page
    assert isinstance(page, ModelsPage)
    assert page.context.value() == 4096 and page.context.text() == "4096 tokens" and page.context.isReadOnly()
    assert page.report is not None and page.report.context == 4096
    assert "KV cache for 4096 tokens" in page.fit_note.text()
    page.vram.setValue(24)
    win.apply_settings(Settings(context_size=65_536))  # what the Settings page's save does
    assert page.context.text() == "65536 tokens"
    assert page.report is not None and page.report.context == 65_536
    assert page.report == fit(24 * (1 << 30), 65_536, page.report.vram_source, page.catalog)
    assert "KV cache for 65536 tokens" in page.fit_note.text()
    store.close()


# ----------------------------------------------------------------------------- regenerate on the real engine


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders, default_demo: DemoCopies) -> DemoModel:
    return default_demo.copy_to(module_tmp.mktemp("seed-demo"))


@pytest.fixture(scope="module")
def window(qapp: QApplication, request: pytest.FixtureRequest, patched_backend: object, demo: DemoModel,
           module_tmp: ModuleFolders) -> Iterator[MainWindow]:
    win = MainWindow(history=HistoryStore(module_tmp.mktemp("seed-history") / "history.sqlite3"))
    win.model_selector.restore_mode("sidecar-d2t")  # one mode for every reply (Auto, the default, takes turns)
    win.show()
    win.loading.use_demo(demo)
    QtBot(request).waitUntil(lambda: win.chat_page.ready, timeout=WAIT_MS)
    yield win
    win.close()
    win.history.close()


def _replies(qtbot: QtBot, win: MainWindow, chat: ChatSettings, regenerates: int) -> list[tuple[str, Any]]:
    """Send in a new chat with these settings, regenerate; each reply's text and the seed its stats keep."""
    win.chat_page.new_chat()
    win.chat_page.set_chat_settings(chat)
    done: list[dict[str, Any]] = []
    win.bridge.done.connect(done.append)
    try:
        win.chat_page.send("Tell me about lighthouses")
        qtbot.waitUntil(lambda: len(done) == 1, timeout=WAIT_MS)
        replies = []
        for n in range(regenerates + 1):
            conversation = win.chat_page.conversation_id
            assert conversation is not None
            last = win.history.messages(conversation)[-1]
            assert last.role == "assistant" and last.complete and last.stats is not None and last.content.strip()
            replies.append((last.content, last.stats["seed"]))
            if n < regenerates:
                win.chat_page.regenerate()
                qtbot.waitUntil(lambda n=n: len(done) == n + 2, timeout=WAIT_MS)  # type: ignore[misc]
        return replies
    finally:
        win.bridge.done.disconnect(done.append)


def test_regenerate_draws_a_new_seed_and_a_fixed_seed_repeats_the_reply(qtbot: QtBot, window: MainWindow) -> None:
    warm = _replies(qtbot, window, replace(HOT, temperature=0.8), regenerates=2)
    assert len({seed for _text, seed in warm}) == 3  # every regenerate drew its own seed, kept with its stats

    hot = _replies(qtbot, window, HOT, regenerates=2)
    assert len({seed for _text, seed in hot}) == 3
    assert len({text for text, _seed in hot}) == 3  # the sampler really samples: other seeds, other replies

    fixed = _replies(qtbot, window, replace(HOT, seed_mode="fixed", seed=hot[0][1]), regenerates=2)
    assert {seed for _text, seed in fixed} == {hot[0][1]}
    assert {text for text, _seed in fixed} == {hot[0][0]}  # the kept seed reproduces the reply
