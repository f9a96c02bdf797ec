"""Render resources/icons/fastmtp-chat.svg into the PNG sizes, the Windows .ico and the macOS .icns.

    .venv/bin/python installers/make_icons.py

The outputs are committed (the build machines need no SVG renderer); run this again after editing the SVG.
Qt renders the SVG (QtSvg ships with PySide6); Pillow, installed with matplotlib in `dev`, writes .ico/.icns.
"""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

ICONS = Path(__file__).resolve().parent.parent / "resources" / "icons"
SVG = ICONS / "fastmtp-chat.svg"
PNG_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)


def render_png(size: int) -> bytes:
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice, Qt
    from PySide6.QtGui import QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    image = QImage(size, size, QImage.Format.Format_ARGB32)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    QSvgRenderer(str(SVG)).render(painter)
    painter.end()
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buffer, "PNG")
    return bytes(data.data())


def main() -> int:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PIL import Image
    from PySide6.QtGui import QGuiApplication

    _app = QGuiApplication(sys.argv[:1])
    pngs = {size: render_png(size) for size in PNG_SIZES}
    for size, data in pngs.items():
        (ICONS / f"fastmtp-chat-{size}.png").write_bytes(data)
    largest = Image.open(io.BytesIO(pngs[512]))
    largest.save(ICONS / "fastmtp-chat.ico", sizes=[(s, s) for s in (16, 24, 32, 48, 64, 128, 256)])
    largest.save(ICONS / "fastmtp-chat.icns")
    print(f"wrote {len(pngs)} PNGs, fastmtp-chat.ico and fastmtp-chat.icns under {ICONS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
