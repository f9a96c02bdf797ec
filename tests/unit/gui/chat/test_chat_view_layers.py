"""The messages the chat view shows are Qt-free data: the history and the chat page can use them without a
display."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]

_PROBE = """
import json, sys
import app.gui.chat.messages
print(json.dumps(sorted(name for name in sys.modules if name.split(".")[0] == "PySide6")))
"""


def test_the_messages_module_imports_no_qt() -> None:
    done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True, cwd=ROOT)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
