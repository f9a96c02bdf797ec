"""Light and dark themes: follow the system (Qt ≥ 6.5 reports its colour scheme) unless the user picks one.

Both use the Fusion style, with one change for dark palettes (``IndicatorStyle``): Fusion outlines a check
box or radio button in the window colour made darker, which on a dark window is all but invisible, so an
unchecked "Thinking" box could not be seen."""

from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QGuiApplication, QPainter, QPalette, QPen
from PySide6.QtWidgets import QApplication, QProxyStyle, QStyle, QStyleOption, QWidget

from app.gui.shell.palette import DARK, LIGHT, Palette
from app.settings.app_settings import Theme

INDICATOR_OUTLINE_DARK = "#7c8494"  # the outline of check boxes and radio buttons on a dark window


class IndicatorStyle(QProxyStyle):
    """Fusion, with check box and radio button indicators outlined visibly on dark palettes."""

    def __init__(self) -> None:
        super().__init__("Fusion")

    def drawPrimitive(self, element: QStyle.PrimitiveElement, option: QStyleOption, painter: QPainter,
                      widget: QWidget | None = None) -> None:
        super().drawPrimitive(element, option, painter, widget)
        box = element == QStyle.PrimitiveElement.PE_IndicatorCheckBox
        radio = element == QStyle.PrimitiveElement.PE_IndicatorRadioButton
        if not (box or radio) or option.palette.color(QPalette.ColorRole.Window).lightness() >= 128:
            return
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing, True)
        painter.setPen(QPen(QColor(INDICATOR_OUTLINE_DARK), 1.0))
        painter.setBrush(Qt.BrushStyle.NoBrush)
        rect = QRectF(option.rect)
        if box:  # over Fusion's own outline: the same rectangle
            painter.drawRect(rect.adjusted(0.5, 0.5, -0.5, -0.5))
        else:  # the same circle as Fusion's
            radius = (option.rect.width() + (option.rect.width() + 1) % 2) / 2.0 - 1
            centre = QPointF(option.rect.center()) + QPointF(1, 1)
            painter.drawEllipse(centre, radius, radius)
        painter.restore()


def system_is_dark() -> bool:
    hints = QGuiApplication.styleHints()
    return bool(hints.colorScheme() == Qt.ColorScheme.Dark)


def resolve(theme: Theme) -> Palette:
    """The colours of ``theme``; ``system`` asks the platform."""
    if theme == "system":
        return DARK if system_is_dark() else LIGHT
    return DARK if theme == "dark" else LIGHT


def apply(app: QApplication, theme: Theme) -> Palette:
    """Set the application's palette for ``theme`` (Fusion style, so both themes look the same everywhere, with
    indicators that show on dark palettes)."""
    colours = resolve(theme)
    if not isinstance(app.style(), IndicatorStyle):
        app.setStyle(IndicatorStyle())
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
