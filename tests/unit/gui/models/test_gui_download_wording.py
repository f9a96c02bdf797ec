"""The Models page speaks of the window, not the command line (issue 13, defect 9): a failed download says to
press Download again (never "run the same command"), a gated repository points at the page's own token box,
and the download panel names the quantization it fetches and its size. The page chooses its words by the
error's kind (``test_gui_error_wording.py`` rewords the core to prove it).

The real fetcher and trust chain against a signed release on 127.0.0.1 (``tests.helpers.release_server``), fresh data
and config folders and a file-backed keyring per test, as in ``test_gui_models_hostile.py``.
"""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from app.core.errors import DiskSpaceError, DownloadError
from app.gui.models import models_page
from app.gui.models.download_words import WINDOW_ADVICE, window_advice
from app.gui.models.models_page import ModelsPage
from app.release import download, fetcher
from app.release.catalog import load_catalog, user_endpoints
from tests.helpers.gui_windows import mirrored_models_page
from tests.helpers.release_server import Fault, ReleaseServer
from tests.helpers.signed_release_server import serve_signed_release

WAIT_MS = 60_000
CATALOG = load_catalog()
MODEL = CATALOG.quant("Q4_K_P").file
PAYLOAD = {MODEL: os.urandom(200_000), CATALOG.sidecar.file: os.urandom(30_000),
           CATALOG.integrity.patch: b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n"}
COMMAND_WORDS = ("command", "python -m", "--quant", "`")  # what only a terminal user can act on


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ReleaseServer]:
    yield from serve_signed_release(tmp_path, monkeypatch, PAYLOAD)


@pytest.fixture
def page(qtbot: QtBot, server: ReleaseServer) -> Iterator[ModelsPage]:
    """The page with this module's test server added as a mirror through its own mirror settings."""
    yield from mirrored_models_page(qtbot, server)


def _download(qtbot: QtBot, page: ModelsPage) -> None:
    qtbot.mouseClick(page.download_buttons["Q4_K_P"], Qt.MouseButton.LeftButton)
    assert page.downloading


def _no_command_words(text: str) -> None:
    for words in COMMAND_WORDS:
        assert words not in text.lower(), text


def test_the_panel_names_the_quantization_and_its_size(qtbot: QtBot, page: ModelsPage,
                                                       server: ReleaseServer) -> None:
    server.set_fault(MODEL, Fault(trickle_after=32_768, trickle_piece=1024, trickle_delay=0.05))
    assert page.download_title.text() == ""
    _download(qtbot, page)
    title = page.download_title.text()
    assert title == "Downloading Q4_K_P (~15.4 GiB) and its FastMTP sidecar (~861.2 MiB)…"
    assert page.download_title.isVisible()
    qtbot.waitUntil(lambda: MODEL in page._rows, timeout=WAIT_MS)
    assert page.download_title.text() == title  # the steps below it change; the heading stays
    qtbot.mouseClick(page.cancel_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not page.downloading, timeout=WAIT_MS)
    assert page.download_title.text() == "Q4_K_P: download cancelled"
    assert "Download again resumes" in page.step_label.text()


def test_a_gated_repository_points_at_the_token_box_not_a_command(qtbot: QtBot, page: ModelsPage,
                                                                  server: ReleaseServer,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(models_page, "endpoints_for", user_endpoints)  # the mirror alone: no retries at the hub
    server.set_fault(MODEL, Fault(status=403, times=20))
    _download(qtbot, page)
    qtbot.waitUntil(lambda: not page.downloading, timeout=WAIT_MS)
    assert isinstance(page.last_error, DownloadError)
    assert "token set" in page.last_error.advice  # the core still tells the terminal user the command
    text = page.step_label.text()
    assert text.startswith("Nothing was installed.") and "access denied (HTTP 403)" in text
    assert "Hub token box below" in text and "press Download again" in text
    _no_command_words(text)
    assert page.download_title.text() == "Q4_K_P: the download failed"


def test_a_full_disk_says_to_free_space_and_press_download_again(qtbot: QtBot, page: ModelsPage,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    real = shutil.disk_usage

    class Usage(NamedTuple):
        total: int
        used: int
        free: int

    def tiny(path: Any) -> Usage:
        usage = real(path)
        return Usage(usage.total, usage.used, 1000)  # room for the integrity files, not for the model

    monkeypatch.setattr(fetcher.shutil, "disk_usage", tiny)
    _download(qtbot, page)
    qtbot.waitUntil(lambda: not page.downloading, timeout=WAIT_MS)
    assert isinstance(page.last_error, DiskSpaceError)
    text = page.step_label.text()
    assert "Not enough free space" in text and "then press Download again" in text
    _no_command_words(text)


@pytest.mark.parametrize("kind", sorted(WINDOW_ADVICE))
def test_every_download_kind_the_page_knows_has_window_words(kind: str) -> None:
    words = window_advice(DownloadError("Could not download it.", "Run `python -m app fetch --quant X` again.",
                                        kind=kind))
    _no_command_words(words)
    assert "ress Download again" in words or "Pick another quantization in the table" in words


def test_an_unknown_kind_keeps_the_core_advice() -> None:
    assert window_advice(DownloadError("Could not download it.", "Try another mirror.", kind="tls-unverified")) \
        == "Try another mirror."
    for neutral in (fetcher.RESUME_ADVICE, download.START_OVER_ADVICE, download.KEPT_ADVICE):
        _no_command_words(neutral)  # the core's own words suit a terminal and a window alike
