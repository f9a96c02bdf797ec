"""Labels every page lays out the same way: text that wraps to the width it is given, and a group's heading."""

from __future__ import annotations

from PySide6.QtGui import QFont
from PySide6.QtWidgets import QLabel, QSizePolicy


def wrapping_label(text: str = "") -> QLabel:
    """A label that wraps and asks its layout for the height its wrapped text needs at the given width."""
    label = QLabel(text)
    label.setWordWrap(True)
    policy = QSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Minimum)
    policy.setHeightForWidth(True)
    label.setSizePolicy(policy)
    return label


def heading(text: str) -> QLabel:
    """A heading inside a group box (demi-bold, the group's own font otherwise)."""
    label = QLabel(text)
    font = label.font()
    font.setWeight(QFont.Weight.DemiBold)
    label.setFont(font)
    return label
