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

WAIT_MS = 120_000  # a cached backend build re-links and self-tests: seconds, more on a busy machine


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
    panel.demo_progress.valueChanged.connect(progress.append)
    qtbot.mouseClick(panel.demo_button, Qt.MouseButton.LeftButton)
    assert panel.demo_running and not panel.demo_button.isEnabled()
    qtbot.waitUntil(lambda: win.chat_page.ready, timeout=WAIT_MS)
    assert panel.last_error is None
    manifest = registry.active()
    assert manifest is not None and manifest.flavor == "cpu" and manifest.patched
    assert progress and progress[-1] == 100  # the build's progress, then the demo model
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
