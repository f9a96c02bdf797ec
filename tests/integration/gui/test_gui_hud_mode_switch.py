"""After a drafting-mode switch the HUD shows no numbers of the previous mode under the new mode's name (issue 13,
defect 12): they are blank from the switch until the new mode's first reply brings its own. The real engine on
the demo model."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

from pathlib import Path
from typing import Any

import pytest
from pytestqt.qtbot import QtBot

from app.chats.history import HistoryStore
from app.gguftools.demo_model import DemoModel
from app.gui.chat.hud import Hud
from app.gui.main import MainWindow
from tests.helpers.demo_copies import DemoCopies
from tests.helpers.module_folders import ModuleFolders

WAIT_MS = 60_000


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders, default_demo: DemoCopies) -> DemoModel:
    return default_demo.copy_to(module_tmp.mktemp("hud-switch-demo"))


def _blank(hud: Hud) -> bool:
    return (hud.tps.text() == "— tok/s" and hud.prompt_tps.text() == "— tok/s" and hud.first_token.text() == "—"
            and hud.acceptance.text() == "—" and hud.per_pass.text() == "—" and hud.acceptance_bar.value() == 0
            and not hud.sparkline.values)


def _reply(qtbot: QtBot, win: MainWindow, text: str) -> dict[str, Any]:
    done: list[dict[str, Any]] = []
    win.bridge.done.connect(done.append)
    win.chat_page.send(text)
    qtbot.waitUntil(lambda: bool(done), timeout=WAIT_MS)
    win.bridge.done.disconnect(done.append)
    return done[0]


def test_a_mode_switch_blanks_the_hud_until_the_new_mode_has_numbers(qtbot: QtBot, tmp_path: Path,
                                                                      patched_backend: object,
                                                                      demo: DemoModel) -> None:
    store = HistoryStore(tmp_path / "history.sqlite3")
    win = MainWindow(history=store)
    qtbot.addWidget(win)
    win.model_selector.restore_mode("sidecar-d2t")  # not Auto, the default: this test switches modes itself
    win.show()
    try:
        win.use_demo(demo)
        qtbot.waitUntil(lambda: win.chat_page.ready, timeout=WAIT_MS)
        _reply(qtbot, win, "How does drafting work?")
        hud = win.chat_page.chat.hud
        assert "FastMTP d2t" in hud.mode.text() and not _blank(hud)
        assert hud.acceptance.text().endswith(")")  # e.g. "88%  (190/215)"

        win.model_selector.mode_box.setCurrentIndex(win.model_selector.mode_box.findData("off"))
        assert hud.mode.text() == "off (target only)"
        assert _blank(hud)  # not the d2t reply's numbers under the new name
        assert "off (target only)" in hud.pill_text() and "tok/s" not in hud.pill_text().replace("— tok/s", "")
        qtbot.waitUntil(lambda: win.chat_page.ready, timeout=WAIT_MS)
        assert _blank(hud)  # loaded, no reply yet: still nothing to show

        reply = _reply(qtbot, win, "And without drafting?")
        assert hud.tps.text() != "— tok/s" and hud.tps.text().endswith("tok/s")
        assert reply["stats"]["mode"] == "off (target only) · temperature 0.7"  # and what it was sampled at
    finally:
        win.close()
        store.close()
