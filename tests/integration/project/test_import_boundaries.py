"""The layering the README's map promises, pinned: the GUI and the engine client never load native code, and
every llama.cpp call goes through ``app/native/``."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

APP = Path(__file__).resolve().parents[3] / "app"

_PROBE = """
import importlib, json, pkgutil, sys
import app.engine.client, app.engine.config, app.engine.protocol, app.settings.chat_settings, app.gui
for info in pkgutil.iter_modules(app.gui.__path__):
    importlib.import_module("app.gui." + info.name)
loaded = sorted(sys.modules)
uses_ctypes = sorted(name for name, module in sys.modules.items()
                     if name.startswith("app") and "ctypes" in vars(module))
print(json.dumps({"loaded": loaded, "uses_ctypes": uses_ctypes}))
"""


def test_the_gui_and_the_engine_client_load_no_native_module() -> None:
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, env=env, check=True,
                          cwd=APP.parent)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert "app.gui.main" in result["loaded"]  # the probe really imported the window
    native = [m for m in result["loaded"] if m.startswith(("app.native", "llama_cpp", "app.engine.speculative",
                                                            "app.engine.session", "app.engine.worker"))]
    assert native == []
    assert result["uses_ctypes"] == []


def test_no_llama_call_outside_the_native_wrapper() -> None:
    calls = re.compile(r"\.(?:lib\.)?llama_[a-z_]+\(|\blib\.llama_")
    offenders = []
    for path in sorted(APP.rglob("*.py")):
        if path.is_relative_to(APP / "native"):
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if calls.search(line) and not line.lstrip().startswith("#"):
                offenders.append(f"{path.relative_to(APP.parent)}:{number}: {line.strip()}")
    assert offenders == []


def test_the_engine_records_module_imports_nothing_native() -> None:
    source = (APP / "engine" / "config.py").read_text(encoding="utf-8")
    imports = re.findall(r"^(?:from|import) (\S+)", source, re.M)
    # app.core.defaults: the default values, a module that imports nothing
    assert imports and all(name in {"__future__", "dataclasses", "pathlib", "typing", "app.core.defaults"}
                           for name in imports)


# The layering docs/architecture.md states, bottom to top: a package imports only itself and the ones before it.
LAYERS = ["core", "gguftools", "release", "backend", "native", "engine", "settings", "chats", "models", "machines",
          "gui", "bench", "cli"]
# Inside the window: the shell (ops, theme, state) serves every page; pages may use each other's widgets but not the
# window (main.py), which composes them.
GUI_PAGES = ["chat", "models", "backend", "benchmark", "settings"]


def _imports(path: Path, app: Path = APP) -> set[str]:
    """Every ``app...`` module a file imports, at its top or inside a function (a lazy import is an arrow too)."""
    module = ".".join(path.relative_to(app.parent).with_suffix("").parts)
    package = module.rsplit(".", 1)[0] if path.name != "__init__.py" else module.removesuffix(".__init__")
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            if base == "app" or base.startswith("app."):
                found.add(base)
                found.update(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("app"))
    return found


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else None


def test_app_holds_only_the_layer_packages() -> None:
    loose = sorted(p.name for p in APP.glob("*.py") if p.name not in {"__init__.py", "__main__.py"})
    packages = sorted(p.name for p in APP.iterdir() if p.is_dir() and (p / "__init__.py").is_file())
    assert loose == []
    assert packages == sorted(LAYERS)


def test_every_import_points_down_the_layers() -> None:
    upward = []
    for path in sorted(APP.rglob("*.py")):
        own = _layer(".".join(path.relative_to(APP.parent).with_suffix("").parts))
        if own is None:
            continue
        for target in _imports(path):
            other = _layer(target)
            if other is not None and LAYERS.index(other) > LAYERS.index(own):
                upward.append(f"{path.relative_to(APP.parent)} -> {target}")
    assert upward == []


def test_the_window_shell_imports_no_page_and_no_page_imports_the_window() -> None:
    gui = APP / "gui"
    wrong = []
    for path in sorted(gui.rglob("*.py")):
        room = path.relative_to(gui).parts[0] if len(path.relative_to(gui).parts) > 1 else path.stem
        for target in _imports(path):
            parts = target.split(".")
            if parts[:2] != ["app", "gui"] or len(parts) < 3:
                continue
            if room == "shell" and parts[2] in [*GUI_PAGES, "main", "screenshots"]:
                wrong.append(f"{path.relative_to(APP.parent)} -> {target}")
            if room in GUI_PAGES and parts[2] in ("main", "screenshots"):
                wrong.append(f"{path.relative_to(APP.parent)} -> {target}")
    assert wrong == []


def test_the_checks_see_an_upward_arrow(tmp_path: Path) -> None:
    """The walker is not blind: a lazy import of the window from the core counts, as does a relative one."""
    probe = tmp_path / "app" / "core" / "probe.py"
    probe.parent.mkdir(parents=True)
    probe.write_text("def f() -> None:\n    from app.gui import main\n    from ..engine import config\n")
    arrows = _imports(probe, tmp_path / "app")
    assert {"app.gui.main", "app.engine.config"} <= arrows
    assert _layer("app.gui.main") == "gui" and LAYERS.index("gui") > LAYERS.index("core")


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every circle of imports in ``graph`` (module -> the modules it imports), each once, as found by a depth-first
    walk: the path from where the circle starts back to it."""
    found: list[list[str]] = []
    seen: set[frozenset[str]] = set()
    done: set[str] = set()

    def walk(node: str, path: list[str]) -> None:
        for target in sorted(graph.get(node, ())):
            if target in path:
                circle = path[path.index(target):]
                if frozenset(circle) not in seen:
                    seen.add(frozenset(circle))
                    found.append([*circle, target])
            elif target not in done:
                walk(target, [*path, target])
        done.add(node)

    for start in sorted(graph):
        if start not in done:
            walk(start, [start])
    return found


def _gui_graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """The window's imports between its modules, and between its rooms (shell/, a page's folder, main, ...)."""
    gui = APP / "gui"
    modules = {".".join(p.relative_to(APP.parent).with_suffix("").parts).removesuffix(".__init__"): p
               for p in gui.rglob("*.py") if p != gui / "__init__.py"}
    graph = {m: {t for t in _imports(p) if t in modules and t != m} for m, p in modules.items()}
    rooms: dict[str, set[str]] = {}
    for module, targets in graph.items():
        room = module.split(".")[2]
        rooms.setdefault(room, set()).update(t.split(".")[2] for t in targets if t.split(".")[2] != room)
    return graph, rooms


def test_no_import_circle_inside_the_window() -> None:
    """No two of the window's modules import each other, however far round (the transcript's widget and its
    painter once did), and no two of its rooms do: each room stands on the ones below it."""
    modules, rooms = _gui_graph()
    assert _circles(modules) == []
    assert _circles(rooms) == []


def test_the_circle_check_sees_a_circle() -> None:
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert _circles({"a": {"b"}, "b": set()}) == []
