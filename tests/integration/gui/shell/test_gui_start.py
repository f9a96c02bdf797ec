"""`python -m app` where Qt cannot start: it names the missing libraries (or the display) and runs the terminal
quickstart instead of aborting (issue 13, defect 1). The quickstart itself is stubbed (exit code 7): it builds
a backend and is tested elsewhere; what is checked here is that the app reaches it, with its exit code."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from app import cli
from app.gui import main as gui_main
from app.gui.shell import startup

ROOT = Path(__file__).resolve().parents[4]
STUBBED_APP = ("import sys, app.cli.models as m\n"
               "m.cmd_quickstart = lambda args: (print('QUICKSTART RAN', flush=True), 7)[1]\n"
               "from app.cli import main\nsys.exit(main(sys.argv[1:]))\n")

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or shutil.which("ldd") is None,
                                reason="the check runs ldd on Linux")


def _env(**changes: str | None) -> dict[str, str]:
    env = dict(os.environ)
    for key in ("QT_QPA_PLATFORM", "WAYLAND_DISPLAY", "XDG_SESSION_TYPE", "DISPLAY"):
        env.pop(key, None)
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def _python_m_app(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``python -m app`` (no command) with the quickstart stubbed."""
    return subprocess.run([sys.executable, "-c", STUBBED_APP], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)


def test_ldd_output_of_the_real_xcb_plugin_is_parsed() -> None:
    plugin = startup.platform_plugin("xcb")
    assert plugin.is_file()
    output = subprocess.run(["ldd", str(plugin)], capture_output=True, text=True, check=True).stdout
    assert "libQt6XcbQpa.so.6" in output
    assert startup.parse_ldd_missing(output) == []  # `make test` installs what the xcb plugin needs
    broken = output + "\tlibxcb-icccm.so.4 => not found\n\tlibxcb-keysyms.so.1 => not found\n" \
                      "\tlibxcb-icccm.so.4 => not found\n"
    assert startup.parse_ldd_missing(broken) == ["libxcb-icccm.so.4", "libxcb-keysyms.so.1"]
    assert [startup.deb_package(n) for n in ("libxcb-icccm.so.4", "libxcb-keysyms.so.1", "libxcb-cursor.so.0",
                                              "libX11-xcb.so.1", "libxkbcommon-x11.so.0", "libX11.so.6",
                                              "libxcb-render-util.so.0", "libglib-2.0.so.0")] == \
        ["libxcb-icccm4", "libxcb-keysyms1", "libxcb-cursor0", "libx11-xcb1", "libxkbcommon-x11-0", "libx11-6",
         "libxcb-render-util0", "libglib2.0-0"]


def test_the_platform_qt_will_use(monkeypatch: pytest.MonkeyPatch) -> None:
    names = {"offscreen": "offscreen", "wayland;xcb": "wayland", "xcb:foo=1": "xcb"}
    for value, name in names.items():
        monkeypatch.setenv("QT_QPA_PLATFORM", value)
        assert startup.qt_platform_name() == name
    monkeypatch.delenv("QT_QPA_PLATFORM")
    monkeypatch.setenv("WAYLAND_DISPLAY", "wayland-0")
    monkeypatch.setenv("XDG_SESSION_TYPE", "wayland")
    assert startup.qt_platform_name() == "wayland"
    monkeypatch.setenv("XDG_SESSION_TYPE", "x11")
    assert startup.qt_platform_name() == "xcb"


def test_missing_libraries_are_named_and_the_quickstart_runs_instead(monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    import app.cli.models

    monkeypatch.delenv("QT_QPA_PLATFORM", raising=False)
    monkeypatch.setenv("DISPLAY", ":0")
    monkeypatch.setattr(startup, "platform_missing_libraries",
                        lambda name: ["libxcb-icccm.so.4", "libxcb-keysyms.so.1"] if name == "xcb" else [])
    monkeypatch.setattr(gui_main, "run", lambda: pytest.fail("the window must not start"))
    monkeypatch.setattr(app.cli.models, "cmd_quickstart", lambda args: 7)
    assert cli.main([]) == 7
    err = capsys.readouterr().err
    assert "libxcb-icccm.so.4, libxcb-keysyms.so.1" in err
    assert "sudo apt-get install libxcb-icccm4 libxcb-keysyms1" in err
    assert "terminal quickstart" in err


def test_a_display_that_cannot_work_falls_back_without_an_abort() -> None:
    done = _python_m_app(_env(DISPLAY=":987"))  # no X server there
    assert done.returncode == 7, done.stderr  # the quickstart's exit code, not -SIGABRT
    assert done.returncode != -signal.SIGABRT
    assert "QUICKSTART RAN" in done.stdout
    assert "Qt cannot open the window on the display ':987'" in done.stderr
    assert "Running the terminal quickstart instead of the window." in done.stderr


def test_a_platform_with_a_really_missing_library_is_named_without_an_abort() -> None:
    """PySide6's wayland plugin links libwayland-cursor.so.0, which `make test` does not install."""
    missing = startup.platform_missing_libraries("wayland")
    if not missing:
        pytest.skip("every library of the wayland plugin is installed here")
    done = _python_m_app(_env(QT_QPA_PLATFORM="wayland", WAYLAND_DISPLAY="wayland-0"))
    assert done.returncode == 7, done.stderr
    assert f"needs libraries this machine lacks: {', '.join(missing)}" in done.stderr
    assert "sudo apt-get install " + startup.deb_package(missing[0]) in done.stderr
    assert "QUICKSTART RAN" in done.stdout


def test_a_platform_that_works_opens_the_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QT_QPA_PLATFORM", "offscreen")
    assert startup.qt_start_problem() is None
