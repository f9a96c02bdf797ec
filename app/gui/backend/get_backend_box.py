"""The Backend page's "Get a backend" group: build here (CPU or CUDA), install the prebuilt one for this machine
from the signed feed (which one and why, or "Build here" when none fits), or a given signed archive; and the job
strip that every one of these jobs shows in. Layout only: the page wires the buttons to its jobs."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QGroupBox, QHBoxLayout, QLabel, QLineEdit, QPushButton, QVBoxLayout, QWidget

from app.backend.feed import Selection
from app.gui.shell.job_strip import JobStrip
from app.gui.shell.labels import heading, wrapping_label
from app.gui.shell.status_text import bad_colour
from app.release.catalog import CatalogError, backend_feed_url


def default_feed_url() -> str:
    """The catalog's feed (``FASTMTP_BACKEND_FEED_URL`` replaces it); empty when there is none."""
    try:
        return backend_feed_url()
    except CatalogError:
        return ""


class GetBackendBox(QGroupBox):
    """The build buttons, the feed's row with its verdict (``feed_label``) and "Build here" fallback, the archive's
    row, and ``strip`` (the job's words, bar, Cancel and log)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Get a backend", parent)
        self.build_cpu_button = QPushButton("Build CPU backend")
        self.build_cuda_button = QPushButton("Build CUDA backend")
        buttons = QHBoxLayout()
        buttons.addWidget(self.build_cpu_button)
        buttons.addWidget(self.build_cuda_button)
        buttons.addStretch(1)
        self.prebuilt_source = QLineEdit()
        self.prebuilt_source.setPlaceholderText("a backend archive (.tar.xz) or its https:// URL")
        self.browse_button = QPushButton("Browse…")
        self.install_button = QPushButton("Install a prebuilt backend…")
        prebuilt = QHBoxLayout()
        prebuilt.addWidget(self.prebuilt_source, 1)
        prebuilt.addWidget(self.browse_button)
        prebuilt.addWidget(self.install_button)
        self.feed_url = QLineEdit(default_feed_url())
        self.feed_url.setPlaceholderText("the signed backend feed's https:// URL")
        self.feed_button = QPushButton("Install the one for this machine")
        self.feed_button.setToolTip("Picks the archive for this machine's NVIDIA GPU and driver (or the CPU one) "
                                    "from the publisher's signed list of prebuilt backends")
        feed_row = QHBoxLayout()
        feed_row.addWidget(QLabel("From the feed:"))
        feed_row.addWidget(self.feed_url, 1)
        feed_row.addWidget(self.feed_button)
        self.feed_label = wrapping_label()  # which archive the feed gave and why, or why none fits
        self.feed_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.feed_label.hide()
        self.feed_build_button = QPushButton("Build here")  # offered when no prebuilt archive fits
        self.feed_build_button.hide()
        feed_fallback = QHBoxLayout()
        feed_fallback.addWidget(self.feed_build_button)
        feed_fallback.addStretch(1)
        self.strip = JobStrip("The first build takes a few minutes; later builds with the same inputs reuse the "
                              "cached build tree and take seconds.", "Cancel build", "The build log appears here.")
        box = QVBoxLayout(self)
        box.addWidget(heading("Build here"))
        box.addWidget(wrapping_label("Compiles llama.cpp with the FastMTP d2t patch on this machine, from the "
                                     "pinned, hash-checked source; needs the build tools above."))
        box.addLayout(buttons)
        box.addWidget(heading("Install a prebuilt backend"))
        box.addWidget(wrapping_label("Built elsewhere, packed and signed by its publisher: the signature is checked "
                                     "against a trusted publisher key, then the archive's sha256 and what it "
                                     "holds; nothing is installed unless every check passes."))
        box.addLayout(feed_row)
        box.addWidget(self.feed_label)
        box.addLayout(feed_fallback)
        box.addWidget(wrapping_label("Or a given archive, a file or its URL:"))
        box.addLayout(prebuilt)
        box.addWidget(wrapping_label("Either way, the backend's self-test runs on this machine before it is "
                                     "used."))
        box.addWidget(self.strip, 1)
        self.build_cuda_button.setEnabled(False)  # until the toolchain says CUDA can be built

    def set_busy(self, busy: bool) -> None:
        """While a job runs, no other can start from here (they share the strip)."""
        for widget in (self.prebuilt_source, self.browse_button, self.install_button, self.feed_url,
                       self.feed_button, self.feed_build_button):
            widget.setEnabled(not busy)

    def show_feed_text(self, text: str, *, bad: bool = False) -> None:
        self.feed_label.setText(text)
        self.feed_label.setStyleSheet(f"color: {bad_colour(self).name()};" if bad else "")
        self.feed_label.show()

    def show_selection(self, selection: Selection) -> None:
        """Which archive the feed gave this machine and why; or why none fits, with "Build here" offered."""
        chosen = selection.archive
        if chosen is None:
            self.show_feed_text(f"No prebuilt backend fits this machine ({selection.machine.describe()}): "
                                f"{selection.reason} Build here instead: it compiles the backend for this machine.")
            self.feed_build_button.show()
        else:
            self.show_feed_text(f"Picked {chosen.name} ({chosen.label()}) for this machine "
                                f"({selection.machine.describe()}). {selection.reason}")
            self.feed_build_button.hide()
        self.feed_label.setToolTip("\n".join(selection.passed_over))
