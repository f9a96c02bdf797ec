"""The models and backend pages against the real core: a signed release on 127.0.0.1, the real fetcher,
the real trust chain, a real file-backed keyring, and the real (cached) backend build.

Each models-page test gets its own data and config folders, so trusted keys and rollback floors never
leak between tests.
"""

from __future__ import annotations

import json
import os
import re

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

from collections.abc import Iterator
from pathlib import Path

import keyring
import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QLabel, QStackedWidget
from pytestqt.qtbot import QtBot

from app.backend import cuda_wheels, registry
from app.backend.events import BuildEvent
from app.backend.registry import BackendManifest
from app.backend.toolchain import Cublas, CudaToolkit, Tool, Toolchain
from app.core import paths, secrets
from app.core.errors import BuildCancelled, TrustError
from app.gui.backend.backend_page import BackendPage
from app.gui.backend.toolchain_box import TOOLKIT_BUTTON, ToolkitOffer, ToolkitProgress, toolkit_offer
from app.gui.models.download_files import FAILED, OK
from app.gui.models.models_page import ModelsPage
from app.gui.models.quants_box import Q_FITS, Q_NAME, Q_STATE
from app.models.fit import GIB, fit
from app.models.installed import default_destination, list_installed
from app.release import signing, trust
from app.release.catalog import add_user_endpoint, endpoints_for, load_catalog
from app.release.publish import KeyPair, keygen
from tests.helpers.cuda_index import (
    PIN,
    LocalIndex,
    fake_nvidia_smi,
    isolate_pip,
    require_cached_wheelhouse,
    tiny_wheel,
)
from tests.helpers.file_keyring import plaintext_keyring
from tests.helpers.gui_windows import mirrored_models_page
from tests.helpers.module_folders import ModuleFolders
from tests.helpers.release_server import Fault, ReleaseServer
from tests.helpers.signed_release_server import signed_release_files
from tests.helpers.waits import HANG_MS

WAIT_MS = HANG_MS  # a hang guard: every wait ends as soon as its condition holds (tests/helpers/waits.py)
BUILD_WAIT_MS = HANG_MS  # a hang guard: every wait ends as soon as its condition holds (tests/helpers/waits.py)
CATALOG = load_catalog()
MODEL = CATALOG.quant("Q4_K_P").file
SIDECAR = CATALOG.sidecar.file
PATCH = CATALOG.integrity.patch
PAYLOAD = {MODEL: os.urandom(400_000), SIDECAR: os.urandom(60_000), PATCH: b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n"}
SLOW = Fault(trickle_after=32_768, trickle_piece=4096, trickle_delay=0.02)  # ~2 s for the model file


@pytest.fixture
def folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Fresh data and config folders and a real file-backed keyring, all inside the test's folder."""
    monkeypatch.setenv("FASTMTP_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("FASTMTP_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.delenv(secrets.ENV_VAR, raising=False)
    with plaintext_keyring(tmp_path / "keyring.cfg"):
        yield tmp_path


@pytest.fixture
def key(folders: Path) -> KeyPair:
    return keygen(folders / "keys")


@pytest.fixture
def server(folders: Path, key: KeyPair) -> Iterator[ReleaseServer]:
    with ReleaseServer(signed_release_files(folders / "release", PAYLOAD, key.private)) as srv:
        yield srv


def pin(key: KeyPair) -> None:
    trust.pin_key(CATALOG.repo, signing.load_public_key(key.public.read_bytes(), str(key.public)))


@pytest.fixture
def page(qtbot: QtBot, server: ReleaseServer) -> Iterator[ModelsPage]:
    """The page with this module's test server added as a mirror through its own mirror settings."""
    yield from mirrored_models_page(qtbot, server)


def click_download(qtbot: QtBot, page: ModelsPage, quant: str = "Q4_K_P") -> None:
    qtbot.mouseClick(page.download_buttons[quant], Qt.MouseButton.LeftButton)
    assert page.downloading


def installed_files() -> list[str]:
    folder = default_destination(CATALOG.repo)
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


# ----------------------------------------------------------------------------- quantizations and fit


def test_quantizations_show_sizes_and_the_fit_advice(qtbot: QtBot, folders: Path) -> None:
    page = ModelsPage()  # detects GPUs for real (nvidia-smi, or none)
    qtbot.addWidget(page)
    qtbot.waitUntil(lambda: page.ops.idle, timeout=WAIT_MS)
    assert "Looking" not in page.gpu_label.text()
    page.vram.setValue(24)
    page.context.setValue(32_768)
    table = page.quant_table
    assert [table.item(r, Q_NAME).text() for r in range(table.rowCount())] == [q.name for q in CATALOG.quants]
    expected = fit(24 * GIB, 32_768, "by hand")
    assert expected.recommended is not None
    fits = {table.item(r, Q_NAME).text(): table.item(r, Q_FITS).text() for r in range(table.rowCount())}
    assert fits[expected.recommended] == "recommended"
    assert {name for name, text in fits.items() if text in ("yes", "recommended")} == \
        {q.name for q in expected.quants if q.fits}
    assert table.item(0, 1).text().startswith("~") and table.item(0, 1).text().endswith(" GiB")
    page.vram.setValue(4)
    assert {table.item(r, Q_FITS).text() for r in range(table.rowCount())} == {"no"}
    assert "KV cache" in page.fit_note.text()


# ----------------------------------------------------------------------------- downloads


def test_download_shows_per_file_progress_and_installs_verified_files(qtbot: QtBot, page: ModelsPage,
                                                                      server: ReleaseServer, key: KeyPair) -> None:
    pin(key)
    server.set_fault(MODEL, SLOW)
    installed_signals: list[object] = []
    page.model_installed.connect(installed_signals.append)
    chat_requests: list[tuple[str, str]] = []
    page.chat_requested.connect(lambda folder, quant: chat_requests.append((folder, quant)))
    click_download(qtbot, page)
    assert not page.chat_button.isVisible()
    qtbot.waitUntil(lambda: MODEL in page._rows and "/s" in page.file_row(MODEL)["speed"], timeout=WAIT_MS)
    row = page.file_row(MODEL)
    assert row["signature"] == OK and row["sha256"] != OK  # signed manifest verified; file not complete yet
    assert " / " in row["progress"] and row["eta"] != ""
    qtbot.waitUntil(lambda: page.installed is not None or page.last_error is not None, timeout=WAIT_MS)
    assert page.last_error is None and page.installed is not None
    for name in PAYLOAD:
        row = page.file_row(name)
        assert (row["signature"], row["size"], row["sha256"], row["status"]) == (OK, OK, OK, "installed")
        assert (default_destination(CATALOG.repo) / name).read_bytes() == PAYLOAD[name]
    assert "Installed version 1" in page.step_label.text()
    states = {page.quant_table.item(r, Q_NAME).text(): page.quant_table.item(r, Q_STATE).text()
              for r in range(page.quant_table.rowCount())}
    assert states["Q4_K_P"] == "installed" and states["Q2_K_P"] == ""
    assert all(button.isEnabled() for button in page.download_buttons.values())
    # the chat hears of it, and the download is a listed, verified model with its d2t sidecar
    assert installed_signals == [page.installed]
    folder = default_destination(CATALOG.repo)
    [model] = list_installed(folder.parent)
    assert model.verified and model.quant == "Q4_K_P" and model.target == folder / MODEL
    assert model.sidecar_d2t == folder / SIDECAR and model.sidecar_full is None
    assert page.chat_button.isVisible()
    qtbot.mouseClick(page.chat_button, Qt.MouseButton.LeftButton)
    assert chat_requests == [(str(folder), "Q4_K_P")]


def test_a_tampered_file_fails_on_its_own_row_with_nothing_installed(qtbot: QtBot, page: ModelsPage,
                                                                     server: ReleaseServer, key: KeyPair) -> None:
    pin(key)
    server.set_fault(MODEL, Fault(tamper_at=1234, times=10))
    click_download(qtbot, page)
    qtbot.waitUntil(lambda: not page.downloading, timeout=WAIT_MS)
    row = page.file_row(MODEL)
    assert (row["signature"], row["size"], row["sha256"]) == (OK, OK, FAILED)
    assert row["status"].startswith("Failed the sha256 check") and "nothing was installed" in row["status"]
    assert FAILED not in (page.file_row(SIDECAR)["sha256"], page.file_row(SIDECAR)["size"])
    assert page.step_label.text().startswith("Nothing was installed.") and MODEL in page.step_label.text()
    assert installed_files() == []


def test_pause_and_resume_continue_from_the_kept_bytes(qtbot: QtBot, page: ModelsPage, server: ReleaseServer,
                                                       key: KeyPair) -> None:
    pin(key)
    server.set_fault(MODEL, SLOW)
    click_download(qtbot, page)
    qtbot.waitUntil(lambda: MODEL in page._rows and page.file_row(MODEL)["speed"] != "", timeout=WAIT_MS)
    qtbot.mouseClick(page.pause_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.total_label.text().startswith("Paused"), timeout=WAIT_MS)
    assert page.downloading and page.resume_button.isEnabled() and not page.pause_button.isEnabled()
    qtbot.mouseClick(page.resume_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not page.downloading, timeout=WAIT_MS)
    assert page.installed is not None, page.step_label.text()
    resumed = [r.headers.get("range", "") for r in server.gets(MODEL)]
    assert len(resumed) >= 2 and resumed[-1].startswith("bytes=") and resumed[-1] != "bytes=0-"
    assert (default_destination(CATALOG.repo) / MODEL).read_bytes() == PAYLOAD[MODEL]


def test_cancel_keeps_the_parts_and_installs_nothing(qtbot: QtBot, page: ModelsPage, server: ReleaseServer,
                                                     key: KeyPair) -> None:
    pin(key)
    server.set_fault(MODEL, Fault(trickle_after=32_768, trickle_piece=1024, trickle_delay=0.05))
    click_download(qtbot, page)
    qtbot.waitUntil(lambda: MODEL in page._rows and page.file_row(MODEL)["speed"] != "", timeout=WAIT_MS)
    qtbot.mouseClick(page.cancel_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not page.downloading, timeout=WAIT_MS)
    assert "cancelled" in page.step_label.text() and installed_files() == []
    parts = list(Path(os.environ["FASTMTP_DATA_DIR"]).rglob(MODEL + ".part"))
    assert parts and parts[0].stat().st_size > 0


def test_a_download_keeps_running_while_another_page_is_shown(qtbot: QtBot, page: ModelsPage,
                                                              server: ReleaseServer, key: KeyPair) -> None:
    pin(key)
    stack = QStackedWidget()
    qtbot.addWidget(stack)
    other = QLabel("chat")
    stack.addWidget(page)
    stack.addWidget(other)
    stack.show()
    server.set_fault(MODEL, SLOW)
    click_download(qtbot, page)
    qtbot.waitUntil(lambda: MODEL in page._rows, timeout=WAIT_MS)
    stack.setCurrentWidget(other)
    assert not page.isVisible() and page.downloading
    qtbot.waitUntil(lambda: not page.downloading, timeout=WAIT_MS)
    assert page.installed is not None and sorted(PAYLOAD) == sorted(set(installed_files()) & set(PAYLOAD))


# ----------------------------------------------------------------------------- trust on first use


def test_first_use_shows_the_fingerprint_and_trusts_only_on_explicit_confirmation(
        qtbot: QtBot, page: ModelsPage, server: ReleaseServer, key: KeyPair) -> None:
    click_download(qtbot, page)
    qtbot.waitUntil(lambda: page.trust_dialog is not None and page.trust_dialog.isVisible(), timeout=WAIT_MS)
    dialog = page.trust_dialog
    assert dialog is not None
    shown = dialog.fingerprint_label.text().replace("\n", ":")
    assert shown == key.fingerprint
    assert not dialog.trust_button.isEnabled()
    other = keygen(Path(os.environ["FASTMTP_CONFIG_DIR"]) / "other-key")
    dialog.answer.setText(other.fingerprint)  # a pasted fingerprint that is not the release's
    assert not dialog.trust_button.isEnabled() and "not the key" in dialog.hint.text()
    dialog.answer.setText(key.fingerprint.replace(":", "").upper())  # the announced one, pasted
    assert dialog.trust_button.isEnabled()
    assert server.gets(MODEL) == []  # no payload byte before the key is trusted
    qtbot.mouseClick(dialog.trust_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not page.downloading, timeout=WAIT_MS)
    assert page.installed is not None and page.installed.fingerprint == key.fingerprint
    assert [k.fingerprint for k in trust.user_keys(CATALOG.repo)] == [key.fingerprint]


def test_refusing_the_key_installs_nothing_and_pins_nothing(qtbot: QtBot, page: ModelsPage,
                                                            server: ReleaseServer) -> None:
    click_download(qtbot, page)
    qtbot.waitUntil(lambda: page.trust_dialog is not None and page.trust_dialog.isVisible(), timeout=WAIT_MS)
    dialog = page.trust_dialog
    assert dialog is not None
    dialog.answer.setText("yes")
    assert dialog.trust_button.isEnabled()
    qtbot.mouseClick(dialog.refuse_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not page.downloading, timeout=WAIT_MS)
    assert isinstance(page.last_error, TrustError)
    assert "You did not trust the key" in page.step_label.text()
    assert trust.user_keys(CATALOG.repo) == [] and installed_files() == [] and server.gets(MODEL) == []


def test_closing_while_the_key_question_is_open_refuses_it_and_stops(qtbot: QtBot, page: ModelsPage,
                                                                    server: ReleaseServer) -> None:
    click_download(qtbot, page)
    qtbot.waitUntil(lambda: page.trust_dialog is not None and page.trust_dialog.isVisible(), timeout=WAIT_MS)
    page.shutdown()  # what closing the window does
    qtbot.waitUntil(lambda: not page.downloading, timeout=WAIT_MS)
    assert page.trust_dialog is None and "cancelled" in page.step_label.text()
    assert trust.user_keys(CATALOG.repo) == [] and installed_files() == [] and server.gets(MODEL) == []


def test_deleting_the_page_during_the_key_question_stops_the_download(qtbot: QtBot, server: ReleaseServer) -> None:
    add_user_endpoint("plain", server.url(""))
    page = ModelsPage(detect_gpu=False)
    page.show()
    click_download(qtbot, page)
    qtbot.waitUntil(lambda: page.trust_dialog is not None and page.trust_dialog.isVisible(), timeout=WAIT_MS)
    operation = page.download_op
    assert operation is not None
    page.deleteLater()  # e.g. the page replaced in the window: nobody is left to answer
    qtbot.waitUntil(lambda: not operation.running, timeout=WAIT_MS)
    assert trust.user_keys(CATALOG.repo) == [] and installed_files() == []


# ----------------------------------------------------------------------------- mirrors and token


def test_mirror_and_token_settings_use_the_config_and_the_keyring(qtbot: QtBot, page: ModelsPage,
                                                                  server: ReleaseServer) -> None:
    assert page.mirror_list.count() == 1 and endpoints_for()[0].url == server.url("").rstrip("/")
    page.mirror_url.setText("ftp://nope")
    qtbot.mouseClick(page.add_mirror_button, Qt.MouseButton.LeftButton)
    assert "not an http(s) URL" in page.settings_message.text() and page.mirror_list.count() == 1
    page.mirror_list.setCurrentRow(0)
    qtbot.mouseClick(page.remove_mirror_button, Qt.MouseButton.LeftButton)
    assert page.mirror_list.count() == 0 and endpoints_for()[0].is_hub

    qtbot.waitUntil(lambda: page.save_token_button.isEnabled(), timeout=WAIT_MS)
    page.token_edit.setText("hf_test_token_123")
    qtbot.mouseClick(page.save_token_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.token_status.text() == "A token is stored in the keyring.", timeout=WAIT_MS)
    assert keyring.get_password(secrets.SERVICE, secrets.USERNAME) == "hf_test_token_123"
    assert page.token_edit.text() == ""  # not left in the widget
    qtbot.mouseClick(page.clear_token_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.token_status.text().startswith("No token stored"), timeout=WAIT_MS)
    assert keyring.get_password(secrets.SERVICE, secrets.USERNAME) is None


# ----------------------------------------------------------------------------- backend page


@pytest.fixture
def backend_page(qtbot: QtBot) -> Iterator[BackendPage]:
    widget = BackendPage()
    widget.show()
    yield widget
    widget.shutdown()
    qtbot.waitUntil(lambda: widget.ops.idle, timeout=BUILD_WAIT_MS)
    widget.close()
    widget.deleteLater()


def test_backend_page_shows_the_detected_build_tools(qtbot: QtBot, backend_page: BackendPage) -> None:
    qtbot.waitUntil(lambda: backend_page.toolchain is not None, timeout=WAIT_MS)
    tools = backend_page.toolchain
    assert tools is not None and tools.cmake is not None
    assert tools.cmake.version in backend_page.tool_labels["cmake"].text()
    assert backend_page.tool_labels["gpus"].text() != "…"
    assert backend_page.build_cpu_button.isEnabled() == tools.can_build_cpu
    assert backend_page.build_cuda_button.isEnabled() == (tools.can_build_cuda and bool(tools.gpus))


def test_backend_page_shows_a_real_build_then_lists_and_self_tests_it(
        qtbot: QtBot, backend_page: BackendPage, patched_backend: BackendManifest) -> None:
    """The same inputs as the cached patched CPU build, with one small source file touched: the real builder
    recompiles that file and re-links from its cache (seconds), so ninja's [n/N] lines drive the bar."""
    page = backend_page
    qtbot.waitUntil(lambda: page.toolchain is not None, timeout=WAIT_MS)
    tree = paths.cache_dir() / "src" / f"{patched_backend.llama_cpp_python_version}-d2t-" \
        f"{(patched_backend.patch_sha256 or '')[:12]}"
    os.utime(tree / "vendor" / "llama.cpp" / "src" / "llama-cparams.cpp")  # 100 bytes: compiles in a moment
    seen: list[int] = []
    page.progress.valueChanged.connect(seen.append)
    qtbot.mouseClick(page.build_cpu_button, Qt.MouseButton.LeftButton)
    assert page.building and not page.build_cpu_button.isEnabled() and page.cancel_build_button.isEnabled()
    page.hide()  # the user switches to another page (the stack hides this one): the build goes on
    qtbot.waitUntil(lambda: not page.building, timeout=BUILD_WAIT_MS)
    page.show()
    assert page.last_error is None, page.step_label.text()
    assert page.built is not None and page.built.id == patched_backend.id
    assert seen == sorted(seen) and len(set(seen)) >= 5 and seen[-1] == 100
    assert any(10 < value < 92 for value in seen)  # within the compile step: from ninja's [n/N]
    log = page.log.toPlainText()
    assert re.search(r"^\[\d+/\d+\] Building CXX object .*llama-cparams", log, re.MULTILINE)
    assert "==> checking the build tools" in log and "reusing the cached build tree" in log
    assert "==> self-testing the new backend" in log
    assert page.step_label.text().startswith(f"Backend {patched_backend.id} built, self-tested and active")

    row = page.row_texts(patched_backend.id)
    assert (row["flavor"], row["patch"], row["selftest"], row["active"]) == ("cpu", "yes", "ok", "● active")
    assert page.selected_id() == patched_backend.id
    details = page.details.toPlainText()  # labelled lines, not JSON; the JSON is one click away
    assert f"(sha256 {patched_backend.patch_sha256})" in details and "Self-test" in details and "{" not in details
    qtbot.mouseClick(page.copy_json_button, Qt.MouseButton.LeftButton)
    assert json.loads(QApplication.clipboard().text())["patch_sha256"] == patched_backend.patch_sha256
    assert page.selftest_label.text().startswith("Self-test at build time: passed")
    assert not page.use_button.isEnabled()  # already the active one

    qtbot.mouseClick(page.selftest_button, Qt.MouseButton.LeftButton)
    assert page.selftest_label.text().startswith("Self-testing")
    qtbot.waitUntil(lambda: page.selftest_result is not None, timeout=WAIT_MS)
    assert page.selftest_result is not None and page.selftest_result["ok"] is True
    text = page.selftest_label.text()
    assert text.startswith(f"Self-test of {patched_backend.id}: passed") and "d2t sidecar loads" in text


def test_use_makes_the_selected_backend_the_active_one(qtbot: QtBot, backend_page: BackendPage,
                                                      patched_backend: BackendManifest) -> None:
    page = backend_page
    (paths.backends_dir() / "active.json").unlink()  # no active backend, as after `backend remove` of it
    try:
        page.refresh_backends(select=patched_backend.id)
        assert page.row_texts(patched_backend.id)["active"] == "" and page.use_button.isEnabled()
        qtbot.mouseClick(page.use_button, Qt.MouseButton.LeftButton)
        assert registry.active_id() == patched_backend.id
        assert page.row_texts(patched_backend.id)["active"] == "● active" and not page.use_button.isEnabled()
        assert page.selftest_label.text().startswith(f"{patched_backend.id} is the active backend now")
    finally:
        registry.set_active(patched_backend.id)


def test_an_unpatched_backend_cannot_be_made_active_from_the_page(
        qtbot: QtBot, backend_page: BackendPage, patched_backend: BackendManifest,
        unpatched_backend: BackendManifest) -> None:
    page = backend_page
    page.refresh_backends(select=unpatched_backend.id)
    assert page.row_texts(unpatched_backend.id)["patch"].startswith("no")
    assert page.use_button.isEnabled()
    qtbot.mouseClick(page.use_button, Qt.MouseButton.LeftButton)
    assert "without the FastMTP d2t patch" in page.selftest_label.text()
    assert registry.active_id() == patched_backend.id


# ----------------------------------------------------------------------------- backend page: the CUDA toolkit


def test_the_cuda_toolkit_is_offered_only_when_it_is_missing_and_there_is_something_to_build_for(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FASTMTP_CACHE_DIR", str(tmp_path / "cache"))
    cc = Tool("/usr/bin/cc", "13.2")
    bare = Toolchain(cmake=cc, ninja=cc, c_compiler=cc, cxx_compiler=cc, nvcc=None, ccache=None)
    nvcc_only = Toolchain(cmake=cc, ninja=cc, c_compiler=cc, cxx_compiler=cc, nvcc=Tool("/usr/local/bin/nvcc", "13.0"),
                          ccache=None)
    complete = Toolchain(cmake=cc, ninja=cc, c_compiler=cc, cxx_compiler=cc, nvcc=nvcc_only.nvcc, ccache=None,
                         cublas=Cublas("/usr/local/cuda/include", "/usr/local/cuda/lib64", from_wheel=False),
                         cuda_toolkit=CudaToolkit("system", "/usr/local/cuda", "13.0"))
    assert toolkit_offer(bare, "13.0", "auto") == ToolkitOffer("13.0", from_driver=True)
    assert toolkit_offer(nvcc_only, "13.2", "auto") == ToolkitOffer("13.2", from_driver=True)  # no cuBLAS
    assert toolkit_offer(complete, "13.0", "auto") is None
    assert toolkit_offer(bare, None, "auto") is None  # no driver, no GPU: nothing to build for
    assert toolkit_offer(bare, "13.0", "system") is None  # the app's toolkit would not be used
    assert toolkit_offer(bare, "11.8", "auto") is None  # no wheels for it: the toolkit from NVIDIA it is
    assert toolkit_offer(bare, "12.4", "auto") == ToolkitOffer("12.4", from_driver=True)  # it fails in words
    for_another = toolkit_offer(bare, None, "app")
    assert for_another == ToolkitOffer("13.0", from_driver=False)
    assert "another machine" in for_another.text() and "nothing is installed system-wide" in for_another.text()
    for_driver = toolkit_offer(bare, "13.0", "auto")
    assert for_driver is not None and for_driver.text() == (
        "Downloads NVIDIA's CUDA 13 compiler (nvcc) and cuBLAS as pip wheels into the app's cache, for the "
        "driver's CUDA 13.0; nothing is installed system-wide.")
    installed = cuda_wheels.toolkit_dir("13.0")
    installed.mkdir(parents=True)
    (installed / cuda_wheels.MARKER).write_text(json.dumps({"cuda": "13.0"}))
    assert toolkit_offer(bare, "13.0", "app") is None  # the app's own is there already
    assert toolkit_offer(bare, "13.2", "auto") == ToolkitOffer("13.2", from_driver=True)


def test_the_toolkit_progress_follows_the_log_lines_of_a_fetch_and_install() -> None:
    events: list[BuildEvent] = []
    progress = ToolkitProgress(events.append, wheels=3)
    for line in ["downloading nvidia-cuda-nvcc>=13.0,<13.1",
                 "Looking in indexes: http://127.0.0.1:1/simple/",
                 "  Downloading nvidia_cuda_nvcc-13.0.88-py3-none-manylinux2014_x86_64.whl (37.4 MB)",
                 "downloading nvidia-nvvm>=13.0,<13.1, nvidia-cublas>=13.0,<13.1",
                 "Processing /opt/pypi/files/nvidia_nvvm-13.0.88-py3-none-manylinux2010_x86_64.whl",  # file:// index
                 "  Downloading https://example.org/a/nvidia_cublas-13.0.2.14-py3-none-manylinux_2_27_x86_64.whl",
                 "installing 3 wheels from /cache/cuda-wheels/13.0",
                 "Processing /cache/cuda-wheels/13.0/nvidia_cuda_nvcc-13.0.88-py3-none-manylinux2014_x86_64.whl",
                 "Installing collected packages: nvidia-nvvm, nvidia-cuda-nvcc, nvidia-cublas",
                 "Successfully installed nvidia-cublas-13.0.2.14 nvidia-cuda-nvcc-13.0.88 nvidia-nvvm-13.0.88"]:
        progress(line)
    shown = [(e.kind, e.message, e.percent) for e in events if e.kind != "log"]
    assert shown == [
        ("step", "downloading nvidia-cuda-nvcc>=13.0,<13.1", 2.0),
        ("progress", "Downloading nvidia_cuda_nvcc-13.0.88 (37.4 MB)…", 2.0),
        ("step", "downloading nvidia-nvvm>=13.0,<13.1, nvidia-cublas>=13.0,<13.1", 28.0),
        ("progress", "Downloading nvidia_nvvm-13.0.88…", 28.0),
        ("progress", "Downloading nvidia_cublas-13.0.2.14…", 54.0),
        ("step", "installing 3 wheels from /cache/cuda-wheels/13.0", 80.0),
        ("progress", "Unpacking the wheels (about 840 MB)…", 85.0),
        ("progress", "Checking that the toolkit is complete and nvcc runs…", 95.0)]
    logged = [e.message for e in events if e.kind == "log"]
    assert len(logged) == 7 and logged[0].startswith("Looking in indexes")  # pip's lines; ours are steps
    assert all(e.step == "cuda-toolkit" for e in events)


@pytest.fixture(scope="module")
def cached_wheelhouse() -> Path:
    """The CUDA 13.0 wheels `make test` fetched into the user's cache (read before a test moves the cache)."""
    return require_cached_wheelhouse()


@pytest.fixture(scope="module")
def cuda_index(cached_wheelhouse: Path, module_tmp: ModuleFolders) -> Iterator[LocalIndex]:
    """The cached CUDA 13.0 wheels on a real PEP 503 index on 127.0.0.1, and a CUDA 12 nvcc wheel without nvcc."""
    cu12 = tiny_wheel(module_tmp.mktemp("cu12"), "nvidia-cuda-nvcc-cu12", "12.4.131",
                      {"nvidia/cuda_nvcc/bin/ptxas": b""})
    served = LocalIndex(module_tmp.mktemp("cuda-index"), [*sorted(cached_wheelhouse.glob("*.whl")), cu12])
    yield served
    served.close()


@pytest.fixture
def no_cuda_toolkit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cuda_index: LocalIndex) -> Path:
    """No CUDA toolkit anywhere the app looks: the system's hidden (FASTMTP_CUDA_TOOLKIT=app), an empty cache
    folder (returned); a driver reporting CUDA 13.0 with an H200 (a fake nvidia-smi first on PATH); pip sees
    the local index only."""
    isolate_pip(monkeypatch)
    monkeypatch.setenv("PIP_INDEX_URL", cuda_index.url)
    cache = tmp_path / "cache"
    monkeypatch.setenv("FASTMTP_CACHE_DIR", str(cache))
    monkeypatch.setenv(cuda_wheels.TOOLKIT_ENV, "app")
    fake_nvidia_smi(tmp_path / "bin", PIN, ["NVIDIA H200, 9.0, 143771"])
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    return cache


@pytest.fixture
def toolkit_page(qtbot: QtBot, no_cuda_toolkit: Path) -> Iterator[BackendPage]:
    """The backend page on that machine, with the build tools detected."""
    widget = BackendPage()
    widget.show()
    qtbot.waitUntil(lambda: widget.toolchain is not None, timeout=WAIT_MS)
    yield widget
    widget.shutdown()
    qtbot.waitUntil(lambda: widget.ops.idle, timeout=BUILD_WAIT_MS)
    widget.close()
    widget.deleteLater()


@pytest.mark.slow
def test_the_backend_page_gets_the_cuda_toolkit_from_the_index_and_then_can_build_cuda(
        qtbot: QtBot, toolkit_page: BackendPage, no_cuda_toolkit: Path, cuda_index: LocalIndex,
        cached_wheelhouse: Path) -> None:
    page = toolkit_page
    tools = page.toolchain
    assert tools is not None and tools.nvcc is None and tools.cuda_toolkit is None
    assert [gpu.name for gpu in tools.gpus] == ["NVIDIA H200"] and not page.build_cuda_button.isEnabled()
    assert page.toolkit_button.isVisible() and page.toolkit_button.isEnabled()
    assert page.toolkit_button.text() == TOOLKIT_BUTTON == "Get the CUDA build tools (about 530 MB download)"
    assert page.toolkit_label.isVisible()
    assert page.toolkit_label.text() == ToolkitOffer(PIN, from_driver=True).text()
    seen: list[int] = []
    page.progress.valueChanged.connect(seen.append)
    qtbot.mouseClick(page.toolkit_button, Qt.MouseButton.LeftButton)
    assert page.building and page.cancel_build_button.isEnabled()
    assert not (page.toolkit_button.isEnabled() or page.build_cpu_button.isEnabled())
    qtbot.waitUntil(lambda: not page.building, timeout=BUILD_WAIT_MS)
    assert page.last_error is None, page.step_label.text()

    root = no_cuda_toolkit / "cuda-toolkit" / PIN
    assert page.toolkit is not None and page.toolkit.root == root and page.toolkit.nvcc_version == PIN
    assert cuda_wheels.installed_toolkits() == [page.toolkit]
    assert sorted(p.name for p in (no_cuda_toolkit / "cuda-wheels" / PIN).glob("*.whl")) == \
        sorted(p.name for p in cached_wheelhouse.glob("*.whl"))
    log = page.log.toPlainText()
    assert f"Looking in indexes: {cuda_index.url}" in log  # pip downloaded from the local index, and only there
    assert "==> downloading nvidia-cuda-nvcc>=13.0,<13.1\n" in log and "==> installing 7 wheels from" in log
    assert f"==> CUDA toolkit {PIN} ready in {root}" in log
    assert seen == sorted(seen) and len(set(seen)) >= 5 and seen[-1] == 100
    assert "nothing was installed system-wide" in page.step_label.text() and str(root) in page.step_label.text()

    # detected again: the app's toolkit is the CUDA compiler now, and the CUDA build can start
    qtbot.waitUntil(lambda: page.toolchain is not None and page.toolchain.cuda_toolkit is not None, timeout=WAIT_MS)
    tools = page.toolchain
    assert tools.cuda_toolkit == CudaToolkit("app", str(root), PIN)
    assert tools.nvcc == Tool(str(root / "bin" / "nvcc"), PIN) and tools.can_build_cuda
    nvcc_text = page.tool_labels["nvcc"].text()
    assert str(root / "bin" / "nvcc") in nvcc_text and "the app's own CUDA toolkit" in nvcc_text
    assert page.tool_labels["cublas"].text() == f"{root / 'lib'} (pip wheel)"
    assert page.build_cuda_button.isEnabled()
    assert not page.toolkit_button.isVisible() and not page.toolkit_label.isVisible()


@pytest.mark.slow
def test_cancelling_the_cuda_toolkit_install_leaves_nothing_installed(
        qtbot: QtBot, toolkit_page: BackendPage, no_cuda_toolkit: Path, cached_wheelhouse: Path) -> None:
    page = toolkit_page
    house = no_cuda_toolkit / "cuda-wheels" / PIN  # downloaded already: the op goes straight to the install
    house.mkdir(parents=True)
    for wheel in cached_wheelhouse.glob("*.whl"):
        (house / wheel.name).symlink_to(wheel)
    qtbot.mouseClick(page.toolkit_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "Processing " in page.log.toPlainText(), timeout=WAIT_MS)  # pip is unpacking
    assert page.cancel_build_button.text() == "Cancel download"
    qtbot.mouseClick(page.cancel_build_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not page.building, timeout=WAIT_MS)
    assert isinstance(page.last_error, BuildCancelled), page.step_label.text()
    assert page.step_label.text().startswith("Cancelled; no CUDA toolkit was installed.")
    assert f"==> the wheelhouse {house} already holds every CUDA {PIN} wheel" in page.log.toPlainText()
    assert list((no_cuda_toolkit / "cuda-toolkit").iterdir()) == []  # no staging, no half toolkit
    assert cuda_wheels.installed_toolkits() == [] and page.toolkit is None
    assert page.toolkit_button.isVisible() and page.toolkit_button.isEnabled()  # offered again
    assert not page.build_cuda_button.isEnabled()


def test_cuda_toolkit_errors_are_shown_in_words(qtbot: QtBot, toolkit_page: BackendPage, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch, cuda_index: LocalIndex) -> None:
    page = toolkit_page
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple/")  # nothing listens there: no network
    qtbot.mouseClick(page.toolkit_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not page.building, timeout=WAIT_MS)
    assert isinstance(page.last_error, cuda_wheels.CudaWheelsUnreachable)
    text = page.step_label.text()
    assert text.startswith("Getting the CUDA build tools failed; nothing was installed.")
    assert "the package index was not reachable" in text and "Check the internet connection" in text
    assert "color" in page.step_label.styleSheet()
    assert page.toolkit_button.isEnabled() and cuda_wheels.installed_toolkits() == []

    # a CUDA 12 driver: PyPI's CUDA 12 nvcc wheel holds no nvcc, which the page says before the large download
    monkeypatch.setenv("PIP_INDEX_URL", cuda_index.url)
    fake_nvidia_smi(tmp_path / "bin", "12.4", ["NVIDIA H200, 9.0, 143771"])
    page.refresh_toolchain()
    qtbot.waitUntil(lambda: page.offer is not None and page.offer.cuda == "12.4", timeout=WAIT_MS)
    assert page.toolkit_label.text().startswith("Downloads NVIDIA's CUDA 12 compiler")
    qtbot.mouseClick(page.toolkit_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not page.building, timeout=WAIT_MS)
    text = page.step_label.text()
    assert "holds no nvcc compiler" in text and "Update the NVIDIA driver to 580 or newer" in text
    assert "color" in page.step_label.styleSheet()
    assert not list((Path(os.environ["FASTMTP_CACHE_DIR"]) / "cuda-wheels" / "12.4").glob("nvidia_cublas*"))


# ----------------------------------------------------------------------------- in the window


def test_the_window_has_the_models_and_backend_pages(qtbot: QtBot, folders: Path) -> None:
    from app.chats.history import HistoryStore
    from app.gui.main import MainWindow

    history = HistoryStore(folders / "history.sqlite3")
    window = MainWindow(history=history)
    qtbot.addWidget(window)
    window.show()
    names = [window.nav.item(row).text() for row in range(window.nav.count())]
    assert names[:3] == ["Chat", "Models", "Backend"] and names[-1] == "Settings"
    window.nav.setCurrentRow(names.index("Models"))
    assert isinstance(window.pages.currentWidget(), ModelsPage)
    window.nav.setCurrentRow(names.index("Backend"))
    backend = window.pages.currentWidget()
    assert isinstance(backend, BackendPage) and backend.isVisible()
    qtbot.waitUntil(lambda: backend.toolchain is not None, timeout=WAIT_MS)
    window.close()
    history.close()
