"""More than one machine, in the window: the "Remote server…" dialog, and the Settings page's group with the remote
servers, the RPC workers (with the warning that RPC has no authentication) and "Serve this machine".

The server started here is our llama-server (``app.machines.serve``), in a session of its own; it stops with the
app unless "Keep running after the app closes" is ticked, then ``python -m app serve --stop`` (or unticking it here and
stopping) ends it.
"""

from __future__ import annotations

import html
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.backend.rpc import NO_AUTH_WARNING, parse_endpoints
from app.core.errors import FastMTPError
from app.gui.shell.confirm_dialog import confirm_destructive
from app.gui.shell.page_ops import OwnedOps
from app.gui.shell.status_text import bad_colour, error_text, good_colour
from app.machines import serve
from app.machines.remote_servers import RemoteServer, add_server, check_url, load_servers, remove_server
from app.machines.upstream_server import UpstreamServer
from app.settings.app_settings import Settings

RPC_NOTE = (f"{NO_AUTH_WARNING} Use workers only on a network you trust. The GPU layers setting decides how many "
            "layers go to them.")


class RemoteServerDialog(QDialog):
    """Add a remote server, or edit one (``server``): name, address, API key (kept in the keyring), model,
    certificate check. An edited server keeps its name (its chats and settings refer to it by name).

    The plain-HTTP rule is checked as the address is typed; ``server`` is the saved server after OK."""

    def __init__(self, parent: QWidget | None = None, server: RemoteServer | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(f"Edit remote server {server.name}" if server else "Remote server")
        self.server: RemoteServer | None = None
        self.name = QLineEdit(server.name if server else "")
        self.name.setPlaceholderText("gpu-box")
        self.name.setReadOnly(server is not None)
        self.url = QLineEdit(server.url if server else "")
        self.url.setPlaceholderText("https://gpu-box.example:8080 or http://192.168.1.20:8080")
        self.api_key = QLineEdit()
        self.api_key.setEchoMode(QLineEdit.EchoMode.Password)
        self.api_key.setPlaceholderText("kept in the keyring" + (" (empty: keep the stored one)" if server else ""))
        self.model = QLineEdit(server.model if server else "")
        self.model.setPlaceholderText("the server's first model")
        self.verify_tls = QCheckBox("Check the server's HTTPS certificate")
        self.verify_tls.setChecked(server.verify_tls if server else True)
        self.note = QLabel()
        self.note.setWordWrap(True)
        form = QFormLayout()
        form.addRow("Name", self.name)
        form.addRow("Address", self.url)
        form.addRow("API key", self.api_key)
        form.addRow("Model", self.model)
        form.addRow("", self.verify_tls)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.note)
        layout.addWidget(self.buttons)
        self.url.textChanged.connect(lambda _text: self._check())
        self.verify_tls.toggled.connect(lambda _on: self._check())
        self.setMinimumWidth(520)
        self._check()

    def _check(self) -> bool:
        """Say what the address means (plain HTTP, an unchecked certificate) or why it cannot be used."""
        text = self.url.text().strip()
        if not text:
            self._say("A llama-server (ours: `python -m app serve` on that machine), vLLM or any OpenAI-compatible "
                      "server.", bad=False)
            return False
        try:
            _, warning = check_url(text, self.verify_tls.isChecked())
        except FastMTPError as exc:
            self._say(error_text(exc), bad=True)
            return False
        self._say(warning or "HTTPS with a checked certificate.", bad=warning is not None)
        return True

    def _say(self, text: str, *, bad: bool) -> None:
        colour = (bad_colour(self) if bad else good_colour(self)).name()
        self.note.setText(f'<span style="color: {colour};">{html.escape(text)}</span>')

    def accept(self) -> None:
        key = self.api_key.text().strip()
        try:
            self.server, _ = add_server(self.name.text().strip(), self.url.text(), key or None,
                                        model=self.model.text(), verify_tls=self.verify_tls.isChecked())
        except FastMTPError as exc:
            self._say(error_text(exc), bad=True)
            return
        super().accept()


class MachinesGroup(QGroupBox):
    """The Settings page's "More than one machine": remote servers, RPC workers, serving this machine.

    ``remote_servers_changed`` after a server was added; ``serving_changed(running)`` when the server started or
    stopped."""

    remote_servers_changed = Signal()
    serving_changed = Signal(bool)

    def __init__(self, settings: Settings, parent: QWidget | None = None) -> None:
        super().__init__("More than one machine", parent)
        self.ops = OwnedOps(self)
        self.server: UpstreamServer | None = None
        self._chat_model = settings.chat_model
        self.remotes = QListWidget()  # one row a saved server: "name  url"
        self.remotes.setMaximumHeight(96)
        self.remotes.currentRowChanged.connect(lambda _row: self._remote_selected())
        self.remotes.itemDoubleClicked.connect(lambda _item: self.edit_remote())
        self.add_remote_button = QPushButton("Add…")
        self.add_remote_button.setToolTip("Add a llama-server, vLLM or any OpenAI-compatible server")
        self.add_remote_button.clicked.connect(self.add_remote)
        self.edit_remote_button = QPushButton("Edit…")
        self.edit_remote_button.clicked.connect(self.edit_remote)
        self.remove_remote_button = QPushButton("Remove")
        self.remove_remote_button.clicked.connect(self.remove_remote)
        self.rpc_workers = QLineEdit()
        self.rpc_workers.setPlaceholderText("host:port, host:port (python -m app rpc-worker on each)")
        self.rpc_note = QLabel(RPC_NOTE)
        self.rpc_note.setWordWrap(True)
        self.rpc_note.setStyleSheet("color: #b45309;")
        self.serve_box = QCheckBox("Serve this machine (llama-server with the chat's model and its FastMTP sidecar)")
        self.serve_box.toggled.connect(self._serve_toggled)
        self.serve_host = QLineEdit()
        self.serve_port = QSpinBox()
        self.serve_port.setRange(1, 65_535)
        self.serve_parallel = QSpinBox()
        self.serve_parallel.setRange(1, 64)
        self.keep_running = QCheckBox("Keep running after the app closes (stop it with: python -m app serve --stop)")
        self.serve_note = QLabel()
        self.serve_note.setWordWrap(True)
        self.serve_note.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)  # the key, to copy

        remote_row = QHBoxLayout()  # the buttons side by side: the page has no room for a column of them
        remote_row.addWidget(self.remotes, 1)
        for button in (self.add_remote_button, self.edit_remote_button, self.remove_remote_button):
            remote_row.addWidget(button, 0, Qt.AlignmentFlag.AlignTop)
        serve_row = QHBoxLayout()
        serve_row.addWidget(QLabel("address"))
        serve_row.addWidget(self.serve_host)
        serve_row.addWidget(QLabel("port"))
        serve_row.addWidget(self.serve_port)
        serve_row.addWidget(QLabel("slots"))
        serve_row.addWidget(self.serve_parallel)
        serve_row.addStretch(1)
        form = QFormLayout(self)
        form.addRow("Remote servers", remote_row)
        form.addRow("RPC workers", self.rpc_workers)
        form.addRow("", self.rpc_note)
        form.addRow("", self.serve_box)
        form.addRow("", serve_row)
        form.addRow("", self.keep_running)
        form.addRow("", self.serve_note)
        self.show_settings(settings)
        self.refresh_remotes()

    # ------------------------------------------------------------------ settings

    def show_settings(self, settings: Settings) -> None:
        self._chat_model = settings.chat_model
        self.rpc_workers.setText(settings.rpc_workers.replace(",", ", "))
        self.serve_host.setText(settings.serve_host)
        self.serve_port.setValue(settings.serve_port)
        self.serve_parallel.setValue(settings.serve_parallel)
        self.keep_running.setChecked(settings.serve_keep_running)

    def apply_to(self, settings: Settings) -> Settings:
        """``settings`` with this group's fields; FastMTPError in words when the RPC workers are not host:port."""
        from dataclasses import replace

        workers = self.rpc_workers.text().strip()
        rpc = ",".join(parse_endpoints(workers)) if workers else ""
        return replace(settings, rpc_workers=rpc, serve_host=self.serve_host.text().strip() or "127.0.0.1",
                       serve_port=self.serve_port.value(), serve_parallel=self.serve_parallel.value(),
                       serve_keep_running=self.keep_running.isChecked())

    def keep_chat_model(self, key: str) -> None:
        self._chat_model = key

    # ------------------------------------------------------------------ remote servers

    def refresh_remotes(self) -> None:
        chosen = self._selected_name()
        self.remotes.clear()
        servers = load_servers()
        for server in servers:
            item = QListWidgetItem(f"{server.name}  {server.url}")
            item.setData(Qt.ItemDataRole.UserRole, server.name)
            self.remotes.addItem(item)
            if server.name == chosen:
                self.remotes.setCurrentItem(item)
        if not servers:
            item = QListWidgetItem("none yet: a llama-server, vLLM or any OpenAI-compatible server")
            item.setFlags(Qt.ItemFlag.NoItemFlags)
            self.remotes.addItem(item)
        self._remote_selected()

    def remote_names(self) -> list[str]:
        """The saved servers' names, as listed."""
        items = (self.remotes.item(row) for row in range(self.remotes.count()))
        return [str(name) for item in items if (name := item.data(Qt.ItemDataRole.UserRole)) is not None]

    def _selected_name(self) -> str | None:
        item = self.remotes.currentItem()
        name = item.data(Qt.ItemDataRole.UserRole) if item is not None else None
        return str(name) if name is not None else None

    def selected_remote(self) -> RemoteServer | None:
        name = self._selected_name()
        return next((server for server in load_servers() if server.name == name), None) if name else None

    def _remote_selected(self) -> None:
        chosen = self._selected_name() is not None  # from the list itself: no file read on every row change
        self.edit_remote_button.setEnabled(chosen)
        self.remove_remote_button.setEnabled(chosen)

    def add_remote(self) -> RemoteServer | None:
        return self._open_dialog(None)

    def edit_remote(self) -> RemoteServer | None:
        """Change the selected server's address, key, model or certificate check (an empty key keeps the
        stored one)."""
        server = self.selected_remote()
        return self._open_dialog(server) if server is not None else None

    def _open_dialog(self, server: RemoteServer | None) -> RemoteServer | None:
        dialog = RemoteServerDialog(self, server)
        if dialog.exec() != QDialog.DialogCode.Accepted:
            return None
        self.refresh_remotes()
        self.remote_servers_changed.emit()
        return dialog.server

    def remove_remote(self) -> bool:
        """Forget the selected server and its key in the keyring, after asking (Cancel is the default)."""
        server = self.selected_remote()
        if server is None or not self.confirm_remove(server):
            return False
        try:
            remove_server(server.name)
        except FastMTPError as exc:
            self._note(error_text(exc), bad=True)
            return False
        self.refresh_remotes()
        self.remote_servers_changed.emit()
        return True

    def confirm_remove(self, server: RemoteServer) -> bool:
        return confirm_destructive(self, "Remove remote server",
                                   f"Remove the remote server \u201c{server.name}\u201d ({server.url})?",
                                   "Its API key is deleted from the keyring. Chats with it stay in the history.",
                                   "Remove")

    # ------------------------------------------------------------------ serving

    @property
    def serving(self) -> bool:
        return self.server is not None

    def _serve_toggled(self, on: bool) -> None:
        if on and self.server is None:
            self.start_serving()
        elif not on and self.server is not None:
            self.stop_serving()

    def start_serving(self) -> None:
        """Start llama-server in the background with the chat's model, this group's address, port and slots."""
        try:
            warning = serve.check_host(self.serve_host.text().strip() or "127.0.0.1")
        except FastMTPError as exc:
            self._serve_failed(exc)
            return
        plan_fields: dict[str, Any] = {"host": self.serve_host.text().strip() or "127.0.0.1",
                                       "port": self.serve_port.value(), "parallel": self.serve_parallel.value()}
        workers = self.rpc_workers.text().strip()
        chat_model = self._chat_model
        self.serve_box.setEnabled(False)
        self._note("Starting the server…", bad=False)

        def work(_report: object) -> tuple[UpstreamServer, str | None]:
            target, draft = serve.chat_model_files(chat_model)
            rpc = parse_endpoints(workers) if workers else []
            plan = serve.ServePlan(target=target, draft=draft, rpc=rpc, **plan_fields)
            key, created = serve.ensure_key()
            server = serve.make_server(plan, serve.server_binary(bool(rpc)), key)
            server.start(detach=True)  # its own session: it can outlive the window when asked to
            serve.write_state(server, plan)
            return server, key if created else None

        def started(result: tuple[UpstreamServer, str | None]) -> None:
            self.server, new_key = result
            self.serve_box.setEnabled(True)
            lines = [f"Serving at {self.server.url.replace('127.0.0.1', plan_fields['host'])}."]
            if new_key:
                lines.append(f"API key (shown this once; kept in the keyring): {new_key}")
            else:
                lines.append("API key: the one in the keyring, shown when it was made (`python -m app serve "
                             "--new-key` makes another).")
            if warning:
                lines.append(warning)
            self._note("\n".join(lines), bad=False)
            self.serving_changed.emit(True)

        self.ops.start(work, started, self._serve_failed)

    def _serve_failed(self, exc: Exception) -> None:
        self.serve_box.blockSignals(True)
        self.serve_box.setChecked(False)
        self.serve_box.blockSignals(False)
        self.serve_box.setEnabled(True)
        self._note(error_text(exc), bad=True)

    def stop_serving(self) -> None:
        server, self.server = self.server, None
        self.serve_box.blockSignals(True)
        self.serve_box.setChecked(False)
        self.serve_box.blockSignals(False)
        if server is not None:
            server.stop()
            serve.state_path().unlink(missing_ok=True)
            self._note("The server was stopped.", bad=False)
            self.serving_changed.emit(False)

    def close_with_app(self) -> None:
        """The window closes: the server stops with it unless it should keep running (then its state file stays,
        for ``serve --stop``)."""
        if self.server is None:
            return
        if self.keep_running.isChecked():
            self.server.client.close()
            self.server = None
            return
        self.stop_serving()

    def _note(self, text: str, *, bad: bool) -> None:
        colour = (bad_colour(self) if bad else good_colour(self)).name()
        self.serve_note.setText(f'<span style="color: {colour};">{html.escape(text).replace(chr(10), "<br>")}</span>')
