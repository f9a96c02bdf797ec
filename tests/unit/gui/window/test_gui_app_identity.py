"""The app says who it is (issue 13, defect 12): application and desktop-file name ``fastmtp-chat`` (the X11
window class the .desktop entry's StartupWMClass names, not ``__main__.py``), and the window icon from
``resources/icons/``, found the same way from a checkout and from a frozen bundle."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from PySide6.QtCore import QSize
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from app.chats.history import HistoryStore
from app.core.resources import resources_dir
from app.gui.main import MainWindow
from app.gui.shell.application import APP_ID, app_icon, configure_application, qt_argv

ROOT = Path(__file__).resolve().parents[4]


def test_the_application_is_named_for_the_desktop_entry_and_has_the_icon(qapp: QApplication) -> None:
    configure_application(qapp)
    assert APP_ID == "fastmtp-chat"
    assert qapp.applicationName() == APP_ID and qapp.desktopFileName() == APP_ID
    assert qapp.organizationName() == APP_ID
    assert qapp.applicationDisplayName() == "FastMTP Chat"
    icon = qapp.windowIcon()
    assert not icon.isNull()
    sizes = {size.width() for size in icon.availableSizes()}
    assert {16, 32, 48, 256, 512} <= sizes
    assert not icon.pixmap(QSize(64, 64)).isNull()
    # Qt's xcb names the window's WM_CLASS instance after argv[0]: ``python -m app`` gives __main__.py
    assert qt_argv([str(ROOT / "app" / "__main__.py"), "-style", "fusion"]) == [APP_ID, "-style", "fusion"]
    assert qt_argv([]) == [APP_ID]


def test_the_window_has_the_icon(qtbot: QtBot, tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "history.sqlite3")
    win = MainWindow(history=store)
    qtbot.addWidget(win)
    try:
        assert not win.windowIcon().isNull()
        assert win.windowTitle() == "FastMTP Chat"
    finally:
        win.close()
        store.close()


def test_the_icon_is_found_in_a_frozen_bundle(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                              qapp: QApplication) -> None:
    bundle = tmp_path / "bundle"
    shutil.copytree(resources_dir() / "icons", bundle / "resources" / "icons")
    monkeypatch.setattr(sys, "_MEIPASS", str(bundle), raising=False)
    icon = app_icon()
    assert not icon.isNull() and {16, 512} <= {size.width() for size in icon.availableSizes()}


CHILD = """
import os, subprocess, sys
os.environ["QT_QPA_PLATFORM"] = "xcb"
from pathlib import Path
from app.gui.main import MainWindow
from app.gui.shell.application import make_application
from app.chats.history import HistoryStore
app = make_application([sys.argv[1]])  # what ``python -m app`` passes: .../app/__main__.py
window = MainWindow(history=HistoryStore(Path(sys.argv[2])))
window.show()
app.processEvents()
wid = str(int(window.winId()))
print(subprocess.run(["xprop", "-id", wid, "WM_CLASS"], capture_output=True, text=True).stdout.strip())
icon = subprocess.run(["xprop", "-id", wid, "_NET_WM_ICON"], capture_output=True, text=True).stdout
print("icon:", "not found" not in icon and "CARDINAL" in icon)
window.close()
"""


@pytest.mark.skipif(shutil.which("xvfb-run") is None or shutil.which("xprop") is None,
                    reason="needs xvfb-run and xprop for a real X11 window")
def test_on_x11_the_window_class_is_fastmtp_chat_and_the_icon_is_set(tmp_path: Path) -> None:
    env = {**os.environ, "QT_QPA_PLATFORM": "xcb"}
    result = subprocess.run(["xvfb-run", "-a", sys.executable, "-c", CHILD, str(ROOT / "app" / "__main__.py"),
                             str(tmp_path / "history.sqlite3")], capture_output=True, text=True, timeout=120,
                            cwd=ROOT, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert 'WM_CLASS(STRING) = "fastmtp-chat", "fastmtp-chat"' in result.stdout, result.stdout
    assert "icon: True" in result.stdout, result.stdout
