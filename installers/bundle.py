"""What the frozen app carries besides the Python code PyInstaller finds on its own.

Kept apart from the ``.spec`` file so a fast test can check the lists without running PyInstaller.
Everything here is relative to the repository root.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
APP_NAME = "fastmtp-chat"
SDIST_FOLDER = "sdist"  # inside the bundle: the pinned llama-cpp-python source, used as FASTMTP_WHEELHOUSE
TOOLS_FOLDER = "tools"  # inside the bundle: cmake and ninja, put on PATH by the entry script
BACKENDS_FOLDER = "backends"  # inside the bundle: the prebuilt portable CPU backend, as a `backend pack` archive
PREBUILT_DIR = ROOT / "build" / "prebuilt-backend"  # where installers/build.py puts that archive before PyInstaller

# Imported by the backend's own llama_cpp package (loaded from the backend folder at run time, so
# PyInstaller cannot see it) or only reached through ``-m`` child processes.
HIDDEN_IMPORTS = [
    "typing_extensions", "diskcache", "jinja2", "jinja2.ext", "jinja2.sandbox",
    "uuid", "fnmatch", "string", "multiprocessing", "ctypes", "ctypes.util",
    "app.native.selftest", "app.engine.worker",
]

# Never needed at run time; some are importable in the build environment and would bloat the bundle.
EXCLUDES = ["tkinter", "pytest", "_pytest", "pytestqt", "mypy", "ruff", "IPython", "matplotlib",
            "PIL", "PyInstaller", "setuptools", "pip"]


def resource_files(root: Path = ROOT) -> list[tuple[str, str]]:
    """(source file, destination folder) for every file under ``resources/``, keeping its folder."""
    base = root / "resources"
    return [(str(path), str(path.parent.relative_to(root)))
            for path in sorted(base.rglob("*")) if path.is_file() and "__pycache__" not in path.parts]


def tool_files() -> list[tuple[str, str]]:
    """CMake (with its modules) and ninja from the build environment's pip packages.

    The app builds its llama.cpp backend at first run; with these inside, the user needs only a
    C/C++ compiler (and the CUDA toolkit for a GPU build).
    """
    import cmake  # the pip package: cmake/data/{bin,share}

    files: list[tuple[str, str]] = []
    data = Path(cmake.__file__).resolve().parent / "data"
    for path in sorted(data.rglob("*")):
        inside = path.relative_to(data).parts
        modules = len(inside) > 2 and inside[0] == "share" and inside[1].startswith("cmake-") and inside[2] != "Help"
        if path.is_file() and (modules or (inside[:1] == ("bin",) and path.stem == "cmake")):
            # cmake and its modules; not ctest, cpack, the manuals or the editor files
            files.append((str(path), str(Path(TOOLS_FOLDER, "cmake", path.parent.relative_to(data)))))
    ninja = ninja_executable(Path(sys.executable))
    if ninja is not None:
        files.append((str(ninja), str(Path(TOOLS_FOLDER, "ninja"))))
    return files


def ninja_executable(python: Path, platform: str = sys.platform) -> Path | None:
    """The ninja binary that the pip ``ninja`` package installed next to this Python's scripts.

    In a venv the scripts sit beside ``python`` (``bin`` or ``Scripts``); a Windows base install keeps
    ``python.exe`` at the top and its scripts in ``Scripts``. Only ``ninja.exe`` counts on Windows: a
    ``ninja`` file there is no program.
    """
    name = "ninja.exe" if platform == "win32" else "ninja"
    folders = [python.parent, python.parent / "Scripts"] if platform == "win32" else [python.parent]
    return next((folder / name for folder in folders if (folder / name).is_file()), None)


def sdist_files(root: Path = ROOT) -> list[tuple[str, str]]:
    """The pinned llama-cpp-python sdist from the cache (fetched and hash-checked first), for offline builds."""
    sys.path.insert(0, str(root))
    try:
        from app.backend.source import fetch_sdist, pinned

        path = fetch_sdist(pinned())
    finally:
        sys.path.remove(str(root))
    return [(str(path), SDIST_FOLDER)]


def backend_files(folder: Path = PREBUILT_DIR) -> list[tuple[str, str]]:
    """The prebuilt portable CPU backend archive(s) installers/build.py made, so the app answers with no compiler."""
    return [(str(path), BACKENDS_FOLDER) for path in sorted(folder.glob("*.tar.xz"))]


# ---------------------------------------------------------------- Windows and macOS

DISPLAY_NAME = "FastMTP Chat"  # the windowed Windows program, the Start-menu entry and the macOS .app
BUNDLE_ID = "io.fastmtp.chat"
MACOS_MINIMUM = "12.0"  # Qt 6.8+ (PySide6 6.11 here) runs on macOS 12 and newer
ICONS = ROOT / "resources" / "icons"
ENTRY = ROOT / "installers" / "entry.py"  # every executable runs it: no command opens the window


@dataclass(frozen=True)
class Executable:
    """One program in the one-folder app; all of them run ``entry.py`` from the same Analysis."""

    name: str  # without ``.exe``
    console: bool  # False: no console window (Windows), a regular GUI app rather than a background one (macOS)
    icon: Path | None  # the .ico on Windows; the macOS icon belongs to the .app (``macos_bundle``)

    def file_name(self, platform: str = sys.platform) -> str:
        return self.name + ".exe" if platform == "win32" else self.name


def executables(platform: str = sys.platform) -> list[Executable]:
    """The programs the spec builds for ``platform`` into one COLLECT folder.

    Windows gets two: ``FastMTP Chat.exe`` without a console for the Start menu (started bare, it opens
    the window) and the console ``fastmtp-chat.exe`` for the CLI, so the window never comes with a
    console and the commands still print. macOS gets one windowed program, wrapped in the .app (PyInstaller
    marks a console one background-only, with no Dock icon); from a terminal it still prints. Linux keeps
    the single console ``fastmtp-chat``.
    """
    if platform == "win32":
        icon = ICONS / "fastmtp-chat.ico"
        return [Executable(DISPLAY_NAME, console=False, icon=icon), Executable(APP_NAME, console=True, icon=icon)]
    if platform == "darwin":
        return [Executable(APP_NAME, console=False, icon=None)]
    return [Executable(APP_NAME, console=True, icon=None)]


def app_version(root: Path = ROOT) -> str:
    """``app.__version__``, read from the source so the spec need not import the app."""
    tree = ast.parse((root / "app" / "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__version__"
                                                for t in node.targets):
            value = ast.literal_eval(node.value)
            if isinstance(value, str):
                return value
    raise ValueError(f"no __version__ string in {root / 'app' / '__init__.py'}")


def app_modules(root: Path = ROOT) -> list[str]:
    """Every module of the ``app`` package by its file, so those reached only by ``-m`` or lazily are inside."""
    base = root / "app"
    names = []
    for path in sorted(base.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        parts = path.relative_to(root).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def windows_version_info(executable: Executable, version: str) -> str:
    """The version resource of a Windows program, in PyInstaller's version-file text.

    Explorer shows it under Properties, and the Inno Setup script reads ``ProductVersion`` from it, so the
    installer's version is the build's own.
    """
    numbers = tuple(int(part) for part in (version.split(".") + ["0"] * 4)[:4])
    strings = {"CompanyName": DISPLAY_NAME, "FileDescription": DISPLAY_NAME, "FileVersion": version,
               "InternalName": executable.name, "OriginalFilename": executable.file_name("win32"),
               "ProductName": DISPLAY_NAME, "ProductVersion": version}
    table = ", ".join(f"StringStruct({key!r}, {value!r})" for key, value in strings.items())
    return (f"VSVersionInfo(ffi=FixedFileInfo(filevers={numbers!r}, prodvers={numbers!r}, mask=0x3f, flags=0x0, "
            f"OS=0x40004, fileType=0x1, subtype=0x0, date=(0, 0)), "
            f"kids=[StringFileInfo([StringTable('040904B0', [{table}])]), "
            f"VarFileInfo([VarStruct('Translation', [1033, 1200])])])\n")


def info_plist(version: str) -> dict[str, Any]:
    """The Info.plist entries of ``FastMTP Chat.app`` beyond PyInstaller's own (name, executable, icon)."""
    return {
        "CFBundleName": DISPLAY_NAME,
        "CFBundleDisplayName": DISPLAY_NAME,
        "CFBundleIdentifier": BUNDLE_ID,
        "CFBundleShortVersionString": version,
        "CFBundleVersion": version,
        "LSMinimumSystemVersion": MACOS_MINIMUM,
        "LSApplicationCategoryType": "public.app-category.productivity",
        "NSHighResolutionCapable": True,
        "NSRequiresAquaSystemAppearance": False,  # follow the system's dark mode
    }


def macos_bundle(version: str) -> dict[str, Any]:
    """The keyword arguments of the spec's ``BUNDLE`` step: ``FastMTP Chat.app`` around the one-folder app."""
    return {"name": f"{DISPLAY_NAME}.app", "icon": str(ICONS / "fastmtp-chat.icns"), "bundle_identifier": BUNDLE_ID,
            "version": version, "info_plist": info_plist(version)}
