"""The Backend page's feed install offline (issue 36 item 8): a feed whose server refuses the connection, or whose
name does not resolve, ends within seconds in the words of app.core.net_failures, never "ConnectError: [Errno
-2]…". The real page and core, offscreen; the feed at a closed 127.0.0.1 port or a name under ``.invalid``."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from app.core.errors import DownloadError
from app.gui.backend.backend_page import BackendPage

WAIT_MS = 60_000
TECHNICAL = ("ConnectError", "Errno", "RemoteProtocolError", "Name or service not known", "gaierror")


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def page(qtbot: QtBot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[BackendPage]:
    monkeypatch.setenv("FASTMTP_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("FASTMTP_CONFIG_DIR", str(tmp_path / "config"))
    widget = BackendPage()
    widget.show()
    yield widget
    widget.shutdown()
    qtbot.waitUntil(lambda: widget.ops.idle, timeout=WAIT_MS)
    widget.close()
    widget.deleteLater()


@pytest.mark.parametrize(("url", "words"), [
    ("http://127.0.0.1:{port}/backend-feed.json", "127.0.0.1:{port} refused the connection"),
    ("https://fastmtp-no-such-feed.invalid/backend-feed.json",
     "the name fastmtp-no-such-feed.invalid could not be found (DNS)"),
], ids=["refused", "unresolvable"])
def test_an_unreachable_feed_reads_in_words_within_seconds(qtbot: QtBot, page: BackendPage, url: str,
                                                           words: str) -> None:
    port = closed_port()
    started = time.monotonic()
    page.install_from_feed(url.format(port=port))
    qtbot.waitUntil(lambda: not page.building, timeout=WAIT_MS)
    assert time.monotonic() - started < 10.0
    assert isinstance(page.last_error, DownloadError), page.last_error
    text = page.step_label.text()
    assert words.format(port=port) in text, text
    assert "nothing was installed and the active backend is unchanged" in text
    for technical in TECHNICAL:
        assert technical not in text and technical not in page.log.toPlainText(), technical
