"""Windows build tools, checked on Linux: finding MSVC (vswhere, vcvarsall), its environment, and the
child-process settings that keep the windowed app from flashing console windows.

Nothing here runs Windows. vswhere is stood in for by a real script at the place Visual Studio puts it,
in a Program Files tree built under tmp_path; the vcvarsall environment is a ``set`` dump as cmd prints it.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path, PureWindowsPath

import pytest

from app.backend import toolchain
from app.backend.builder import BuildOptions, Reporter, configure, plan_build
from app.backend.events import BuildEvent
from app.core import processes
from app.core.cancel import CancelToken

# What `cmd /s /c "call vcvarsall.bat x64 >nul && set"` prints (shortened; CRLF line ends), with cmd's hidden
# per-drive entry, a value holding '=' and the mixed-case names Windows uses.
VCVARS_SET_DUMP = (Path(__file__).parent / "fixtures" / "vcvarsall-set.txt").read_bytes().decode("utf-8")

# The same user's environment before vcvarsall ran (as the app sees it, started from the Start menu).
BEFORE = {
    "ALLUSERSPROFILE": r"C:\ProgramData",
    "COMMONPROGRAMFILES(X86)": r"C:\Program Files (x86)\Common Files",
    "COMSPEC": r"C:\WINDOWS\system32\cmd.exe",
    "Path": r"C:\WINDOWS\system32;C:\Users\Ana Núñez\AppData\Local\Programs\FastMTP Chat",
    "PROMPT": "$P$G",
    "USERPROFILE": r"C:\Users\Ana Núñez",
    "FASTMTP_DATA_DIR": r"D:\fastmtp",
}


def _write(path: Path, text: str = "", executable: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if executable:
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _install(root: Path) -> Path:
    """A Visual Studio installation folder with its vcvarsall.bat; returns the .bat."""
    return _write(root / "VC" / "Auxiliary" / "Build" / "vcvarsall.bat", "@echo off\n")


def test_a_vcvarsall_set_dump_parses_to_upper_case_names_with_whole_values() -> None:
    env = toolchain.parse_set_bytes(VCVARS_SET_DUMP.encode("utf-16-le"))  # as `cmd /u` pipes it
    assert env == toolchain.parse_set_output(VCVARS_SET_DUMP)
    assert env["USERPROFILE"] == r"C:\Users\Ana Núñez"  # whole, and no '\r' left from the CRLF line ends
    assert "" not in env and not any(name.startswith("=") for name in env)  # cmd's per-drive entry
    assert env["PATH"].startswith(r"C:\Program Files\Microsoft Visual Studio\2022\BuildTools\VC\Tools")
    assert env["_CL_"] == "/DFOO=1"  # split at the first '=' only
    assert env["VSCMD_ARG_APP_PLAT"] == "Desktop"
    assert env["WINDOWSSDKDIR"].endswith("Windows Kits\\10\\")
    assert set(env) >= {"INCLUDE", "LIB", "LIBPATH", "COMMONPROGRAMFILES(X86)"}


def test_only_what_vcvarsall_changed_goes_into_the_build_environment() -> None:
    delta = toolchain.env_delta(BEFORE, toolchain.parse_set_output(VCVARS_SET_DUMP))
    assert {"INCLUDE", "LIB", "LIBPATH", "PATH", "DEVENVDIR", "VSCMD_ARG_TGT_ARCH", "WINDOWSSDKDIR"} <= set(delta)
    assert not {"ALLUSERSPROFILE", "PROMPT", "USERPROFILE", "COMSPEC", "COMMONPROGRAMFILES(X86)"} & set(delta)


def test_the_child_environment_has_msvc_over_the_app_environment_and_no_name_twice() -> None:
    delta = toolchain.env_delta(BEFORE, toolchain.parse_set_output(VCVARS_SET_DUMP))
    tools = toolchain.Toolchain(None, None, None, None, None, None, build_env=delta)
    env = tools.child_env(BEFORE)
    assert env is not None
    assert [name for name in env if name.upper() == "PATH"] == ["PATH"]  # 'Path' gave way; Windows would see both
    assert env["PATH"].split(";")[0].endswith(r"bin\HostX64\x64")
    assert env["FASTMTP_DATA_DIR"] == r"D:\fastmtp"  # the app's own settings reach the build
    assert env["INCLUDE"] == delta["INCLUDE"]
    assert toolchain.Toolchain(None, None, None, None, None, None).child_env(BEFORE) is None  # inherit as is


def test_vswhere_finds_the_installation_with_the_cpp_tools(tmp_path: Path) -> None:
    program_files_x86 = tmp_path / "Program Files (x86)"
    install = tmp_path / "Program Files" / "Microsoft Visual Studio" / "2022" / "BuildTools"
    vcvarsall = _install(install)
    args_file = tmp_path / "vswhere-args.txt"
    vswhere = toolchain.vswhere_path(program_files_x86)
    _write(vswhere, f"#!/bin/sh\nprintf '%s\\n' \"$@\" > '{args_file}'\necho '{install}'\n", executable=True)

    assert toolchain.find_vcvarsall(program_files_x86, tmp_path / "Program Files") == vcvarsall
    asked = args_file.read_text().splitlines()
    assert asked == toolchain.vswhere_command(vswhere)[1:]
    assert asked[asked.index("-requires") + 1] == "Microsoft.VisualStudio.Component.VC.Tools.x86.x64"
    assert asked[asked.index("-products") + 1] == "*"  # Build Tools count, not only the IDE editions
    assert asked[asked.index("-property") + 1] == "installationPath"


def test_without_vswhere_the_newest_visual_studio_folder_wins(tmp_path: Path) -> None:
    program_files, program_files_x86 = tmp_path / "Program Files", tmp_path / "Program Files (x86)"
    _install(program_files_x86 / "Microsoft Visual Studio" / "2019" / "Enterprise")
    _install(program_files / "Microsoft Visual Studio" / "2022" / "Community")
    newest = _install(program_files / "Microsoft Visual Studio" / "18" / "BuildTools")  # VS 2026 names it 18
    (program_files / "Microsoft Visual Studio" / "2022" / "Professional").mkdir(parents=True)  # no C++ tools
    assert toolchain.find_vcvarsall(program_files_x86, program_files) == newest


def test_vswhere_without_a_cpp_installation_and_no_folders_finds_nothing(tmp_path: Path) -> None:
    program_files_x86 = tmp_path / "Program Files (x86)"
    _write(toolchain.vswhere_path(program_files_x86), "#!/bin/sh\nexit 0\n", executable=True)
    assert toolchain.find_vcvarsall(program_files_x86, tmp_path / "Program Files") is None


def test_the_vcvars_command_survives_spaces_in_the_path() -> None:
    bat = PureWindowsPath(r"C:\Program Files\Microsoft Visual Studio\2022\BuildTools\VC\Auxiliary\Build\vcvarsall.bat")
    line = toolchain.vcvars_command(bat, "x64", r"C:\WINDOWS\system32\cmd.exe")
    assert line.startswith(r'"C:\WINDOWS\system32\cmd.exe" /u /s /c "')
    # cmd /s removes the first and the last quote after /c and runs the rest as it is
    inner = line.split(" /c ", 1)[1]
    assert inner[0] == inner[-1] == '"'
    assert inner[1:-1] == f'call "{bat}" x64 >nul && set'


def test_a_developer_prompt_or_cc_needs_no_vcvarsall(tmp_path: Path) -> None:
    cl_dir = tmp_path / "msvc-bin"
    _write(cl_dir / "cl", "#!/bin/sh\n", executable=True)
    empty = tmp_path / "nothing"
    assert toolchain.msvc_build_env({"PATH": str(cl_dir)}) == {}
    assert toolchain.msvc_build_env({"PATH": str(empty), "CC": "clang-cl"}) == {}
    no_vs = {"PATH": str(empty), "ProgramFiles(x86)": str(tmp_path / "x86"), "ProgramFiles": str(tmp_path / "pf")}
    assert toolchain.msvc_build_env(no_vs) == {}  # no Visual Studio anywhere: the doctor says what to install


def test_on_windows_the_compiler_is_cl_from_the_msvc_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cl = _write(tmp_path / "HostX64" / "x64" / "cl", "#!/bin/sh\n", executable=True)
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.delenv("CXX", raising=False)
    assert toolchain._compilers({"PATH": str(cl.parent)}, "win32") == (str(cl), str(cl))
    cc, cxx = toolchain._compilers({"PATH": str(cl.parent)}, "linux")  # elsewhere MSVC's PATH is not looked at
    assert cc != str(cl) and cxx != str(cl)


def test_build_tools_are_searched_in_scripts_beside_a_windows_python() -> None:
    base = PureWindowsPath(r"C:\Users\Ana Núñez\AppData\Local\Programs\Python\Python311\python.exe")
    assert toolchain.tool_dirs(base, "win32") == [r"C:\Users\Ana Núñez\AppData\Local\Programs\Python\Python311",
                                                  r"C:\Users\Ana Núñez\AppData\Local\Programs\Python\Python311\Scripts"]
    venv = PureWindowsPath(r"D:\fastmtp\.venv\Scripts\python.exe")
    assert toolchain.tool_dirs(venv, "win32")[0] == r"D:\fastmtp\.venv\Scripts"
    assert toolchain.tool_dirs(Path("/opt/venv/bin/python"), "linux") == ["/opt/venv/bin"]


def test_children_start_without_a_console_window_only_on_windows() -> None:
    assert processes.creationflags("win32") == 0x08000000
    assert processes.creationflags("win32") == getattr(subprocess, "CREATE_NO_WINDOW", 0x08000000)
    assert processes.creationflags("linux") == 0 and processes.creationflags("darwin") == 0
    assert processes.kill_tree_command(4242) == ["taskkill", "/F", "/T", "/PID", "4242"]


def test_the_windowed_windows_app_runs_its_children_with_the_console_program(tmp_path: Path) -> None:
    """In the installed folder both programs sit side by side; the children use the console one."""
    windowed = _write(tmp_path / "FastMTP Chat" / "FastMTP Chat.exe")
    console = _write(tmp_path / "FastMTP Chat" / processes.CONSOLE_PROGRAM)
    assert processes.CONSOLE_PROGRAM == "fastmtp-chat.exe"
    assert processes.child_python(str(windowed), "win32", frozen=True) == str(console)
    assert processes.child_python(str(console), "win32", frozen=True) == str(console)
    assert processes.child_python(str(windowed), "win32", frozen=False) == str(windowed)  # a checkout's python
    assert processes.child_python(str(windowed), "linux", frozen=True) == str(windowed)
    console.unlink()  # a folder without it (a hand-made build): itself, which `entry.py` also handles
    assert processes.child_python(str(windowed), "win32", frozen=True) == str(windowed)
    assert processes.child_python() == sys.executable  # here: not frozen


def test_a_streamed_command_runs_in_the_environment_it_is_given() -> None:
    lines: list[str] = []
    env = dict(os.environ, FASTMTP_PROBE="from vcvarsall")
    code, _ = processes.run_streaming([sys.executable, "-c", "import os; print(os.environ['FASTMTP_PROBE'])"],
                                      lines.append, CancelToken(), env=env)
    assert code == 0 and lines == ["from vcvarsall"]


def test_cmake_configure_gets_the_toolchain_build_environment(tmp_path: Path) -> None:
    """The builder's own configure step runs cmake in ``Toolchain.child_env``: how MSVC reaches the build."""
    tools = toolchain.detect()
    if tools.cmake is None or tools.ninja is None:
        pytest.skip("cmake and ninja come with the app's environment; this one lacks them")
    tools.build_env = {"FASTMTP_PROBE": "msvc-environment"}
    tree = tmp_path / "tree"
    _write(tree / "CMakeLists.txt", 'cmake_minimum_required(VERSION 3.21)\nproject(probe NONE)\n'
                                    'message(STATUS "probe=$ENV{FASTMTP_PROBE}")\n')
    events: list[BuildEvent] = []
    plan = plan_build(BuildOptions(flavor="cpu"), tools)
    configure(plan, tree, tmp_path / "build", Reporter(events.append), CancelToken())
    assert any(event.message.endswith("probe=msvc-environment") for event in events)
    assert "FASTMTP_PROBE" not in os.environ  # only the build's child saw it


def test_the_platform_note_says_macos_has_no_cuda() -> None:
    note = toolchain.platform_note("darwin")
    assert note is not None and "no CUDA" in note and "Metal" in note and "xcode-select" in note
    windows = toolchain.platform_note("win32")
    assert windows is not None and "MSVC" in windows
    assert toolchain.platform_note("linux") is None


def test_a_windows_cuda_toolkit_layout_gives_cublas_and_the_driver_library(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "NVIDIA GPU Computing Toolkit" / "CUDA" / "v13.0"  # what CUDA_PATH names on Windows
    _write(root / "include" / "cublas_v2.h")
    _write(root / "lib" / "x64" / "cublas.lib")
    cuda_lib = _write(root / "lib" / "x64" / "cuda.lib")
    monkeypatch.setenv("CUDA_PATH", str(root))
    found = toolchain.find_cublas(None)
    assert found == toolchain.Cublas(str(root / "include"), str(root / "lib" / "x64"), from_wheel=False)
    assert toolchain.find_cuda_driver_lib(None) == str(cuda_lib)  # so the build keeps CUDA's VMM pool
