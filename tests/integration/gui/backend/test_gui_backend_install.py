"""The Backend page's prebuilt install, its installed list following builds and installs made elsewhere, and
its CUDA hints at a small window size; offscreen, against the real core.

The archive is the real patched CPU backend, packed and signed with the real commands; the page checks
it, asks about an unknown key with the real trust dialog, self-tests it in a child process and installs
it into the test's own data folder, from a file and from a local HTTP server on 127.0.0.1.
"""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QLabel
from pytestqt.qtbot import QtBot

from app.backend import registry
from app.backend.registry import BackendManifest
from app.backend.signing import backend_repo
from app.chats.history import HistoryStore
from app.core.errors import TrustError, VerificationError
from app.gui.backend.backend_page import BackendPage
from app.gui.main import MainWindow
from app.release import signing, trust
from app.release.catalog import repo_slug
from app.settings.app_settings import Settings
from tests.helpers.cuda_index import PIN, fake_nvidia_smi
from tests.helpers.module_folders import ModuleFolders
from tests.helpers.release_server import ReleaseServer
from tests.helpers.signed_backend import PREVIOUS, Signed, installed, other_machine, run_app, sign_packed
from tests.helpers.waits import HANG_MS

WAIT_MS = HANG_MS  # a hang guard: every wait ends as soon as its condition holds (tests/helpers/waits.py)
REPO = backend_repo()  # backend archives are signed for the app's own repository (issue 35 item 5)


@pytest.fixture(scope="module")
def signed(patched_backend: BackendManifest, module_tmp: ModuleFolders) -> Signed:
    return sign_packed(patched_backend, module_tmp.mktemp("publisher"))


@pytest.fixture
def machine(tmp_path: Path, signed: Signed, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This process on another machine: fresh folders where a different backend is installed and active."""
    env = other_machine(tmp_path / "machine", signed.backend)
    for key in ("FASTMTP_DATA_DIR", "FASTMTP_CONFIG_DIR"):
        monkeypatch.setenv(key, env[key])
    return Path(env["FASTMTP_DATA_DIR"])


@pytest.fixture
def page(qtbot: QtBot, machine: Path) -> Iterator[BackendPage]:
    widget = BackendPage()
    widget.show()
    yield widget
    widget.shutdown()
    qtbot.waitUntil(lambda: widget.ops.idle, timeout=WAIT_MS)
    widget.close()
    widget.deleteLater()


def install(qtbot: QtBot, page: BackendPage, source: str) -> None:
    page.prebuilt_source.setText(source)
    qtbot.mouseClick(page.install_button, Qt.MouseButton.LeftButton)
    assert page.building and not page.install_button.isEnabled() and page.cancel_build_button.isEnabled()


# ----------------------------------------------------------------------------- installing a prebuilt backend


def test_the_page_offers_both_ways_and_says_which_is_which(qtbot: QtBot, page: BackendPage) -> None:
    texts = [label.text() for label in page.findChildren(QLabel)]
    assert "Build here" in texts and "Install a prebuilt backend" in texts
    assert any("self-test runs on this machine" in text for text in texts)
    assert page.build_cpu_button.isVisible() and page.install_button.isVisible()
    assert page.row_texts(PREVIOUS)["origin"] == "built here"


def test_a_prebuilt_archive_asks_about_its_key_then_is_self_tested_installed_and_listed(
        qtbot: QtBot, page: BackendPage, signed: Signed, machine: Path) -> None:
    install(qtbot, page, str(signed.archive))
    qtbot.waitUntil(lambda: page.trust_dialog is not None and page.trust_dialog.isVisible(), timeout=WAIT_MS)
    dialog = page.trust_dialog
    assert dialog is not None and dialog.fingerprint_label.text().replace("\n", ":") == signed.fingerprint
    assert installed(machine) == ([PREVIOUS], PREVIOUS)  # nothing before the key is trusted
    dialog.answer.setText("yes")
    qtbot.mouseClick(dialog.trust_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not page.building, timeout=WAIT_MS)

    assert page.last_error is None, page.step_label.text()
    got = page.installed_prebuilt
    assert got is not None and got.manifest.id == signed.backend.id and got.manifest.selftest["ok"] is True
    step = page.step_label.text()
    assert step.startswith(f"Prebuilt backend {signed.backend.id} is installed and active.")
    assert "Signed by a key you trusted, not one shipped with the app" in step and signed.fingerprint in step
    assert "self-testing" in page.log.toPlainText() and page.progress.value() == 100
    assert registry.active_id() == signed.backend.id
    assert [k.fingerprint for k in trust.user_keys(REPO)] == [signed.fingerprint]
    row = page.row_texts(signed.backend.id)
    assert (row["origin"], row["selftest"], row["active"]) == ("prebuilt, signed by your trusted key", "ok",
                                                               "● active")
    assert page.row_texts(PREVIOUS)["origin"] == "built here" and page.selected_id() == signed.backend.id
    assert signed.fingerprint in page.details.toPlainText()
    assert page.selftest_label.text().startswith("Self-test when it was installed here: passed")


def test_a_publisher_signed_prebuilt_from_a_url_says_so(qtbot: QtBot, signed: Signed, machine: Path,
                                                        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The packaged app ships the publisher's key in its resources: a backend signed with it needs no question."""
    from app.core.resources import resources_dir

    bundle = tmp_path / "bundle"
    (bundle / "resources").mkdir(parents=True)
    for entry in resources_dir().iterdir():
        if entry.name != "keys":
            (bundle / "resources" / entry.name).symlink_to(entry)
    (bundle / "resources" / "keys").mkdir()
    (bundle / "resources" / "keys" / f"{repo_slug(REPO)}.pem").write_bytes(signed.public.read_bytes())
    monkeypatch.setattr(sys, "_MEIPASS", str(bundle), raising=False)  # what a frozen app's resources are
    widget = BackendPage()
    widget.show()
    try:
        with ReleaseServer(signed.served()) as server:
            install(qtbot, widget, server.url(signed.archive.name))
            qtbot.waitUntil(lambda: not widget.building, timeout=WAIT_MS)
        assert widget.trust_dialog is None and widget.last_error is None, widget.step_label.text()
        assert widget.installed_prebuilt is not None and widget.installed_prebuilt.publisher_signed
        assert "Publisher-signed: the key that signed it ships with the app" in widget.step_label.text()
        assert widget.row_texts(signed.backend.id)["origin"] == "prebuilt, publisher-signed"
        assert trust.user_keys(REPO) == []  # a shipped key is never copied into the user's keys
    finally:
        widget.shutdown()
        qtbot.waitUntil(lambda: widget.ops.idle, timeout=WAIT_MS)
        widget.deleteLater()


def test_a_tampered_archive_is_refused_in_words_and_the_active_backend_stays(
        qtbot: QtBot, page: BackendPage, signed: Signed, machine: Path, tmp_path: Path) -> None:
    trust.pin_key(REPO, signing.load_public_key(signed.public.read_bytes(), "public.pem"))
    install(qtbot, page, str(signed.tampered_copy(tmp_path / "tampered")))
    qtbot.waitUntil(lambda: not page.building, timeout=WAIT_MS)
    assert isinstance(page.last_error, VerificationError)
    step = page.step_label.text()
    assert step.startswith("Refused: nothing was installed and the active backend is unchanged.")
    assert "failed the sha256 check" in step
    assert installed(machine) == ([PREVIOUS], PREVIOUS) and registry.active_id() == PREVIOUS
    assert page.row_texts(PREVIOUS)["active"] == "● active" and page.table.rowCount() == 1
    assert page.install_button.isEnabled() and page.build_cpu_button.isEnabled()


def test_refusing_the_key_installs_nothing_and_trusts_nothing(qtbot: QtBot, page: BackendPage, signed: Signed,
                                                              machine: Path) -> None:
    install(qtbot, page, str(signed.archive))
    qtbot.waitUntil(lambda: page.trust_dialog is not None and page.trust_dialog.isVisible(), timeout=WAIT_MS)
    dialog = page.trust_dialog
    assert dialog is not None
    qtbot.mouseClick(dialog.refuse_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not page.building, timeout=WAIT_MS)
    assert isinstance(page.last_error, TrustError) and "You did not trust the key" in page.step_label.text()
    assert trust.user_keys(REPO) == [] and installed(machine) == ([PREVIOUS], PREVIOUS)


def test_a_missing_file_is_named_and_nothing_starts(qtbot: QtBot, page: BackendPage, tmp_path: Path) -> None:
    page.prebuilt_source.setText(str(tmp_path / "nowhere.tar.xz"))
    qtbot.mouseClick(page.install_button, Qt.MouseButton.LeftButton)
    assert not page.building and "There is no file at" in page.step_label.text()


# ----------------------------------------------------------------------------- issue 13, defect 4


def test_the_installed_list_follows_a_backend_installed_by_another_process(
        qtbot: QtBot, page: BackendPage, signed: Signed, machine: Path) -> None:
    assert list(page.manifests) == [PREVIOUS]
    env = dict(os.environ)
    done = run_app(env, "backend", "install", str(signed.archive), "--trust-fingerprint", signed.fingerprint,
                   "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    qtbot.waitUntil(lambda: signed.backend.id in page.manifests, timeout=WAIT_MS)
    qtbot.waitUntil(lambda: page.row_texts(signed.backend.id)["active"] == "● active", timeout=WAIT_MS)
    assert page.row_texts(PREVIOUS)["active"] == ""


def test_the_installed_list_shows_the_backend_the_first_run_demo_built(
        qtbot: QtBot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, patched_backend: BackendManifest) -> None:
    """A fresh machine: the first-run panel builds the CPU backend (from the cached build tree) for the demo;
    the Backend page, created with the window before that, lists it without a restart."""
    monkeypatch.setenv("FASTMTP_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("FASTMTP_CONFIG_DIR", str(tmp_path / "config"))
    win = MainWindow(history=HistoryStore(tmp_path / "history.sqlite3"))
    qtbot.addWidget(win)
    win.show()
    win.start()
    assert win.first_run_visible() and win.backend_page.table.rowCount() == 0
    qtbot.waitUntil(lambda: win.first_run.toolchain is not None, timeout=WAIT_MS)
    qtbot.mouseClick(win.first_run.demo_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: win.chat_page.ready, timeout=WAIT_MS)
    active = registry.active()
    assert active is not None and active.id == patched_backend.id
    qtbot.waitUntil(lambda: active.id in win.backend_page.manifests, timeout=WAIT_MS)
    win.show_page("Backend")
    assert win.backend_page.row_texts(active.id)["active"] == "● active"
    assert win.backend_page.row_texts(active.id)["origin"] == "built here"
    win.close()


# ----------------------------------------------------------------------------- issue 13, defect 5


@pytest.mark.parametrize("width", [1024, 1180])  # 1180 x 700 is the window's default size
def test_the_cuda_hints_wrap_and_show_their_whole_text_in_a_small_window(
        qtbot: QtBot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, width: int) -> None:
    """A driver reporting CUDA 13.0 and no nvcc or cuBLAS: the page says why "Build CUDA backend" is off and
    offers the CUDA build tools. Each hint gets the height its wrapped text needs, inside the page's width."""
    monkeypatch.setenv("FASTMTP_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("FASTMTP_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("FASTMTP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FASTMTP_CUDA_TOOLKIT", "app")
    fake_nvidia_smi(tmp_path / "bin", PIN, ["NVIDIA H200, 9.0, 143771"])
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    win = MainWindow(history=HistoryStore(tmp_path / "history.sqlite3"), settings=Settings(first_run_done=True))
    qtbot.addWidget(win)
    win.resize(width, 700)
    win.show()
    win.show_page("Backend")
    page = win.backend_page
    qtbot.waitUntil(lambda: page.toolchain is not None and page.offer is not None, timeout=WAIT_MS)
    assert not page.build_cuda_button.isEnabled()
    assert "nvcc and cuBLAS were not found" in page.problems_label.text()
    viewport = page.scroll_area.viewport()

    def fits(label: QLabel) -> bool:
        right = label.mapTo(viewport, QPoint(label.width(), 0)).x()
        return (label.isVisible() and label.height() >= label.heightForWidth(label.width())
                and right <= viewport.width())

    for label in (page.problems_label, page.toolkit_label):
        assert label.wordWrap() and label.text()
        qtbot.waitUntil(lambda label=label: fits(label), timeout=60_000)  # the layout settles after the texts
    win.close()
