"""A failed download in words (first-hour issue, item 1; issue 36 item 8): "ConnectError: [Errno -2] Name or service
not known (gave up after 5 retries)" and "Press Download again to resume" when nothing was downloaded became "The
name HOST could not be found (DNS): …" and "retry", in the words of the one place (app.core.net_failures), with no
retries for a name that does not resolve or a refused connection; the technical words stay in the tooltip.

The real page and fetcher against mirrors that cannot be reached: a name under ``.invalid`` (never resolves) and
127.0.0.1 port 1 (nothing listens); then the release server on 127.0.0.1 failing mid-file, so bytes are kept and
the page says "resume". No internet; the retry backoff is zero so the 503 retries do not take half a minute."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

from collections.abc import Iterator

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from app.gui.models import models_page
from app.gui.models.models_page import ModelsPage
from app.release import download, fetcher
from app.release.catalog import Endpoint, user_endpoints
from app.release.fetcher import NetworkDownloadError
from tests.helpers.release_server import Fault, ReleaseServer
from tests.unit.gui.models.test_gui_download_wording import MODEL, WAIT_MS, server  # noqa: F401  (the signed release)

ENGLISH = ("Name or service not known", "gave up after", "ConnectError", "Errno", "RemoteProtocolError")


@pytest.fixture
def page(qtbot: QtBot, server: ReleaseServer,  # noqa: F811
         monkeypatch: pytest.MonkeyPatch) -> Iterator[ModelsPage]:
    monkeypatch.setattr(fetcher._Download, "_backoff", lambda _self, _attempt, _after: 0.0)
    widget = ModelsPage(detect_gpu=False)
    widget.show()
    yield widget
    widget.shutdown()
    qtbot.waitUntil(lambda: widget.ops.idle, timeout=WAIT_MS)
    widget.close()
    widget.deleteLater()


def _fail(qtbot: QtBot, page: ModelsPage) -> NetworkDownloadError:
    qtbot.mouseClick(page.download_buttons["Q4_K_P"], Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not page.downloading, timeout=WAIT_MS)
    assert isinstance(page.last_error, NetworkDownloadError), page.last_error
    return page.last_error


@pytest.mark.parametrize(("url", "cause", "words"), [
    ("http://fastmtp-no-such-host.invalid/", "name-not-resolved",
     "The name fastmtp-no-such-host.invalid could not be found (DNS): no internet connection, or a wrong address. "
     "This machine may be offline: check the internet connection"),
    ("http://127.0.0.1:1/", "connection-refused", "127.0.0.1:1 refused the connection"),
], ids=["unresolvable", "closed-port"])
def test_an_unreachable_mirror_reads_in_words_and_says_retry(qtbot: QtBot, page: ModelsPage,
                                                            monkeypatch: pytest.MonkeyPatch, url: str, cause: str,
                                                            words: str) -> None:
    monkeypatch.setattr(models_page, "endpoints_for", lambda: [Endpoint(kind="plain", url=url)])
    error = _fail(qtbot, page)
    assert error.cause == cause and error.kept_bytes == 0
    text = page.step_label.text()
    assert text.startswith("Nothing was installed. " + words), text
    assert text.endswith("Press Download again to retry.") and "resume" not in text.lower()
    for english in ENGLISH:
        assert english not in text, text
    assert "not retried" in page.step_label.toolTip() and url in page.step_label.toolTip()  # the technical detail
    assert "resume" not in error.advice  # the CLI's advice: nothing kept, nothing to resume


def test_a_failure_after_bytes_were_kept_says_resume(qtbot: QtBot, page: ModelsPage, server: ReleaseServer,  # noqa: F811
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(models_page, "endpoints_for", user_endpoints)  # the local mirror alone
    page.mirror_url.setText(server.url(""))
    qtbot.mouseClick(page.add_mirror_button, Qt.MouseButton.LeftButton)
    server.set_fault(MODEL, Fault(trickle_after=32_768, trickle_piece=1024, trickle_delay=0.05))
    qtbot.mouseClick(page.download_buttons["Q4_K_P"], Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: MODEL in page._rows, timeout=WAIT_MS)
    part = fetcher._part_path(download.staging_dir(page.catalog.repo) / "files", MODEL)
    qtbot.waitUntil(lambda: part.is_file() and part.stat().st_size > 0, timeout=WAIT_MS)
    qtbot.mouseClick(page.cancel_button, Qt.MouseButton.LeftButton)  # the part is kept
    qtbot.waitUntil(lambda: not page.downloading, timeout=WAIT_MS)
    server.set_fault(MODEL, Fault(status=503, times=50))
    error = _fail(qtbot, page)
    assert error.cause == "server-error" and error.kept_bytes > 0
    text = page.step_label.text()
    assert f"127.0.0.1:{server.port} had a server error (HTTP 503)" in text, text
    assert "Press Download again to resume" in text, text


def test_a_dead_mirror_and_an_unreachable_hub_are_both_named(qtbot: QtBot, page: ModelsPage,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(models_page, "endpoints_for", lambda: [
        Endpoint(kind="plain", url="http://127.0.0.1:1/"), Endpoint(kind="hf", url="https://fastmtp-hub.invalid")])
    error = _fail(qtbot, page)
    assert [f.kind for f in error.failures] == ["connection-refused", "name-not-resolved"]
    text = page.step_label.text()
    assert "127.0.0.1:1 refused the connection" in text, text  # the mirror ...
    assert "the name fastmtp-hub.invalid could not be found (DNS)" in text, text  # ... and the hub, not only one
    for english in ENGLISH:
        assert english not in text, text
