"""The navigation rail on the window's left edge: one icon with its name under it per page, and a tooltip that
says what the page is for and its key (Ctrl+1 …).

It is a ``QListWidget`` in icon mode, so the window switches pages as it did with the plain list
(``currentRowChanged``, ``item(row).text()`` is the page's name); only the look and the tooltips are new.
"""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtWidgets import QAbstractItemView, QListView, QListWidget, QListWidgetItem, QWidget

from app.gui.shell import icons
from app.gui.shell.palette import DARK, LIGHT, Palette

RAIL_WIDTH = 80  # at least; wider when a page's name needs it (``_fit``)
CELL_HEIGHT = 62
TEXT_AIR = 18  # around a name in its cell: the cell's margins, the item's text margins, and some air
# page name -> (icon, what the page is for); a page added under another name gets the chat icon and no words
PAGES = {
    "Chat": ("chat", "Chat with the model, with live speed and drafting figures"),
    "Models": ("models", "Download and check models and their FastMTP sidecars"),
    "Backend": ("backend", "Build or install the llama.cpp backend; build tools and GPUs"),
    "Benchmark": ("benchmark", "Measure tok/s by drafting mode and depth for your model on this machine"),
    "Settings": ("settings", "Theme, context size, GPU layers, folders, remote servers, updates"),
}


class NavRail(QListWidget):
    """A narrow column of page buttons (icon over name); the current page is highlighted."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("nav")
        self.setViewMode(QListView.ViewMode.IconMode)
        self.setFlow(QListView.Flow.TopToBottom)
        self.setWrapping(False)
        self.setMovement(QListView.Movement.Static)
        self.setResizeMode(QListView.ResizeMode.Adjust)
        self.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        self.setIconSize(QSize(24, 24))
        self.setSpacing(0)
        self.setUniformItemSizes(True)
        self._fit()
        self.setFocusPolicy(Qt.FocusPolicy.TabFocus)  # a click does not steal the composer's focus
        self._palette = LIGHT
        self.set_palette(LIGHT)

    def new_item(self, name: str) -> QListWidgetItem:
        """The rail's button for the page ``name``: icon, name and tooltip (with its Ctrl+number key)."""
        item = QListWidgetItem(name)
        item.setData(Qt.ItemDataRole.UserRole, name)
        item.setTextAlignment(Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignTop)
        self._decorate(item)
        return item

    def tooltips(self) -> None:
        """Each page's tooltip names its key, which follows its row, and the rail is as wide as the longest
        name needs (called after pages are added)."""
        for row in range(self.count()):
            self._decorate(self.item(row))
        self._fit()

    def cell_width(self) -> int:
        """A page button's width: ``RAIL_WIDTH`` less the rail's edge, or what the longest name needs."""
        names = [self.item(row).text() for row in range(self.count())]
        widest = max((self.fontMetrics().horizontalAdvance(name) for name in names), default=0)
        return max(RAIL_WIDTH - 8, widest + TEXT_AIR)

    def _fit(self) -> None:
        cell = QSize(self.cell_width(), CELL_HEIGHT)
        self.setGridSize(cell)
        for row in range(self.count()):
            self.item(row).setSizeHint(cell)
        self.setFixedWidth(cell.width() + 8)

    def _decorate(self, item: QListWidgetItem) -> None:
        name = item.text()
        icon_name, what = PAGES.get(name, ("chat", ""))
        colours = self._palette
        item.setIcon(icons.icon(icon_name, colours.text, colours.muted))
        row = self.row(item)
        key = f" ({'Ctrl+' + str(row + 1)})" if 0 <= row < 9 else ""
        item.setToolTip(f"<b>{name}</b>{key}" + (f"<br>{what}" if what else ""))

    def set_palette(self, colours: Palette) -> None:
        """Icons and highlight in the theme's colours."""
        self._palette = colours
        dark = colours is DARK
        rail = "#161a21" if dark else "#eceff3"
        edge = "#2a303b" if dark else "#d5d9e0"
        chosen = "#2a3550" if dark else "#dbe4f5"
        hover = "#222834" if dark else "#e2e6ec"
        self.setStyleSheet(
            f"QListWidget#nav {{ background: {rail}; border: none; border-right: 1px solid {edge};"
            f" padding-top: 6px; outline: 0; }}"
            f"QListWidget#nav::item {{ color: {colours.text}; border-radius: 8px; margin: 2px 3px;"
            f" padding-top: 6px; }}"
            f"QListWidget#nav::item:hover {{ background: {hover}; }}"
            f"QListWidget#nav::item:selected {{ background: {chosen}; color: {colours.text}; }}")
        self.tooltips()
