"""Light and dark themes: follow the system (Qt ≥ 6.5 reports its colour scheme) unless the user picks one."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication

from app.gui.markdown import DARK, LIGHT, Palette
from app.settings import Theme


def system_is_dark() -> bool:
    hints = QGuiApplication.styleHints()
    return bool(hints.colorScheme() == Qt.ColorScheme.Dark)


def resolve(theme: Theme) -> Palette:
    """The colours of ``theme``; ``system`` asks the platform."""
    if theme == "system":
        return DARK if system_is_dark() else LIGHT
    return DARK if theme == "dark" else LIGHT


def apply(app: QApplication, theme: Theme) -> Palette:
    """Set the application's palette for ``theme`` (Fusion style, so both themes look the same everywhere)."""
    colours = resolve(theme)
    app.setStyle("Fusion")
    palette = QPalette()
    if colours is DARK:
        base, window, text, button = "#15181e", "#1c2028", "#e5e7eb", "#262b35"
        for role, colour in ((QPalette.ColorRole.Window, window), (QPalette.ColorRole.WindowText, text),
                             (QPalette.ColorRole.Base, base), (QPalette.ColorRole.AlternateBase, window),
                             (QPalette.ColorRole.Text, text), (QPalette.ColorRole.Button, button),
                             (QPalette.ColorRole.ButtonText, text), (QPalette.ColorRole.ToolTipBase, button),
                             (QPalette.ColorRole.ToolTipText, text), (QPalette.ColorRole.Highlight, "#2f6feb"),
                             (QPalette.ColorRole.HighlightedText, "#ffffff"), (QPalette.ColorRole.Link, "#7aa2f7"),
                             (QPalette.ColorRole.PlaceholderText, "#8b93a1")):
            palette.setColor(role, colour)
        for role in (QPalette.ColorRole.WindowText, QPalette.ColorRole.Text, QPalette.ColorRole.ButtonText):
            palette.setColor(QPalette.ColorGroup.Disabled, role, "#6b7280")
    else:
        palette = app.style().standardPalette()
    app.setPalette(palette)
    for widget in app.allWidgets():  # widgets under a style sheet keep their old palette until polished again
        widget.style().unpolish(widget)
        widget.style().polish(widget)
    return colours
