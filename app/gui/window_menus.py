"""The window's menus and keys: Chats (new, search, stop, rename / pin / delete, export / import, quit), Help
(the shortcuts, About) and Ctrl+1 … Ctrl+5 for the rail's pages. Every key is a window action, so it answers
wherever the focus is, and each one says what it does for Help → Keyboard shortcuts.

The window (``app.gui.main``) builds one with its chat page and its page switcher; the chat's own behaviour stays
on ``ChatPage``, these are only the ways to reach it."""

from __future__ import annotations

from functools import partial
from typing import Any

from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMainWindow, QStackedWidget

from app.gui.chat.chat_page import ChatPage
from app.gui.shell.about_dialog import AboutDialog, ShortcutsDialog
from app.gui.shell.application import app_icon
from app.gui.shell.page_switcher import PageSwitcher


class WindowMenus:
    """The menu bar of ``window`` and its keys, acting on ``chat`` (shown in ``chat_stack``, where the first-run
    panel may stand in its place) and on the rail of pages (``switcher``)."""

    def __init__(self, window: QMainWindow, chat: ChatPage, chat_stack: QStackedWidget,
                 switcher: PageSwitcher) -> None:
        self.window, self.chat, self.chat_stack, self.switcher = window, chat, chat_stack, switcher
        self._shortcut_rows: list[tuple[str, str]] = []
        menu = window.menuBar().addMenu("&Chats")
        menu.addAction(self._action("New chat", self.new_chat_with_keys, "Ctrl+N",
                                    "a new chat, the cursor in the message box"))
        menu.addAction(self._action("Search chats", self.search_chats, "Ctrl+F", "search the chats"))
        self.stop_action = self._action("Stop the reply", chat.stop_reply, "Esc", "stop the reply as it streams")
        self.stop_action.setEnabled(False)
        menu.addAction(self.stop_action)
        menu.addSeparator()
        self.rename_action = self._action("Rename chat", self.rename_open_chat, "F2", "rename the open chat")
        self.pin_action = self._action("Pin chat to the top", self.toggle_pin_open_chat)
        self.delete_action = self._action(f"Delete chat…\t{chat.sidebar.delete_action.shortcut().toString()}",
                                          lambda: chat.sidebar.delete(chat.conversation_id))
        self._shortcut_rows.append(("Del", "delete the chat selected in the list (it asks first)"))
        for action in (self.rename_action, self.pin_action, self.delete_action):
            menu.addAction(action)
        menu.addSeparator()
        for label, slot in (("Export this chat as Markdown…", lambda: chat.transfer.export_dialog("md", current=True)),
                            ("Export this chat as JSON…", lambda: chat.transfer.export_dialog("json", current=True)),
                            ("Export all chats as Markdown…", lambda: chat.transfer.export_dialog("md", current=False)),
                            ("Export all chats as JSON…", lambda: chat.transfer.export_dialog("json", current=False)),
                            ("Import chats from JSON…", chat.transfer.import_dialog)):
            menu.addAction(self._action(label, slot))
        menu.addSeparator()
        menu.addAction(self._action("Quit", window.close, "Ctrl+Q", "quit FastMTP Chat"))
        menu.aboutToShow.connect(self.update_chat_actions)
        menu.aboutToHide.connect(self._chat_keys_live)
        for row in range(1, 6):  # Ctrl+1 … Ctrl+5: the rail's pages, top to bottom
            self._action(f"Page {row}", partial(switcher.show_row, row - 1), f"Ctrl+{row}")
        self._shortcut_rows += [("Ctrl+1 … Ctrl+5", "the pages: Chat, Models, Backend, Benchmark, Settings"),
                                ("Enter", "send the message"), ("Shift+Enter", "a new line in the message"),
                                ("Tab, Shift+Tab", "leave the message box (to Send, or back)")]
        help_menu = window.menuBar().addMenu("&Help")
        help_menu.addAction(self._action("Keyboard shortcuts", self.show_shortcuts, "F1", "this list"))
        help_menu.addAction(self._action("About FastMTP Chat", self.show_about))
        self.shortcuts_dialog: ShortcutsDialog | None = None
        self.about_dialog: AboutDialog | None = None

    def _action(self, label: str, slot: Any, keys: str = "", what: str = "") -> QAction:
        """A window action; with ``keys`` it answers them wherever the focus is in the window, and ``what`` is its
        line in Help → Keyboard shortcuts."""
        action = QAction(label, self.window)
        action.triggered.connect(slot)
        if keys:
            action.setShortcut(QKeySequence(keys))
            self.window.addAction(action)  # also while the menu bar is hidden or its menu disabled
        if keys and what:
            self._shortcut_rows.append((QKeySequence(keys).toString(QKeySequence.SequenceFormat.NativeText), what))
        return action

    def shortcut_rows(self) -> list[tuple[str, str]]:
        """(keys, what they do), as Help → Keyboard shortcuts lists them."""
        return list(self._shortcut_rows)

    def busy_changed(self, busy: bool) -> None:
        """The engine started or finished some work: Esc stops a reply only while one streams."""
        self.stop_action.setEnabled(busy and self.chat.chat.streaming_entry() is not None)

    # ------------------------------------------------------------------ the chat's keys

    def new_chat_with_keys(self) -> None:
        """Ctrl+N: the Chat page, a new chat, the cursor in the message box."""
        self.switcher.show_page("Chat")
        self.chat.new_chat()

    def search_chats(self) -> None:
        """Ctrl+F: the Chat page, the cursor in the sidebar's search box (its text selected, to type over)."""
        self.switcher.show_page("Chat")
        if self.chat_stack.currentWidget() is self.chat:  # not the first-run panel in its place
            self.chat.focus_search()

    def rename_open_chat(self) -> None:
        """F2: the open chat's title becomes an edit box in the sidebar (Enter keeps it, Esc does not)."""
        chat = self.chat
        if chat.conversation_id is not None and chat.sidebar.isEnabled():
            self.switcher.show_page("Chat")
            chat.sidebar.begin_rename(chat.conversation_id)

    def toggle_pin_open_chat(self) -> None:
        self.chat.sidebar.toggle_pin(self.chat.conversation_id)

    def update_chat_actions(self) -> None:
        """The Chats menu as it opens: rename, pin and delete act on the open, saved chat, not while a reply
        streams (the sidebar is disabled then); pin reads "Unpin" for a pinned chat."""
        sidebar, open_chat = self.chat.sidebar, self.chat.conversation_id
        usable = sidebar.item_for(open_chat) is not None and sidebar.isEnabled()
        for action in (self.rename_action, self.pin_action, self.delete_action):
            action.setEnabled(usable)
        self.pin_action.setText("Unpin chat" if sidebar.is_pinned(open_chat) else "Pin chat to the top")

    def _chat_keys_live(self) -> None:
        """The Chats menu closed: its greyed items work again, F2 with them. Greyed for good, a look at the menu
        in a new chat left F2 dead after the first reply until the menu opened again; each action checks for
        itself whether it can act (``rename_open_chat``, the sidebar's ``toggle_pin`` and ``delete``)."""
        for action in (self.rename_action, self.pin_action, self.delete_action):
            action.setEnabled(True)

    # ------------------------------------------------------------------ Help

    def show_shortcuts(self) -> ShortcutsDialog:
        """Help → Keyboard shortcuts (F1): a small window listing the keys."""
        if self.shortcuts_dialog is None:
            self.shortcuts_dialog = ShortcutsDialog(self.shortcut_rows(), self.window)
        self.shortcuts_dialog.show()
        self.shortcuts_dialog.raise_()
        return self.shortcuts_dialog

    def show_about(self) -> AboutDialog:
        """Help → About: the versions of the app, its backend, llama.cpp, CUDA and the driver."""
        if self.about_dialog is None:
            self.about_dialog = AboutDialog(app_icon(), self.window)
        else:
            self.about_dialog.refresh()  # a backend built or switched since
        self.about_dialog.show()
        self.about_dialog.raise_()
        return self.about_dialog
