"""The Models page's "Mirrors and hub token" group: the user's mirrors (tried before the hub; added, listed and
removed in the catalog's user endpoints) and the hub token in the system keyring (whose calls may block on an unlock
prompt, so they run off the GUI thread)."""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import (
    QComboBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QPushButton,
    QWidget,
)

from app.core import secrets
from app.core.errors import FastMTPError
from app.gui.shell.ops import Report
from app.gui.shell.page_ops import OwnedOps
from app.gui.shell.status_text import error_text
from app.release.catalog import EndpointKind, add_user_endpoint, remove_user_endpoint, user_endpoints


class MirrorsAndToken(QGroupBox):
    """The mirror list with its kind, URL, Add and Remove; the token box with Save and Forget, the token's status,
    and ``settings_message`` (what the last action did, or why it could not)."""

    def __init__(self, ops: OwnedOps, parent: QWidget | None = None) -> None:
        super().__init__("Mirrors and hub token", parent)
        self.ops = ops
        self.mirror_list = QListWidget()
        self.mirror_list.setFixedHeight(64)
        self.mirror_kind = QComboBox()
        self.mirror_kind.addItem("plain base URL", "plain")
        self.mirror_kind.addItem("HF-compatible host", "hf")
        self.mirror_url = QLineEdit()
        self.mirror_url.setPlaceholderText("https://mirror.example.org/models")
        self.add_mirror_button = QPushButton("Add mirror")
        self.add_mirror_button.clicked.connect(self.add_mirror)
        self.remove_mirror_button = QPushButton("Remove")
        self.remove_mirror_button.clicked.connect(self.remove_mirror)
        mirror_row = QHBoxLayout()
        mirror_row.addWidget(self.mirror_kind)
        mirror_row.addWidget(self.mirror_url, 1)
        mirror_row.addWidget(self.add_mirror_button)
        mirror_row.addWidget(self.remove_mirror_button)
        self.token_edit = QLineEdit()
        self.token_edit.setEchoMode(QLineEdit.EchoMode.Password)
        self.token_edit.setPlaceholderText("hf_… (stored in the system keyring, sent only to the hub)")
        self.save_token_button = QPushButton("Save token")
        self.save_token_button.clicked.connect(self.save_token)
        self.clear_token_button = QPushButton("Forget token")
        self.clear_token_button.clicked.connect(self.clear_token)
        token_row = QHBoxLayout()
        token_row.addWidget(self.token_edit, 1)
        token_row.addWidget(self.save_token_button)
        token_row.addWidget(self.clear_token_button)
        self.token_status = QLabel()
        self.token_status.setWordWrap(True)
        self.settings_message = QLabel()
        self.settings_message.setWordWrap(True)
        form = QFormLayout(self)
        form.addRow("Mirrors (tried before the hub)", self.mirror_list)
        form.addRow("", mirror_row)
        form.addRow("Hub token", token_row)
        form.addRow("", self.token_status)
        form.addRow("", self.settings_message)

    def refresh_mirrors(self) -> None:
        self.mirror_list.clear()
        try:
            for endpoint in user_endpoints(checked=False):  # a bad entry is listed too, so it can be removed
                self.mirror_list.addItem(f"{endpoint.url}  ({endpoint.kind})")
            user_endpoints()  # and named here when one is not an http(s) URL
        except FastMTPError as exc:
            self.settings_message.setText(error_text(exc))

    def add_mirror(self) -> None:
        kind: EndpointKind = "hf" if self.mirror_kind.currentData() == "hf" else "plain"
        try:
            endpoint = add_user_endpoint(kind, self.mirror_url.text().strip())
        except FastMTPError as exc:
            self.settings_message.setText(error_text(exc))
            return
        self.mirror_url.clear()
        self.settings_message.setText(f"Added the mirror {endpoint.url}; downloads try it before the hub.")
        self.refresh_mirrors()

    def remove_mirror(self) -> None:
        item = self.mirror_list.currentItem()
        if item is None:
            self.settings_message.setText("Select a mirror to remove.")
            return
        url = item.text().split("  (")[0]
        remove_user_endpoint(url)
        self.settings_message.setText(f"Removed the mirror {url}.")
        self.refresh_mirrors()

    def save_token(self) -> None:
        token = self.token_edit.text()
        self.token_edit.clear()
        self._keyring_op(lambda _report: secrets.set_token(token), "The token is stored in the system keyring.")

    def clear_token(self) -> None:
        def work(_report: Report) -> None:
            if not secrets.clear_token():
                raise secrets.SecretsError("No token was stored.")

        self._keyring_op(work, "The token was removed from the keyring.")

    def _keyring_op(self, work: Any, done: str) -> None:
        """The keyring may block (an unlock prompt): run it off the GUI thread."""
        self.save_token_button.setEnabled(False)
        self.clear_token_button.setEnabled(False)

        def succeeded(_result: None) -> None:
            self.settings_message.setText(done)
            self.refresh_token_status()

        def failed(exc: Exception) -> None:
            self.settings_message.setText(error_text(exc))
            self.refresh_token_status()

        self.ops.start(work, succeeded, failed)

    def refresh_token_status(self) -> None:
        def shown(status: secrets.TokenStatus) -> None:
            self.save_token_button.setEnabled(status.keyring_available)
            self.clear_token_button.setEnabled(status.keyring_available)
            if status.source == "env":
                text = f"A token is set in {secrets.ENV_VAR}; it wins over the keyring."
            elif status.source == "keyring":
                text = "A token is stored in the keyring."
            elif status.keyring_available:
                text = "No token stored: public repositories need none."
            else:
                text = (f"No keyring is available, so a token cannot be stored safely; set {secrets.ENV_VAR} "
                        "for the app instead.")
            self.token_status.setText(text)

        self.ops.start(lambda _report: secrets.status(), shown, lambda exc: self.token_status.setText(error_text(exc)))
