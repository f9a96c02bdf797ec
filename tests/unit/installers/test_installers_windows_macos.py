"""The Windows and macOS packaging, checked on Linux: the spec's programs per platform, the .app's
Info.plist, the Windows version resource, the Inno Setup script against what the spec makes, the .dmg
layout, and what the first-run panel tells a Mac user.

PyInstaller builds only for the system it runs on, so the spec is run here the way PyInstaller runs
it (a script with Analysis, EXE, COLLECT, BUNDLE in its namespace), with those names recording what
the spec asks of them for ``win32`` and ``darwin``. The real Linux build is ``installers/build.py``.
"""

from __future__ import annotations

import ast
import importlib.util
import pkgutil
import plistlib
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path, PureWindowsPath
from typing import Any

import pytest

import app
from app.backend.toolchain import Toolchain, platform_note
from app.core import paths, processes
from app.gui.chat.first_run import real_model_advice
from installers import bundle

ROOT = Path(__file__).resolve().parents[3]
SPEC = ROOT / "installers" / "fastmtp-chat.spec"
ISS = ROOT / "installers" / "fastmtp-chat.iss"
MAKE_DMG = ROOT / "installers" / "macos" / "make_dmg.sh"


# ---------------------------------------------------------------- bundle.py


def test_windows_gets_a_windowed_and_a_console_program_other_systems_one() -> None:
    windows = bundle.executables("win32")
    assert [(p.file_name("win32"), p.console) for p in windows] == [("FastMTP Chat.exe", False),
                                                                    ("fastmtp-chat.exe", True)]
    assert all(p.icon == ROOT / "resources" / "icons" / "fastmtp-chat.ico" and p.icon.is_file() for p in windows)
    assert windows[1].file_name("win32") == processes.CONSOLE_PROGRAM  # the program the app's children run
    # macOS: windowed, or PyInstaller marks the .app background-only (no Dock icon, no menu bar)
    assert [(p.file_name("darwin"), p.console) for p in bundle.executables("darwin")] == [("fastmtp-chat", False)]
    assert [(p.file_name("linux"), p.console) for p in bundle.executables("linux")] == [("fastmtp-chat", True)]


def test_the_app_info_plist_carries_the_version_bundle_id_and_minimum_macos() -> None:
    settings = bundle.macos_bundle(app.__version__)
    assert settings["name"] == "FastMTP Chat.app" and settings["bundle_identifier"] == "io.fastmtp.chat"
    assert Path(settings["icon"]).is_file() and settings["icon"].endswith(".icns")
    assert settings["version"] == app.__version__
    plist = plistlib.loads(plistlib.dumps(settings["info_plist"]))  # what PyInstaller writes must be plist-able
    assert plist["CFBundleShortVersionString"] == app.__version__ == bundle.app_version()
    assert plist["CFBundleIdentifier"] == settings["bundle_identifier"]
    assert plist["LSMinimumSystemVersion"] == "12.0"
    assert plist["NSHighResolutionCapable"] is True
    assert "LSBackgroundOnly" not in plist


def test_the_windows_version_resource_names_the_program_and_the_app_version() -> None:
    program = bundle.executables("win32")[0]
    text = bundle.windows_version_info(program, "1.2.3")
    tree = ast.parse(text, mode="eval")  # PyInstaller eval()s this text
    assert isinstance(tree.body, ast.Call) and isinstance(tree.body.func, ast.Name)
    assert tree.body.func.id == "VSVersionInfo"
    structs = {node.args[0].value: node.args[1].value for node in ast.walk(tree)  # type: ignore[attr-defined]
               if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "StringStruct"}
    assert structs["ProductVersion"] == structs["FileVersion"] == "1.2.3"  # the .iss reads ProductVersion
    assert structs["OriginalFilename"] == "FastMTP Chat.exe"
    assert "filevers=(1, 2, 3, 0)" in text and "prodvers=(1, 2, 3, 0)" in text


def test_every_app_module_is_listed_for_the_bundle() -> None:
    listed = bundle.app_modules()
    walked = {"app"} | {module.name for module in pkgutil.walk_packages(app.__path__, "app.")}
    assert set(listed) == walked
    assert {"app.engine.worker", "app.native.selftest", "app.gui.main"} <= set(listed)  # reached by -m or lazily
    assert all(importlib.util.find_spec(name) is not None for name in listed)


@pytest.mark.parametrize(("layout", "platform", "found"), [
    ("venv/Scripts/python.exe venv/Scripts/ninja.exe", "win32", "venv/Scripts/ninja.exe"),
    ("Python311/python.exe Python311/Scripts/ninja.exe", "win32", "Python311/Scripts/ninja.exe"),
    ("venv/Scripts/python.exe venv/Scripts/ninja", "win32", None),  # not a Windows program
    ("venv/bin/python venv/bin/ninja", "linux", "venv/bin/ninja"),
    ("py/python py/Scripts/ninja", "linux", None),
])
def test_ninja_is_found_where_pip_puts_it(tmp_path: Path, layout: str, platform: str, found: str | None) -> None:
    for name in layout.split():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    python = tmp_path / layout.split()[0]
    assert bundle.ninja_executable(python, platform) == (tmp_path / found if found else None)


# ---------------------------------------------------------------- the spec, as PyInstaller runs it


@dataclass
class Made:
    """One spec target as the spec asked for it (PyInstaller's own classes only build for this system)."""

    kind: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    pure: list[Any] = field(default_factory=list)
    scripts: list[Any] = field(default_factory=list)
    binaries: list[Any] = field(default_factory=list)
    datas: list[Any] = field(default_factory=list)


def _run_spec(platform: str, workpath: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Made]]:
    made: dict[str, list[Made]] = {kind: [] for kind in ("Analysis", "PYZ", "EXE", "COLLECT", "BUNDLE")}

    def target(kind: str) -> Any:
        def make(*args: Any, **kwargs: Any) -> Made:
            made[kind].append(Made(kind, args, kwargs))
            return made[kind][-1]
        return make

    namespace: dict[str, Any] = {kind: target(kind) for kind in made}
    namespace.update(SPECPATH=str(SPEC.parent), workpath=str(workpath), DISTPATH=str(workpath / "dist"))
    monkeypatch.setenv("FASTMTP_BUNDLE_SDIST", "0")  # no sdist download for a dry run
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setitem(sys.modules, "bundle", bundle)
    monkeypatch.setattr(sys, "platform", platform)  # the spec has no other input for the target system
    try:
        exec(compile(SPEC.read_text(), str(SPEC), "exec"), namespace)
    finally:
        monkeypatch.undo()
    return made


def test_the_windows_spec_puts_both_programs_into_one_folder(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    made = _run_spec("win32", tmp_path, monkeypatch)
    analysis, = made["Analysis"]
    assert analysis.args[0] == [str(bundle.ENTRY)] and "app.engine.worker" in analysis.kwargs["hiddenimports"]
    exes = made["EXE"]
    assert [(exe.kwargs["name"], exe.kwargs["console"]) for exe in exes] == [("FastMTP Chat", False),
                                                                              ("fastmtp-chat", True)]
    for exe in exes:
        assert exe.kwargs["exclude_binaries"] is True  # one-folder: the binaries go to COLLECT once
        assert exe.kwargs["icon"].endswith("fastmtp-chat.ico") and Path(exe.kwargs["icon"]).is_file()
        version = Path(exe.kwargs["version"]).read_text(encoding="utf-8")
        assert f"StringStruct('ProductVersion', '{app.__version__}')" in version
        assert f"StringStruct('OriginalFilename', '{exe.kwargs['name']}.exe')" in version
    collect, = made["COLLECT"]
    assert list(collect.args[:2]) == exes and collect.kwargs["name"] == bundle.APP_NAME
    assert made["BUNDLE"] == []


def test_the_macos_spec_wraps_the_folder_in_the_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made = _run_spec("darwin", tmp_path, monkeypatch)
    exe, = made["EXE"]
    assert exe.kwargs["name"] == "fastmtp-chat" and exe.kwargs["console"] is False and exe.kwargs["version"] is None
    collect, = made["COLLECT"]
    app_bundle, = made["BUNDLE"]
    assert app_bundle.args == (collect,)
    assert app_bundle.kwargs == bundle.macos_bundle(app.__version__)


def test_the_linux_spec_keeps_one_console_program(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made = _run_spec("linux", tmp_path, monkeypatch)
    assert [(exe.kwargs["name"], exe.kwargs["console"], exe.kwargs["icon"], exe.kwargs["version"])
            for exe in made["EXE"]] == [("fastmtp-chat", True, None, None)]
    assert made["BUNDLE"] == [] and list(tmp_path.iterdir()) == []  # no version files off Windows


# ---------------------------------------------------------------- the Inno Setup script


def _iss_defines() -> dict[str, str]:
    return dict(re.findall(r'^#define (\w+) "([^"]*)"$', ISS.read_text(), re.MULTILINE))


def _iss_section(name: str) -> list[str]:
    text = ISS.read_text()
    body = text.split(f"[{name}]\n", 1)[1].split("\n[", 1)[0]
    return [line for line in body.splitlines() if line and not line.startswith(";")]


def test_the_installer_packs_the_spec_folder_and_starts_the_windowed_program() -> None:
    defines = _iss_defines()
    windowed, console = bundle.executables("win32")
    assert defines["DistFolder"] == bundle.APP_NAME
    assert defines["WindowedExe"] == windowed.file_name("win32") and not windowed.console
    assert defines["ConsoleExe"] == console.file_name("win32") and console.console
    assert _iss_section("Files") == ['Source: "..\\dist\\{#DistFolder}\\*"; DestDir: "{app}"; '
                                     'Flags: recursesubdirs createallsubdirs ignoreversion']
    icons = _iss_section("Icons")
    start_menu = next(line for line in icons if line.startswith('Name: "{autoprograms}'))
    desktop = next(line for line in icons if line.startswith('Name: "{autodesktop}'))
    assert 'Filename: "{app}\\{#WindowedExe}"' in start_menu and "Tasks" not in start_menu
    assert 'Filename: "{app}\\{#WindowedExe}"' in desktop and "Tasks: desktopicon" in desktop
    assert any(line.startswith('Name: "desktopicon"') and "unchecked" in line for line in _iss_section("Tasks"))
    assert all("{#WindowedExe}" in line for line in _iss_section("Run"))
    # the version is the one the spec writes into the console program
    assert 'GetStringFileInfo(BuiltConsoleExe, "ProductVersion")' in ISS.read_text()
    assert '"..\\dist\\" + DistFolder + "\\" + ConsoleExe' in ISS.read_text()


def test_the_installer_icon_exists_and_user_data_is_the_app_data_folder() -> None:
    setup = dict(line.split("=", 1) for line in _iss_section("Setup"))
    icon = ISS.parent / Path(*PureWindowsPath(setup["SetupIconFile"]).parts)
    assert icon.resolve() == (ROOT / "resources" / "icons" / "fastmtp-chat.ico") and icon.is_file()
    assert setup["PrivilegesRequired"] == "lowest"
    assert setup["UninstallDisplayIcon"] == "{app}\\{#WindowedExe}"
    assert "{#AppVersion}" in setup["OutputBaseFilename"] and setup["AppVersion"] == "{#AppVersion}"
    assert _iss_defines()["DataFolder"] == paths.APP_NAME  # platformdirs: %LOCALAPPDATA%\fastmtp-chat
    # only the bundle's own folder is cleared; the user's data goes only when they say so
    assert _iss_section("UninstallDelete") == ['Type: filesandordirs; Name: "{app}\\_internal"']
    assert "MB_DEFBUTTON2" in ISS.read_text() and "not UninstallSilent()" in ISS.read_text()


# ---------------------------------------------------------------- the macOS disk image


def test_the_disk_image_holds_the_app_and_an_applications_link(tmp_path: Path) -> None:
    built = tmp_path / "dist" / "FastMTP Chat.app"
    (built / "Contents" / "MacOS").mkdir(parents=True)
    (built / "Contents" / "Info.plist").write_bytes(plistlib.dumps(bundle.info_plist(app.__version__)))
    (built / "Contents" / "MacOS" / "fastmtp-chat").write_bytes(b"\x7fELF")
    stage = tmp_path / "stage"
    subprocess.run(["bash", str(MAKE_DMG), "--stage", str(stage), str(built)], check=True, capture_output=True)
    assert sorted(path.name for path in stage.iterdir()) == ["Applications", "FastMTP Chat.app"]
    assert (stage / "Applications").is_symlink() and str((stage / "Applications").readlink()) == "/Applications"
    copied = plistlib.loads((stage / "FastMTP Chat.app" / "Contents" / "Info.plist").read_bytes())
    assert copied["CFBundleIdentifier"] == "io.fastmtp.chat"


def test_the_disk_image_script_refuses_what_is_no_app(tmp_path: Path) -> None:
    proc = subprocess.run(["bash", str(MAKE_DMG), str(tmp_path / "missing.app")], capture_output=True, text=True)
    assert proc.returncode == 1 and "is not an app bundle" in proc.stderr


# ---------------------------------------------------------------- what a Mac user is told


def test_the_first_run_panel_tells_a_mac_user_there_is_no_cuda() -> None:
    tools = Toolchain(None, None, None, None, None, None)
    text, flavor = real_model_advice(tools, 4096, platform="darwin")
    note = platform_note("darwin")
    assert flavor == "cpu" and note is not None and text.startswith(note)
    assert "No NVIDIA GPU was found" not in text  # nvidia-smi is no question on a Mac
    linux_text, _ = real_model_advice(tools, 4096, platform="linux")
    assert "Metal" not in linux_text and "No NVIDIA GPU was found" in linux_text


def test_the_signing_entitlements_let_the_app_load_the_backend_it_builds() -> None:
    entitlements = plistlib.loads((ROOT / "installers" / "macos" / "entitlements.plist").read_bytes())
    # the llama.cpp libraries are built on the user's Mac, so no team signature; ctypes callbacks need libffi
    assert entitlements == {"com.apple.security.cs.disable-library-validation": True,
                            "com.apple.security.cs.allow-unsigned-executable-memory": True}
    assert "--entitlements installers/macos/entitlements.plist" in (ROOT / "installers" / "README.md").read_text()
