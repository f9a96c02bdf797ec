"""The Models page asks before a big download, with the signed manifest's real sizes: "Download Q4_K_P: about …
into FOLDER (… free there). Download now?". No: the model file is never requested, nothing lands in the models
folder and the page says nothing was downloaded. Yes: the download goes on and installs.

The real fetcher and trust chain against a signed release on 127.0.0.1, as in ``test_gui_download_wording.py``; the
threshold is lowered so the small test files count as big, and the message box's answer comes from a patched
``QMessageBox.exec`` (the page's own question and decision code run).
"""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox
from pytestqt.qtbot import QtBot

from app.core.units import format_bytes
from app.gui.models.models_page import ModelsPage
from app.models.installed import default_destination
from app.release import download
from app.release.catalog import load_catalog
from app.release.download import DownloadDeclined
from tests.helpers.gui_windows import WAIT_MS, mirrored_models_page
from tests.helpers.release_server import ReleaseServer
from tests.helpers.signed_release_server import serve_signed_release

CATALOG = load_catalog()
MODEL = CATALOG.quant("Q4_K_P").file
SIDECAR = CATALOG.sidecar.file
PAYLOAD = {MODEL: os.urandom(150_000), SIDECAR: os.urandom(30_000),
           CATALOG.integrity.patch: b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n"}
PAYLOAD_BYTES = sum(len(data) for data in PAYLOAD.values())


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ReleaseServer]:
    monkeypatch.setattr(download, "BIG_DOWNLOAD_BYTES", 1024)  # the test release is a big download
    yield from serve_signed_release(tmp_path, monkeypatch, PAYLOAD)


@pytest.fixture
def page(qtbot: QtBot, server: ReleaseServer) -> Iterator[ModelsPage]:
    yield from mirrored_models_page(qtbot, server)


def answer_with(monkeypatch: pytest.MonkeyPatch, button: QMessageBox.StandardButton) -> list[str]:
    """Answer the page's message box with ``button``; returns the questions it asked."""
    asked: list[str] = []

    def exec_(box: QMessageBox) -> int:
        asked.append(box.text())
        return int(button)

    monkeypatch.setattr(QMessageBox, "exec", exec_)
    return asked


def download_and_wait(qtbot: QtBot, page: ModelsPage) -> None:
    qtbot.mouseClick(page.download_buttons["Q4_K_P"], Qt.MouseButton.LeftButton)
    assert page.downloading
    qtbot.waitUntil(lambda: not page.downloading, timeout=WAIT_MS)


def models_folder_files() -> list[Path]:
    dest = default_destination(CATALOG.repo)
    return sorted(p for p in dest.rglob("*") if p.is_file()) if dest.exists() else []


def test_declining_the_big_download_fetches_nothing(qtbot: QtBot, page: ModelsPage, server: ReleaseServer,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    asked = answer_with(monkeypatch, QMessageBox.StandardButton.No)
    download_and_wait(qtbot, page)
    dest = default_destination(CATALOG.repo)
    assert len(asked) == 1
    assert asked[0].startswith(f"Download Q4_K_P: about {format_bytes(PAYLOAD_BYTES)} into {dest} (")
    assert asked[0].endswith(" free there). Download now?")
    assert server.gets(MODEL) == [] and server.gets(SIDECAR) == []  # the model file was never requested
    assert models_folder_files() == []
    assert isinstance(page.last_error, DownloadDeclined) and page.installed is None
    assert page.step_label.text().startswith("Nothing was downloaded")
    assert page.download_title.text() == "Q4_K_P: not downloaded"
    assert page.size_box is None and all(b.isEnabled() for b in page.download_buttons.values())


def test_accepting_the_big_download_installs_it(qtbot: QtBot, page: ModelsPage, server: ReleaseServer,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    asked = answer_with(monkeypatch, QMessageBox.StandardButton.Yes)
    download_and_wait(qtbot, page)
    assert len(asked) == 1
    assert page.last_error is None and page.installed is not None, page.step_label.text()
    assert (default_destination(CATALOG.repo) / MODEL).read_bytes() == PAYLOAD[MODEL]
    assert "Installed version 1" in page.step_label.text()


def test_a_small_download_is_not_asked_about(qtbot: QtBot, page: ModelsPage, server: ReleaseServer,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(download, "BIG_DOWNLOAD_BYTES", PAYLOAD_BYTES + 1)
    asked = answer_with(monkeypatch, QMessageBox.StandardButton.No)
    download_and_wait(qtbot, page)
    assert asked == [] and page.installed is not None, page.step_label.text()
