"""A retrying download's row on the Models page (issue 36 item 8): it says "retrying in N s" in words and shows no
speed and no ETA while it waits (no frozen "ETA 2 s"), and the download then completes.

The real page and fetcher against the signed release server on 127.0.0.1: the model file answers 503 once, then
the next request is held (the server's hook waits on an event) so the row can be read while the retry waits."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

import threading
from collections.abc import Iterator

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from app.gui.models.download_files import F_ETA, F_SPEED, F_STATUS
from app.gui.models.models_page import ModelsPage
from tests.helpers.gui_windows import mirrored_models_page
from tests.helpers.release_server import Fault, ReleaseServer
from tests.unit.gui.models.test_gui_download_wording import MODEL, WAIT_MS, server  # noqa: F401  (the signed release)


@pytest.fixture
def page(qtbot: QtBot, server: ReleaseServer) -> Iterator[ModelsPage]:  # noqa: F811
    yield from mirrored_models_page(qtbot, server)


def _cell(page: ModelsPage, column: int) -> str:
    item = page.files_table.item(page._rows[MODEL], column)
    return item.text() if item is not None else ""


def test_a_retrying_row_says_when_and_shows_no_eta(qtbot: QtBot, page: ModelsPage,
                                                   server: ReleaseServer) -> None:  # noqa: F811
    held = threading.Event()
    server.set_fault(MODEL, Fault(status=503))
    server.set_fault(MODEL, Fault(hook=lambda: held.wait(60)))  # the retry's request, held until the row was read
    try:
        qtbot.mouseClick(page.download_buttons["Q4_K_P"], Qt.MouseButton.LeftButton)
        # the retry's two events, the row's and then the batch line's: each reaches the page in its own turn of the
        # event loop, so the wait is for both (the batch line says no ETA while the retry waits)
        qtbot.waitUntil(lambda: MODEL in page._rows and "retrying in" in _cell(page, F_STATUS)
                        and page.total_label.text().endswith("ETA —"), timeout=WAIT_MS)
        status = _cell(page, F_STATUS)
        # the hub is among the endpoints too, so the test server is named as the mirror it is
        assert status.startswith(f"The mirror 127.0.0.1:{server.port} had a server error (HTTP 503); retrying in "), \
            status
        assert "(retry 1 of 4)" in status
        assert _cell(page, F_ETA) == "—" and _cell(page, F_SPEED) == ""
    finally:
        held.set()
    qtbot.waitUntil(lambda: not page.downloading, timeout=WAIT_MS)
    assert page.last_error is None, page.step_label.text()
    assert _cell(page, F_STATUS) == "installed"  # verified, then moved into place
    assert len(server.gets(MODEL)) == 2
