"""A finished download hands its result to the chat's model selector: the new model is listed and chosen from the
download's one folder, without the whole models folder being listed again (``list_installed`` is not called).

The real main window, the real Models page downloading a small signed release from 127.0.0.1; loading the chosen
model is recorded instead of run (no engine is needed).
"""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from app.chats.history import HistoryStore
from app.gui.models import model_selector
from app.models.installed import InstalledModel, default_destination
from app.release.catalog import load_catalog
from app.settings.app_settings import Settings
from tests.helpers.gui_windows import WAIT_MS, open_window
from tests.helpers.release_server import ReleaseServer
from tests.helpers.signed_release_server import serve_signed_release

CATALOG = load_catalog()
MODEL = CATALOG.quant("Q4_K_P").file
SIDECAR = CATALOG.sidecar.file
PAYLOAD = {MODEL: os.urandom(100_000), SIDECAR: os.urandom(20_000),
           CATALOG.integrity.patch: b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n"}


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ReleaseServer]:
    yield from serve_signed_release(tmp_path, monkeypatch, PAYLOAD)


def test_a_download_is_listed_without_a_rescan_and_the_chat_keeps_its_model(
        qtbot: QtBot, tmp_path: Path, server: ReleaseServer, monkeypatch: pytest.MonkeyPatch) -> None:
    store = HistoryStore(tmp_path / "history.sqlite3")
    with open_window(qtbot, store, settings=Settings(first_run_done=True)) as win:
        selector, page = win.model_selector, win.models_page
        qtbot.waitUntil(lambda: not selector.listing_models, timeout=WAIT_MS)  # the window's first listing
        rescans: list[tuple[Path, ...]] = []
        real = model_selector.list_installed

        def counted(*roots: Path) -> list[InstalledModel]:
            rescans.append(roots)
            return real(*roots)

        monkeypatch.setattr(model_selector, "list_installed", counted)
        loads: list[str] = []
        monkeypatch.setattr(win.loading, "reload", lambda: loads.append(selector.key()))

        page.mirror_url.setText(server.url(""))
        qtbot.mouseClick(page.add_mirror_button, Qt.MouseButton.LeftButton)
        qtbot.mouseClick(page.download_buttons["Q4_K_P"], Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: not page.downloading, timeout=WAIT_MS)
        assert page.installed is not None, page.step_label.text()
        target = default_destination(CATALOG.repo) / MODEL
        before = selector.key()
        qtbot.waitUntil(lambda: selector.model_box.findData(str(target)) >= 0 and not selector.listing_models,
                        timeout=WAIT_MS)

        model = selector.installed_model(str(target))
        assert model is not None and model.verified and model.quant == "Q4_K_P"
        assert model.sidecar_d2t == target.parent / SIDECAR and model.version == page.installed.version
        box = selector.model_box
        assert box.itemText(box.findData(str(target))).startswith("Q4_K_P · release 1 · ")
        assert rescans == []  # the download's folder alone was read
        assert loads == [] and selector.key() == before  # the chat keeps its model; "Chat with it now" picks it
        page.shutdown()
        qtbot.waitUntil(lambda: page.ops.idle, timeout=WAIT_MS)
