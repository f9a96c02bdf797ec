"""What the window remembers between starts, apart from the settings: its geometry and splitter, where the HUD
sits and whether it is folded, the drafting mode, and the chat that was open.

A JSON file next to the settings (``window-state.json`` in the config folder). It is not part of
``settings.json`` because none of it is a preference the Settings page edits: it is where the user left
things. Reading never fails (a damaged or missing file gives the defaults, a bad value its default), and
neither does writing: losing the window's place is not worth an error in the user's face.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path

from app import paths, settings_file
from app.errors import StorageError

FILE_NAME = "window-state.json"


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


def load(path: Path | None = None) -> WindowState:
    """The remembered state, or the defaults where there is none or it cannot be read."""
    try:
        data = settings_file.load_json_object(path or state_path())  # None: missing or damaged
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


def save(state: WindowState, path: Path | None = None) -> bool:
    """Write the state atomically; False (and nothing changed) when the config folder cannot be written."""
    try:
        path = path or state_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        settings_file.write_json(path, asdict(state))
    except (OSError, StorageError):
        return False
    return True
