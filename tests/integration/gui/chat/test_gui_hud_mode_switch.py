"""After a drafting-mode switch the HUD shows no numbers of the previous mode under the new mode's name (issue 13,
defect 12): they are blank from the switch until the new mode's first reply brings its own. The real engine on
the demo model."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed


import pytest
from pytestqt.qtbot import QtBot

from app.chats.history import HistoryStore
from app.gguftools.demo_model import DemoModel
from app.gui.chat.hud import Hud
from tests.helpers.demo_copies import DemoCopies
from tests.helpers.gui_windows import open_window, send_and_wait
from tests.helpers.module_folders import ModuleFolders
from tests.helpers.waits import HANG_MS

WAIT_MS = HANG_MS  # a hang guard: every wait ends as soon as its condition holds (tests/helpers/waits.py)


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders, default_demo: DemoCopies) -> DemoModel:
    return default_demo.copy_to(module_tmp.mktemp("hud-switch-demo"))


def _blank(hud: Hud) -> bool:
    return (hud.tps.text() == "— tok/s" and hud.prompt_tps.text() == "— tok/s" and hud.first_token.text() == "—"
            and hud.acceptance.text() == "—" and hud.per_pass.text() == "—" and hud.acceptance_bar.value() == 0
            and not hud.sparkline.values)


def test_a_mode_switch_blanks_the_hud_until_the_new_mode_has_numbers(qtbot: QtBot, store: HistoryStore,
                                                                      patched_backend: object,
                                                                      demo: DemoModel) -> None:
    # not Auto, the default: this test switches modes itself
    with open_window(qtbot, store, mode="sidecar-d2t") as win:
        win.loading.use_demo(demo)
        qtbot.waitUntil(lambda: win.chat_page.ready, timeout=WAIT_MS)
        send_and_wait(qtbot, win, "How does drafting work?")
        hud = win.chat_page.chat.hud
        assert "FastMTP d2t" in hud.mode.text() and not _blank(hud)
        assert hud.acceptance.text().endswith(")")  # e.g. "88%  (190/215)"

        win.model_selector.mode_box.setCurrentIndex(win.model_selector.mode_box.findData("off"))
        assert hud.mode.text() == "off (target only)"
        assert _blank(hud)  # not the d2t reply's numbers under the new name
        assert "off (target only)" in hud.pill_text() and "tok/s" not in hud.pill_text().replace("— tok/s", "")
        qtbot.waitUntil(lambda: win.chat_page.ready, timeout=WAIT_MS)
        assert _blank(hud)  # loaded, no reply yet: still nothing to show

        reply = send_and_wait(qtbot, win, "And without drafting?")
        assert hud.tps.text() != "— tok/s" and hud.tps.text().endswith("tok/s")
        assert reply["stats"]["mode"] == "off (target only) · temperature 0.7"  # and what it was sampled at
