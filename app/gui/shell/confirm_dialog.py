"""Asking before something is deleted for good (a saved chat, a remote server): the one confirmation every page
uses, with Cancel the default."""

from __future__ import annotations

from PySide6.QtWidgets import QMessageBox, QWidget


def confirm_destructive(parent: QWidget, title: str, question: str, detail: str, action: str) -> bool:
    """Ask before something is deleted for good; Cancel is the default button (Enter or Esc keeps it)."""
    box = QMessageBox(QMessageBox.Icon.Question, title, question, parent=parent)
    box.setInformativeText(detail)
    confirm = box.addButton(action, QMessageBox.ButtonRole.DestructiveRole)
    cancel = box.addButton(QMessageBox.StandardButton.Cancel)
    box.setDefaultButton(cancel)
    box.setEscapeButton(cancel)
    box.exec()
    return box.clickedButton() is confirm
