"""Cancel on the Benchmark page stops the real ``bench matrix`` child promptly (the "first hour" issue: it took
about 13 s, as the child only checks for a cancel between variants and the page gave it ChildJob's 20 s grace),
and the results of the run before stay up labelled as that run's. The real patched CPU backend and the demo
model, the page offscreen."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from app.backend.registry import BackendManifest
from app.core.errors import JobCancelled
from app.gguftools.demo_model import DemoModel
from app.gui.benchmark.benchmark_page import CANCEL_GRACE_S, BenchmarkPage
from app.gui.models.bench_model import BenchModel
from tests.helpers.demo_copies import DemoCopies
from tests.helpers.module_folders import ModuleFolders
from tests.helpers.waits import HANG_MS

WAIT_MS = HANG_MS  # a hang guard: every wait ends as soon as its condition holds (tests/helpers/waits.py)


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders, default_demo: DemoCopies) -> DemoModel:
    return default_demo.copy_to(module_tmp.mktemp("gui-bench-cancel-demo"))


def test_cancel_ends_the_child_and_labels_the_earlier_results(qtbot: QtBot, patched_backend: BackendManifest,
                                                              demo: DemoModel) -> None:
    page = BenchmarkPage(lambda: BenchModel("demo", demo.target, d2t=demo.sidecar_d2t))
    qtbot.addWidget(page)
    page.show()
    for mode, box in page.mode_boxes.items():
        box.setChecked(mode == "off")
    page.tokens.setValue(4)
    page.runs.setValue(1)
    qtbot.mouseClick(page.run_button, Qt.MouseButton.LeftButton)  # a tiny run first: results to keep
    qtbot.waitUntil(lambda: not page.running, timeout=WAIT_MS)
    assert page.last_error is None, page.status.text()
    assert [row["variant"] for row in page.table_rows()] == ["off"]
    measured_at = page.results_at
    assert measured_at is not None

    for mode, box in page.mode_boxes.items():
        box.setChecked(mode in ("off", "embedded", "d2t"))
    for depth, box in page.depth_boxes.items():
        box.setChecked(depth <= 4)
    page.tokens.setValue(2048)  # each variant far longer than the cancel's grace
    page.runs.setValue(3)
    qtbot.mouseClick(page.run_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.progress_seen >= 2, timeout=WAIT_MS)  # a variant is under way in the child
    job = page.job
    assert job is not None and job.grace_s == CANCEL_GRACE_S <= 2
    proc = job._proc
    assert proc is not None and proc.poll() is None
    seen_at_cancel = page.progress_seen
    qtbot.mouseClick(page.cancel_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not page.running, timeout=WAIT_MS)

    assert proc.poll() is not None  # the child is gone (and reaped) ...
    with pytest.raises(ProcessLookupError):
        os.kill(proc.pid, 0)
    assert page.progress_seen == seen_at_cancel  # ... without finishing the variant under way
    assert isinstance(page.last_error, JobCancelled) and page.status.text().startswith("Cancelled")
    assert page.run_button.isEnabled() and not page.cancel_button.isEnabled()
    assert page.bar.value() == 0
    assert [row["variant"] for row in page.table_rows()] == ["off"]  # the earlier run's results, labelled so
    assert page.results_note.isVisible()
    assert page.results_note.text() == f"Results of the run at {measured_at:%H:%M} — the last run was cancelled."
