"""The layering the README's map promises, pinned: the GUI and the engine client never load native code, and
every llama.cpp call goes through ``app/native/``."""

from __future__ import annotations

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
    assert imports and all(name in {"__future__", "dataclasses", "pathlib", "typing"} for name in imports)
