"""``make windows-cross-check``: the patched CPU backend cross-built for Windows (MinGW), its d2t path run by Wine.

What a Linux machine can say about the Windows backend (issue 35): the app's own patched llama.cpp tree (the pinned
llama-cpp-python sdist with resources/patches applied, by app/backend/builder.prepare_source, the very tree the
Linux build uses) compiles for x86_64-w64-mingw32 (CMake, installers/mingw/mingw-w64-x86_64.cmake, CPU only,
GGML_NATIVE=OFF, the x86-64-v2 baseline the packaged app's base module uses) into libllama.dll and ggml*.dll, and a
small program against them (installers/mingw/d2t_check.cpp) run by Wine loads the demo target with its d2t sidecar and
drafts: every draft row must be finite exactly at the sidecar's d2t ids (-inf elsewhere), and the target's and the
draft's greedy ids, and the draft logits at the d2t ids, must be the Linux engine's for the same tokens.

Needs Debian's ``mingw-w64`` and ``wine`` (``apt-get install -y mingw-w64 wine wine64``), cmake and ninja. The build
folder is kept in ~/.cache/fastmtp-chat/windows-cross/ (a rerun only re-links), and only the targets the check needs
are built, at -O1 (C) and -O0 (C++), not the release's -O3, to keep a first build on a two-core machine short.

    .venv/bin/python -m installers.windows_cross check [--no-build] [--json]
    .venv/bin/python -m installers.windows_cross status [--json]

Exit 0: the check passed; 1: it ran and failed (the reasons are printed); 3: it cannot run here (a tool is
missing, or --no-build and nothing is built yet).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from app.core import paths  # noqa: E402

HERE = Path(__file__).resolve().parent / "mingw"
TOOLCHAIN_FILE = HERE / "mingw-w64-x86_64.cmake"
CHECK_SOURCE = HERE / "d2t_check.cpp"
CXX = "x86_64-w64-mingw32-g++-posix"
# the DLLs the check program loads (ggml-cpu built in, not a GGML_BACKEND_DL module: one variant is enough here)
DLLS = ("libllama.dll", "ggml.dll", "ggml-base.dll", "ggml-cpu.dll")
# MinGW's runtime, shipped beside the DLLs as a MinGW-built Windows app ships it (see the toolchain file for why)
_GCC_DLLS = Path("/usr/lib/gcc/x86_64-w64-mingw32/12-posix")
RUNTIME_DLLS = (_GCC_DLLS / "libgcc_s_seh-1.dll", _GCC_DLLS / "libstdc++-6.dll",
                Path("/usr/x86_64-w64-mingw32/lib/libwinpthread-1.dll"))
CMAKE_ARGS = [
    "-DCMAKE_BUILD_TYPE=Release",
    # not the release's -O3: a first build on two busy cores in minutes, not the better part of an hour (C at -O1
    # keeps ggml's matrix kernels quick enough; the C++ of llama.cpp's many model files is compiled at -O0)
    "-DCMAKE_C_FLAGS_RELEASE=-O1 -DNDEBUG",
    "-DCMAKE_CXX_FLAGS_RELEASE=-O0 -DNDEBUG",
    # Debian 12's MinGW-w64 10 headers lack THREAD_POWER_THROTTLING_STATE, which ggml-cpu.c uses from Windows 8 on
    # (a hint against Windows 11's core parking): the C files see the Windows 7 API, so that block is left out here
    "-DCMAKE_C_FLAGS=-D_WIN32_WINNT=0x0601",
    "-DBUILD_SHARED_LIBS=ON",
    "-DGGML_NATIVE=OFF",
    # x86-64-v2, the packaged app's base CPU module (builder._CPU_BASELINE); Wine runs it on this CPU as it is
    "-DGGML_SSE42=ON", "-DGGML_AVX=OFF", "-DGGML_AVX2=OFF", "-DGGML_FMA=OFF", "-DGGML_F16C=OFF",
    "-DGGML_BMI2=OFF", "-DGGML_AVX512=OFF",
    "-DGGML_OPENMP=OFF",  # MSVC builds use vcomp; MinGW's libgomp would be one more DLL to ship
    "-DGGML_RPC=OFF",
    "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_TOOLS=OFF",
    "-DLLAMA_BUILD_SERVER=OFF", "-DLLAMA_BUILD_COMMON=OFF", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF",
]
# draft logits under Wine vs Linux: another SIMD level and -O1, the same arithmetic (measured: 2e-6); the self-test's
# own bound for d2t vs full sidecar logits
DIFF_TOLERANCE = 1e-3
HOW_TO_RUN = "make windows-cross-check (needs: apt-get install -y mingw-w64 wine wine64)"


class CannotRun(Exception):
    """The check cannot run on this machine (a missing tool, or nothing built): exit 3, not a failure."""


def cache_dir() -> Path:
    return paths.cache_dir() / "windows-cross"


def build_dir() -> Path:
    return cache_dir() / "build"


def bin_dir() -> Path:
    """What a Windows user's backend folder would hold for this check: the DLLs and the program."""
    return cache_dir() / "bin"


def wine_program() -> str | None:
    """``wine64`` (Debian keeps it in /usr/lib/wine), else the ``wine`` launcher."""
    for candidate in (shutil.which("wine64"), "/usr/lib/wine/wine64", shutil.which("wine")):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


def missing_tools() -> list[str]:
    """What this machine lacks for the check, in words (empty: it can run)."""
    missing = [f"{tool} ({package})" for tool, package in
               ((CXX, "Debian package mingw-w64"), ("cmake", "cmake"), ("ninja", "ninja-build"))
               if shutil.which(tool) is None]
    if wine_program() is None:
        missing.append("wine64 (Debian packages wine and wine64)")
    missing += [f"{dll} (Debian package mingw-w64)" for dll in RUNTIME_DLLS if not dll.is_file()]
    return missing


def is_built() -> bool:
    return all((bin_dir() / name).is_file() for name in (*DLLS, "d2t_check.exe"))


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def patched_tree() -> Path:
    """The app's patched source tree, made (or reused) by the same code the Linux build uses; the vendored
    llama.cpp inside it."""
    from app.backend import builder, patching, source, toolchain
    from app.backend.events import BuildEvent

    def sink(event: BuildEvent) -> None:
        if event.kind == "log":
            say(f"  {event.message}")

    # prepare_source reads only the pin and the patch of a plan; no compiler of this machine is involved
    tools = toolchain.Toolchain(cmake=None, ninja=None, c_compiler=None, cxx_compiler=None, nvcc=None, ccache=None)
    plan = builder.BuildPlan(source.pinned(), patching.default_patch(), "cpu", [], [], tools)
    tree = builder.prepare_source(plan, builder.BuildOptions(flavor="cpu"), builder.Reporter(sink))
    return tree / "vendor" / "llama.cpp"


def _run(cmd: list[str], what: str, cwd: Path | None = None) -> None:
    """Run a build command, its lines shown as they come (a first build is minutes of ninja); on failure the last
    lines are the error's words."""
    say("  $ " + " ".join(cmd))
    lines: list[str] = []
    with subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace") as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines = [*lines[-29:], line.rstrip()]
            say("    " + line.rstrip())
    if proc.returncode != 0:
        tail = "\n".join(lines)
        raise RuntimeError(f"{what} failed (exit {proc.returncode}):\n{tail}")


def build(jobs: int = 2) -> Path:
    """Configure, build libllama.dll and its ggml DLLs, link the check program; returns the bin folder."""
    llama_cpp = patched_tree()
    out = build_dir()
    out.mkdir(parents=True, exist_ok=True)
    # configured every run (seconds): changed arguments reach the cache, unchanged ones rebuild nothing
    _run(["cmake", "-S", str(llama_cpp), "-B", str(out), "-G", "Ninja",
          f"-DCMAKE_TOOLCHAIN_FILE={TOOLCHAIN_FILE}", *CMAKE_ARGS], "configuring the MinGW build")
    _run(["ninja", "-C", str(out), f"-j{jobs}", "llama"], "building libllama.dll with MinGW")
    dest = bin_dir()
    dest.mkdir(parents=True, exist_ok=True)
    for name in DLLS:
        shutil.copy2(out / "bin" / name, dest / name)
    for dll in RUNTIME_DLLS:
        shutil.copy2(dll, dest / dll.name)
    exe = dest / "d2t_check.exe"
    newest_input = max(p.stat().st_mtime for p in (CHECK_SOURCE, out / "bin" / "libllama.dll"))
    if not exe.is_file() or exe.stat().st_mtime < newest_input:
        _run([CXX, "-std=c++17", "-O1", "-o", str(exe), str(CHECK_SOURCE),
              f"-I{llama_cpp / 'include'}", f"-I{llama_cpp / 'src'}", f"-I{llama_cpp / 'ggml' / 'include'}",
              f"-L{out / 'src'}", f"-L{out / 'ggml' / 'src'}", "-lllama", "-lggml", "-lggml-base"],
             "compiling d2t_check.exe with MinGW")
    return dest


def windows_path(path: Path) -> str:
    """``path`` as Wine's default Z: drive (the Unix root) names it."""
    return "Z:" + str(path.resolve()).replace("/", "\\")


def wine_env() -> dict[str, str]:
    """A private Wine prefix under the temp folder (kept between runs: creating one takes half a minute), no
    Wine debug chatter, no Mono/Gecko install prompts, no display."""
    prefix = Path(tempfile.gettempdir()) / f"fastmtp-wine-{os.getuid()}"
    env = {k: v for k, v in os.environ.items() if k != "DISPLAY"}
    env.update(WINEPREFIX=str(prefix), WINEDEBUG="-all", WINEDLLOVERRIDES="mscoree,mshtml=", WINEARCH="win64")
    return env


@dataclass
class DraftRun:
    target_next: list[int]
    draft_next: list[int]
    logits: npt.NDArray[np.float32]  # (positions, vocabulary)
    info: dict[str, Any]


def run_under_wine(target: Path, sidecar: Path, tokens: list[int], work: Path) -> DraftRun:
    wine = wine_program()
    if wine is None:
        raise CannotRun("wine64 is not installed")
    logits_file = work / "draft-logits.bin"
    cmd = [wine, str(bin_dir() / "d2t_check.exe"), windows_path(target), windows_path(sidecar),
           windows_path(logits_file), *map(str, tokens)]
    say("  $ " + " ".join(cmd))
    proc = subprocess.run(cmd, env=wine_env(), cwd=bin_dir(), capture_output=True, text=True, timeout=600,
                          check=False)
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith("{")), "")
    if not line:
        raise RuntimeError(f"d2t_check.exe under Wine gave no answer (exit {proc.returncode}):\n"
                           f"{(proc.stdout + proc.stderr).strip()[-3000:]}")
    info: dict[str, Any] = json.loads(line)
    if not info.get("ok"):
        raise RuntimeError(f"d2t_check.exe under Wine failed: {info.get('error')}\n{proc.stderr.strip()[-2000:]}")
    logits = np.fromfile(logits_file, dtype="<f4").reshape(len(tokens), int(info["n_vocab"]))
    return DraftRun(info["target_next"], info["draft_next"], logits, info)


def run_on_linux(target: Path, sidecar: Path, tokens: list[int]) -> DraftRun | None:
    """The same probe through the app's engine on the active Linux backend (None when it is not a patched one)."""
    from app.backend import registry

    manifest = registry.active()
    if manifest is None or not manifest.patched:
        return None
    from app.native import draft_probe
    from app.native.handles import Model

    with Model(target, load_mtp=False) as model:
        probe = draft_probe.probe(model, tokens, sidecar)
    return DraftRun(probe.target_next, probe.draft_next, probe.draft_logits.astype(np.float32),
                    {"backend": manifest.id})


def compare(windows: DraftRun, linux: DraftRun | None, d2t: npt.NDArray[np.int64]) -> list[str]:
    """What is wrong with the Windows run, in words (empty: the d2t path behaves as on Linux)."""
    problems = []
    finite = np.isfinite(windows.logits)
    expected = np.zeros(windows.logits.shape[1], dtype=bool)
    expected[d2t] = True
    for row in range(windows.logits.shape[0]):
        if not np.array_equal(finite[row], expected):
            wrong = np.flatnonzero(finite[row] != expected)[:5].tolist()
            problems.append(f"draft row {row} is finite at {int(finite[row].sum())} ids, not at exactly the "
                            f"{len(d2t)} d2t ids (first differences at {wrong})")
    outside = [t for t in windows.draft_next if t not in set(d2t.tolist())]
    if outside:
        problems.append(f"drafted ids {outside} are not d2t ids")
    if linux is not None:
        if windows.target_next != linux.target_next:
            problems.append(f"the target's greedy ids differ: Wine {windows.target_next}, Linux {linux.target_next}")
        if windows.draft_next != linux.draft_next:
            problems.append(f"the drafted ids differ: Wine {windows.draft_next}, Linux {linux.draft_next}")
        diff = float(np.max(np.abs(windows.logits[:, d2t] - linux.logits[:, d2t])))
        if not diff <= DIFF_TOLERANCE:
            problems.append(f"the draft logits at the d2t ids differ from Linux's by up to {diff:.3g}")
    return problems


def check(no_build: bool = False) -> dict[str, Any]:
    missing = missing_tools()
    if missing:
        raise CannotRun("missing: " + "; ".join(missing))
    if no_build:
        if not is_built():
            raise CannotRun(f"nothing is built in {bin_dir()} yet")
    else:
        say("building the patched llama.cpp for Windows (MinGW)")
        build()
    from app.gguftools.builtin_demo import d2t_ids, ensure_demo_model, table_prompt

    demo = ensure_demo_model(paths.demo_model_dir())
    tokens = table_prompt(demo, 12)
    ids = d2t_ids(demo.sidecar_d2t)
    with tempfile.TemporaryDirectory(prefix="fastmtp-wincheck-") as tmp:
        say("running d2t_check.exe under Wine")
        windows = run_under_wine(demo.target, demo.sidecar_d2t, tokens, Path(tmp))
    say("running the same probe through the Linux engine")
    linux = run_on_linux(demo.target, demo.sidecar_d2t, tokens)
    problems = compare(windows, linux, ids)
    result: dict[str, Any] = {
        "ok": not problems,
        "problems": problems,
        "tokens": tokens,
        "d2t_ids": len(ids),
        "wine": {"target_next": windows.target_next, "draft_next": windows.draft_next,
                 "finite_per_row": windows.info["finite_per_row"], "system_info": windows.info["system_info"]},
        "linux": None if linux is None else {"target_next": linux.target_next, "draft_next": linux.draft_next,
                                             "backend": linux.info["backend"]},
        "compared_with_linux": linux is not None,
        "max_abs_diff_at_d2t_ids": None if linux is None else
        float(np.max(np.abs(windows.logits[:, ids] - linux.logits[:, ids]))),
        "bin": str(bin_dir()),
    }
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="windows_cross", description=__doc__.splitlines()[0] if __doc__ else "")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("check", help="build (unless --no-build) and run the d2t check under Wine")
    run.add_argument("--no-build", action="store_true", help="only run what is already built (exit 3 if nothing)")
    run.add_argument("--json", action="store_true")
    status = sub.add_parser("status", help="whether the check can run here, and whether it is built")
    status.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.command == "status":
        state = {"missing": missing_tools(), "built": is_built(), "bin": str(bin_dir())}
        print(json.dumps(state) if args.json else "\n".join(f"{k}: {v}" for k, v in state.items()))
        return 0
    try:
        result = check(no_build=args.no_build)
    except CannotRun as exc:
        result = {"ok": False, "cannot_run": str(exc), "how_to_run": HOW_TO_RUN}
        print(json.dumps(result) if args.json else f"cannot run the Windows cross-check here: {exc}\n{HOW_TO_RUN}")
        return 3
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        result = {"ok": False, "problems": [str(exc)]}
    if args.json:
        print(json.dumps(result))
    else:
        for problem in result["problems"]:
            print(f"FAILED: {problem}")
        if result["ok"]:
            print(f"OK: the MinGW build of the patched llama.cpp drafted {result['wine']['draft_next']} under Wine, "
                  f"every row finite at exactly the {result['d2t_ids']} d2t ids"
                  + (f"; the same ids as Linux (max logit difference {result['max_abs_diff_at_d2t_ids']:.2g})"
                     if result["compared_with_linux"] else "; no patched Linux backend to compare with"))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
