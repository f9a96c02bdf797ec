"""The sidecar maker's file name (issue 36 item 7): the dialog starts with a free name (never "already exists" with
nowhere to choose), a name that exists is said in words with a way out, and a long result never overlaps the
dialog's buttons."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

from pathlib import Path

from PySide6.QtCore import QRect
from PySide6.QtWidgets import QApplication, QWidget
from pytestqt.qtbot import QtBot

from app.gui.models.sidecar_dialog import MakeSidecarDialog
from app.models.sidecar_job import free_out


def _place(dialog: QWidget, widget: QWidget) -> QRect:
    return QRect(widget.mapTo(dialog, widget.rect().topLeft()), widget.size())


def test_an_existing_name_gets_a_free_one_and_a_typed_clash_is_said(qtbot: QtBot, tmp_path: Path) -> None:
    target = tmp_path / "Mine.gguf"
    target.write_bytes(b"GGUF")
    (tmp_path / "Mine-FastMTP-32K.gguf").write_bytes(b"old")  # the shipped sidecar's name is taken
    dialog = MakeSidecarDialog(target)
    qtbot.addWidget(dialog)
    assert dialog.name_edit.text() == "Mine-FastMTP-32K-2.gguf" == free_out(target, 32768).name
    assert dialog.make_button.isEnabled() and "Writes" in dialog.out_label.text()
    assert "--out" in dialog.command() and str(tmp_path / "Mine-FastMTP-32K-2.gguf") in dialog.command()

    dialog.name_edit.setText("Mine-FastMTP-32K.gguf")  # the user types the taken name
    assert not dialog.make_button.isEnabled()
    assert "already exists" in dialog.out_label.text() and "Use a free name" in dialog.out_label.text()
    assert not dialog.use_free_button.isHidden()
    dialog.start()  # refused: nothing runs on a taken name
    assert not dialog.running

    dialog.use_free_button.click()
    assert dialog.name_edit.text() == "Mine-FastMTP-32K-2.gguf" and dialog.make_button.isEnabled()
    dialog.name_edit.setText("my own")  # .gguf is added
    assert dialog.out == tmp_path / "my own.gguf" and dialog.make_button.isEnabled()
    dialog.name_edit.setText("../elsewhere.gguf")
    assert not dialog.make_button.isEnabled() and "file name only" in dialog.out_label.text()
    dialog.name_edit.setText("")
    assert not dialog.make_button.isEnabled()


def test_the_suggested_name_follows_the_vocabulary_until_the_user_types_one(qtbot: QtBot, tmp_path: Path) -> None:
    target = tmp_path / "Mine.gguf"
    target.write_bytes(b"GGUF")
    dialog = MakeSidecarDialog(target)
    qtbot.addWidget(dialog)
    dialog.vocab.setCurrentIndex(dialog.vocab.findData(16384))
    assert dialog.name_edit.text() == "Mine-FastMTP-16K.gguf"
    dialog.name_edit.setText("chosen.gguf")
    dialog.vocab.setCurrentIndex(dialog.vocab.findData(32768))
    assert dialog.name_edit.text() == "chosen.gguf"


def test_a_long_result_does_not_overlap_the_buttons(qtbot: QtBot, tmp_path: Path) -> None:
    target = tmp_path / "Mine.gguf"
    target.write_bytes(b"GGUF")
    dialog = MakeSidecarDialog(target)
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    out = tmp_path / "Mine-FastMTP-32K.gguf"
    out.write_bytes(b"new")  # what the child wrote
    note = ("Mine-FastMTP-32K-old.gguf stays this model's d2t drafting mode: the new one did not measure clearly "
            "better (a difference this small is within chance): " + "figures " * 60)
    dialog._done({"path": str(out), "vocab_size": 32768, "corpus": "the document prompts",
                  "check": {"positions": 256, "sidecar_acceptance": 0.71, "embedded_acceptance": 0.9,
                            "current_acceptance": 0.7},
                  "warnings": ["The corpus has only 113 distinct tokens; " + "more words " * 40],
                  "attach_note": note, "attached": False})
    QApplication.processEvents()
    box = _place(dialog, dialog.result_label)
    assert dialog.result_label.isVisible() and "within chance" in dialog.result_label.toPlainText()
    for widget in (dialog.make_button, dialog.close_button, dialog.use_anyway_button):
        assert widget.isVisible()
        assert not box.intersects(_place(dialog, widget)), widget.text()
        assert dialog.rect().contains(_place(dialog, widget)), widget.text()
    assert not _place(dialog, dialog.step_label).intersects(box)
    assert not _place(dialog, dialog.bar).intersects(box)
    assert dialog.name_edit.text() == "Mine-FastMTP-32K-2.gguf"  # the written name is taken: the next one is free
