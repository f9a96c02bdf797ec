"""The Settings page's context (issue 34): "Auto" by default with its figure and arithmetic for the chat's model,
your own value checked as you type, and a value that does not fit warned about in the window before the load.

Real widgets offscreen; real GGUF files (the built-in demo; a 27B-shaped header made sparse to a terabyte, which
fits no machine).
"""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

from pathlib import Path

import numpy as np
import pytest
from gguf import LlamaFileType
from pytestqt.qtbot import QtBot

from app.chats.history import HistoryStore
from app.engine.config import EngineConfig
from app.gguftools.demo_model import DemoModel
from app.gguftools.qwen35 import ARCH, QWEN35_27B, hparams_kv
from app.gguftools.writer import plan_array, write_gguf
from app.gui.models.model_selector import DEMO_LABEL
from app.gui.settings.settings_page import AUTO_TEXT, SettingsPage
from app.gui.shell.status_text import bad_colour
from app.models.context_size import largest_sidecar
from app.settings import app_settings
from app.settings.app_settings import Settings
from tests.helpers.demo_copies import DemoCopies
from tests.helpers.gui_windows import WAIT_MS, open_window
from tests.helpers.module_folders import ModuleFolders


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders, default_demo: DemoCopies) -> DemoModel:
    return default_demo.copy_to(module_tmp.mktemp("ctx-gui-demo"))


@pytest.fixture(scope="module")
def huge(module_tmp: ModuleFolders) -> Path:
    path = write_gguf(module_tmp.mktemp("ctx-gui") / "huge.gguf", ARCH, hparams_kv(QWEN35_27B,
                      LlamaFileType.MOSTLY_Q4_K_M), [plan_array("pad", np.zeros(16, np.float32))])
    os.truncate(path, 1 << 40)
    return path


def _page(qtbot: QtBot, settings: Settings | None = None) -> SettingsPage:
    page = SettingsPage(settings or Settings())
    qtbot.addWidget(page)
    return page


def test_the_context_is_auto_with_its_figure_and_arithmetic_for_the_chats_model(qtbot: QtBot,
                                                                                  demo: DemoModel) -> None:
    page = _page(qtbot)
    assert page.context_size.value() == 0 and page.context_size.text() == AUTO_TEXT
    assert "worked out when a model on this machine is chosen" in page.context_note.text()
    page.set_context_model((demo.target, demo.sidecar_d2t, 0), DEMO_LABEL)
    qtbot.waitUntil(lambda: page.context_plan is not None, timeout=WAIT_MS)
    fit = page.context_fit()
    assert fit is not None and fit.auto and fit.fits and fit.tokens <= 8192  # the demo stays small
    assert page.context_note.text() == f"Auto for {DEMO_LABEL}: {fit.summary}."
    assert "fits" in fit.summary and "MiB sidecar" in fit.summary
    assert page.context_note.toolTip() == "\n".join(fit.formula) and "KV per token" in page.context_note.toolTip()

    page.context_size.setValue(4096)  # your own value: the same arithmetic, as you type
    assert page.context_note.text().startswith(f"Yours for {DEMO_LABEL}: 4,096 tokens: ")
    assert f"Auto would use {fit.tokens:,}" in page.context_note.text()
    assert page.current().context_size == 4096
    page.context_size.setValue(0)
    assert page.current().context_size == 0 and page.context_note.text().startswith("Auto for")


def test_your_value_that_does_not_fit_is_said_in_red_before_anything_loads(qtbot: QtBot, huge: Path) -> None:
    page = _page(qtbot, Settings(context_size=8192))
    assert page.context_size.value() == 8192
    page.set_context_model((huge, None, 0), "huge.gguf")
    qtbot.waitUntil(lambda: page.context_plan is not None, timeout=WAIT_MS)
    text = page.context_note.text()
    assert text.startswith("The context of 8,192 tokens you chose may not fit this machine: 8,192 tokens: 1024 GiB "
                           "model"), text
    assert bad_colour(page).name() in page.context_note.styleSheet()
    page.set_context_model(None)  # a remote server: nothing to work out here
    assert page.context_fit() is None and "Auto: the largest context" in page.context_note.text()


def test_a_file_that_cannot_be_sized_is_said_in_words(qtbot: QtBot, tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_text("not a model")
    page = _page(qtbot)
    page.set_context_model((bad, None, 0), "bad.gguf")
    qtbot.waitUntil(lambda: "cannot be worked out" in page.context_note.text(), timeout=WAIT_MS)
    assert page.context_fit() is None


def test_the_window_gives_the_page_the_chats_model_and_warns_before_a_load_that_does_not_fit(
        qtbot: QtBot, store: HistoryStore, demo: DemoModel, huge: Path) -> None:
    with open_window(qtbot, store, settings=Settings(context_size=8192)) as win:
        win.model_selector.demo = demo  # the built-in demo, written (what ``use_demo`` keeps)
        model = win.model_selector.context_model()
        assert model == (demo.target, largest_sidecar(demo.sidecar_d2t, demo.sidecar_full), 0)  # a CPU machine
        win.apply_settings(win.settings)  # what a save does: the page works the context out for the chat's model
        page = win.settings_page
        qtbot.waitUntil(lambda: page.context_plan is not None, timeout=WAIT_MS)
        assert page.context_note.text().startswith(f"Yours for {DEMO_LABEL}: 8,192 tokens: ")

        config = win.model_selector.config_for("sidecar-d2t")
        assert config is not None and config.n_ctx == 8192  # yours, as you set it
        assert win.loading.warn_context(config) is None and not win.chat_page.banner.isVisibleTo(win)

        warning = win.loading.warn_context(EngineConfig(huge, n_ctx=8192))  # one that does not fit: said, in the window
        assert warning is not None and "8,192 tokens you chose may not fit" in warning
        assert win.chat_page.banner.isVisibleTo(win) and "1024 GiB model" in win.chat_page.banner.text.text()
        assert "Settings page" in win.chat_page.banner.text.text()

        win.settings = Settings()  # Auto: the load's context is Auto's figure for the model
        auto = win.model_selector.config_for("off")
        fit = page.context_plan.fit() if page.context_plan is not None else None
        assert auto is not None and fit is not None and auto.n_ctx == fit.tokens
        assert app_settings.engine_fields(win.settings)["n_ctx"] == 0  # resolved only where the config is made
