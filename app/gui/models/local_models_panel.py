"""The Models page's "Your own model files": add a GGUF already on disk, scan the usual places, see what each
file is and how far it is verified, check it against the hub, and make its FastMTP sidecar.

Everything slow goes through the page's :class:`~app.gui.shell.page_ops.OwnedOps`: reading GGUF headers (adding,
scanning), hashing against the hub, copying. Making a sidecar runs the ``sidecar make`` command in a child
process (:class:`~app.gui.models.sidecar_dialog.MakeSidecarDialog`). A ``.gguf`` dropped anywhere on the window
arrives here through :class:`GgufDrop`. ``models_changed`` tells the window to list the chat's models again.

Verification badges never blur the states: *publisher-signed* (green), *hub hash matches* (blue: the hub's
file, no publisher signature), *unverified local file* (grey), *hub hash DIFFERS* (red, refused).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QAbstractScrollArea,
    QCheckBox,
    QFileDialog,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.core import secrets
from app.core.units import format_bytes
from app.gui.shell.empty_state import EmptyState
from app.gui.shell.ops import Report
from app.gui.shell.page_ops import OwnedOps
from app.gui.shell.status_text import error_text
from app.models import local_models
from app.models.local_models import FoundFile, LocalModel
from app.release.hub_hash import EXPLANATIONS, LABELS, HubCheck, State, verify_against_hub

BADGE_COLOURS: dict[State, tuple[str, str]] = {  # (background, text)
    "publisher-signed": ("#dcfce7", "#166534"),
    "hub-hash-matches": ("#dbeafe", "#1e40af"),
    "unverified": ("#e5e7eb", "#374151"),
    "hub-hash-mismatch": ("#fee2e2", "#991b1b"),
}
# added files table columns
(A_FILE, A_FACTS, A_SIDECARS, A_STATE, A_ACTIONS) = range(5)
# scan table columns
(S_FILE, S_WHERE, S_FACTS, S_USABLE, S_ACTION) = range(5)


def badge(state: State) -> QLabel:
    """A coloured pill with the state's words; its tooltip says what the state proves and what it does not."""
    background, text = BADGE_COLOURS[state]
    label = QLabel(LABELS[state])
    label.setObjectName(f"badge-{state}")
    label.setStyleSheet(f"QLabel {{ background: {background}; color: {text}; border-radius: 8px; padding: 2px 8px;"
                        " font-weight: 600; }")
    label.setToolTip(EXPLANATIONS[state])
    label.setAlignment(Qt.AlignmentFlag.AlignCenter)
    return label


def facts_text(facts: local_models.ModelFacts) -> str:
    """``qwen35 · Q4_K_M · 15.3 GiB · MTP head`` (what gguf inspect said)."""
    head = "MTP head" if facts.mtp_head else "no MTP head"
    sidecar = {"full": "full sidecar", "d2t": "d2t sidecar"}.get(facts.sidecar, head)
    return f"{facts.architecture} · {facts.quantization} · {format_bytes(facts.size_bytes)} · {sidecar}"


def distinct_names(paths: list[Path]) -> dict[Path, str]:
    """What a list shows for each file: its name, and where two files share a name (two ``target.gguf``), the
    name with as much of its folder as tells them apart: ``target.gguf (in models/)``, ``target.gguf (in
    a/models/)`` (issue 36 item 9: two such files looked identical everywhere)."""
    by_name: dict[str, list[Path]] = {}
    for path in paths:
        by_name.setdefault(path.name, []).append(path)
    shown: dict[Path, str] = {}
    for name, group in by_name.items():
        unique = list(dict.fromkeys(group))
        if len(unique) == 1:
            shown[unique[0]] = name
            continue
        depth = 1
        longest = max(len(p.parent.parts) for p in unique)
        while depth < longest and len({p.parent.parts[-depth:] for p in unique}) < len(unique):
            depth += 1
        for path in unique:
            folder = "/".join(path.parent.parts[-depth:]).lstrip("/") or "/"
            shown[path] = f"{name} (in {folder}/)" if folder != "/" else f"{name} (in /)"
    return shown


NO_OWN_FILES = "No model files added yet. Add a GGUF you already have, or let the app look for them."
HUB_UNKNOWN_REPO = ("Not available: this file's repository on the Hugging Face hub is not known. Only files in "
                    "the Hugging Face cache or LM Studio's models folders can be checked (their folders name the "
                    "repository).")


def hub_check_unavailable(model: LocalModel) -> str | None:
    """Why "Check with the hub" is greyed for ``model`` (its tooltip), or None when it can run: a greyed button
    with no reason left people guessing whether the app or the file was at fault."""
    if not model.present:
        return f"Not available: the file is missing ({model.path}), so there is nothing to hash."
    if model.origin is None:
        return HUB_UNKNOWN_REPO
    return None


class GgufDrop(QObject):
    """Accepts ``.gguf`` files dragged onto ``window`` (an event filter) and hands each path to ``on_file``."""

    def __init__(self, window: QWidget, on_file: Callable[[Path], None]) -> None:
        super().__init__(window)
        self._on_file = on_file
        window.setAcceptDrops(True)
        window.installEventFilter(self)

    def watch(self, widget: QWidget) -> None:
        """Also take ``.gguf`` files dropped on ``widget``, which accepts drops of its own (the message box would
        paste the file's address as text); other drops stay the widget's."""
        target = widget.viewport() if isinstance(widget, QAbstractScrollArea) else widget  # where drops land
        target.installEventFilter(self)

    @staticmethod
    def gguf_paths(event: QDropEvent | QDragEnterEvent) -> list[Path]:
        mime = event.mimeData()
        if mime is None or not mime.hasUrls():
            return []
        return [Path(url.toLocalFile()) for url in mime.urls()
                if url.isLocalFile() and url.toLocalFile().lower().endswith(".gguf")]

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if isinstance(event, QDragEnterEvent) and event.type() in (QEvent.Type.DragEnter, QEvent.Type.DragMove):
            if self.gguf_paths(event):
                event.acceptProposedAction()
                return True
        elif isinstance(event, QDropEvent) and event.type() == QEvent.Type.Drop:
            found = self.gguf_paths(event)
            if found:
                event.acceptProposedAction()
                for path in found:
                    self._on_file(path)
                return True
        return False


class LocalModelsPanel(QGroupBox):
    """Your own GGUF files: added ones with their facts, sidecars and verification, and a scan of the usual places.

    ``history_path``: the chat history the sidecar dialog may count (the window's).
    """

    models_changed = Signal()

    def __init__(self, parent: QWidget | None = None, *, history_path: Path | None = None) -> None:
        super().__init__("Your own model files", parent)
        self.ops = OwnedOps(self)
        self.history_path = history_path
        self.models: list[LocalModel] = []
        self.found: list[FoundFile] = []
        self.scanning = False
        self.busy = 0  # adds, checks and copies under way
        self.last_error: Exception | None = None
        self.file_dialog: QFileDialog | None = None
        self.sidecar_dialog: QWidget | None = None

        self.add_button = QPushButton("Add a model file…")
        self.add_button.setToolTip("Pick a .gguf already on disk (or drop one on the window); it is used where it is")
        self.add_button.clicked.connect(lambda _checked=False: self.pick_file())
        self.scan_button = QPushButton("Scan for models")
        self.scan_button.setToolTip("Look in LM Studio's models folders, the Hugging Face cache, Downloads and the "
                                    "models folder")
        self.scan_button.clicked.connect(lambda _checked=False: self.scan())
        self.copy_box = QCheckBox("Copy into the models folder")
        self.copy_box.setToolTip("Off: the file is used where it is (nothing is copied)")
        buttons = QHBoxLayout()
        buttons.addWidget(self.add_button)
        buttons.addWidget(self.scan_button)
        buttons.addWidget(self.copy_box)
        buttons.addStretch(1)
        self.status = QLabel("Add a Qwen3.8 (qwen35 architecture) GGUF you already have, or let the app look for them.")
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        self.added_table = QTableWidget(0, 5)
        self.added_table.setHorizontalHeaderLabels(["File", "What it is", "FastMTP sidecars", "Verification", ""])
        self._table_look(self.added_table, stretch=A_FACTS)
        self.added_empty = EmptyState(self.added_table, NO_OWN_FILES)  # an empty table says how to fill it
        self.scan_label = QLabel()
        self.scan_label.setWordWrap(True)
        self.scan_table = QTableWidget(0, 5)
        self.scan_table.setHorizontalHeaderLabels(["Found", "Where", "What it is", "Can it be used?", ""])
        self._table_look(self.scan_table, stretch=S_USABLE)
        self.scan_table.hide()
        self.scan_label.hide()

        box = QVBoxLayout(self)
        box.addLayout(buttons)
        box.addWidget(self.status)
        box.addWidget(self.added_table)
        box.addWidget(self.scan_label)
        box.addWidget(self.scan_table)
        self.refresh()

    @staticmethod
    def _table_look(table: QTableWidget, stretch: int) -> None:
        table.verticalHeader().setVisible(False)
        table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        table.setWordWrap(False)  # one line a file; the whole reason is in the tooltip
        table.setTextElideMode(Qt.TextElideMode.ElideRight)  # a cut cell ends in "…", never mid-letter
        table.setMinimumHeight(110)
        header = table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(stretch, QHeaderView.ResizeMode.Stretch)

    @property
    def idle(self) -> bool:
        return self.ops.idle and not self.scanning and self.busy == 0

    # ------------------------------------------------------------------ the added files

    def refresh(self) -> None:
        """Show the registry again (cheap: a JSON file and a ``stat`` per file)."""
        self.models = local_models.load_registry()
        table = self.added_table
        table.setRowCount(len(self.models))
        names = distinct_names([m.path for m in self.models])
        for row, model in enumerate(self.models):
            item = QTableWidgetItem(names[model.path])
            item.setToolTip(str(model.path) + (f"\ncopied from {model.copied_from}" if model.copied_from else ""))
            table.setItem(row, A_FILE, item)
            shown = facts_text(model.facts) if model.present else model.problem
            facts = QTableWidgetItem(shown)
            # the column is narrower than the text at 1024x700 (the view elides it): the tooltip has all of it
            why = model.problem or model.facts.reason
            facts.setToolTip(shown if why in ("", shown) else f"{shown}\n{why}")
            table.setItem(row, A_FACTS, facts)
            sidecars = ", ".join(f"{kind} {path.name}" for kind, path in (("d2t", model.sidecar_d2t),
                                                                          ("full", model.sidecar_full)) if path)
            sidecar_item = QTableWidgetItem(sidecars or "none yet")
            sidecar_item.setToolTip("\n".join(str(p) for p in (model.sidecar_d2t, model.sidecar_full) if p)
                                    or "No FastMTP sidecar yet")
            table.setItem(row, A_SIDECARS, sidecar_item)
            table.setCellWidget(row, A_STATE, badge(model.state))
            table.setCellWidget(row, A_ACTIONS, self._actions(model))
        self._fit_columns()

    def _fit_columns(self) -> None:
        """The action buttons always show whole (issue 36 item 9: at 1024x700 Remove was off the table's edge): the
        file and sidecar columns are capped (elided, their tooltips have it all), "What it is" takes what is left."""
        table = self.added_table
        header = table.horizontalHeader()
        metrics = table.fontMetrics()
        for column, cap in ((A_FILE, 30), (A_SIDECARS, 0)):  # the sidecars column: as wide as its heading
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.Interactive)
            wanted = max(table.sizeHintForColumn(column), header.sectionSizeHint(column))
            table.setColumnWidth(column, min(wanted, max(metrics.averageCharWidth() * cap,
                                                         header.sectionSizeHint(column))))

    def _actions(self, model: LocalModel) -> QWidget:
        holder = QWidget()
        row = QHBoxLayout(holder)
        row.setContentsMargins(0, 0, 0, 0)
        check = QPushButton("Check with the hub")
        why_not = hub_check_unavailable(model)
        check.setEnabled(why_not is None)
        check.setToolTip(why_not or f"Compare the file with the content hash the hub reports for "
                                    f"{model.origin.repo if model.origin else ''}")
        check.setAccessibleDescription(why_not or "")
        check.clicked.connect(lambda _c=False, p=model.path: self.check_with_hub(p))
        make = QPushButton("Make sidecar…")  # the whole "Make FastMTP sidecar…" did not fit at 1024x700
        make.setAccessibleName("Make FastMTP sidecar…")
        make.setEnabled(model.facts.mtp_head and model.present)
        make.setToolTip("Make FastMTP sidecar: " + (
            f"this model already drafts with its d2t sidecar {model.sidecar_d2t.name}; a new one replaces it only "
            "if it measures clearly better" if model.sidecar_d2t is not None
            else "build a trimmed d2t draft head from this model's MTP head" if model.facts.mtp_head
            else "this model has no MTP head to build a sidecar from"))
        make.clicked.connect(lambda _c=False, p=model.path: self.make_sidecar(p))
        remove = QPushButton("Remove")
        remove.setToolTip("Forget it here (the file itself stays)")
        remove.clicked.connect(lambda _c=False, p=model.path: self.remove(p))
        for button in (check, make, remove):
            row.addWidget(button)
        return holder

    def model(self, path: Path | str) -> LocalModel | None:
        return local_models.find(path, self.models)

    def state_of(self, path: Path | str) -> str:
        """The badge text shown for an added file (what a user reads; for tests)."""
        for row, model in enumerate(self.models):
            if model.path == Path(path).absolute():
                widget = self.added_table.cellWidget(row, A_STATE)
                return widget.text() if isinstance(widget, QLabel) else ""
        return ""

    # ------------------------------------------------------------------ adding

    def pick_file(self) -> QFileDialog:
        """The file picker (Qt's own dialog: the same on every desktop); a chosen file is added."""
        dialog = QFileDialog(self, "Add a model file", str(Path.home()), "GGUF models (*.gguf)")
        dialog.setFileMode(QFileDialog.FileMode.ExistingFile)
        dialog.setOption(QFileDialog.Option.DontUseNativeDialog, True)
        dialog.fileSelected.connect(lambda chosen: self.add_path(Path(chosen)))
        dialog.finished.connect(lambda _result: dialog.deleteLater())
        self.file_dialog = dialog
        dialog.open()
        return dialog

    def add_path(self, path: Path, copy: bool | None = None) -> None:
        """Add ``path`` (in place, or copied when the box is ticked) in the background; the list follows."""
        copy = self.copy_box.isChecked() if copy is None else copy
        self._set_status(f"Reading {path.name}…" + (" and copying it into the models folder" if copy else ""))
        self.busy += 1

        def work(report: Report) -> LocalModel:
            return local_models.add(path, copy=copy, on_bytes=lambda done, total: report((done, total)))

        def progress(value: object) -> None:
            if isinstance(value, tuple):
                done, total = value
                self._set_status(f"Copying {path.name}: {done / max(total, 1):.0%}")

        def added(model: LocalModel) -> None:
            self.busy -= 1
            how = f"copied to {model.path.parent}" if model.copied_from else "used where it is, nothing copied"
            if model.sidecar_d2t is not None:  # it drafts with that: no advice to make another (issue 29 item 4)
                self._set_status(f"Added {model.path.name} ({how}); FastMTP sidecar found beside it: "
                                 f"{model.sidecar_d2t.name}. Usable: drafting with it (FastMTP d2t).")
            else:
                self._set_status(f"Added {model.path.name} ({how}). {model.facts.reason}")
            self.refresh()
            self._mark_found_added()
            self.models_changed.emit()

        self.ops.start(work, added, self._failed, progress)

    def remove(self, path: Path) -> None:
        try:
            model = local_models.remove(path)
        except local_models.LocalModelError as exc:
            self._failed(exc, count=False)
            return
        self._set_status(f"Removed {model.path.name} from your models; the file itself is untouched.")
        self.refresh()
        self._mark_found_added()
        self.models_changed.emit()

    def _failed(self, exc: Exception, count: bool = True) -> None:
        if count:
            self.busy -= 1
        self.last_error = exc
        self._set_status(error_text(exc), error=True)

    def _set_status(self, text: str, error: bool = False) -> None:
        self.status.setText(text)
        self.status.setStyleSheet("color: #b91c1c;" if error else "")

    # ------------------------------------------------------------------ verification

    def check_with_hub(self, path: Path) -> None:
        """Hash the file and compare it with the hub's content hash (network: the hub's API only)."""
        model = self.model(path)
        if model is None or model.origin is None:
            return
        origin = model.origin
        self.busy += 1
        self._set_status(f"Asking the hub for the content hash of {origin.path_in_repo} in {origin.repo}…")

        def work(report: Report) -> HubCheck:
            check = verify_against_hub(model.path, origin, token=secrets.get_token(),
                                       on_bytes=lambda done, total: report((done, total)))
            local_models.record_check(model.path, check)
            return check

        def progress(value: object) -> None:
            if isinstance(value, tuple):
                done, total = value
                self._set_status(f"Hashing {model.path.name}: {done / max(total, 1):.0%}")

        def checked(check: HubCheck) -> None:
            self.busy -= 1
            self._set_status(f"{model.path.name}: {check.label}. {EXPLANATIONS[check.state]}",
                             error=check.state == "hub-hash-mismatch")
            self.refresh()
            self.models_changed.emit()

        self.ops.start(work, checked, self._failed, progress)

    # ------------------------------------------------------------------ the scan

    def scan(self, roots: list[local_models.ScanRoot] | None = None) -> None:
        """Look for ``.gguf`` files in the usual places (default :func:`app.models.local_models.scan_roots`)."""
        if self.scanning:
            return
        self.scanning = True
        self.scan_button.setEnabled(False)
        self.found = []
        self.scan_table.setRowCount(0)
        self.scan_table.show()
        self.scan_label.show()
        chosen = roots if roots is not None else local_models.scan_roots()
        places = ", ".join(str(r.path) for r in chosen if r.path.is_dir()) or "none of the usual folders exist"
        self.scan_label.setText(f"Scanning {places}…")

        def work(report: Report) -> list[FoundFile]:
            return local_models.scan(chosen, on_found=report)

        def progress(value: object) -> None:
            if isinstance(value, FoundFile):
                self._show_found(value)

        def done(found: list[FoundFile]) -> None:
            self.scanning = False
            self.scan_button.setEnabled(True)
            usable = sum(1 for f in found if f.usable)
            self.scan_label.setText(f"Found {len(found)} GGUF file(s), {usable} usable as a model, in {places}.")

        def failed(exc: Exception) -> None:
            self.scanning = False
            self.scan_button.setEnabled(True)
            self.scan_label.setText("The scan stopped: " + error_text(exc))

        self.ops.start(work, done, failed, progress)

    def _show_found(self, found: FoundFile) -> None:
        self.found.append(found)
        table = self.scan_table
        row = table.rowCount()
        table.insertRow(row)
        name = QTableWidgetItem(found.path.name)
        name.setToolTip(str(found.path))
        table.setItem(row, S_FILE, name)
        self._name_found_rows()
        table.setItem(row, S_WHERE, QTableWidgetItem(found.where))
        what = QTableWidgetItem(facts_text(found.facts) if found.facts else "unreadable")
        what.setToolTip(what.text())  # elided in a narrow window: the whole text here
        table.setItem(row, S_FACTS, what)
        verdict = QTableWidgetItem(("yes — " if found.usable else "no — ") + found.reason)
        verdict.setToolTip(found.reason)
        table.setItem(row, S_USABLE, verdict)
        button = QPushButton("Added" if found.added else "Add")
        button.setEnabled(found.usable and not found.added)
        button.clicked.connect(lambda _c=False, p=found.path: self.add_path(p))
        table.setCellWidget(row, S_ACTION, button)

    def _name_found_rows(self) -> None:
        """Found files that share a name show the folder that tells them apart."""
        names = distinct_names([f.path for f in self.found])
        for row, found in enumerate(self.found):
            item = self.scan_table.item(row, S_FILE)
            if item is not None:
                item.setText(names[found.path])

    def _mark_found_added(self) -> None:
        added = {m.path for m in self.models}
        for row, found in enumerate(self.found):
            button = self.scan_table.cellWidget(row, S_ACTION)
            if isinstance(button, QPushButton):
                button.setText("Added" if found.path in added else "Add")
                button.setEnabled(found.usable and found.path not in added)

    def found_row(self, path: Path) -> dict[str, str]:
        """The texts of a scan row by column (what a user reads; for tests)."""
        row = next(i for i, f in enumerate(self.found) if f.path == path.absolute())
        button = self.scan_table.cellWidget(row, S_ACTION)

        def text(column: int) -> str:
            item = self.scan_table.item(row, column)
            return item.text() if item is not None else ""

        return {"file": text(S_FILE), "where": text(S_WHERE), "facts": text(S_FACTS), "usable": text(S_USABLE),
                "action": button.text() if isinstance(button, QPushButton) else ""}

    # ------------------------------------------------------------------ sidecars

    def make_sidecar(self, path: Path) -> QWidget | None:
        """Open the "Make FastMTP sidecar" dialog for an added model; the list follows when it made one."""
        from app.gui.models.sidecar_dialog import MakeSidecarDialog

        model = self.model(path)
        if model is None:
            return None
        dialog = MakeSidecarDialog(model.path, self, history_path=self.history_path)
        dialog.made.connect(self._sidecar_made)
        self.sidecar_dialog = dialog
        dialog.open()
        return dialog

    def _sidecar_made(self, path: str) -> None:
        self._set_status(f"Made the FastMTP sidecar {Path(path).name}.")
        self.refresh()
        self.models_changed.emit()
