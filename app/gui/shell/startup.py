"""Can Qt start here? Before the window opens, find out why Qt could not show it (a platform plugin's missing
shared libraries, a display that cannot be reached) and say what to install, so ``python -m app`` falls back to
the terminal quickstart instead of letting Qt abort the process.

Qt-light: nothing here starts Qt in this process; the one real attempt runs in a child process.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

PROBE_TIMEOUT_S = 30
_PROBE = ("import sys\nfrom PySide6.QtGui import QGuiApplication\n"
          "app = QGuiApplication(sys.argv[:1])\nprint(app.platformName())\n")
# sonames whose Debian package name does not follow the libfooN / libfoo1-2 rule
_DEB_NAMES = {"libglib-2.0.so.0": "libglib2.0-0", "libgobject-2.0.so.0": "libglib2.0-0",
              "libgthread-2.0.so.0": "libglib2.0-0", "libfreetype.so.6": "libfreetype6"}


def qt_platform_name() -> str:
    """The platform plugin Qt will try first: ``QT_QPA_PLATFORM``'s first name, else the session's
    (wayland on a Wayland session, xcb otherwise, as Qt 6 picks on Linux)."""
    wanted = os.environ.get("QT_QPA_PLATFORM", "").strip()
    if wanted:
        return re.split(r"[;:]", wanted, maxsplit=1)[0].strip()
    if os.environ.get("WAYLAND_DISPLAY") and os.environ.get("XDG_SESSION_TYPE") == "wayland":
        return "wayland"
    return "xcb"


def platform_plugin(name: str) -> Path:
    """The file of PySide6's Qt platform plugin ``name`` (``libqxcb.so``, …)."""
    from PySide6.QtCore import QLibraryInfo

    return Path(QLibraryInfo.path(QLibraryInfo.LibraryPath.PluginsPath)) / "platforms" / f"libq{name}.so"


def parse_ldd_missing(output: str) -> list[str]:
    """The libraries ``ldd`` reports as ``not found``, in order, each once."""
    missing: list[str] = []
    for line in output.splitlines():
        match = re.match(r"\s*(\S+)\s+=>\s+not found", line)
        if match and match.group(1) not in missing:
            missing.append(match.group(1))
    return missing


def deb_package(soname: str) -> str:
    """Debian's package name for a shared library: ``libxcb-icccm.so.4`` -> ``libxcb-icccm4``,
    ``libX11-xcb.so.1`` -> ``libx11-xcb1``, ``libxkbcommon-x11.so.0`` -> ``libxkbcommon-x11-0``."""
    if soname in _DEB_NAMES:
        return _DEB_NAMES[soname]
    match = re.fullmatch(r"(lib.+?)\.so\.(\d+)(?:\..*)?", soname)
    if match is None:
        return soname
    stem = match.group(1).lower()
    return stem + ("-" if stem[-1].isdigit() else "") + match.group(2)


def _library_installed(soname: str) -> bool:
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    try:
        listing = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return True  # cannot tell: the child-process probe still catches it
    return any(line.split(" (", 1)[0].strip() == soname for line in listing.splitlines())


def platform_missing_libraries(name: str) -> list[str]:
    """The shared libraries the platform plugin ``name`` needs and this machine lacks (``ldd``'s
    ``not found``; for xcb also ``libxcb-cursor.so.0``, which Qt 6.5+ opens at run time)."""
    plugin = platform_plugin(name)
    ldd = shutil.which("ldd")
    if not plugin.is_file() or ldd is None:
        return []
    try:
        result = subprocess.run([ldd, str(plugin)], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return []
    missing = parse_ldd_missing(result.stdout)
    if name == "xcb" and not _library_installed("libxcb-cursor.so.0"):
        missing.append("libxcb-cursor.so.0")
    return missing


def describe_missing(name: str, missing: list[str]) -> str:
    """What to tell the user: the libraries and the command that installs them."""
    packages = " ".join(dict.fromkeys(deb_package(lib) for lib in missing))
    return (f"Qt cannot open the window: its {name} platform plugin needs libraries this machine lacks: "
            f"{', '.join(missing)}.\nOn Debian/Ubuntu install them with: sudo apt-get install {packages}\n"
            "(`make run` installs them when it runs as root.)")


def qt_start_problem() -> str | None:
    """None when Qt can open its platform here; else why not, in words, and what to install.

    Linux only: ``ldd`` on the platform plugin names missing libraries; then a child process starts a
    QGuiApplication, so a failure (such as a display that cannot be reached) aborts the child, not this
    process. No ctypes."""
    if not sys.platform.startswith("linux"):
        return None
    name = qt_platform_name()
    missing = platform_missing_libraries(name)
    if missing:
        return describe_missing(name, missing)
    try:
        probe = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                               timeout=PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return f"Qt did not start its {name} platform within {PROBE_TIMEOUT_S} s."
    except OSError as exc:
        return f"Qt could not be checked: {exc}"
    if probe.returncode == 0:
        return None
    lines = [line for line in probe.stderr.splitlines() if line.strip()]
    detail = "\n".join("  " + line for line in lines[-4:])
    where = (f"the display {os.environ.get('DISPLAY', '')!r} (DISPLAY)" if name == "xcb"
             else f"the {name} platform")
    return (f"Qt cannot open the window on {where}; ldd finds no library of its {name} plugin missing, so "
            f"the display itself could not be used. Qt said:\n{detail}")
