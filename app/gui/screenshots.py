"""Screenshots of the real app for the README: ``python -m app.gui.screenshots OUTDIR``.

Run it under a display (``xvfb-run -a .venv/bin/python -m app.gui.screenshots docs/screenshots``). It sets the
application up as ``run()`` does (its name, desktop file name and icon), opens the real window with the built-in
demo model on the active backend (the patched CPU backend is built first when none is active: seconds when its
build tree is cached), sends a message with drafting off (that chat is pinned) and one with the d2t sidecar,
waits for each streamed reply, and grabs the window with ``QWidget.grab()`` (which draws the window itself, so
the screen may be smaller than the window): the first-run panel, the chat with its HUD, and every other page of
the rail (Models, Backend, …, Settings), in the light and the dark theme, at each of ``SIZES``:
``chat-light.png`` at the README's size, ``chat-light-1024x700.png`` and so on at the others.
History and settings live in a temporary folder, so the user's own chats are neither shown nor changed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QEventLoop, QTimer
from PySide6.QtWidgets import QApplication, QScrollArea

from app.core import paths
from app.settings.app_settings import Settings

README_SIZE = (1280, 800)  # the unsuffixed files, which the README shows
LAPTOP = (1366, 768)  # the common laptop screen the window must fit
SIZES = (README_SIZE, (1024, 700), LAPTOP, (1920, 1080))  # the smallest window we design for, a laptop, full HD
PROMPT = "Hello! What is FastMTP Chat, and how does its drafting work?"
PLAIN_PROMPT = "The same without drafting, please."


def wait_until(app: QApplication, condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Run the event loop until ``condition()`` holds (checked every 20 ms)."""
    deadline = time.monotonic() + timeout_s
    loop = QEventLoop()
    timer = QTimer()
    timer.setInterval(20)
    timer.timeout.connect(lambda: loop.quit() if condition() or time.monotonic() > deadline else None)
    timer.start()
    if not condition():
        loop.exec()
    timer.stop()
    if not condition():
        raise TimeoutError(f"gave up waiting for {what} after {timeout_s:.0f} s")


def settle(app: QApplication, ms: int = 300) -> None:
    """Let layouts, detection results and repaints land before a grab."""
    loop = QEventLoop()
    QTimer.singleShot(ms, loop.quit)
    loop.exec()
    app.processEvents()


def file_name(page: str, theme: str, size: tuple[int, int]) -> str:
    """``chat-dark.png`` at the README's size, ``chat-dark-1920x1080.png`` at another."""
    suffix = "" if size == README_SIZE else f"-{size[0]}x{size[1]}"
    return f"{page.lower()}-{theme}{suffix}.png"


def take(out: Path, themes: tuple[str, ...] = ("light", "dark"),
         sizes: tuple[tuple[int, int], ...] = SIZES) -> list[Path]:
    """Write the screenshots into ``out``; returns their paths."""
    from app.backend import registry
    from app.backend.builder import BuildOptions, build_backend
    from app.chats.history import HistoryStore
    from app.gguftools.builtin_demo import ensure_demo_model
    from app.gui.main import MainWindow
    from app.gui.shell.application import make_application

    app = make_application(sys.argv[:1])  # named and with its icon, as ``run()`` sets it up
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    scratch = Path(tempfile.mkdtemp(prefix="fastmtp-shots-"))
    os.environ["FASTMTP_CONFIG_DIR"] = str(scratch / "config")
    if registry.active() is None:
        print("no active backend: building the patched CPU backend", file=sys.stderr)
        build_backend(BuildOptions(flavor="cpu"))
    demo = ensure_demo_model(paths.demo_model_dir())

    history = HistoryStore(scratch / "history.sqlite3")
    window = MainWindow(history=history, settings=Settings(first_run_done=True), remembers=False)
    window.resize(*sizes[0])
    window.show()

    def grab(page: str, theme: str) -> None:
        for size in sizes:
            window.resize(*size)
            settle(app)
            path = out / file_name(page, theme, size)
            window.grab().save(str(path))
            written.append(path)
            print(path)

    def set_theme(name: str) -> None:
        window.apply_settings(Settings(theme="dark" if name == "dark" else "light", first_run_done=True))
        window.settings_page.show_settings(window.settings)

    window.show_first_run()
    wait_until(app, lambda: window.first_run.toolchain is not None, 120, "GPU and build tool detection")
    for name in themes:
        set_theme(name)
        grab("first-run", name)

    window.chat_stack.setCurrentIndex(0)
    done: list[dict[str, Any]] = []
    window.bridge.done.connect(done.append)
    # first a reply with drafting off (its chat pinned), then one with d2t: the HUD's "vs off" shows how far it has
    # measured (one reply each way is no verdict)
    window.model_selector.restore_mode("off")  # picked without a load: ``use_demo`` loads in this mode
    window.loading.use_demo(demo)
    wait_until(app, lambda: window.chat_page.ready, 120, "the demo model to load")
    window.chat_page.send(PLAIN_PROMPT)
    wait_until(app, lambda: bool(done), 120, "the reply with drafting off")
    plain_tps = (done[0].get("stats") or {}).get("decode_tps") or 0.0
    if window.chat_page.conversation_id is not None:
        window.chat_page.sidebar.set_pinned(window.chat_page.conversation_id, True)
    mode_box = window.model_selector.mode_box
    mode_box.setCurrentIndex(mode_box.findData("sidecar-d2t"))  # loads the d2t pair
    wait_until(app, lambda: window.chat_page.ready and not window.bridge.busy, 120,
               "the demo model with its d2t sidecar")
    window.chat_page.new_chat()
    done.clear()
    window.chat_page.send(PROMPT)
    wait_until(app, lambda: bool(done), 120, "the streamed reply")
    drafted_tps = (done[0].get("stats") or {}).get("decode_tps") or 0.0
    hud = window.chat_page.chat.hud
    print(f"drafting off {plain_tps:.0f} tok/s, d2t {drafted_tps:.0f} tok/s; the HUD says: vs off "
          f"{hud.vs_off.text()} ({hud.vs_off.toolTip()})", file=sys.stderr)
    for name in themes:
        set_theme(name)
        window.show_page("Chat")
        grab("chat", name)
    for page in window.page_names()[1:]:  # every page of the rail after Chat
        for name in themes:
            set_theme(name)
            window.show_page(page)
            grab(page, name)
    window.resize(*sizes[0])
    window.close()
    history.close()
    return written


def take_own(out: Path, themes: tuple[str, ...] = ("light",), size: tuple[int, int] = README_SIZE) -> list[Path]:
    """``models-own-*.png`` (your own files: one added from a fake LM Studio folder, the scan of the usual places)
    and ``benchmark-run-*.png`` (the Benchmark page after a small matrix on the demo model)."""
    from app.backend import registry
    from app.backend.builder import BuildOptions, build_backend
    from app.chats.history import HistoryStore
    from app.gguftools.builtin_demo import ensure_demo_model
    from app.gui.main import MainWindow
    from app.gui.shell.application import make_application

    app = make_application(sys.argv[:1])
    out.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="fastmtp-shots-own-"))
    os.environ["FASTMTP_CONFIG_DIR"] = str(scratch / "config")
    os.environ["FASTMTP_DATA_DIR"] = str(paths.data_dir())  # the backends (and the demo) stay where they are ...
    os.environ["FASTMTP_CACHE_DIR"] = str(paths.cache_dir())
    os.environ["HOME"] = str(scratch / "home")  # ... while the scan looks here (LM Studio, Downloads), not in yours
    os.environ["HF_HUB_CACHE"] = str(scratch / "hf-hub")
    if registry.active() is None:
        build_backend(BuildOptions(flavor="cpu"))
    demo = ensure_demo_model(paths.demo_model_dir())
    planted = scratch / "home" / ".lmstudio" / "models" / "someone" / "Qwen3.8-27B-MTP-GGUF" / "Qwen3.8-27B-Q4_K_M.gguf"
    sidecar = scratch / "home" / "Downloads" / "Qwen3.8-27B-FastMTP-32K.gguf"
    for source, link in ((demo.target, planted), (demo.sidecar_d2t, sidecar)):
        link.parent.mkdir(parents=True, exist_ok=True)
        os.link(source, link)
    history = HistoryStore(scratch / "history.sqlite3")
    window = MainWindow(history=history, settings=Settings(first_run_done=True), remembers=False)
    window.resize(*size)
    window.show()
    panel = window.models_page.local
    panel.add_path(planted)
    wait_until(app, lambda: panel.idle, 120, "the file to be added")
    panel.scan()
    wait_until(app, lambda: not panel.scanning, 120, "the scan")
    window.loading.use_demo(demo)
    wait_until(app, lambda: window.chat_page.ready and not window.bridge.busy, 120, "the demo model to load")
    page = window.bench_page
    window.show_page("Benchmark")
    for mode, box in page.mode_boxes.items():
        box.setChecked(mode in ("off", "embedded", "d2t"))
    page.tokens.setValue(32)
    page.run()
    wait_until(app, lambda: not page.running, 900, "the benchmark")
    written: list[Path] = []
    for name in themes:
        window.apply_settings(Settings(theme="dark" if name == "dark" else "light", first_run_done=True))
        for shot, page_name in (("models-own", "Models"), ("benchmark-run", "Benchmark")):
            window.show_page(page_name)
            settle(app)
            if page_name == "Models":
                scroll = window.models_page.findChild(QScrollArea)
                if scroll is not None:
                    scroll.ensureWidgetVisible(panel, 0, 0)
                    scroll.verticalScrollBar().setValue(panel.y())
            settle(app)
            path = out / file_name(shot, name, size)
            window.grab().save(str(path))
            written.append(path)
            print(path)
    window.close()
    history.close()
    return written


def take_long_chat(out: Path, themes: tuple[str, ...] = ("light",), size: tuple[int, int] = README_SIZE) -> list[Path]:
    """``chat-long-*.png`` (issue 34): a chat on the demo model in a 512-token context, with the context meter, the
    note that the oldest turns were left out, Continue under a reply cut by its cap, and "stop at the limit"."""
    from app.backend import registry
    from app.backend.builder import BuildOptions, build_backend
    from app.chats.history import HistoryStore
    from app.gguftools.builtin_demo import ensure_demo_model
    from app.gui.main import MainWindow
    from app.gui.shell.application import make_application
    from app.settings.chat_settings import ChatSettings

    app = make_application(sys.argv[:1])
    out.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="fastmtp-shots-long-"))
    os.environ["FASTMTP_CONFIG_DIR"] = str(scratch / "config")
    if registry.active() is None:
        build_backend(BuildOptions(flavor="cpu"))
    demo = ensure_demo_model(paths.demo_model_dir())
    history = HistoryStore(scratch / "history.sqlite3")
    window = MainWindow(history=history, settings=Settings(first_run_done=True, context_size=512),
                        remembers=False)
    window.resize(*size)
    window.show()
    window.model_selector.restore_mode("sidecar-d2t")
    window.loading.use_demo(demo)
    page = window.chat_page
    wait_until(app, lambda: page.ready and not window.bridge.busy, 300, "the demo model to load")
    written: list[Path] = []

    def ask(text: str) -> None:
        page.send(text)
        wait_until(app, lambda: not window.bridge.busy, 300, "the reply")

    def grab(shot: str) -> None:
        for name in themes:
            window.apply_settings(Settings(theme="dark" if name == "dark" else "light", first_run_done=True,
                                           context_size=512))
            settle(app)
            path = out / file_name(shot, name, size)
            window.grab().save(str(path))
            written.append(path)
            print(path)

    def ask_until(shown: Callable[[], bool]) -> None:
        """Questions until ``shown()`` (the context is full by then: 12 fill 512 tokens several times)."""
        for i in range(12):
            ask(f"Question {i}: what do lighthouse keepers do all night, and why?")
            if shown():
                return

    page.set_chat_settings(ChatSettings(thinking=False, temperature=0.0, max_tokens=60))
    ask_until(page.trim_note.isVisible)
    grab("chat-long-trim")
    page.new_chat()
    page.set_chat_settings(ChatSettings(thinking=False, temperature=0.0, max_tokens=24))
    ask("Tell me a long story about the sea.")
    grab("chat-long-continue")
    page.new_chat()
    page.set_chat_settings(ChatSettings(thinking=False, temperature=0.0, max_tokens=60, overflow="stop"))
    ask_until(page.limit_banner.isVisible)
    grab("chat-long-limit")
    window.close()
    history.close()
    return written


def first_run(out: Path, sizes: tuple[tuple[int, int], ...] = (LAPTOP, (1024, 700))) -> dict[str, Any]:
    """A new user's first run, scripted on the real window: empty data and config folders (the build cache stays,
    so the backend build is what a second install on this machine costs), the first-run panel, a click on "Try
    the demo model", the build with its estimate, the demo loaded, a first message and its streamed reply; shots
    of each stage at ``sizes``. Returns (and writes as ``first-run.json``) the estimate against the measured build.
    """
    from PySide6.QtCore import Qt
    from PySide6.QtTest import QTest

    from app.backend import build_estimate, registry
    from app.backend.builder import BuildOptions
    from app.chats.history import HistoryStore
    from app.gui.main import MainWindow
    from app.gui.shell.application import make_application

    app = make_application(sys.argv[:1])
    out.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="fastmtp-first-run-"))
    os.environ["FASTMTP_CONFIG_DIR"] = str(scratch / "config")
    os.environ["FASTMTP_DATA_DIR"] = str(scratch / "data")
    assert registry.active() is None, "the scripted first run needs an empty data folder"
    history = HistoryStore(scratch / "history.sqlite3")
    window = MainWindow(history=history, remembers=False)
    window.resize(*sizes[0])
    window.show()
    window.start()
    written: list[str] = []

    def grab(stage: str) -> None:
        for size in sizes:
            window.resize(*size)
            settle(app)
            path = out / f"first-run-{stage}-{size[0]}x{size[1]}.png"
            window.grab().save(str(path))
            written.append(str(path))
            print(path)

    panel = window.first_run
    wait_until(app, lambda: panel.toolchain is not None, 120, "GPU and build tool detection")
    said = build_estimate.estimate(BuildOptions(flavor="cpu"))
    grab("welcome")
    QTest.mouseClick(panel.demo_button, Qt.MouseButton.LeftButton)
    job = window.build_job
    wait_until(app, lambda: job.running and job.percent > 0, 60, "the build to start")
    grab("building")
    wait_until(app, lambda: not job.running, 3600, "the backend build")
    built_s = job.elapsed()
    wait_until(app, lambda: window.chat_page.ready, 300, "the demo model to load")
    started = time.monotonic()
    first_token: list[float] = []
    done: list[dict[str, Any]] = []
    window.bridge.token.connect(lambda _event: first_token.append(time.monotonic()) if not first_token else None)
    window.bridge.done.connect(done.append)
    window.chat_page.chat.input.setPlainText(PROMPT)
    QTest.keyClick(window.chat_page.chat.input, Qt.Key.Key_Return)
    wait_until(app, lambda: bool(done), 300, "the first streamed reply")
    grab("reply")
    ratio = round(max(said.seconds, built_s) / max(min(said.seconds, built_s), 0.1), 2)
    summary: dict[str, Any] = {
               "estimate_s": round(said.seconds, 1), "estimate_words": said.words(), "basis": said.basis,
               "build_s": round(built_s, 1), "build_outcome": job.outcome,
               "ratio": ratio, "within_factor_2": ratio <= 2.0,
               "first_token_s": round(first_token[0] - started, 2) if first_token else None,
               "reply_tokens": len(done[0].get("tokens") or []) if done else 0, "screenshots": written}
    (out / "first-run.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print(summary, file=sys.stderr)
    window.close()
    history.close()
    return summary


def parse_size(text: str) -> tuple[int, int]:
    """``1024x700`` -> (1024, 700)."""
    width, _, height = text.lower().partition("x")
    return int(width), int(height)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.gui.screenshots", description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder for the PNG files (docs/screenshots)")
    parser.add_argument("--theme", choices=["light", "dark", "both"], default="both")
    parser.add_argument("--own", action="store_true",
                        help="only the pages of your own models: models-own-*.png and benchmark-run-*.png")
    parser.add_argument("--first-run", action="store_true",
                        help="a scripted first run from empty folders to the first streamed reply (first-run-*.png, "
                             "first-run.json: the build's estimate against the measured build)")
    parser.add_argument("--long-chat", action="store_true",
                        help="only a long chat in a small context: the meter, the trim note, Continue and the limit "
                             "(chat-long-*.png)")
    parser.add_argument("--size", action="append", metavar="WxH",
                        help="only this window size (repeatable; default: 1280x800, 1024x700, 1366x768, 1920x1080)")
    args = parser.parse_args(argv)
    themes = ("light", "dark") if args.theme == "both" else (args.theme,)
    sizes = tuple(parse_size(size) for size in args.size) if args.size else SIZES
    if args.own:
        take_own(args.out, themes, sizes[0])
        return 0
    if args.first_run:
        first_run(args.out, sizes if args.size else (LAPTOP, (1024, 700)))
        return 0
    if args.long_chat:
        take_long_chat(args.out, themes, sizes[0] if args.size else README_SIZE)
        return 0
    take(args.out, themes, sizes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
