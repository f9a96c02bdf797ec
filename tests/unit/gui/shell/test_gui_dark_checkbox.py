"""An unchecked check box (the top bar's "Thinking") and radio button are plain to see in the dark theme (issue 13,
defect 12): their indicator has an outline that stands out from the window, as it does in the light theme.
Drawn by the real style on real widgets and read back pixel by pixel."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

from collections.abc import Iterator

import pytest
from PySide6.QtGui import QColor, QImage
from PySide6.QtWidgets import (
    QAbstractButton,
    QApplication,
    QCheckBox,
    QRadioButton,
    QStyle,
    QStyleOptionButton,
    QVBoxLayout,
    QWidget,
)
from pytestqt.qtbot import QtBot

from app.gui.shell import theme

CONTRAST = 60  # the dark outline's lightness differs from the window's by at least this much (0..255)
LIGHT_CONTRAST = 40  # Fusion's light outline, unchanged (about 50)


@pytest.fixture
def dark(qapp: QApplication) -> Iterator[QApplication]:
    theme.apply(qapp, "dark")
    yield qapp
    theme.apply(qapp, "light")  # the rest of the session's tests expect the light theme


def _outline_contrast(button: QAbstractButton, element: QStyle.SubElement) -> int:
    """The largest lightness difference between the indicator's edge pixels and the window around it."""
    image: QImage = button.grab().toImage()
    option = QStyleOptionButton()
    button.initStyleOption(option)  # type: ignore[attr-defined]
    rect = button.style().subElementRect(element, option, button)
    window = button.palette().color(button.window().backgroundRole()).lightness()
    middle_x, middle_y = rect.left() + rect.width() // 2, rect.top() + rect.height() // 2
    edge = [(x, middle_y) for x in (rect.left(), rect.left() + 1, rect.right(), rect.right() - 1)]
    edge += [(middle_x, y) for y in (rect.top(), rect.top() + 1, rect.bottom(), rect.bottom() - 1)]
    return max(abs(QColor(image.pixel(x, y)).lightness() - window) for x, y in edge)


def test_unchecked_indicators_have_a_visible_outline_in_the_dark_theme(qtbot: QtBot, dark: QApplication) -> None:
    page = QWidget()
    qtbot.addWidget(page)
    column = QVBoxLayout(page)
    box, radio = QCheckBox("Thinking"), QRadioButton("Random seed")
    column.addWidget(box)
    column.addWidget(radio)
    page.show()
    qtbot.waitExposed(page)
    assert not box.isChecked() and not radio.isChecked()
    assert _outline_contrast(box, QStyle.SubElement.SE_CheckBoxIndicator) >= CONTRAST
    assert _outline_contrast(radio, QStyle.SubElement.SE_RadioButtonIndicator) >= CONTRAST
    box.setChecked(True)  # checked, the mark is still drawn by the style
    assert _outline_contrast(box, QStyle.SubElement.SE_CheckBoxIndicator) >= CONTRAST


def test_the_light_theme_indicators_keep_their_outline(qtbot: QtBot, qapp: QApplication) -> None:
    theme.apply(qapp, "light")
    box = QCheckBox("Thinking")
    qtbot.addWidget(box)
    box.show()
    qtbot.waitExposed(box)
    assert _outline_contrast(box, QStyle.SubElement.SE_CheckBoxIndicator) >= LIGHT_CONTRAST  # Fusion's own
