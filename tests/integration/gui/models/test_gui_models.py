"""The chat's model selector against the real core: installed releases of the tiny demo model in a models
folder, the real engine loading them, and a wrong sidecar reported in words."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from app.chats.history import HistoryStore
from app.gguftools.demo_model import DemoModel
from app.gui.main import MainWindow
from app.gui.models.model_selector import DEMO_LABEL
from app.models.context_size import largest_sidecar, resolve_context
from app.models.installed import InstalledModel, list_installed
from app.release.publish import keygen
from app.settings import app_settings
from app.settings.app_settings import Settings
from tests.helpers.demo_copies import DemoCopies
from tests.helpers.demo_release import FULL_SIDECAR, MODEL, SIDECAR, install_release
from tests.helpers.module_folders import ModuleFolders
from tests.helpers.waits import HANG_MS

WAIT_MS = HANG_MS  # a hang guard: every wait ends as soon as its condition holds (tests/helpers/waits.py)
BAD_REPO = "tests/mismatched-pair"


@pytest.fixture(scope="module")
def config_dir(module_tmp: ModuleFolders) -> Iterator[Path]:
    """This module's own config folder: trusted keys, verified versions and the saved settings stay here."""
    folder = module_tmp.mktemp("gui-models-config")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FASTMTP_CONFIG_DIR", str(folder))
        yield folder


@pytest.fixture(scope="module")
def models(module_tmp: ModuleFolders, default_demo: DemoCopies, config_dir: Path) -> Path:
    """Two installed releases: the demo model with its d2t and full sidecars, and one whose "sidecar" is the
    target model itself (signed and verified like any release: the files are what they claim, just wrong)."""
    demo: DemoModel = default_demo.copy_to(module_tmp.mktemp("gui-models-demo"))
    key = keygen(module_tmp.mktemp("gui-models-keys"))
    root = module_tmp.mktemp("gui-models")
    work = module_tmp.mktemp("gui-models-work")
    install_release(work / "good", key, root, {MODEL: demo.target, SIDECAR: demo.sidecar_d2t,
                                                FULL_SIDECAR: demo.sidecar_full})
    install_release(work / "bad", key, root, {MODEL: demo.target, SIDECAR: demo.target}, repo=BAD_REPO)
    return root


@pytest.fixture(scope="module")
def installed(models: Path) -> dict[str, InstalledModel]:
    listed = {"good" if m.repo != BAD_REPO else "bad": m for m in list_installed(models)}
    assert set(listed) == {"good", "bad"} and all(m.verified for m in listed.values())
    return listed


@pytest.fixture(scope="module")
def window(qapp: QApplication, request: pytest.FixtureRequest, patched_backend: object, models: Path,
           module_tmp: ModuleFolders) -> Iterator[MainWindow]:
    history = HistoryStore(module_tmp.mktemp("gui-models-history") / "history.sqlite3")
    win = MainWindow(history=history, settings=Settings(models_dir=str(models), first_run_done=True))
    win.show()
    QtBot(request).waitUntil(lambda: not win.model_selector.listing_models, timeout=WAIT_MS)
    yield win
    win.close()
    history.close()


def _choose(qtbot: QtBot, win: MainWindow, key: str) -> None:
    index = win.model_selector.model_box.findData(key)
    assert index >= 0
    win.model_selector.model_box.setCurrentIndex(index)
    qtbot.waitUntil(lambda: not win.bridge.busy, timeout=WAIT_MS)


def test_installed_models_are_offered_next_to_the_demo_model(window: MainWindow,
                                                            installed: dict[str, InstalledModel]) -> None:
    box = window.model_selector.model_box
    assert box.itemText(0) == DEMO_LABEL
    keys = [box.itemData(row) for row in range(box.count())]
    assert installed["good"].key in keys and installed["bad"].key in keys
    text = box.itemText(box.findData(installed["good"].key))
    assert "Q4_K_P" in text and "release 1" in text
    tip = box.itemData(box.findData(installed["good"].key), Qt.ItemDataRole.ToolTipRole)
    assert SIDECAR in tip and FULL_SIDECAR in tip


def test_an_installed_model_chats_with_fastmtp_drafting(qtbot: QtBot, window: MainWindow,
                                                        installed: dict[str, InstalledModel]) -> None:
    good = installed["good"]
    window.model_selector.mode_box.setCurrentIndex(window.model_selector.mode_box.findData("sidecar-d2t"))
    _choose(qtbot, window, good.key)
    assert window.chat_page.ready, window.chat_page.banner.text.text()
    config = window.bridge.config
    assert config is not None and config.target == good.target and config.draft == good.sidecar_d2t
    # Auto (the default): the largest context the model (with its largest sidecar) fits on this machine
    assert window.settings.context_size == 0
    auto = resolve_context(0, good.target, largest_sidecar(good.sidecar_d2t, good.sidecar_full), config.n_gpu_layers)
    assert config.mode == "sidecar" and config.n_ctx == auto and 2048 <= auto <= 8192  # the demo's trained 8,192
    assert config.draft_depth == window.settings.draft_depth
    assert all(window.model_selector.mode_enabled(key) for key in ("sidecar-d2t", "sidecar-full", "embedded", "off"))
    assert app_settings.load().chat_model == good.key  # remembered for the next start

    tokens: list[dict[str, Any]] = []
    done: list[dict[str, Any]] = []
    window.bridge.token.connect(tokens.append)
    window.bridge.done.connect(done.append)
    window.chat_page.chat.input.setPlainText("Hello, downloaded model!")
    qtbot.keyClick(window.chat_page.chat.input, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: bool(done), timeout=WAIT_MS)
    reply = done[0]
    assert reply["text"].strip() and [t["token"] for t in tokens] == reply["tokens"]
    assert "draft" in reply["provenance"]
    assert re.match(r"\d+%", window.chat_page.chat.hud.acceptance.text())
    assert "FastMTP d2t" in window.chat_page.chat.hud.mode.text()
    assert not window.chat_page.banner.isVisible()


def test_a_sidecar_that_does_not_fit_its_model_gives_a_banner_in_words(qtbot: QtBot, window: MainWindow,
                                                                       installed: dict[str, InstalledModel]) -> None:
    bad = installed["bad"]
    errors: list[dict[str, Any]] = []
    window.bridge.error.connect(errors.append)
    _choose(qtbot, window, bad.key)
    assert errors and errors[0]["error"] == "SidecarError"
    assert not window.chat_page.ready and window.chat_page.banner.isVisible()
    text = window.chat_page.banner.text.text()
    assert "is not an MTP draft sidecar" in text and errors[0]["advice"] in text
    assert not window.chat_page.banner.restart_button.isVisible()
    # this release has no full sidecar: that mode is greyed out and says why
    assert not window.model_selector.mode_enabled("sidecar-full")
    mode_box = window.model_selector.mode_box
    tip = mode_box.itemData(mode_box.findData("sidecar-full"), Qt.ItemDataRole.ToolTipRole)
    assert "no full MTP sidecar" in tip

    # "Chat with it now" from the Models page brings the good model back
    window.models_page.chat_requested.emit(str(installed["good"].folder), "Q4_K_P")
    qtbot.waitUntil(lambda: window.chat_page.ready, timeout=WAIT_MS)
    assert window.model_selector.model_box.currentData() == installed["good"].key and window.current_page() == "Chat"
    assert not window.chat_page.banner.isVisible()
