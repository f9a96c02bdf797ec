"""The first-run panel against the real core: the demo model from a fresh machine, and the real set-up."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from app.backend import registry
from app.backend.registry import BackendManifest
from app.backend.toolchain import Gpu, Tool, Toolchain
from app.chats.history import HistoryStore
from app.gui.chat.first_run import real_model_advice
from app.gui.main import MainWindow
from app.settings import app_settings
from tests.helpers.waits import HANG_MS

WAIT_MS = HANG_MS  # a hang guard: every wait ends as soon as its condition holds (tests/helpers/waits.py)


@pytest.fixture
def fresh_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, patched_backend: BackendManifest) -> Path:
    """Empty data and config folders: no backend active, no settings. The build cache stays, so the CPU
    backend the demo needs (the same inputs as ``patched_backend``) is rebuilt from its cached tree."""
    monkeypatch.setenv("FASTMTP_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("FASTMTP_CONFIG_DIR", str(tmp_path / "config"))
    assert registry.active() is None
    return tmp_path


def test_first_run_tries_the_demo_model_then_a_second_start_goes_straight_to_chat(
        qtbot: QtBot, fresh_machine: Path) -> None:
    history = HistoryStore(fresh_machine / "history.sqlite3")
    win = MainWindow(history=history)
    qtbot.addWidget(win)
    win.show()
    win.start()
    panel = win.first_run
    assert win.first_run_visible() and win.current_page() == "Chat"
    assert panel.demo_button.isVisible() and panel.build_button.isVisible()
    assert "CPU backend is built" in panel.demo_text.text()
    qtbot.waitUntil(lambda: panel.toolchain is not None, timeout=WAIT_MS)
    assert panel.build_button.text() in ("Build the CPU backend", "Build the CUDA backend")

    progress: list[int] = []
    panel.build_status.bar.valueChanged.connect(progress.append)
    qtbot.mouseClick(panel.demo_button, Qt.MouseButton.LeftButton)
    assert panel.demo_running and not panel.demo_button.isEnabled()
    qtbot.waitUntil(lambda: win.chat_page.ready, timeout=WAIT_MS)
    assert panel.last_error is None
    manifest = registry.active()
    assert manifest is not None and manifest.flavor == "cpu" and manifest.patched
    assert progress and progress[-1] == 100  # the build's progress, then the demo model
    assert win.build_job.outcome == "built" and win.build_job.log_count > 0
    assert not win.first_run_visible() and win.chat_page.chat.isVisible()
    assert app_settings.load().first_run_done
    assert win.model_selector.model_box.currentText() == "Demo model (built-in)"

    done: list[dict[str, Any]] = []
    tokens: list[dict[str, Any]] = []
    win.bridge.done.connect(done.append)
    win.bridge.token.connect(tokens.append)
    win.chat_page.chat.input.setPlainText("Hello, demo model!")
    qtbot.keyClick(win.chat_page.chat.input, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: bool(done), timeout=WAIT_MS)
    assert tokens and done[0]["text"].strip()
    last = win.chat_page.chat.entries[-1]
    assert last.role == "assistant" and last.text.strip() == done[0]["text"].strip()
    win.close()

    second = MainWindow(history=history)
    qtbot.addWidget(second)
    second.show()
    second.start()
    assert not second.first_run_visible() and second.chat_page.chat.isVisible()
    qtbot.waitUntil(lambda: second.chat_page.ready, timeout=WAIT_MS)
    second.close()
    history.close()


def test_choosing_a_quantization_opens_the_models_page_and_is_remembered(
        qtbot: QtBot, fresh_machine: Path) -> None:
    win = MainWindow(history=HistoryStore(fresh_machine / "history.sqlite3"))
    qtbot.addWidget(win)
    win.show()
    win.start()
    assert win.first_run_visible()
    qtbot.mouseClick(win.first_run.models_button, Qt.MouseButton.LeftButton)
    assert win.current_page() == "Models"
    assert app_settings.load().first_run_done
    assert win.settings_page.current().first_run_done  # saving the Settings page keeps it
    assert win.needs_first_run()  # still no backend: the next start offers the panel again
    win.history.close()


def test_a_build_started_on_the_panel_is_the_one_build_every_page_shows(qtbot: QtBot, fresh_machine: Path) -> None:
    """One build state for the window: the Backend page sees the panel's build (progress, step, log, Cancel; no
    second build), and its Cancel stops the panel's build."""
    win = MainWindow(history=HistoryStore(fresh_machine / "history.sqlite3"))
    qtbot.addWidget(win)
    win.show()
    win.start()
    panel, page, job = win.first_run, win.backend_page, win.build_job
    assert "the build tree is cached" in panel.demo_text.text()  # the estimate, said before the click
    qtbot.mouseClick(panel.demo_button, Qt.MouseButton.LeftButton)
    assert job.running and job.options is not None and job.options.flavor == "cpu"
    assert page.building and not page.build_cpu_button.isEnabled() and page.cancel_build_button.isEnabled()
    assert not panel.build_button.isEnabled() and not panel.demo_button.isEnabled()
    assert panel.build_status.isVisible() and panel.build_status.cancel_button.isVisible()
    assert "Building the CPU backend" in page.step_label.text() and "elapsed" in page.step_label.text()
    assert not job.start(job.options)  # no second build beside it
    page.build("cpu")  # nor from the Backend page's own button
    assert job.log_count > 0 and page.log.toPlainText().startswith("estimate: about")
    qtbot.mouseClick(page.cancel_build_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not job.running, timeout=WAIT_MS)
    assert job.outcome == "cancelled" and registry.active() is None  # nothing half-built is installed
    assert panel.last_error is not None and panel.demo_button.isEnabled()
    assert "cancelled" in panel.build_status.title.text() and page.log.toPlainText()  # the log stays
    assert page.build_cpu_button.isEnabled() == (page.toolchain is None or page.toolchain.can_build_cpu)

    qtbot.mouseClick(panel.demo_button, Qt.MouseButton.LeftButton)  # again, to the end this time
    qtbot.waitUntil(lambda: win.chat_page.ready, timeout=WAIT_MS)
    assert job.outcome == "built" and page.built is not None and page.built.id == registry.active_id()
    assert "built, self-tested and active" in page.step_label.text()
    win.close()
    win.history.close()


def _tools(gpus: list[Gpu], nvcc: bool) -> Toolchain:
    tool = Tool("/usr/bin/true", "1.0")
    return Toolchain(cmake=tool, ninja=tool, c_compiler=tool, cxx_compiler=tool, nvcc=tool if nvcc else None,
                     ccache=None, gpus=gpus, cublas=None)


def test_the_real_model_card_proposes_a_backend_and_a_fitting_quantization() -> None:
    from app.backend.toolchain import Cublas

    big = Gpu("NVIDIA RTX 6000 Ada", "8.9", 49140)
    tools = _tools([big], nvcc=True)
    tools.cublas = Cublas("/usr/include", "/usr/lib", from_wheel=False)
    text, flavor = real_model_advice(tools, 32768)
    assert flavor == "cuda" and "Build the CUDA backend" in text and "RTX 6000 Ada (48 GiB)" in text
    assert "Download Q" in text and "so it fits" in text

    text, flavor = real_model_advice(_tools([big], nvcc=False), 32768)
    assert flavor == "cpu" and "cannot be built yet" in text

    text, flavor = real_model_advice(_tools([Gpu("NVIDIA GT 1030", "6.1", 2048)], nvcc=True), 32768)
    assert "No quantization fits" in text

    text, flavor = real_model_advice(_tools([], nvcc=False), 4096)
    assert flavor == "cpu" and "No NVIDIA GPU" in text
