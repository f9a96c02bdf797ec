"""The Models page's table of a download's files: one row a file (added on its first event: payload files are
fetched only once the signed manifest that lists them verified, so its signature check has passed by then), its
bar, speed and time left, and its three checks (signature, size, sha256) as the core reports them."""

from __future__ import annotations

from PySide6.QtGui import QColor
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QProgressBar, QTableWidget, QTableWidgetItem, QWidget

from app.core.units import format_bytes
from app.gui.models.download_words import human_eta, plain_failure
from app.gui.shell.status_text import bad_colour, good_colour
from app.release.progress import FetchEvent

OK, FAILED, PENDING = "✓", "✗", "…"

# download files table columns
(F_NAME, F_PROGRESS, F_SPEED, F_ETA, F_SIGNATURE, F_SIZE, F_SHA256, F_STATUS) = range(8)


class DownloadFiles(QTableWidget):
    """The files of one download; ``rows`` (file name -> row) and ``failed`` (the names that failed a check)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(0, 8, parent)
        self.rows: dict[str, int] = {}
        self.failed: set[str] = set()
        self.setHorizontalHeaderLabels(["File", "Progress", "Speed", "ETA", "Signature", "Size", "sha256", "Status"])
        self.verticalHeader().setVisible(False)
        self.setMinimumHeight(130)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        header = self.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(F_PROGRESS, QHeaderView.ResizeMode.Stretch)
        header.setStretchLastSection(True)

    def start_over(self) -> None:
        """A new download: no rows."""
        self.rows.clear()
        self.failed.clear()
        self.setRowCount(0)

    def show_event(self, event: FetchEvent) -> None:
        """One file's event (``event.file`` set): its row's bar, speed, time left, checks and status."""
        row = self._row(event.file)
        bar = self.cellWidget(row, F_PROGRESS)
        if isinstance(bar, QProgressBar) and event.bytes_total:
            bar.setValue(round(1000 * event.bytes_done / event.bytes_total))
            bar.setFormat(f"{format_bytes(event.bytes_done)} / {format_bytes(event.bytes_total)}")
        if event.kind == "progress":
            self._cell(row, F_SPEED, f"{format_bytes(event.speed_bps)}/s")
            self._cell(row, F_ETA, human_eta(event.eta_s))
            self._cell(row, F_STATUS, "downloading")
        elif event.kind == "start":
            self._cell(row, F_STATUS, event.message or "downloading")
        elif event.kind == "retry":  # "… retrying in 2.0 s": no speed or ETA while it waits
            self._cell(row, F_SPEED, "")
            self._cell(row, F_ETA, human_eta(None))
            self._cell(row, F_STATUS, event.message)
        elif event.kind == "done":
            if isinstance(bar, QProgressBar):
                bar.setValue(1000)
            self._cell(row, F_SPEED, "")
            self._cell(row, F_ETA, "")
            self._cell(row, F_SIZE, OK, good_colour(self))
            self._cell(row, F_SHA256, OK, good_colour(self))
            self._cell(row, F_STATUS, "verified")
        elif event.kind == "error":
            self.mark_failed(event.file, event.message, event.error_kind)

    def all_installed(self) -> None:
        for row in self.rows.values():
            self._cell(row, F_STATUS, "installed", good_colour(self))

    def _row(self, name: str) -> int:
        """The file's row, added on its first event: payload files are only fetched once the signed
        manifest that lists them verified, so a row's signature check has passed by then."""
        if name in self.rows:
            return self.rows[name]
        row = self.rowCount()
        self.insertRow(row)
        self.rows[name] = row
        self._cell(row, F_NAME, name)
        bar = QProgressBar()
        bar.setRange(0, 1000)
        bar.setValue(0)
        self.setCellWidget(row, F_PROGRESS, bar)
        self._cell(row, F_SIGNATURE, OK, good_colour(self)).setToolTip("Listed in the release's signed manifest; the "
                                                           "signature verified with the trusted publisher key.")
        self._cell(row, F_SIZE, PENDING)
        self._cell(row, F_SHA256, PENDING)
        return row

    def _cell(self, row: int, column: int, text: str, colour: QColor | None = None) -> QTableWidgetItem:
        item = QTableWidgetItem(text)
        if colour is not None:
            item.setForeground(colour)
        self.setItem(row, column, item)
        return item

    def mark_failed(self, name: str, message: str, kind: str) -> None:
        row = self.rows[name]
        self.failed.add(name)
        check, text = plain_failure(kind, message)
        if check == "size":
            self._cell(row, F_SIZE, FAILED, bad_colour(self))
        elif check == "sha256":
            self._cell(row, F_SIZE, OK, good_colour(self))
            self._cell(row, F_SHA256, FAILED, bad_colour(self))
        self._cell(row, F_SPEED, "")
        self._cell(row, F_ETA, "")
        self._cell(row, F_STATUS, text, bad_colour(self)).setToolTip(message)

    def file_row(self, name: str) -> dict[str, str]:
        """The texts of one file's row by column name (what a user reads; used by tests and screenshots)."""
        row = self.rows[name]
        columns = ["file", "progress", "speed", "eta", "signature", "size", "sha256", "status"]
        values = {}
        for column, key in enumerate(columns):
            item = self.item(row, column)
            widget = self.cellWidget(row, column)
            values[key] = widget.text() if isinstance(widget, QProgressBar) else (item.text() if item else "")
        return values

    def recolour(self) -> None:
        """Light <-> dark: the checks' and statuses' colours again."""
        for name, row in self.rows.items():
            for column in (F_SIGNATURE, F_SIZE, F_SHA256, F_STATUS):
                item = self.item(row, column)
                if item is None:
                    continue
                if item.text() == FAILED or (column == F_STATUS and name in self.failed):
                    item.setForeground(bad_colour(self))
                elif item.text() in (OK, "installed"):
                    item.setForeground(good_colour(self))
