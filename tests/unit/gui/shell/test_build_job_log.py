"""What a log view bound to the window's build appends: the new lines, all kept ones after a new build started or
the oldest were dropped."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

from pytestqt.qtbot import QtBot

from app.gui.shell import build_job
from app.gui.shell.build_job import BuildJob


def test_a_view_gets_the_lines_it_has_not_shown(qtbot: QtBot) -> None:
    job = BuildJob()
    for n in range(5):
        job._log(f"line {n}")
    assert job.lines_since(0) == [f"line {n}" for n in range(5)]
    assert job.lines_since(3) == ["line 3", "line 4"] and job.lines_since(5) == []
    job.log.clear()
    job.log_count = 0
    job._log("new build")
    assert job.lines_since(5) == ["new build"]  # the view showed more than this build has: it starts afresh


def test_lines_dropped_from_a_full_log_are_not_asked_for(qtbot: QtBot) -> None:
    job = BuildJob()
    for n in range(build_job.LOG_LINES + 10):
        job._log(str(n))
    kept = job.lines_since(0)
    assert len(kept) == build_job.LOG_LINES and kept[0] == "10"
    assert job.lines_since(build_job.LOG_LINES + 8) == [str(build_job.LOG_LINES + 8), str(build_job.LOG_LINES + 9)]
