"""Issue 37 item 11: a window closed while its background job runs gets no callback (its widget is gone), and a
job that outlives the app's objects ends without "Signal source has been deleted"."""

from __future__ import annotations

import threading
from typing import Any

import shiboken6
from PySide6.QtWidgets import QLabel
from pytestqt.qtbot import QtBot

from app.gui.shell import ops
from app.gui.shell.ops import BackgroundOp, wait_for_all


class Receiver(QLabel):
    def __init__(self) -> None:
        super().__init__()
        self.got: list[Any] = []

    def done(self, value: Any) -> None:
        self.setText(str(value))  # on a deleted widget this would raise "already deleted"
        self.got.append(value)


def test_a_result_for_a_deleted_widget_is_dropped(qtbot: QtBot) -> None:
    release = threading.Event()
    receiver = Receiver()
    witness: list[Any] = []
    BackgroundOp(lambda report: (report(1), release.wait(30), 7)[-1], receiver.done, receiver.done,
                 receiver.done).start()
    other = BackgroundOp(lambda report: 8, witness.append).start()
    qtbot.waitUntil(lambda: witness == [8] and not other.running)
    shiboken6.delete(receiver)  # the window closed while the job runs
    assert not shiboken6.isValid(receiver)
    release.set()
    assert wait_for_all(10_000)
    BackgroundOp(lambda report: 9, witness.append).start()
    qtbot.waitUntil(lambda: witness == [8, 9])  # delivered in order: the dropped result came before it
    assert not ops._RUNNING or all(not op.running for op in ops._RUNNING)


def test_an_emit_after_the_relay_is_gone_is_dropped_in_silence(qtbot: QtBot) -> None:
    class Gone:
        def emit(self, payload: object) -> None:
            raise RuntimeError("Signal source has been deleted")

    ops._emit(Gone(), ("op", 1))  # no exception: the app is gone, nobody to tell
