"""The window's own line icons (``resources/icons/ui/*.svg``), drawn in the theme's colour.

The SVGs stroke in ``currentColor``; ``icon`` puts a colour in its place and renders the result, so one file
serves the light and the dark theme (a fixed dark stroke would vanish on the dark window).
"""

from __future__ import annotations

from functools import cache

from PySide6.QtCore import QByteArray, QRectF, Qt
from PySide6.QtGui import QColor, QIcon, QImage, QPainter, QPixmap
from PySide6.QtSvg import QSvgRenderer

from app.core.resources import resources_dir

RENDER_PX = (24, 48)  # rendered sizes: 1x and 2x of the rail's 24-pixel icons (Qt scales between them)


def icon_names() -> list[str]:
    """The icons there are (file names without ``.svg``)."""
    return sorted(path.stem for path in (resources_dir() / "icons" / "ui").glob("*.svg"))


@cache
def _svg(name: str) -> str:
    return (resources_dir() / "icons" / "ui" / f"{name}.svg").read_text(encoding="utf-8")


def icon(name: str, colour: str | QColor, disabled: str | QColor | None = None) -> QIcon:
    """The icon ``name`` stroked in ``colour`` (and in ``disabled`` for the disabled state, when given)."""
    result = QIcon()
    for mode, tint in ((QIcon.Mode.Normal, colour), (QIcon.Mode.Disabled, disabled)):
        if tint is None:
            continue
        data = QByteArray(_svg(name).replace("currentColor", QColor(tint).name()).encode("utf-8"))
        renderer = QSvgRenderer(data)
        for size in RENDER_PX:
            image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
            image.fill(Qt.GlobalColor.transparent)
            painter = QPainter(image)
            painter.setRenderHint(QPainter.RenderHint.Antialiasing)
            renderer.render(painter, QRectF(0, 0, size, size))
            painter.end()
            result.addPixmap(QPixmap.fromImage(image), mode)
    return result
