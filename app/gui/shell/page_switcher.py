"""The window's body: the navigation rail on the left and the page it has picked beside it. Pages are added by
name (Settings stays last) and keep running while hidden, so a download or a build goes on while the user chats."""

from __future__ import annotations

from PySide6.QtWidgets import QHBoxLayout, QStackedWidget, QWidget

from app.gui.shell.nav_rail import NavRail


class PageSwitcher(QWidget):
    """The rail (``nav``) and the stack of pages (``pages``) it switches, row for row."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.nav = NavRail()
        self.nav.currentRowChanged.connect(self._show_row)
        self.pages = QStackedWidget()
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addWidget(self.nav)
        layout.addWidget(self.pages, 1)

    def add_page(self, name: str, widget: QWidget) -> None:
        """Add a page to the rail (Chat, Models, Backend, …; Settings stays last); a page already there under
        ``name`` is replaced."""
        for row in range(self.nav.count()):
            if self.nav.item(row).text() == name:
                old = self.pages.widget(row)
                self.pages.insertWidget(row, widget)
                if old is not None:
                    self.pages.removeWidget(old)
                    old.deleteLater()
                self.pages.setCurrentIndex(max(self.nav.currentRow(), 0))
                return
        row = self.nav.count()
        if row and self.nav.item(row - 1).text() == "Settings":
            row -= 1  # Settings stays last
        self.nav.insertItem(row, self.nav.new_item(name))
        self.nav.tooltips()  # the keys (Ctrl+1 …) follow the rows
        self.pages.insertWidget(row, widget)
        if self.nav.currentRow() < 0:
            self.nav.setCurrentRow(0)

    def show_page(self, name: str) -> None:
        """Switch to the page called ``name``."""
        for row in range(self.nav.count()):
            if self.nav.item(row).text() == name:
                self.nav.setCurrentRow(row)
                return
        raise KeyError(name)

    def show_row(self, row: int) -> None:
        """Switch to the page in ``row`` (Ctrl+1 …), when there is one."""
        if 0 <= row < self.nav.count():
            self.nav.setCurrentRow(row)

    def page_names(self) -> list[str]:
        return [self.nav.item(row).text() for row in range(self.nav.count())]

    def current_page(self) -> str:
        item = self.nav.currentItem()
        return item.text() if item is not None else ""

    def _show_row(self, row: int) -> None:
        if row >= 0:
            self.pages.setCurrentIndex(row)
