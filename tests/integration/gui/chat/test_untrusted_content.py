"""A message never makes the app read a file or the network: images are links, raw HTML is text.

Real widgets offscreen, a real HTTP server that records every request, real exports. Reading
``/dev/zero`` as an image used to abort the process (std::bad_alloc), so those cases run in a child
process with a bounded address space: a regression fails the test instead of killing the test run.
"""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from PySide6.QtCore import QByteArray, QUrl
from PySide6.QtGui import QTextDocument
from pytestqt.qtbot import QtBot

from app.chats.history import HistoryStore
from app.gui.chat.chat_view import ChatView
from app.gui.chat.markdown import MarkdownRenderer

ROOT = Path(__file__).resolve().parents[4]


class Recorder:
    """A local HTTP server that serves a tiny PNG and remembers every path asked for."""

    PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                        "1f15c4890000000d49444154789c6360000002000100e221bc330000000049454e44ae426082")

    def __init__(self) -> None:
        self.requests: list[str] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                recorder.requests.append(self.path)
                self.send_response(200)
                self.send_header("Content-Type", "image/png")
                self.send_header("Content-Length", str(len(Recorder.PNG)))
                self.end_headers()
                self.wfile.write(Recorder.PNG)

            def log_message(self, *_args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/x.png"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    server = Recorder()
    yield server
    server.close()


def hostile(url: str) -> str:
    """A reply that names a device, a secret file, raw HTML and a remote image."""
    return ("Look: ![zero](/dev/zero) and ![passwd](file:///etc/passwd).\n\n"
            '<img src="/dev/zero">\n\n'
            f"Inline <img src=\"{url}\"> too, and ![remote]({url}).\n\n"
            f"[![linked](/dev/zero)]({url})\n\nThe end.")


def test_the_renderer_turns_images_into_links_and_escapes_raw_html() -> None:
    out = MarkdownRenderer().render(hostile("http://127.0.0.1:9/x.png"), lambda _code: 0)
    assert "<img" not in out
    assert '<a href="/dev/zero">[image: zero]</a>' in out
    assert '<a href="http://127.0.0.1:9/x.png">[image: remote]</a>' in out
    assert '<a href="http://127.0.0.1:9/x.png">[image: linked]</a>' in out  # no link inside a link
    assert "&lt;img src=&quot;/dev/zero&quot;&gt;" in out
    assert "file:///etc/passwd" not in out.replace("![passwd](file:///etc/passwd)", "")  # never a link target


# The window's three ways to show a message, on real widgets in a child process with a bounded address space
# (reading /dev/zero used to end in std::bad_alloc: a regression fails the test instead of killing the run).
CHILD = r"""
import json, os, resource, sys
from pathlib import Path
os.environ["QT_QPA_PLATFORM"] = "offscreen"
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
from PySide6.QtCore import QUrl
from PySide6.QtGui import QTextDocument
from PySide6.QtWidgets import QApplication
from app.gui.chat.chat_view import ChatView
from app.gui.main import MainWindow
from app.chats.history import EXPORT_FORMAT, HistoryStore, StoredMessage

qt = QApplication([])
url, work, text = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
seen = {}

def look(stage, view):
    document = view.transcript.document()
    document.size()  # the whole layout: images would be loaded here
    view.transcript.grab()  # and a paint
    qt.processEvents()
    images = []
    block = document.begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fmt = it.fragment().charFormat()
            if fmt.isImageFormat():
                images.append(fmt.toImageFormat().name())
            it += 1
        block = block.next()
    asked = [bytes(document.resource(QTextDocument.ResourceType.ImageResource, QUrl(name)).data())
             for name in ("/dev/zero", "file:///etc/passwd", url)]
    seen.setdefault(stage, {"images": [], "asked": []})
    seen[stage]["images"] += images
    seen[stage]["asked"] += [len(a) for a in asked]
    seen[stage]["text"] = view.transcript_text()

view = ChatView()
view.resize(900, 700)
view.show()
view.add_user(text)  # the user's own message: plain text
view.begin_reply()
for start in range(0, len(text), 7):  # a reply as it streams: the tail is drawn again and again
    view.append_token({"kind": "token", "piece": text[start:start + 7], "provenance": "draft"})
    if start % 35 == 0:
        view.flush_render()
        look("streaming", view)
view.finish_reply({"kind": "done", "text": text, "stats": {"generated": 40}})
look("streamed", view)

view.show_conversation([StoredMessage(1, 1, "user", "show me", None, 0.0),  # a reopened chat
                        StoredMessage(2, 1, "assistant", "<think>" + text + "</think>" + text, None, 0.0)])
view.activate_link(QUrl("think:1"))  # its thinking opened: rendered too
look("reopened", view)

export = work / "hostile.json"  # an imported chat, titled with raw HTML
export.write_text(json.dumps({"format": EXPORT_FORMAT, "conversations": [{
    "title": '<img src="/dev/zero">', "messages": [{"role": "user", "content": "hi"},
                                                   {"role": "assistant", "content": text}]}]}))
window = MainWindow(history=HistoryStore(work / "history.sqlite3"))
window.show()
imported = window.chat_page.transfer.import_chats(export)
window.chat_page.sidebar.list.setCurrentRow(0)
look("imported", window.chat_page.chat)
seen["imported"]["opened"] = window.chat_page.conversation_id in imported
seen["imported"]["tooltip"] = window.chat_page.sidebar.list.item(0).toolTip()
window.close()
print(json.dumps(seen))
"""


def test_streamed_reopened_and_imported_chats_load_no_resource(tmp_path: Path, recorder: Recorder) -> None:
    result = subprocess.run([sys.executable, "-c", CHILD, recorder.url, str(tmp_path), hostile(recorder.url)],
                            capture_output=True,
                            text=True, cwd=ROOT, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]  # before the fix: -6 (SIGABRT), std::bad_alloc
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(seen) == {"streaming", "streamed", "reopened", "imported"}
    for stage, found in seen.items():
        assert found["images"] == [], stage  # not one image in the document
        assert set(found["asked"]) == {0}, stage  # asked for a resource directly, the transcript gives nothing
    for stage in ("streamed", "reopened", "imported"):
        shown = seen[stage]["text"]
        assert "[image: zero]" in shown and "[image: remote]" in shown and "[image: linked]" in shown, stage
        assert '<img src="/dev/zero">' in shown and f'<img src="{recorder.url}">' in shown, stage  # shown as text
        assert "root:" not in shown, stage  # /etc/passwd was not read into the transcript
    assert seen["imported"]["opened"]
    tooltip = seen["imported"]["tooltip"]
    assert "<img" not in tooltip and "&lt;img" in tooltip  # the title is text in its tooltip as well
    assert recorder.requests == []  # nothing asked the test server for the remote image


def test_raw_img_html_in_the_document_itself_loads_nothing(qtbot: QtBot, recorder: Recorder) -> None:
    """Past the renderer (HTML put into the document directly), the transcript still refuses every resource."""
    view = ChatView()
    qtbot.addWidget(view)
    view.show()
    cursor = view._end_cursor()
    cursor.insertHtml(f'<p>a <img src="file:///etc/passwd" alt="p"> b <img src="{recorder.url}" alt="r"></p>')
    view.transcript.document().size()
    view.transcript.grab()
    for name in ("file:///etc/passwd", "/etc/passwd", recorder.url):
        got = view.transcript.document().resource(QTextDocument.ResourceType.ImageResource, QUrl(name))
        assert got == QByteArray(), name
    assert recorder.requests == []


RAW_CHILD = r"""
import os, resource, sys
os.environ["QT_QPA_PLATFORM"] = "offscreen"
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
from PySide6.QtWidgets import QApplication
from app.gui.chat.chat_view import ChatView
qt = QApplication([])
view = ChatView()
view.resize(800, 600)
view.show()
view._end_cursor().insertHtml('<p>see <img src="/dev/zero" alt="zero"> here</p>')  # past the renderer
view.transcript.document().size()
view.transcript.grab()
qt.processEvents()
print("drawn:", view.transcript_text().strip())
"""


def test_dev_zero_in_raw_document_html_is_never_read() -> None:
    result = subprocess.run([sys.executable, "-c", RAW_CHILD], capture_output=True, text=True, cwd=ROOT,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-2000:]  # before the fix: -6 (SIGABRT), std::bad_alloc
    assert "drawn: see" in result.stdout


def test_markdown_export_escapes_raw_html(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "h.sqlite3")
    conv = store.create_conversation('<script>alert("title")</script>', "Be <b>bold</b>.")
    store.add_message(conv, "user", "Show `Vec<T>` and <img src=\"/dev/zero\"> please")
    store.add_message(conv, "assistant", "<div onclick=\"x()\">\nblock html\n</div>\n\n"
                      "```html\n<img src=\"/dev/zero\">\n```\n\n"
                      "Text with <span style=\"color:red\">inline</span> and a <!-- comment -->.\n\n"
                      "```\nan unclosed fence <b>",
                      {"decode_tps": 12.5, "acceptance": 0.5})
    store.add_message(conv, "user", "```\n<img src=\"/dev/zero\">")  # would close the fence left open above
    exported = store.export_markdown(conv)
    store.close()

    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").parse(exported)
    raw = [t for t in tokens if t.type == "html_block"]
    raw += [c for t in tokens for c in t.children or [] if c.type == "html_inline" and c.content != "<sub>"
            and c.content != "</sub>"]
    assert raw == [], raw
    html = MarkdownIt("commonmark").render(exported)
    assert "<img" not in html and "<script" not in html and "<div" not in html and "<span" not in html
    assert "&lt;img src=&quot;/dev/zero&quot;&gt;" in html  # shown as text
    assert "<code>Vec&lt;T&gt;</code>" in html  # code spans keep their text as it is
    assert '<code class="language-html">&lt;img src=&quot;/dev/zero&quot;&gt;\n</code>' in html
    assert "<sub>12.5 tok/s · acceptance 50%</sub>" in html  # the export's own footer stays
