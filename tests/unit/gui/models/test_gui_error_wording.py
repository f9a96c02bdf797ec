"""The window chooses its words by an error's kind, never by the core's English: reword the core's message and
advice (as a later release may) and the Models page still says the same thing, in its own words.

``fetch_release`` is replaced by a stand-in that raises the reworded errors, so no server, network or backend
is involved; the keyring is a file per test, as in ``test_gui_download_wording.py``.
"""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from app.core.child_job import ChildJobError
from app.core.errors import DiskSpaceError, DownloadError, FastMTPError, VerificationError
from app.gui.models import models_page
from app.gui.models.download_files import FAILED, OK
from app.gui.models.download_words import download_error_text
from app.gui.models.models_page import ModelsPage
from app.gui.shell.status_text import error_text
from app.release.catalog import load_catalog
from app.release.progress import FetchEvent
from tests.helpers.signed_release_server import own_user

WAIT_MS = 30_000
MODEL = load_catalog().quant("Q4_K_P").file
COMMAND_WORDS = ("command", "python -m", "--quant", "`")
# the core says it differently now: none of its sentences is one the window ever knew
NEW_ADVICE = "Reworded core advice: run `python -m app token set --new-flag` and try the command again."


@pytest.fixture
def page(qtbot: QtBot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModelsPage]:
    with own_user(tmp_path, monkeypatch):
        widget = ModelsPage(detect_gpu=False)
        widget.show()
        yield widget
        widget.shutdown()
        qtbot.waitUntil(lambda: widget.ops.idle, timeout=WAIT_MS)
        widget.close()
        widget.deleteLater()


def _event(kind: Any, message: str = "", error_kind: str = "") -> FetchEvent:
    return FetchEvent(kind=kind, file=MODEL, bytes_done=0, bytes_total=1000, total_done=0, total_bytes=1000,
                      speed_bps=0.0, eta_s=None, message=message, error_kind=error_kind)


def _fails_with(monkeypatch: pytest.MonkeyPatch, error: FastMTPError,
                events: tuple[FetchEvent, ...] = ()) -> None:
    def fake_fetch_release(plan: Any, *, on_event: Callable[[Any], None], **_kw: Any) -> Any:
        for event in events:
            on_event(event)
        raise error

    monkeypatch.setattr(models_page, "fetch_release", fake_fetch_release)


def _download(qtbot: QtBot, page: ModelsPage) -> str:
    qtbot.mouseClick(page.download_buttons["Q4_K_P"], Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not page.downloading, timeout=WAIT_MS)
    return page.step_label.text()


def _no_command_words(text: str) -> None:
    for words in COMMAND_WORDS:
        assert words not in text.lower(), text


def test_a_reworded_access_denial_still_points_at_the_token_box(qtbot: QtBot, page: ModelsPage,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    _fails_with(monkeypatch, DownloadError("The hub would not hand over the file (reworded).", NEW_ADVICE,
                                           kind="download-denied"))
    text = _download(qtbot, page)
    assert text.startswith("Nothing was installed. The hub would not hand over the file (reworded).")
    assert "Hub token box below" in text and "press Download again" in text and "Reworded" not in text
    _no_command_words(text)


def test_a_reworded_full_disk_still_says_to_press_download_again(qtbot: QtBot, page: ModelsPage,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    _fails_with(monkeypatch, DiskSpaceError("No bytes fit anymore (reworded).", NEW_ADVICE, kind="disk-full"))
    text = _download(qtbot, page)
    assert "No bytes fit anymore (reworded)." in text and "then press Download again" in text
    _no_command_words(text)


def test_the_failed_check_of_a_row_follows_the_kind_not_the_words(qtbot: QtBot, page: ModelsPage,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    message = f"{MODEL}: its digest is not the signed one (reworded, no check named)."
    _fails_with(monkeypatch, VerificationError(message, NEW_ADVICE, kind="sha256-mismatch"),
                (_event("start"), _event("error", message, "sha256-mismatch")))
    _download(qtbot, page)
    row = page.file_row(MODEL)
    assert row["sha256"] == FAILED and row["size"] == OK
    assert row["status"].startswith("Failed the sha256 check")


def test_words_that_name_a_check_do_not_mark_it_without_its_kind(qtbot: QtBot, page: ModelsPage,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    message = f"{MODEL}: the mirror mentions sha256 and a wrong size, but the connection dropped."
    _fails_with(monkeypatch, DownloadError(message, NEW_ADVICE, kind="download-network"),
                (_event("start"), _event("error", message, "download-network")))
    text = _download(qtbot, page)
    row = page.file_row(MODEL)
    assert FAILED not in (row["sha256"], row["size"]) and row["status"] == message
    assert "Press Download again to resume" in text
    _no_command_words(text)


def test_a_child_jobs_kind_chooses_the_window_words() -> None:
    child = ChildJobError("The child ran out of room (reworded).", NEW_ADVICE, 1, "DiskSpaceError", kind="no-room")
    text = download_error_text(child)
    assert text.startswith("The child ran out of room (reworded).\n") and "press Download again" in text
    _no_command_words(text)
    # a kind the page has no words for keeps the core's advice; so does a page that passes no wording
    other = ChildJobError("Something else.", "Core advice.", 1, "GGUFError", kind="not-gguf")
    assert download_error_text(other) == "Something else.\nCore advice."
    assert error_text(child) == f"The child ran out of room (reworded).\n{NEW_ADVICE}"
