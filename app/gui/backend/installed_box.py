"""The Backend page's list of installed backends: one row a backend (the active one marked, where each came
from), the selected one's manifest in words (its JSON one click away), "Use" and the self-test run again in a
child process (a native crash cannot take the window down)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import (
    QAbstractItemView,
    QApplication,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QPlainTextEdit,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.backend import archive, feed, registry
from app.backend.builder import run_selftest_subprocess
from app.backend.registry import BackendManifest
from app.core.errors import FastMTPError
from app.gui.shell.labels import wrapping_label
from app.gui.shell.ops import BackgroundOp
from app.gui.shell.page_ops import OwnedOps
from app.gui.shell.status_text import bad_colour, error_text, good_colour

# installed backends table columns
(B_ID, B_FLAVOR, B_PATCH, B_SELFTEST, B_ORIGIN, B_BUILT, B_ACTIVE) = range(7)
COLUMNS = ["id", "flavor", "patch", "selftest", "origin", "built", "active"]


def selftest_summary(result: dict[str, Any]) -> str:
    """One plain sentence about a self-test result (the manifest's or a fresh one)."""
    if not result:
        return "not run"
    if not result.get("ok"):
        return f"FAILED: {result.get('error', 'no result')}"
    parts = [f"passed in {result.get('seconds', '?')} s"]
    agreement = result.get("greedy_table_agreement")
    if isinstance(agreement, int | float):
        parts.append(f"greedy decoding follows the demo table on {agreement:.0%} of steps")
    d2t = result.get("d2t")
    if isinstance(d2t, dict):
        parts.append("d2t sidecar loads, draft logits match the full sidecar" if d2t.get("loaded")
                     else "d2t sidecar refused, as an unpatched build must")
    parts.append("GPU offload" if result.get("gpu_offload") else "CPU only")
    return "; ".join(parts)


def manifest_text(manifest: BackendManifest, origin: str) -> str:
    """A backend's manifest as labelled lines a person reads (the JSON stays one click away: "Copy as JSON")."""
    flavor = "CPU" if manifest.flavor != "cuda" else (
        f"CUDA {manifest.cuda_version or '?'} for " + (feed.sm(manifest.cuda_archs) or "?"))
    built = manifest.built_at.replace("T", " ").split("+")[0] if manifest.built_at else "?"
    rows = [("Backend", manifest.id), ("Origin", origin), ("Flavour", flavor),
            ("Source", f"llama-cpp-python {manifest.llama_cpp_python_version} (llama.cpp "
                       f"{manifest.llama_cpp_commit}), sha256 {manifest.sdist_sha256}"),
            ("d2t patch", f"{manifest.patch_name} (sha256 {manifest.patch_sha256})" if manifest.patch_name
             else "none: this build refuses the d2t sidecar"),
            ("Built", f"{built} UTC in {manifest.build_seconds:.0f} s with {manifest.compiler}"),
            ("Self-test", selftest_summary(manifest.selftest)),
            ("CMake", " ".join(manifest.cmake_args))]
    if manifest.cpu_variants:
        rows.append(("CPU modules", ", ".join(manifest.cpu_variants)))
    width = max(len(label) for label, _value in rows)
    return "\n".join(f"{label:<{width}}  {value}" for label, value in rows)


class InstalledBackends(QGroupBox):
    """"Installed backends": the table read from the registry, the selected backend's manifest, Use, Run
    self-test, Copy as JSON. ``busy`` says whether the page's job is running (then no staging folder is tidied:
    it may be the job's)."""

    def __init__(self, ops: OwnedOps, busy: Callable[[], bool], parent: QWidget | None = None) -> None:
        super().__init__("Installed backends", parent)
        self.ops = ops
        self.busy = busy
        self.manifests: dict[str, BackendManifest] = {}
        self.selftest_op: BackgroundOp[dict[str, Any]] | None = None
        self.selftest_result: dict[str, Any] | None = None  # the last self-test run from here ...
        self.selftest_of: str | None = None  # ... and the backend it tested
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(["Backend", "Flavor", "d2t patch", "Self-test", "Origin", "Built", ""])
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.setMaximumHeight(150)
        self.table.itemSelectionChanged.connect(self._selection_changed)
        self.details = QPlainTextEdit()
        self.details.setReadOnly(True)
        self.details.setMaximumHeight(140)
        self.details.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.details.setPlaceholderText("Select a backend to see its manifest.")
        self.details.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        self._details_json = ""  # the selected backend's manifest as JSON, for "Copy as JSON"
        self.copy_json_button = QPushButton("Copy as JSON")
        self.copy_json_button.setToolTip("The selected backend's manifest, as `python -m app backend list --json` "
                                         "gives it, for a bug report")
        self.copy_json_button.clicked.connect(lambda: QApplication.clipboard().setText(self._details_json))
        self.use_button = QPushButton("Use")
        self.use_button.clicked.connect(self.use_selected)
        self.selftest_button = QPushButton("Run self-test")
        self.selftest_button.clicked.connect(self.selftest_selected)
        self.selftest_label = wrapping_label()
        buttons = QHBoxLayout()
        buttons.addWidget(self.selftest_label, 1)
        buttons.addWidget(self.use_button)
        buttons.addWidget(self.selftest_button)
        buttons.addWidget(self.copy_json_button)
        box = QVBoxLayout(self)
        box.addWidget(self.table)
        box.addWidget(self.details)
        box.addLayout(buttons)

    def refresh_backends(self, select: str | None = None) -> None:
        """Re-read the registry (small JSON files) and show every backend, the active one marked."""
        if not self.busy():
            registry.cleanup_stale_staging()
        backends = registry.list_backends()
        active = registry.active_id()
        selected = select or self.selected_id() or active
        self.manifests = {m.id: m for m in backends}
        self.table.setRowCount(len(backends))
        for row, manifest in enumerate(backends):
            origin = archive.read_origin(registry.backend_dir(manifest.id))
            cells = [manifest.id, manifest.flavor + (f" {feed.sm(manifest.cuda_archs)}" if manifest.cuda_archs else ""),
                     "yes" if manifest.patched else "no (cannot load d2t sidecars)",
                     "ok" if manifest.selftest_ok else "FAILED", archive.origin_label(origin),
                     manifest.built_at.replace("T", " ")[:19], "● active" if manifest.id == active else ""]
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if column == B_SELFTEST:
                    item.setForeground(good_colour(self) if manifest.selftest_ok else bad_colour(self))
                if column == B_ORIGIN:
                    item.setToolTip(origin.describe() if origin is not None else "built on this machine")
                self.table.setItem(row, column, item)
        ids = [m.id for m in backends]
        if selected in ids:
            self.table.selectRow(ids.index(selected))
        self._selection_changed()

    def selected_id(self) -> str | None:
        rows = {index.row() for index in self.table.selectionModel().selectedRows()}
        if not rows:
            return None
        item = self.table.item(min(rows), B_ID)
        return item.text() if item is not None else None

    def row_texts(self, backend_id: str) -> dict[str, str]:
        """The texts of one backend's row by column name (what a user reads; used by tests)."""
        for row in range(self.table.rowCount()):
            texts = [item.text() if (item := self.table.item(row, column)) is not None else ""
                     for column in range(len(COLUMNS))]
            if texts[B_ID] == backend_id:
                return dict(zip(COLUMNS, texts, strict=True))
        raise KeyError(backend_id)

    def _selection_changed(self) -> None:
        backend_id = self.selected_id()
        manifest = self.manifests.get(backend_id) if backend_id else None
        busy = self.selftest_op is not None and self.selftest_op.running
        self.use_button.setEnabled(manifest is not None and manifest.id != registry.active_id())
        self.selftest_button.setEnabled(manifest is not None and not busy)
        self.copy_json_button.setEnabled(manifest is not None)
        if manifest is None:
            self.details.clear()
            self._details_json = ""
            return
        origin = archive.describe_origin(registry.backend_dir(manifest.id))
        self.details.setPlainText(manifest_text(manifest, origin))
        self._details_json = json.dumps({"origin": origin, **manifest.to_dict()}, indent=2)
        if busy:
            return
        if self.selftest_result is not None and self.selftest_of == manifest.id:
            self.selftest_label.setText(f"Self-test of {manifest.id}: {selftest_summary(self.selftest_result)}")
        else:
            when = "at build time" if archive.read_origin(registry.backend_dir(manifest.id)) is None else \
                "when it was installed here"
            self.selftest_label.setText(f"Self-test {when}: {selftest_summary(manifest.selftest)}")

    def use_selected(self) -> None:
        backend_id = self.selected_id()
        if backend_id is None:
            return
        try:
            registry.set_active(backend_id)
        except FastMTPError as exc:
            self.selftest_label.setText(error_text(exc))
            return
        self.refresh_backends(select=backend_id)
        self.selftest_label.setText(f"{backend_id} is the active backend now; the next model load uses it.")

    def selftest_selected(self) -> None:
        """Run the self-test again in a child process (a native crash cannot take the window down)."""
        backend_id = self.selected_id()
        if backend_id is None or (self.selftest_op is not None and self.selftest_op.running):
            return
        folder = registry.backend_dir(backend_id)
        self.selftest_result = None
        self.selftest_label.setText(f"Self-testing {backend_id}…")
        self.selftest_button.setEnabled(False)

        self.selftest_of = backend_id

        def done(result: dict[str, Any]) -> None:
            self.selftest_result = result
            self._selection_changed()

        def failed(exc: Exception) -> None:
            self.selftest_result = {"ok": False, "error": f"the self-test could not run: {error_text(exc)}"}
            self._selection_changed()

        self.selftest_op = self.ops.start(lambda _report: run_selftest_subprocess(folder), done, failed)
