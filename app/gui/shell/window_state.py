"""What the window remembers between starts, apart from the settings: its geometry and splitter, where the HUD
sits and whether it is folded, the drafting mode, and the chat that was open.

A JSON file next to the settings (``window-state.json`` in the config folder). It is not part of
``settings.json`` because none of it is a preference the Settings page edits: it is where the user left
things. Reading never fails and never blocks: it goes through ``settings_file.load_state`` (a regular file only,
size-capped), and a file that is damaged or holds a value the window could not use (a geometry or splitter that
is not ASCII, a chat id outside SQLite's range) is logged, moved aside as
``window-state.json.bad``, and the window starts from the defaults. Neither does writing fail: losing the
window's place is not worth an error in the user's face.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from PySide6.QtCore import QRect
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QWidget

from app.core import paths, settings_file
from app.core.errors import StorageError

FILE_NAME = "window-state.json"
MAX_BLOB = 64 * 1024  # a saved geometry or splitter is under 100 bytes
MAX_ID = 2**63 - 1  # SQLite's largest rowid


@dataclass
class WindowState:
    geometry: str = ""  # QWidget.saveGeometry(), base64; "" leaves the window at its default size
    splitter: str = ""  # the chat page's sidebar | chat QSplitter.saveState(), base64
    hud_corner: str = "top-right"
    hud_collapsed: bool = False
    drafting_mode: str = ""  # a key of ``main.MODES``; "" is the first mode
    history: str = ""  # the history file the open chat belongs to (another file's ids mean other chats)
    conversation: int = 0  # the open chat's id in ``history``; 0 for a new, empty chat


def state_path() -> Path:
    return paths.config_dir() / FILE_NAME


def _check(data: dict[str, Any]) -> None:
    """``ValueError`` naming a value that would break the window (a value merely of the wrong type gets its
    default in ``load``): a geometry or splitter that is not ASCII (``QByteArray.fromBase64`` takes ASCII) or is
    far longer than Qt saves, a chat id outside SQLite's range."""
    for name in ("geometry", "splitter"):
        blob = data.get(name, "")
        if isinstance(blob, str) and (len(blob) > MAX_BLOB or not blob.isascii()):
            raise ValueError(f"{name} is not a saved Qt state (ASCII base64)")
    conversation = data.get("conversation", 0)
    if type(conversation) is int and not 0 <= conversation <= MAX_ID:
        raise ValueError("conversation is not a chat id")


def load(path: Path | None = None) -> WindowState:
    """The remembered state, or the defaults where there is none or it cannot be used (then set aside)."""
    try:
        data = settings_file.load_state(path or state_path(), _check)  # None: missing or damaged
    except StorageError:  # no usable config folder
        return WindowState()
    state = WindowState()
    if data is None:
        return state
    for f in fields(WindowState):
        value, default = data.get(f.name), getattr(state, f.name)
        if type(value) is type(default):  # bool is not int here, and int is not bool
            setattr(state, f.name, value)
    return state


def fit_rect(frame: QRect, available: QRect, extra_width: int = 0, extra_height: int = 0) -> QRect:
    """The window's frame moved and shrunk to lie within ``available`` (a screen's available geometry); the
    client area loses ``extra_width`` x ``extra_height`` to the frame. A frame that fits is returned as it is."""
    width = min(frame.width(), available.width())
    height = min(frame.height(), available.height())
    x = min(max(frame.x(), available.x()), available.x() + available.width() - width)
    y = min(max(frame.y(), available.y()), available.y() + available.height() - height)
    return QRect(x, y, max(width - extra_width, 1), max(height - extra_height, 1))


def clamp_to_screen(window: QWidget) -> bool:
    """After ``restoreGeometry``: a window remembered on a larger screen (or at a larger size) is shrunk and moved
    to fit the available area of the screen it opens on (issue 36 item 9), never larger than the screen; True when
    it had to change. A maximized or full-screen window is left to the window manager."""
    if window.isMaximized() or window.isFullScreen():
        return False
    screen = window.screen() or QGuiApplication.primaryScreen()
    if screen is None:
        return False
    available = screen.availableGeometry()
    frame, inner = window.frameGeometry(), window.geometry()
    extra_w, extra_h = frame.width() - inner.width(), frame.height() - inner.height()
    if available.contains(frame):
        return False
    fitted = fit_rect(frame, available, extra_w, extra_h)
    window.resize(fitted.width(), fitted.height())
    window.move(fitted.x(), fitted.y())
    return True


def save(state: WindowState, path: Path | None = None) -> bool:
    """Write the state atomically; False (and nothing changed) when the config folder cannot be written."""
    try:
        path = path or state_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        settings_file.write_json(path, asdict(state))
    except (OSError, StorageError):
        return False
    return True
