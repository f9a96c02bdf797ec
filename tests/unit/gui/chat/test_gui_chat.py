"""The chat view's rendering on real widgets: streamed markdown, code blocks, thinking, message actions.

Token events here are shaped like the engine's (``piece``, ``provenance``, ``stats``); the real engine's
stream is covered in test_gui.py.
"""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

from typing import Any

from PySide6.QtCore import QUrl
from PySide6.QtGui import QGuiApplication
from pytestqt.qtbot import QtBot

from app.gui.chat.chat_view import DRAFT_TINT, ChatView
from app.gui.chat.markdown import BlockSplitter, DraftSpans, MarkdownRenderer, mark_drafts, split_thinking
from tests.helpers.gui_windows import WAIT_MS

REPLY = (
    "# Plan\n\nFirst some **bold** words and `inline()` code.\n\n"
    "1. one\n2. two\n\n"
    "```python\ndef square(x):\n    return x * x\n```\n\n"
    "Done."
)


def _tokens(text: str, size: int = 3, provenance: str = "target") -> list[dict[str, Any]]:
    return [{"kind": "token", "piece": text[i:i + size], "provenance": provenance,
             "stats": {"generated": i // size + 1}} for i in range(0, len(text), size)]


def _stream(view: ChatView, text: str, provenance: str = "target") -> None:
    view.begin_reply()
    for event in _tokens(text, provenance=provenance):
        view.append_token(event)


def _colours(view: ChatView) -> set[str]:
    found: set[str] = set()
    block = view.transcript.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            found.add(it.fragment().charFormat().foreground().color().name())
            it += 1
        block = block.next()
    return found


def test_markdown_splitter_finds_finished_blocks_only() -> None:
    splitter = BlockSplitter()
    assert splitter.feed("Para one\nstill one") == 0
    assert splitter.feed("Para one\nstill one\n\nNext") == len("Para one\nstill one\n\n")
    splitter = BlockSplitter()
    text = "Intro\n```py\nx = 1\n\ny = 2\n"
    assert splitter.feed(text) == len("Intro\n")  # the fence starts a block; the blank line inside does not end it
    assert splitter.in_fence
    text += "```\nafter"
    assert splitter.feed(text) == len(text) - len("after") and not splitter.in_fence


def test_thinking_is_split_from_the_answer_and_half_tags_are_held_back() -> None:
    assert split_thinking("<think>\nweighing it</think>\n\nThe answer.") == ("weighing it", "The answer.", False)
    assert split_thinking("<think>still going </thi") == ("still going", "", True)
    assert split_thinking("<thi") == (None, "", False)
    assert split_thinking("plain reply") == (None, "plain reply", False)
    assert split_thinking("reasoned</think>answer") == ("reasoned", "answer", False)


def test_draft_marks_never_touch_markdown_syntax() -> None:
    source = "1. **bold** word\n2. [link](http://example.com/x)"
    spans = DraftSpans()
    spans.add(0, len(source))
    marked = mark_drafts(source, spans.within(0, len(source)))
    html = MarkdownRenderer().render(marked, lambda _code: 0)
    assert "<ol>" in html and "<strong>" in html and 'href="http://example.com/x"' in html
    assert html.count("background-color") >= 3  # bold, word, link text tinted


def test_streamed_markdown_renders_headings_lists_and_highlighted_code(qtbot: QtBot) -> None:
    view = ChatView()
    qtbot.addWidget(view)
    _stream(view, REPLY)
    view.flush_render()
    shown = view.transcript_text()
    assert "Plan" in shown and "# Plan" not in shown and "**" not in shown and "```" not in shown
    assert "def square(x):" in shown
    view.finish_reply({"kind": "done", "text": REPLY, "stop_reason": "stop", "stats": {"generated": 40}})
    shown = view.transcript_text()
    assert "# Plan" not in shown and "return x * x" in shown and "Done." in shown
    assert len(_colours(view)) > 3  # pygments coloured the code's keywords, names and numbers
    assert view.code_blocks[-1] == "def square(x):\n    return x * x\n"
    view.activate_link(QUrl(f"copy-code:{len(view.code_blocks) - 1}"))
    clipboard = QGuiApplication.clipboard()
    assert clipboard.text() == "def square(x):\n    return x * x\n"
    view.activate_link(QUrl("copy:0"))
    assert clipboard.text() == REPLY


def test_streaming_renders_only_the_unfinished_tail(qtbot: QtBot, monkeypatch: Any) -> None:
    view = ChatView()
    qtbot.addWidget(view)
    rendered: list[int] = []
    real = view.renderer.render

    def counting(source: str, register: Any) -> str:
        rendered.append(len(source))
        return real(source, register)

    monkeypatch.setattr(view.renderer, "render", counting)
    paragraph = "A sentence that goes on for a while, about nothing much at all.\n\n"
    view.begin_reply()
    for event in _tokens(paragraph * 200, size=4):
        view.append_token(event)
        view.flush_render()  # the worst case: a redraw after every token
    assert max(rendered) <= 2 * len(paragraph)  # never the whole reply, only a block or the tail
    assert view.transcript_text().count("about nothing much") == 200


def test_the_render_timer_draws_the_stream_without_a_flush(qtbot: QtBot) -> None:
    view = ChatView()
    qtbot.addWidget(view)
    _stream(view, "Streaming words arrive here.")
    qtbot.waitUntil(lambda: "Streaming words arrive here." in view.transcript_text(), timeout=WAIT_MS)


def test_thinking_streams_muted_then_collapses_and_opens_on_click(qtbot: QtBot) -> None:
    view = ChatView()
    qtbot.addWidget(view)
    text = "<think>\nThe user wants a greeting, keep it short.\n</think>\n\nHello **there**."
    _stream(view, text)
    view.flush_render()
    assert "Thinking" in view.transcript_text() and "keep it short" in view.transcript_text()
    assert "<think>" not in view.transcript_text()
    view.finish_reply({"kind": "done", "text": text, "stop_reason": "stop", "stats": {}})
    shown = view.transcript_text()
    assert "Thinking (8 words)" in shown and "keep it short" not in shown and "Hello there." in shown
    view.activate_link(QUrl("think:0"))
    assert "keep it short" in view.transcript_text()
    view.activate_link(QUrl("think:0"))
    assert "keep it short" not in view.transcript_text()
    view.activate_link(QUrl("copy:0"))
    assert QGuiApplication.clipboard().text() == "Hello **there**."


def test_drafted_tokens_are_tinted_in_rendered_markdown(qtbot: QtBot) -> None:
    view = ChatView()
    qtbot.addWidget(view)
    _stream(view, "Some **bold** text.\n\n- a list item\n", provenance="draft")
    view.flush_render()

    def tinted() -> int:
        count = 0
        block = view.transcript.document().begin()
        while block.isValid():
            it = block.begin()
            while not it.atEnd():
                if it.fragment().charFormat().background().color() == DRAFT_TINT:
                    count += it.fragment().length()
                it += 1
            block = block.next()
        return count

    assert tinted() > 10
    view.show_drafts.setChecked(False)
    assert tinted() == 0
    assert "bold" in view.transcript_text() and "**" not in view.transcript_text()


def test_edit_puts_the_message_in_the_box_and_submits_it_with_its_index(qtbot: QtBot) -> None:
    view = ChatView()
    qtbot.addWidget(view)
    view.add_user("first question")
    _stream(view, "first answer")
    view.finish_reply({"kind": "done", "text": "first answer", "stop_reason": "stop", "stats": {}})
    assert "edit" in view.transcript_text() and "regenerate" in view.transcript_text()
    regenerate: list[bool] = []
    view.regenerate_requested.connect(lambda: regenerate.append(True))
    view.activate_link(QUrl("regenerate:1"))
    assert regenerate == [True]
    edits: list[tuple[int, str]] = []
    view.edit_submitted.connect(lambda index, text: edits.append((index, text)))
    view.activate_link(QUrl("edit:0"))
    assert view.input.toPlainText() == "first question" and view.edit_bar.isVisibleTo(view)
    view.input.setPlainText("better question")
    view.send_button.click()
    assert edits == [(0, "better question")] and view.editing is None
