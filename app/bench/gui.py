"""Benchmark: the chat view's responsiveness while a reply streams.

Two figures, both on the real ``ChatView`` (markdown, code highlighting, HUD) fed with synthetic token
events shaped like the engine's:

- **Per-token rendering cost** near the start and near the end of a ``tokens``-long markdown reply
  (sections of a heading, a paragraph, a list and a code block, repeated). Each token is appended,
  flushed and painted (``viewport().repaint()``: the document layout and the paint of what is visible,
  the work the event loop does for a frame; the app itself draws at most every ``RENDER_INTERVAL_MS``).
  The comparison is side by side in one run: two views, one holding a short reply (whole sections, just
  enough to fill the view, so both paint a full view), one holding a reply of almost ``tokens`` tokens,
  are fed the *same* markdown section, token by token and interleaved, so the content and the machine's
  load are the same for both and only the reply's length differs. The mean cost per 1000-token stretch
  of the long reply is reported too (the growth curve).
- **Event-loop latency** while a background thread streams tokens at ``rate`` tokens/s through the same
  queued-signal path as the engine bridge: a 10 ms heartbeat timer records how late each tick fires.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any

WORDS = ["the", "draft", "head", "proposes", "tokens", "and", "the", "target", "verifies", "them", "in",
         "one", "batch", "so", "the", "output", "stays", "exactly", "what", "the", "target", "would", "say"]
CODE = ["def accept(drafts, picks):", "    n = 0", "    for d, p in zip(drafts, picks):",
        "        if d != p:", "            break", "        n += 1", "    return n"]


def synthetic_pieces(n_tokens: int) -> list[str]:
    """A markdown reply of ``n_tokens`` pieces: paragraphs, a bulleted list and a code block, repeated."""
    pieces: list[str] = []
    section = 0
    while len(pieces) < n_tokens:
        section += 1
        pieces += [f"## Part {section}", "\n\n"]
        pieces += [f" {WORDS[(section + i) % len(WORDS)]}" if i else WORDS[section % len(WORDS)]
                   for i in range(40)]
        pieces += [" **important**", ".", "\n\n"]
        for item in range(3):
            pieces += ["- ", "item", f" {item}", " with", " `code`", "\n"]
        pieces += ["\n", "```python", "\n"]
        for line in CODE:
            pieces += [line[i:i + 6] for i in range(0, len(line), 6)] + ["\n"]
        pieces += ["```", "\n\n"]
    return pieces[:n_tokens]


@dataclass
class GuiBenchResult:
    tokens: int
    start_token: int  # where the short reply's measured section starts (the first that fills the view)
    end_token: int  # where the long reply's measured section starts
    samples: int  # tokens measured on each view
    cost_at_start_ms: float  # median per-token cost on the short reply
    cost_at_end_ms: float  # the same section's median on the long reply
    cost_ratio: float
    cost_by_1000_ms: list[float]  # mean per-token cost over each 1000 tokens of the long reply
    latency_rate_tps: int
    latency_p50_ms: float
    latency_p99_ms: float
    latency_max_ms: float
    heartbeats: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def markdown(self) -> str:
        flat = "flat" if self.cost_ratio < 1.25 else "grows"
        p99 = "meets" if self.latency_p99_ms < 50 else "misses"
        curve = " · ".join(f"{c:.2f}" for c in self.cost_by_1000_ms)
        return (
            "| figure | value |\n|---|---:|\n"
            f"| per-token cost (append + layout + paint) at token {self.start_token}, median (ms) | "
            f"{self.cost_at_start_ms:.3f} |\n"
            f"| the same section at token {self.end_token}, median (ms) | {self.cost_at_end_ms:.3f} |\n"
            f"| **end / start** (same content, interleaved, {self.samples} tokens each) | "
            f"**{self.cost_ratio:.2f}x** ({flat}) |\n"
            f"| mean per-token cost per 1000 tokens of the long reply (ms) | {curve} |\n"
            f"| event-loop latency p50 at {self.latency_rate_tps} tok/s (ms) | {self.latency_p50_ms:.2f} |\n"
            f"| **event-loop latency p99** (ms) | **{self.latency_p99_ms:.2f}** ({p99} the 50 ms target) |\n"
            f"| event-loop latency max (ms) | {self.latency_max_ms:.2f} |\n")


def section_starts(pieces: list[str]) -> list[int]:
    """The indices where the synthetic reply's sections (``## Part n``) begin."""
    return [i for i, piece in enumerate(pieces) if piece.startswith("## Part ")]


def _event(piece: str, i: int) -> dict[str, Any]:
    return {"kind": "token", "token": i, "piece": piece, "provenance": "draft" if i % 3 else "target",
            "stats": {"generated": i + 1, "rolling_tps": 50.0 + i % 7, "decode_tps": 50.0, "drafted": i,
                      "accepted": i * 3 // 4, "acceptance": 0.75, "tokens_per_pass": 2.5,
                      "prompt_tps": 900.0, "time_to_first_token": 0.08, "draft_time_share": 0.2}}


def run(tokens: int = 5000, rate: int = 1000) -> GuiBenchResult:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen" if not os.environ.get("DISPLAY") else "xcb")
    from PySide6.QtCore import QElapsedTimer, QEventLoop, QTimer

    from app.gui.chat.chat_view import ChatView
    from app.gui.shell.application import make_application
    from app.gui.shell.ops import Report, run_in_background

    app = make_application([])
    pieces = synthetic_pieces(tokens)

    # 1. rendering cost: the same section fed to a short and a long reply, interleaved token by token
    starts = section_starts(pieces)
    section = pieces[starts[1]:starts[2]]
    rounds = 3
    long_prefix = max(i for i in starts if i + rounds * len(section) <= tokens)
    short_view, long_view = ChatView(), ChatView()
    for view in (short_view, long_view):
        view.resize(900, 700)
        view.show()
        view.begin_reply()
    app.processEvents()

    def draw(view: ChatView, piece: str, i: int) -> float:
        started = time.perf_counter()
        view.append_token(_event(piece, i))
        view.flush_render()
        view.transcript.viewport().repaint()
        return time.perf_counter() - started

    curve: list[float] = []
    for i, piece in enumerate(pieces[:long_prefix]):
        curve.append(draw(long_view, piece, i))
        if i % 200 == 0:
            app.processEvents()
    short_prefix = starts[1]  # the short reply: whole sections until it fills the view (equal paint area)
    for i, piece in enumerate(pieces[:short_prefix]):
        draw(short_view, piece, i)
    while short_view.transcript.verticalScrollBar().maximum() == 0:
        following = min(start for start in starts if start > short_prefix)
        for n, piece in enumerate(pieces[short_prefix:following], short_prefix):
            draw(short_view, piece, n)
        short_prefix = following
    app.processEvents()
    short_costs: list[float] = []
    long_costs: list[float] = []
    for n, piece in enumerate(section * rounds):
        pair = [(short_view, short_costs, short_prefix + n), (long_view, long_costs, long_prefix + n)]
        for view, costs, i in pair if n % 2 else pair[::-1]:
            costs.append(draw(view, piece, i))
    for view in (short_view, long_view):
        view.finish_reply({"kind": "done", "text": "", "stop_reason": "length", "stats": {}})
    start = statistics.median(short_costs) * 1000
    end = statistics.median(long_costs) * 1000
    by_1000 = [round(statistics.mean(curve[k:k + 1000]) * 1000, 3) for k in range(0, len(curve) - 999, 1000)]

    # 2. event-loop latency while tokens stream in from a worker thread at ``rate`` tokens/s
    view2 = ChatView()
    view2.resize(900, 700)
    view2.show()
    view2.begin_reply()
    lateness: list[float] = []
    clock = QElapsedTimer()
    clock.start()
    last = [clock.nsecsElapsed()]
    heartbeat = QTimer()
    heartbeat.setInterval(10)

    def tick() -> None:
        now = clock.nsecsElapsed()
        lateness.append(max((now - last[0]) / 1e6 - 10.0, 0.0))
        last[0] = now

    heartbeat.timeout.connect(tick)
    loop = QEventLoop()

    def stream(report: Report) -> None:
        interval = 1.0 / rate
        due = time.perf_counter()
        for i, piece in enumerate(pieces):
            due += interval
            delay = due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            report(_event(piece, i))

    run_in_background(stream, lambda _r: loop.quit(), lambda _e: loop.quit(), view2.append_token)
    heartbeat.start()
    loop.exec()  # the app's own event loop, until the stream's last token has been delivered
    heartbeat.stop()
    view2.finish_reply({"kind": "done", "text": "".join(pieces), "stop_reason": "length", "stats": {}})
    ordered = sorted(lateness)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    short_view.close()
    long_view.close()
    view2.close()
    return GuiBenchResult(tokens, short_prefix, long_prefix, len(short_costs), round(start, 4), round(end, 4),
                          round(end / start, 3), by_1000, rate,
                          round(statistics.median(ordered), 3), round(p99, 3), round(ordered[-1], 3),
                          len(ordered))
