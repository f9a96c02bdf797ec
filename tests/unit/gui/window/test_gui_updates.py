"""The Settings page's Updates group, offscreen, against a signed feed on a real server on 127.0.0.1.

Each result the check can give is shown in words; the daily check runs at start only when the user
allowed it, and then at most once in 24 hours; with the default settings no request is made at all.
"""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from app import __version__
from app.chats.history import HistoryStore
from app.gui.main import MainWindow
from app.gui.settings.settings_page import SettingsPage
from app.release import signing, trust, updates
from app.release.app_feed import FEED_NAME, current_platform, sign_feed
from app.release.publish import KeyPair, keygen
from app.release.updates import UpdateSource
from app.settings import app_settings
from app.settings.app_settings import Settings
from tests.helpers.release_server import ReleaseServer

WAIT_MS = 30_000
REPO = updates.default_source().repo
KEY_NAME = updates.default_source().public_key
NOW = datetime(2025, 7, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FASTMTP_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("FASTMTP_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv(updates.URL_ENV, raising=False)


@pytest.fixture
def key(tmp_path: Path) -> KeyPair:
    """The feed's key, pinned for the app's repository as a shipped or `trust add` key would be."""
    pair = keygen(tmp_path / "keys")
    trust.pin_key(REPO, signing.load_public_key(pair.public.read_bytes(), "test key"))
    return pair


def feed_files(folder: Path, key: KeyPair, version: str, notes: str = "") -> dict[str, bytes]:
    archive = folder.parent / f"fastmtp-chat-{version}-{current_platform()}.tar.gz"
    archive.write_bytes(b"the app" * 200_000)
    sign_feed(folder, key.private, version=version, notes=notes, files={current_platform(): archive}, repo=REPO,
              public_key_name=KEY_NAME, now=NOW)
    return {p.name: p.read_bytes() for p in folder.iterdir()}


@pytest.fixture
def server(tmp_path: Path, key: KeyPair) -> Iterator[ReleaseServer]:
    notes = "New: a daily update check.\n<b>not bold</b> & escaped"
    with ReleaseServer(feed_files(tmp_path / "feed", key, "0.9.0", notes)) as srv:
        yield srv


def make_page(qtbot: QtBot, server: ReleaseServer, settings: Settings | None = None) -> SettingsPage:
    page = SettingsPage(settings or Settings(), update_source=UpdateSource(server.url(FEED_NAME), REPO,
                                                                         public_key=KEY_NAME),
                        clock=lambda: NOW)
    qtbot.addWidget(page)
    page.show()
    return page


def check_now(qtbot: QtBot, page: SettingsPage) -> str:
    qtbot.mouseClick(page.check_now_button, Qt.MouseButton.LeftButton)
    assert page.update_checking and not page.check_now_button.isEnabled()  # in the background
    qtbot.waitUntil(lambda: page.ops.idle, timeout=WAIT_MS)
    assert page.check_now_button.isEnabled()
    return page.update_label.text()


def test_the_page_starts_unchecked_and_off(qtbot: QtBot, server: ReleaseServer) -> None:
    page = make_page(qtbot, server)
    assert not page.check_updates.isChecked() and not page.current().check_for_updates
    assert "Not checked for updates yet" in page.update_label.text() and page.update_checked.text() == ""


def test_check_now_shows_a_newer_version_with_its_notes_and_link(qtbot: QtBot, server: ReleaseServer,
                                                                  key: KeyPair) -> None:
    page = make_page(qtbot, server)
    text = check_now(qtbot, page)
    name = f"fastmtp-chat-0.9.0-{current_platform()}.tar.gz"
    assert "FastMTP Chat 0.9.0 is available</b> (you have " + __version__ + ")" in text
    assert f'<a href="{server.url(name)}">Download {name}</a> (1 MB, sha256 ' in text
    assert "New: a daily update check.<br>&lt;b&gt;not bold&lt;/b&gt; &amp; escaped" in text  # the notes, as text
    assert "the app does not replace itself" in text and page.update_label.openExternalLinks()
    assert page.update_checked.text() == (f"Last checked {NOW.astimezone().strftime('%Y-%m-%d %H:%M')}; the answer "
                                          f"was signed by {key.fingerprint}.")
    assert not server.gets(name)  # told and linked, never downloaded


def test_check_now_shows_up_to_date(qtbot: QtBot, tmp_path: Path, key: KeyPair) -> None:
    with ReleaseServer(feed_files(tmp_path / "feed", key, __version__)) as srv:
        page = make_page(qtbot, srv)
        text = check_now(qtbot, page)
    assert f"FastMTP Chat {__version__} is up to date." in text and "<a " not in text


def test_a_tampered_feed_shows_could_not_verify_never_an_update(qtbot: QtBot, server: ReleaseServer,
                                                                  tmp_path: Path) -> None:
    server.put(FEED_NAME, (tmp_path / "feed" / FEED_NAME).read_bytes().replace(b"0.9.0", b"9.9.9"))
    page = make_page(qtbot, server)
    text = check_now(qtbot, page)
    assert "The update information could not be verified" in text
    assert "available" not in text and "9.9.9" not in text and "<a " not in text
    assert "Last checked" in page.update_checked.text()


def test_a_feed_signed_by_an_untrusted_key_shows_could_not_verify(qtbot: QtBot, tmp_path: Path) -> None:
    stranger = keygen(tmp_path / "stranger")  # nothing pinned for it, and the page never asks
    with ReleaseServer(feed_files(tmp_path / "feed", stranger, "0.9.0")) as srv:
        page = make_page(qtbot, srv)
        text = check_now(qtbot, page)
    assert "could not be verified" in text and "not trusted yet" in text and "<a " not in text


def test_a_server_that_is_down_shows_could_not_reach(qtbot: QtBot, server: ReleaseServer) -> None:
    page = make_page(qtbot, server)
    server.close()
    text = check_now(qtbot, page)
    assert "Could not reach the update server: 127.0.0.1:" in text and "Check the network connection" in text


def test_the_last_result_is_shown_when_the_page_opens_again(qtbot: QtBot, server: ReleaseServer) -> None:
    check_now(qtbot, make_page(qtbot, server))
    again = make_page(qtbot, server)
    assert "0.9.0 is available" in again.update_label.text() and "Last checked" in again.update_checked.text()


def test_the_checkbox_is_saved_with_the_settings(qtbot: QtBot, server: ReleaseServer) -> None:
    page = make_page(qtbot, server)
    page.check_updates.setChecked(True)
    qtbot.mouseClick(page.save_button, Qt.MouseButton.LeftButton)
    assert app_settings.load().check_for_updates
    assert server.requests == []  # ticking it asks nothing by itself


def test_the_automatic_check_is_off_by_default_and_makes_no_request(qtbot: QtBot, server: ReleaseServer) -> None:
    page = make_page(qtbot, server)
    assert not page.check_for_updates_if_due()
    assert page.ops.idle and server.requests == []


def test_the_automatic_check_runs_when_allowed_then_waits_24_hours(qtbot: QtBot, server: ReleaseServer) -> None:
    page = make_page(qtbot, server, Settings(check_for_updates=True))
    assert page.check_for_updates_if_due()
    qtbot.waitUntil(lambda: page.ops.idle, timeout=WAIT_MS)
    assert "0.9.0 is available" in page.update_label.text()
    seen = len(server.requests)
    later = make_page(qtbot, server, Settings(check_for_updates=True))  # the next start, the same day
    later.updates.clock = lambda: NOW + timedelta(hours=23)
    assert later.check_for_updates_if_due()  # the 24 h rule is applied off the GUI thread ...
    qtbot.waitUntil(lambda: later.ops.idle, timeout=WAIT_MS)
    assert len(server.requests) == seen  # ... and asked nothing
    later.updates.clock = lambda: NOW + timedelta(hours=24)
    assert later.check_for_updates_if_due()
    qtbot.waitUntil(lambda: later.ops.idle, timeout=WAIT_MS)
    assert len(server.requests) > seen


def test_the_window_checks_at_start_only_when_allowed(qtbot: QtBot, server: ReleaseServer, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(updates.URL_ENV, server.url(FEED_NAME))  # the catalog's feed, moved to the test server
    history = HistoryStore(tmp_path / "history.sqlite3")
    off = MainWindow(history=history)  # the settings as a fresh install has them
    qtbot.addWidget(off)
    off.start()
    assert off.settings_page.ops.idle and server.requests == []
    allowed = MainWindow(history=history, settings=Settings(check_for_updates=True))
    qtbot.addWidget(allowed)
    allowed.start()
    qtbot.waitUntil(lambda: allowed.settings_page.ops.idle, timeout=WAIT_MS)
    assert "0.9.0 is available" in allowed.settings_page.update_label.text()
    assert server.gets(FEED_NAME)
    off.close()
    allowed.close()
    history.close()
