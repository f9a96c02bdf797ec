""""Make FastMTP sidecar": draft vocabulary size and corpus, then the build with progress, cancel and the measured
acceptance next to the embedded head.

The job is the ``sidecar make`` command run as a child process (``app.core.child_job``): it tokenizes and probes
through llama.cpp, and a native failure must not take the window down. Cancel stops the child; the sidecar
is written as ``.partial`` and renamed only when complete, and the parent removes anything a killed child
left, so a cancelled build leaves no file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.core import defaults
from app.core.child_job import ChildJob
from app.core.errors import FastMTPError, JobCancelled
from app.gui.shell.page_ops import OwnedOps
from app.gui.shell.status_text import error_text
from app.models import local_models
from app.models.sidecar_job import VOCAB_SIZES, free_out, prompt_sets

STEP_WORDS = {"tokenizing": "Tokenizing the corpus", "counting": "Counting tokens", "slicing": "Slicing rows",
              "writing": "Writing", "checking": "Checking"}


class MakeSidecarDialog(QDialog):
    """Build a d2t sidecar for ``target``; ``made`` carries the new file's path."""

    made = Signal(str)

    def __init__(self, target: Path, parent: QWidget | None = None, *, history_path: Path | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Make FastMTP sidecar")
        self.setMinimumWidth(560)
        self.target = target
        self.history_path = history_path
        self.ops = OwnedOps(self)
        self.job: ChildJob | None = None
        self.outcome: dict[str, Any] | None = None
        self.last_error: Exception | None = None
        self.steps_seen: list[str] = []

        self.vocab = QComboBox()
        for size in VOCAB_SIZES:
            note = " (the release's size)" if size == defaults.DRAFT_VOCAB else ""
            self.vocab.addItem(f"{size // 1024}K ({size:,} draft tokens){note}", size)
        self.vocab.setCurrentIndex(VOCAB_SIZES.index(defaults.DRAFT_VOCAB))
        self.vocab.currentIndexChanged.connect(lambda _i: self._suggest_name())
        self.prompt_boxes: dict[str, QCheckBox] = {}
        corpus = QVBoxLayout()
        for name in prompt_sets():
            box = QCheckBox(f"Built-in prompts: {name}")
            box.setChecked(True)
            self.prompt_boxes[name] = box
            corpus.addWidget(box)
        self.history_box = QCheckBox("My chat history (what you and the model wrote)")
        corpus.addWidget(self.history_box)
        self.files = QListWidget()
        self.files.setFixedHeight(60)
        add_files = QPushButton("Add text files…")
        add_files.clicked.connect(self.pick_files)
        clear = QPushButton("Clear")
        clear.clicked.connect(self.files.clear)
        file_row = QHBoxLayout()
        file_row.addWidget(add_files)
        file_row.addWidget(clear)
        file_row.addStretch(1)
        corpus.addWidget(self.files)
        corpus.addLayout(file_row)
        # the file name is the user's to choose; it starts as a free name, so "already exists" is never a dead end
        self.suggested = ""
        self.name_edit = QLineEdit()
        self.name_edit.setToolTip(f"The new sidecar's file name, written in {target.parent}")
        self.name_edit.textChanged.connect(lambda _t: self._show_out())
        self.use_free_button = QPushButton("Use a free name")
        self.use_free_button.setToolTip("Put a file name that no file in this folder has yet")
        self.use_free_button.clicked.connect(lambda: self._suggest_name(force=True))
        self.use_free_button.hide()
        name_row = QHBoxLayout()
        name_row.addWidget(self.name_edit, 1)
        name_row.addWidget(self.use_free_button)
        self.out_label = QLabel()
        self.out_label.setWordWrap(True)
        self.out_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        writes = QVBoxLayout()
        writes.addLayout(name_row)
        writes.addWidget(self.out_label)
        form = QFormLayout()
        form.addRow("Model", QLabel(target.name))
        form.addRow("Draft vocabulary", self.vocab)
        form.addRow("Corpus", corpus)
        form.addRow("File name", writes)

        self.bar = QProgressBar()
        self.bar.setRange(0, 1000)
        self.bar.setTextVisible(False)
        self.step_label = QLabel("The token frequencies of the corpus choose the draft vocabulary.")
        self.step_label.setWordWrap(True)
        # the result is a read-only text box of its own height (scrolls when long): a long result never pushes over
        # or under the buttons (issue 36 item 7: the widgets overlapped after a result)
        self.result_label = QPlainTextEdit()
        self.result_label.setReadOnly(True)
        self.result_label.setFrameShape(QPlainTextEdit.Shape.NoFrame)
        self.result_label.setMinimumHeight(self.fontMetrics().lineSpacing() * 7)
        self.result_label.hide()
        self.make_button = QPushButton("Make sidecar")
        self.make_button.setDefault(True)
        self.make_button.clicked.connect(self.start)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(self.cancel)
        self.cancel_button.setEnabled(False)
        self.use_anyway_button = QPushButton("Use it anyway")  # a new sidecar that measured worse: the user's call
        self.use_anyway_button.setToolTip("Make the new sidecar this model's FastMTP d2t drafting mode although it "
                                          "measured worse than the current one")
        self.use_anyway_button.clicked.connect(self.use_anyway)
        self.use_anyway_button.hide()
        self.close_button = QPushButton("Close")
        self.close_button.clicked.connect(self.reject)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self.use_anyway_button)
        buttons.addWidget(self.make_button)
        buttons.addWidget(self.cancel_button)
        buttons.addWidget(self.close_button)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.bar)
        layout.addWidget(self.step_label)
        layout.addWidget(self.result_label, 1)
        layout.addLayout(buttons)
        self._suggest_name()

    @property
    def running(self) -> bool:
        return not self.ops.idle

    @property
    def out(self) -> Path:
        """Where the sidecar is written: the typed name (``.gguf`` added when missing) in the target's folder."""
        name = self.name_edit.text().strip()
        if name and not name.lower().endswith(".gguf"):
            name += ".gguf"
        return self.target.parent / name

    def _suggest_name(self, *, force: bool = False) -> None:
        """A free name for the chosen vocabulary; a name the user typed stays unless ``force``."""
        typed = self.name_edit.text().strip()
        if force or not typed or typed == self.suggested:
            self.suggested = free_out(self.target, int(self.vocab.currentData())).name
            self.name_edit.setText(self.suggested)
        self._show_out()

    def name_problem(self) -> str:
        """What is wrong with the typed file name, in words ("" when it can be written)."""
        name = self.name_edit.text().strip()
        if not name:
            return "Type a file name for the new sidecar."
        if "/" in name or "\\" in name or name in (".", ".."):
            return "Type a file name only (it is written beside the model)."
        if self.out.exists():
            return (f"{self.out.name} already exists in this folder: type another name, or press "
                    "\u201cUse a free name\u201d.")
        return ""

    def _show_out(self) -> None:
        problem = self.name_problem()
        self.out_label.setText(problem or f"Writes {self.out}")
        self.use_free_button.setVisible(bool(problem) and bool(self.name_edit.text().strip()))
        self.make_button.setEnabled(not problem and not self.running)

    def pick_files(self) -> QFileDialog:
        dialog = QFileDialog(self, "Text files for the corpus", str(Path.home()), "Text (*.txt *.md);;All files (*)")
        dialog.setFileMode(QFileDialog.FileMode.ExistingFiles)
        dialog.setOption(QFileDialog.Option.DontUseNativeDialog, True)
        dialog.filesSelected.connect(lambda chosen: self.files.addItems(list(chosen)))
        dialog.finished.connect(lambda _r: dialog.deleteLater())
        dialog.open()
        return dialog

    def command(self) -> list[str]:
        """The ``sidecar make`` command this dialog runs (also what a user can run headless)."""
        args = ["sidecar", "make", "--target", str(self.target), "--out", str(self.out), "--vocab",
                str(self.vocab.currentData())]
        chosen = [name for name, box in self.prompt_boxes.items() if box.isChecked()]
        if chosen:
            args += ["--prompts", *chosen]
        if self.history_box.isChecked():
            args.append("--history")
            if self.history_path is not None:
                args += ["--history-file", str(self.history_path)]
        files = [self.files.item(i).text() for i in range(self.files.count())]
        if files:
            args += ["--corpus", *files]
        return args

    def start(self) -> None:
        if self.running or self.name_problem():
            return
        job = self.job = ChildJob(self.command(), leftovers=[self.out])
        self.outcome, self.last_error = None, None
        self.steps_seen.clear()
        self.bar.setValue(0)
        self.result_label.setPlainText("")
        self.result_label.hide()
        self.step_label.setText("Starting…")
        self._set_running(True)
        self.ops.start(job.run, self._done, self._failed, self._progress)

    def cancel(self) -> None:
        if self.job is not None and self.running:
            self.step_label.setText("Cancelling…")
            self.cancel_button.setEnabled(False)
            self.job.cancel()

    def _set_running(self, running: bool) -> None:
        self.make_button.setEnabled(not running and not self.name_problem())
        self.cancel_button.setEnabled(running)
        self.vocab.setEnabled(not running)
        self.name_edit.setEnabled(not running)

    def show_result(self, text: str) -> None:
        self.result_label.setPlainText(text)
        self.result_label.setVisible(bool(text))

    def _progress(self, event: object) -> None:
        if not isinstance(event, dict) or event.get("kind") != "progress":
            return
        step = str(event.get("step", ""))
        if step not in self.steps_seen:
            self.steps_seen.append(step)
        self.bar.setValue(round(1000 * float(event.get("fraction", 0.0))))
        self.step_label.setText(f"{STEP_WORDS.get(step, step)}: {event.get('message', '')}")

    def _done(self, result: dict[str, Any]) -> None:
        self.outcome = result
        self._set_running(False)
        self.bar.setValue(1000)
        self.step_label.setText("Done.")
        check = result.get("check")
        text = (f"Made {Path(result['path']).name}: {result['vocab_size']:,} draft tokens chosen from "
                f"{result['corpus']}.")
        if check:
            text += (f"\nMeasured one-token acceptance along {check['positions']:,} tokens of the model's own text: "
                     f"this sidecar {check['sidecar_acceptance']:.1%}, the embedded MTP head "
                     f"{check['embedded_acceptance']:.1%}.")
        for warning in result.get("warnings", []):
            text += "\nNote: " + warning
        if result.get("attach_note"):  # replaced the current d2t sidecar, or kept beside it and why
            text += "\n" + str(result["attach_note"])
        if result.get("attached"):
            text += "\nThe chat's model selector offers it as the FastMTP d2t drafting mode of this model."
        self.use_anyway_button.setVisible(bool(result.get("attach_note")) and not result.get("attached"))
        self.show_result(text)
        self._suggest_name(force=True)  # the name just written is taken now: the next build gets a free one
        self.made.emit(str(result["path"]))

    def use_anyway(self) -> None:
        """The user chose the new sidecar although it measured worse: it becomes the model's d2t drafting mode."""
        if self.outcome is None:
            return
        path = Path(self.outcome["path"])
        try:
            local_models.attach_sidecar(self.target, path)
        except FastMTPError as exc:
            self.show_result(self.result_label.toPlainText() + "\n" + error_text(exc))
            return
        self.outcome = dict(self.outcome, attached=True)
        self.use_anyway_button.hide()
        self.show_result(self.result_label.toPlainText() + f"\nAs you chose, {path.name} is now this model's "
                         "FastMTP d2t drafting mode.")
        self.made.emit(str(path))

    def _failed(self, exc: Exception) -> None:
        self.last_error = exc
        self._set_running(False)
        if isinstance(exc, JobCancelled):
            self.bar.setValue(0)
            self.step_label.setText("Cancelled: no sidecar was written.")
            return
        self.step_label.setText("The sidecar could not be made.")
        self.show_result(error_text(exc))

    def reject(self) -> None:
        self.cancel()  # closing the dialog stops the build; nothing half-written stays
        super().reject()

    def closeEvent(self, event: QCloseEvent) -> None:
        self.cancel()
        super().closeEvent(event)
