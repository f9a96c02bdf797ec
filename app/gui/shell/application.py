"""Who the app is to the desktop: its id (the X11 window class, the .desktop file's name), its title and its icon,
and the QApplication named after them. The window (``app.gui.main``) and the screenshot scripts start from here."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QApplication

from app.core.resources import resources_dir
from app.gui.shell.gui_thread_gc import collect_cycles_on_gui_thread

APP_ID = "fastmtp-chat"  # application, organization and .desktop file name: the X11 window class
APP_TITLE = "FastMTP Chat"


def qt_argv(argv: Sequence[str]) -> list[str]:
    """The arguments for QApplication: ``argv[0]`` becomes ``fastmtp-chat``, because Qt's xcb platform names
    the window's WM_CLASS instance after it (``__main__.py`` under ``python -m app``)."""
    return [APP_ID, *list(argv)[1:]]


def app_icon() -> QIcon:
    """The app's icon from ``resources/icons/`` (the SVG and its PNG sizes); a checkout and a frozen bundle
    both find it through ``app.core.resources``."""
    icon = QIcon()
    folder = resources_dir() / "icons"
    for png in sorted(folder.glob(f"{APP_ID}-*.png")):
        icon.addFile(str(png))
    svg = folder / f"{APP_ID}.svg"
    if svg.is_file():
        icon.addFile(str(svg))
    return icon


def configure_application(app: QApplication) -> None:
    """Names and icon: the desktop entry (``fastmtp-chat.desktop``, StartupWMClass=fastmtp-chat) matches the
    window, and the window manager and task bar show the app's icon. Before the first window is created."""
    app.setApplicationName(APP_ID)
    app.setOrganizationName(APP_ID)
    app.setApplicationDisplayName(APP_TITLE)
    app.setDesktopFileName(APP_ID)
    app.setWindowIcon(app_icon())


def make_application(argv: Sequence[str] | None = None) -> QApplication:
    """The QApplication (the running one, else a new one from ``argv``), named and with its icon, collecting
    reference cycles on its own thread only (``gui_thread_gc``)."""
    app = QApplication.instance() or QApplication(qt_argv(argv if argv is not None else sys.argv))
    assert isinstance(app, QApplication)
    configure_application(app)
    collect_cycles_on_gui_thread(app)
    return app
