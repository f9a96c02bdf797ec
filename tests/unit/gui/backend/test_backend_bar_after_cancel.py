"""A cancelled build's bar starts again at 0 (issue 36 item 9: it stayed at 94%). The real build job and Backend
page, with the builder standing in for the compiler: it reports up to 94% and then waits for Cancel, which kills
it the way the real builder's child process is killed."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

import threading
from typing import Any

import pytest
from pytestqt.qtbot import QtBot

from app.backend.builder import BuildOptions
from app.backend.events import BuildEvent
from app.core.cancel import CancelToken
from app.core.errors import BuildCancelled
from app.gui.backend.backend_page import BackendPage
from app.gui.shell import build_job as build_job_module
from app.gui.shell.build_job import BuildJob


def test_a_cancelled_build_leaves_no_bar_at_94_percent(qtbot: QtBot, monkeypatch: pytest.MonkeyPatch) -> None:
    def builder(options: BuildOptions, report: Any, cancel: CancelToken, cached: bool) -> None:
        killed = threading.Event()
        cancel.set_kill(killed.set)
        for percent in (10.0, 60.0, 94.0):
            report(BuildEvent("progress", f"compiling ({percent:.0f}%)", percent, "compile"))
        killed.wait(30)
        raise BuildCancelled("The build was cancelled.")

    monkeypatch.setattr(build_job_module.build_estimate, "build_and_record", builder)
    job = BuildJob()
    page = BackendPage(job)
    qtbot.addWidget(page)
    page.build("cpu")
    qtbot.waitUntil(lambda: page.progress.value() == 94, timeout=10_000)
    page.cancel_build()
    qtbot.waitUntil(lambda: not job.running, timeout=10_000)
    assert job.outcome == "cancelled"
    assert page.progress.value() == 0 and "cancelled" in page.step_label.text()
