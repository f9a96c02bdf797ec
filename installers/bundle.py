"""What the frozen app carries besides the Python code PyInstaller finds on its own.

Kept apart from the ``.spec`` file so a fast test can check the lists without running PyInstaller.
Everything here is relative to the repository root.
"""

from __future__ import annotations

import sys
from pathlib import Path

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
    "app.backend.selftest", "app.engine.worker",
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
        if path.is_file() and (modules or inside[:1] == ("bin",) and path.stem == "cmake"):
            # cmake and its modules; not ctest, cpack, the manuals or the editor files
            files.append((str(path), str(Path(TOOLS_FOLDER, "cmake", path.parent.relative_to(data)))))
    ninja = Path(sys.executable).parent / ("ninja.exe" if sys.platform == "win32" else "ninja")
    if ninja.is_file():
        files.append((str(ninja), str(Path(TOOLS_FOLDER, "ninja"))))
    return files


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
