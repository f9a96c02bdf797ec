"""The background-op helper under churn: many ops ending while their workers make cyclic garbage.

A per-op Qt relay once formed a reference cycle with its op; the collector freed it on a worker thread while
the GUI thread was delivering its result, and the test process died with a segmentation fault. Since then the
collector runs on the GUI thread only (``gui_thread_gc``): a worker that explicitly collected here once freed
other tests' widgets on its own thread and crashed a loaded run (issue 38), which no code of the app does.
"""

from __future__ import annotations

import gc
import threading
from typing import Any

from pytestqt.qtbot import QtBot

from app.gui.shell.ops import BackgroundOp, run_in_background, wait_for_all
from tests.helpers.cycles import make_cyclic_garbage


def test_many_ops_deliver_progress_then_result_on_the_gui_thread_while_workers_collect(qtbot: QtBot) -> None:
    gui_thread = threading.get_ident()
    events: dict[int, list[Any]] = {}
    threads: set[int] = set()

    def make(n: int) -> BackgroundOp[int]:
        events[n] = []

        def work(report: Any) -> int:
            for step in range(3):
                report(step)
                if step == n % 3:  # cyclic garbage past the collector's thresholds, at one of its steps in turn
                    make_cyclic_garbage(2_000)
            if n % 7 == 0:
                raise ValueError(f"op {n} failed on purpose")
            return n * n

        def record(kind: str) -> Any:
            def callback(value: Any) -> None:
                threads.add(threading.get_ident())
                events[n].append((kind, str(value) if kind == "failure" else value))
            return callback

        # the op object itself is dropped right away: only the helper keeps it alive while it runs
        return run_in_background(work, record("success"), record("failure"), record("progress"))

    for n in range(120):
        make(n)
        if n % 10 == 0:
            gc.collect()
    qtbot.waitUntil(lambda: all(len(e) == 4 for e in events.values()), timeout=60_000)
    assert wait_for_all(10_000)

    assert threads == {gui_thread}
    for n, got in events.items():
        assert got[:3] == [("progress", 0), ("progress", 1), ("progress", 2)]
        expected = ("failure", f"op {n} failed on purpose") if n % 7 == 0 else ("success", n * n)
        assert got[3] == expected


def test_an_op_cannot_be_started_twice_while_it_runs(qtbot: QtBot) -> None:
    release = threading.Event()
    done: list[str] = []
    op = BackgroundOp(lambda report: release.wait(30), lambda ok: done.append("done"))
    op.start()
    try:
        try:
            op.start()
        except RuntimeError as exc:
            assert "already running" in str(exc)
        else:
            raise AssertionError("a second start was accepted")
    finally:
        release.set()
    qtbot.waitUntil(lambda: done == ["done"], timeout=30_000)
    assert not op.running


def test_a_page_is_shut_down_when_the_window_holding_it_closes(qtbot: QtBot) -> None:
    from PySide6.QtWidgets import QMainWindow, QStackedWidget, QWidget

    from app.gui.shell.page_ops import ShutdownWithWindow

    calls: list[str] = []
    window = QMainWindow()
    qtbot.addWidget(window)
    stack = QStackedWidget()
    first, page = QWidget(), QWidget()
    ShutdownWithWindow(page, lambda: calls.append("shutdown"))
    stack.addWidget(first)
    stack.addWidget(page)
    window.setCentralWidget(stack)
    window.show()
    qtbot.waitExposed(window)
    assert calls == []  # the page was never shown: its window is not known yet
    stack.setCurrentWidget(page)
    qtbot.waitUntil(page.isVisible)
    stack.setCurrentWidget(first)
    stack.setCurrentWidget(page)  # shown twice: still watched once
    window.close()
    assert calls == ["shutdown"]


def test_every_gui_job_goes_through_the_owned_operation_helper() -> None:
    from pathlib import Path

    gui = Path(__file__).resolve().parents[4] / "app" / "gui"
    direct = sorted(path.name for path in gui.rglob("*.py")
                    if path.name not in {"ops.py", "page_ops.py"} and "run_in_background(" in path.read_text("utf-8"))
    assert direct == []  # each goes through OwnedOps, whose callbacks are skipped once their owner is gone
