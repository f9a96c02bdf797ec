"""The Backend page's "Install a prebuilt backend" from the signed backend feed; offscreen, against the real core.

The feed is served by a real HTTP server on 127.0.0.1 and named to the page the way a user's app learns it
(``FASTMTP_BACKEND_FEED_URL`` over the catalog's ``[backend_feed]``). The GPU and the driver come from an
``nvidia-smi`` on PATH that answers as a real one does, so the page's own detection decides. The page says
which archive it picked and why, installs it (self-test in a child process), or says why none fits and
offers "Build here".
"""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from app.backend import registry
from app.backend.feed import FEED_NAME, NoFittingArchive, write_feed
from app.backend.registry import BackendManifest
from app.backend.signing import backend_repo
from app.core.errors import TrustError
from app.gui.backend.backend_page import BackendPage
from app.release import signing, trust
from tests.helpers.module_folders import ModuleFolders
from tests.helpers.release_server import ReleaseServer
from tests.helpers.signed_backend import PREVIOUS, Signed, SignedFeed, installed, other_machine, sign_feed, sign_packed
from tests.helpers.waits import HANG_MS

WAIT_MS = HANG_MS  # a hang guard: every wait ends as soon as its condition holds (tests/helpers/waits.py)
REPO = backend_repo()  # the app's own repository: what backend archives and feeds are signed for
CUDA124 = "fastmtp-backend-cuda12.4-linux-x86_64.tar.xz"


@pytest.fixture(scope="module")
def signed(patched_backend: BackendManifest, module_tmp: ModuleFolders) -> Signed:
    return sign_packed(patched_backend, module_tmp.mktemp("publisher"))


@pytest.fixture(scope="module")
def feed(signed: Signed, module_tmp: ModuleFolders) -> SignedFeed:
    return sign_feed(signed, module_tmp.mktemp("feed"))


def fake_gpu(folder: Path, compute_cap: str, driver: str) -> None:
    """An ``nvidia-smi`` that reports one GPU of ``compute_cap`` and the ``driver``, as the real one prints them."""
    folder.mkdir(parents=True, exist_ok=True)
    smi = folder / "nvidia-smi"
    smi.write_text("#!/bin/sh\ncase \"$1\" in\n"
                   f"  --query-gpu=*) echo 'NVIDIA Test GPU, {compute_cap}, 24564'; exit 0 ;;\nesac\n"
                   f"echo '| NVIDIA-SMI {driver}    Driver Version: {driver}    CUDA Version: 12.4     |'\n")
    smi.chmod(0o755)


@pytest.fixture
def machine(tmp_path: Path, signed: Signed, monkeypatch: pytest.MonkeyPatch) -> Path:
    env = other_machine(tmp_path / "machine", signed.backend)
    for key in ("FASTMTP_DATA_DIR", "FASTMTP_CONFIG_DIR"):
        monkeypatch.setenv(key, env[key])
    return Path(env["FASTMTP_DATA_DIR"])


def open_page(qtbot: QtBot, server: ReleaseServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
              compute_cap: str, driver: str) -> BackendPage:
    monkeypatch.setenv("FASTMTP_BACKEND_FEED_URL", server.url(FEED_NAME))
    fake_gpu(tmp_path / "bin", compute_cap, driver)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    page = BackendPage()
    page.show()
    return page


@pytest.fixture
def closing(qtbot: QtBot) -> Iterator[list[BackendPage]]:
    pages: list[BackendPage] = []
    yield pages
    for page in pages:
        page.shutdown()
        qtbot.waitUntil(lambda page=page: page.ops.idle, timeout=WAIT_MS)
        page.close()
        page.deleteLater()


def test_the_page_picks_the_archive_for_the_gpu_says_why_and_installs_it(
        qtbot: QtBot, feed: SignedFeed, signed: Signed, machine: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, closing: list[BackendPage]) -> None:
    trust.pin_key(REPO, signing.load_public_key(signed.public.read_bytes(), "public.pem"))
    with ReleaseServer(feed.served()) as server:
        page = open_page(qtbot, server, monkeypatch, tmp_path, "8.9", "560.35.03")
        closing.append(page)
        assert page.feed_url.text() == server.url(FEED_NAME)  # the feed the app knows, no typing needed
        assert not page.feed_label.isVisible() and not page.feed_build_button.isVisible()
        qtbot.mouseClick(page.feed_button, Qt.MouseButton.LeftButton)
        assert page.building and not page.feed_button.isEnabled()
        qtbot.waitUntil(lambda: not page.building, timeout=WAIT_MS)
    assert page.last_error is None, page.step_label.text()
    selection = page.feed_selection
    assert selection is not None and selection.archive is not None and selection.archive.name == CUDA124
    assert selection.machine.gpu_archs == ("89",) and selection.machine.driver == "560.35.03"
    shown = page.feed_label.text()
    assert page.feed_label.isVisible() and shown.startswith(f"Picked {CUDA124} (CUDA 12.4 for sm_75")
    assert "sm_89" in shown and "560.35.03" in shown
    assert "older than the 570.26" in page.feed_label.toolTip()  # why the CUDA 12.8 archive was passed over
    assert not page.feed_build_button.isVisible()
    assert page.step_label.text().startswith(f"Prebuilt backend {signed.backend.id} is installed and active.")
    assert registry.active_id() == signed.backend.id
    assert page.feed_install is not None and page.feed_install.installed.origin.archive == CUDA124


def test_nothing_fits_says_why_and_offers_build_here(
        qtbot: QtBot, feed: SignedFeed, signed: Signed, machine: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, closing: list[BackendPage]) -> None:
    trust.pin_key(REPO, signing.load_public_key(signed.public.read_bytes(), "public.pem"))
    with ReleaseServer(feed.served()) as server:
        page = open_page(qtbot, server, monkeypatch, tmp_path, "6.1", "590.10")
        closing.append(page)
        qtbot.mouseClick(page.feed_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: not page.building, timeout=WAIT_MS)
        downloaded = [r.path for r in server.requests if r.path.endswith(".tar.xz")]
    assert isinstance(page.last_error, NoFittingArchive)
    assert "No archive for sm_61" in page.feed_label.text() and "Build here instead" in page.feed_label.text()
    assert page.step_label.text().startswith("No prebuilt backend fits this machine: No archive for sm_61")
    assert downloaded == [] and installed(machine) == ([PREVIOUS], PREVIOUS)
    assert page.feed_build_button.isVisible() and page.feed_build_button.isEnabled()
    built: list[str] = []
    monkeypatch.setattr(page, "build", built.append)
    qtbot.mouseClick(page.feed_build_button, Qt.MouseButton.LeftButton)
    assert built == ["cpu"]  # no nvcc here: the CPU build is the one this machine can make


def test_a_feed_signed_by_another_key_is_refused_naming_the_fingerprints(
        qtbot: QtBot, feed: SignedFeed, signed: Signed, machine: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, closing: list[BackendPage]) -> None:
    trust.pin_key(REPO, signing.load_public_key(signed.public.read_bytes(), "public.pem"))
    other = signing.generate_key()
    write_feed(list(feed.archives.values()), other, tmp_path / "forged")
    files = dict(feed.served(), **{p.name: p.read_bytes() for p in (tmp_path / "forged").iterdir()})
    with ReleaseServer(files) as server:
        page = open_page(qtbot, server, monkeypatch, tmp_path, "8.9", "560.35.03")
        closing.append(page)
        qtbot.mouseClick(page.feed_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: not page.building, timeout=WAIT_MS)
    assert isinstance(page.last_error, TrustError)
    step = page.step_label.text()
    assert step.startswith("Refused: nothing was installed and the active backend is unchanged.")
    assert signing.fingerprint(other.public_key()) in step and feed.fingerprint in step
    assert not page.feed_build_button.isVisible() and installed(machine) == ([PREVIOUS], PREVIOUS)
