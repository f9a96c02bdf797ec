"""Python's cycle collector runs on the GUI thread only, never on a background op's worker.

CPython collects reference cycles on whichever thread crosses its allocation threshold. A widget caught in a cycle
(a page whose connected closures point back at it) is then destroyed on a worker thread, in the middle of whatever
the GUI thread is doing with Qt, and the process dies with a segmentation fault: a loaded ``make test`` did, in the
background-op test, while the GUI thread delivered a progress value (issue 38). Like Anki and calibre, the window
turns the automatic collector off and collects on a GUI-thread timer, by the collector's own thresholds, so cycles
are freed as often as before, only on the thread that owns the widgets.
"""

from __future__ import annotations

import gc

from PySide6.QtCore import QCoreApplication, QObject, QTimer

COLLECT_EVERY_MS = 250  # gen-0 collections cost well under a millisecond; a reply's tokens allocate far less


def due_generation() -> int | None:
    """The oldest generation the automatic collector would collect now (its thresholds against its counts), or
    None when nothing is due."""
    thresholds, counts = gc.get_threshold(), gc.get_count()
    due = [gen for gen in range(3) if thresholds[gen] and counts[gen] > thresholds[gen]]
    return max(due) if due else None


class GuiThreadCollector(QObject):
    """Owns the timer that collects cycles on the GUI thread while the automatic collector is off.

    A child of the application, so it lives and ticks on the GUI thread for as long as the app does; ``stop()``
    hands collection back to Python (used by tests that share one process with non-GUI tests).
    """

    def __init__(self, app: QCoreApplication, interval_ms: int = COLLECT_EVERY_MS) -> None:
        super().__init__(app)
        self.setObjectName(type(self).__name__)
        self.collections = [0, 0, 0]  # by generation, for tests and for a look from a debugger
        self._timer = QTimer(self)
        self._timer.setInterval(interval_ms)
        self._timer.timeout.connect(self.collect_due)
        self.start()

    @property
    def active(self) -> bool:
        return self._timer.isActive()

    def start(self) -> None:
        """Collect only here from now on: what is garbage already goes at the timer's first due collection (not a
        full collection now: the tests restart collection before every Qt test, and one costs 30-40 ms there)."""
        gc.disable()
        self._timer.start()

    def collect_due(self) -> int | None:
        """Collect the generation that is due, if any; returns it."""
        generation = due_generation()
        if generation is not None:
            gc.collect(generation)
            self.collections[generation] += 1
        return generation

    def stop(self) -> None:
        """Back to Python's own collector, after a full collection here."""
        self._timer.stop()
        gc.collect()
        gc.enable()


def collect_cycles_on_gui_thread(app: QCoreApplication) -> GuiThreadCollector:
    """Turn the automatic collector off for this process and collect on ``app``'s thread; one collector per app."""
    collector = app.findChild(GuiThreadCollector, GuiThreadCollector.__name__)
    if not isinstance(collector, GuiThreadCollector):
        return GuiThreadCollector(app)
    if not collector.active:
        collector.start()
    return collector
