"""The models page against a hostile server on 127.0.0.1: Cancel and Pause in the integrity phase (a server
that never answers the manifest request), an integrity file over its cap, and a hand-edited mirror list.

Same set-up as ``test_gui_pages.py``: a signed release, the real fetcher and trust chain, fresh data and
config folders and a file-backed keyring per test.
"""

from __future__ import annotations

import json
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from app.core import paths, secrets
from app.core.errors import VerificationError
from app.gui.models.models_page import ModelsPage
from app.models.installed import default_destination
from app.release import signing, trust
from app.release.catalog import load_catalog, repo_slug
from app.release.publish import KeyPair, keygen
from tests.helpers.file_keyring import plaintext_keyring
from tests.helpers.gui_windows import mirrored_models_page
from tests.helpers.release_server import Fault, ReleaseServer
from tests.helpers.signed_release_server import signed_release_files

WAIT_MS = 60_000
CATALOG = load_catalog()
MODEL = CATALOG.quant("Q4_K_P").file
MANIFEST = CATALOG.integrity.manifest
PAYLOAD = {MODEL: os.urandom(200_000), CATALOG.sidecar.file: os.urandom(30_000),
           CATALOG.integrity.patch: b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n"}


@pytest.fixture
def folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("FASTMTP_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("FASTMTP_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.delenv(secrets.ENV_VAR, raising=False)
    with plaintext_keyring(tmp_path / "keyring.cfg"):
        yield tmp_path


@pytest.fixture
def key(folders: Path) -> KeyPair:
    pair = keygen(folders / "keys")
    trust.pin_key(CATALOG.repo, signing.load_public_key(pair.public.read_bytes(), str(pair.public)))
    return pair


@pytest.fixture
def server(folders: Path, key: KeyPair) -> Iterator[ReleaseServer]:
    with ReleaseServer(signed_release_files(folders / "release", PAYLOAD, key.private)) as srv:
        yield srv


@pytest.fixture
def page(qtbot: QtBot, server: ReleaseServer) -> Iterator[ModelsPage]:
    """The page with this module's test server added as a mirror through its own mirror settings."""
    yield from mirrored_models_page(qtbot, server)


def partial_files() -> list[Path]:
    downloads = paths.data_dir() / "downloads" / repo_slug(CATALOG.repo)
    return sorted(downloads.rglob("*.part*")) if downloads.exists() else []


def installed_files() -> list[str]:
    folder = default_destination(CATALOG.repo)
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def start_and_wait_for_the_manifest_request(qtbot: QtBot, page: ModelsPage, server: ReleaseServer) -> None:
    server.set_fault(MANIFEST, Fault(silent=True))  # the request goes in, no answer ever comes out
    qtbot.mouseClick(page.download_buttons["Q4_K_P"], Qt.MouseButton.LeftButton)
    assert page.downloading
    qtbot.waitUntil(lambda: bool(server.gets(MANIFEST)), timeout=WAIT_MS)  # the fetcher waits on the silent answer


def test_cancel_in_the_integrity_phase_stops_at_once(qtbot: QtBot, page: ModelsPage, server: ReleaseServer) -> None:
    start_and_wait_for_the_manifest_request(qtbot, page, server)
    started = time.monotonic()
    qtbot.mouseClick(page.cancel_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not page.downloading, timeout=WAIT_MS)
    assert time.monotonic() - started < 20  # not the fetcher's 30 s stall timeout and its retries (slack for load)
    assert page.step_label.text() == "Download cancelled before any model file was requested; nothing was kept."
    assert partial_files() == [] and installed_files() == [] and server.gets(MODEL) == []
    assert all(button.isEnabled() for button in page.download_buttons.values())


def test_pause_in_the_integrity_phase_holds_and_resume_installs(qtbot: QtBot, page: ModelsPage,
                                                                server: ReleaseServer) -> None:
    start_and_wait_for_the_manifest_request(qtbot, page, server)
    qtbot.mouseClick(page.pause_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.total_label.text().startswith("Paused"), timeout=WAIT_MS)
    assert page.downloading and server.gets(MODEL) == []
    qtbot.mouseClick(page.resume_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not page.downloading, timeout=WAIT_MS)
    assert page.installed is not None, page.step_label.text()
    assert (default_destination(CATALOG.repo) / MODEL).read_bytes() == PAYLOAD[MODEL]


def test_an_endless_integrity_file_is_refused_in_words(qtbot: QtBot, page: ModelsPage,
                                                       server: ReleaseServer) -> None:
    server.set_fault(MANIFEST, Fault(endless=True))
    qtbot.mouseClick(page.download_buttons["Q4_K_P"], Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not page.downloading, timeout=WAIT_MS)
    assert isinstance(page.last_error, VerificationError)
    text = page.step_label.text()
    assert text.startswith("Nothing was installed.") and MANIFEST in text and "too large" in text
    assert partial_files() == [] and installed_files() == [] and server.gets(MODEL) == []


def test_a_hand_edited_file_url_mirror_is_named_and_can_be_removed(qtbot: QtBot, folders: Path) -> None:
    config = paths.config_dir()
    (config / "endpoints.json").write_text(json.dumps({"endpoints": [{"kind": "plain", "url": "file:///etc"}]}))
    page = ModelsPage(detect_gpu=False)
    qtbot.addWidget(page)
    assert page.mirror_list.count() == 1 and "'file:///etc'" in page.settings_message.text()
    qtbot.mouseClick(page.download_buttons["Q4_K_P"], Qt.MouseButton.LeftButton)
    assert not page.downloading and "'file:///etc'" in page.step_label.text()
    page.mirror_list.setCurrentRow(0)
    qtbot.mouseClick(page.remove_mirror_button, Qt.MouseButton.LeftButton)
    assert page.mirror_list.count() == 0
    assert json.loads((config / "endpoints.json").read_text()) == {"endpoints": []}
    qtbot.waitUntil(lambda: page.ops.idle, timeout=WAIT_MS)
