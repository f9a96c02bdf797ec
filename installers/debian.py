"""The ``.deb`` of the one-folder app: ``/opt/fastmtp-chat``, a launcher on PATH, a menu entry and icons.

Kept free of PyInstaller so tests can build the package tree from any folder and check it. The
package has no maintainer scripts: dpkg's own triggers (hicolor-icon-theme, desktop-file-utils)
refresh the icon and menu caches, so removing the package leaves nothing behind.
"""

from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "fastmtp-chat"
INSTALL_DIR = Path("opt") / PACKAGE
ICON_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)
QT_PACKAGES_FILE = ROOT / "installers" / "debian-qt-packages.txt"
# What the frozen app and its backend need besides the Qt libraries: the C and C++ runtimes the
# bundled Python and the prebuilt backend link (libgomp: ggml's OpenMP threads).
# The libc6 floor is computed from the binaries (``libc_floor``): the newest GLIBC_x.y symbol version any of them
# needs, never below Debian 12's 2.36 (the oldest the README promises).
GLIBC_BASE = "2.36"
BASE_DEPENDS = ("libstdc++6", "libgcc-s1", "libgomp1", "zlib1g")

DESKTOP_ENTRY = """[Desktop Entry]
Type=Application
Name=FastMTP Chat
GenericName=Local LLM chat
Comment=Chat with Qwen models on your own GPU, faster with FastMTP drafting
Exec=fastmtp-chat
Icon=fastmtp-chat
Terminal=false
Categories=Utility;Development;
Keywords=LLM;AI;chat;llama;Qwen;
StartupWMClass=fastmtp-chat
"""


def qt_packages() -> list[str]:
    """The Debian packages Qt's xcb and offscreen platforms load (the Makefile installs the same list)."""
    return [line.strip() for line in QT_PACKAGES_FILE.read_text().splitlines() if line.strip()]


def debian_arch(machine: str | None = None) -> str:
    machine = (machine or platform.machine()).lower()
    return {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(machine, machine)


def libc_floor(app_folder: Path) -> str:
    """The ``libc6`` version the package must depend on: the newest ``GLIBC_x.y`` any ELF file of the app (and of
    the backend archives it bundles) requires, at least :data:`GLIBC_BASE`."""
    from installers.elf_needs import glibc_floor

    return glibc_floor(app_folder, GLIBC_BASE)


def control_file(version: str, arch: str, installed_kib: int, glibc: str = GLIBC_BASE) -> str:
    depends = ", ".join([f"libc6 (>= {glibc})", *BASE_DEPENDS, *qt_packages()])
    return (f"Package: {PACKAGE}\n"
            f"Version: {version}\n"
            f"Architecture: {arch}\n"
            "Maintainer: FastMTP Chat team <team@fastmtp.invalid>\n"
            f"Installed-Size: {installed_kib}\n"
            f"Depends: {depends}\n"
            "Section: utils\n"
            "Priority: optional\n"
            "Description: desktop chat for local Qwen models with FastMTP drafting\n"
            " FastMTP Chat downloads and verifies the model and its FastMTP draft sidecar,\n"
            " builds or installs the patched llama.cpp backend, and chats with live speed\n"
            " and draft-acceptance figures. A CPU backend is included, so the built-in demo\n"
            " model answers on first start without a compiler.\n")


def package_tree(app_folder: Path, root: Path, version: str, arch: str | None = None) -> Path:
    """Lay out the package's files under ``root`` (replaced if it exists); returns ``root``."""
    shutil.rmtree(root, ignore_errors=True)
    target = root / INSTALL_DIR
    shutil.copytree(app_folder, target, symlinks=True)
    launcher = root / "usr" / "bin" / PACKAGE
    launcher.parent.mkdir(parents=True)
    # relative, so the launcher also works in a package unpacked somewhere else (dpkg -x, tests)
    launcher.symlink_to(Path("..", "..", INSTALL_DIR, PACKAGE))
    applications = root / "usr" / "share" / "applications"
    applications.mkdir(parents=True)
    (applications / f"{PACKAGE}.desktop").write_text(DESKTOP_ENTRY)
    icons = ROOT / "resources" / "icons"
    hicolor = root / "usr" / "share" / "icons" / "hicolor"
    for size in ICON_SIZES:
        folder = hicolor / f"{size}x{size}" / "apps"
        folder.mkdir(parents=True)
        shutil.copy2(icons / f"{PACKAGE}-{size}.png", folder / f"{PACKAGE}.png")
    (hicolor / "scalable" / "apps").mkdir(parents=True)
    shutil.copy2(icons / f"{PACKAGE}.svg", hicolor / "scalable" / "apps" / f"{PACKAGE}.svg")
    doc = root / "usr" / "share" / "doc" / PACKAGE
    doc.mkdir(parents=True)
    (doc / "copyright").write_text("FastMTP Chat. Bundled: Python, Qt for Python (LGPLv3), llama.cpp (MIT), "
                                   "llama-cpp-python (MIT), CMake (BSD-3-Clause), Ninja (Apache-2.0).\n")
    installed = sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())
    debian = root / "DEBIAN"
    debian.mkdir()
    (debian / "control").write_text(control_file(version, arch or debian_arch(), (installed + 1023) // 1024,
                                                 libc_floor(target)))
    for path in [root, *root.rglob("*")]:  # dpkg-deb refuses group/world-writable control folders
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o755)
    return root


def build_deb(root: Path, out: Path) -> Path:
    """``dpkg-deb --build`` with root ownership; gzip keeps the build fast and any dpkg can read it."""
    out.unlink(missing_ok=True)
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "-z6", "--build", str(root), str(out)],
                   check=True, stdout=subprocess.DEVNULL)
    return out
