"""Reference cycles holding Qt objects are freed on the GUI thread, however much a background op allocates.

Without this, the collector runs on whichever thread crosses its allocation threshold, and a widget in a cycle is
destroyed on a worker while the GUI thread uses Qt: a loaded ``make test`` died of it (issue 38).
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
import weakref
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from app.gui.shell.gui_thread_gc import collect_cycles_on_gui_thread, due_generation
from app.gui.shell.ops import run_in_background
from tests.helpers.cycles import make_cyclic_garbage

ROOT = Path(__file__).resolve().parents[4]


class CycleHolder(QObject):
    """A Qt object in a reference cycle with itself, as a page whose connected closures point back at it."""

    def __init__(self) -> None:
        super().__init__()
        self.me = self


def allocate_cycles(report: Any) -> int:
    """A worker's allocations: enough cyclic garbage to cross every generation's threshold many times."""
    make_cyclic_garbage(200_000)
    return threading.get_ident()


def test_a_qt_object_in_a_cycle_is_freed_on_the_gui_thread_while_a_worker_allocates(qtbot: QtBot,
                                                                                      qapp: QApplication) -> None:
    collector = collect_cycles_on_gui_thread(qapp)
    gui_thread = threading.get_ident()
    freed_on: list[int] = []
    worker: list[int] = []
    holder = CycleHolder()
    weakref.finalize(holder, lambda: freed_on.append(threading.get_ident()))
    del holder  # unreachable now, freed only by a collection
    before = list(collector.collections)

    run_in_background(allocate_cycles, worker.append)
    qtbot.waitUntil(lambda: bool(worker) and bool(freed_on), timeout=30_000)

    assert worker[0] != gui_thread
    assert freed_on == [gui_thread]  # never the worker's, which allocated 200,000 cycles
    assert sum(collector.collections) > sum(before)  # the timer collected, by the collector's own thresholds


def test_the_collector_collects_the_generation_that_is_due(qapp: QApplication) -> None:
    collector = collect_cycles_on_gui_thread(qapp)
    assert not gc.isenabled()
    gc.collect()
    assert due_generation() is None
    assert collector.collect_due() is None
    threshold = gc.get_threshold()[0]
    kept = [[] for _ in range(threshold + 10)]  # counted as allocations of generation 0
    assert due_generation() == 0
    assert collector.collect_due() == 0
    assert gc.get_count()[0] < threshold
    assert len(kept) == threshold + 10


def test_stopping_hands_collection_back_to_python_and_starting_again_takes_it(qapp: QApplication) -> None:
    collector = collect_cycles_on_gui_thread(qapp)
    collector.stop()
    try:
        assert gc.isenabled() and not collector.active
    finally:
        assert collect_cycles_on_gui_thread(qapp) is collector  # one per app
    assert not gc.isenabled() and collector.active


def test_the_application_the_window_runs_in_collects_on_its_own_thread() -> None:
    child = ("import gc; from app.gui.shell.application import make_application; "
             "app = make_application(['fastmtp-chat']); print('automatic collector on:', gc.isenabled())")
    result = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120, cwd=ROOT,
                            env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert "automatic collector on: False" in result.stdout
