"""Benchmark: the chat view's responsiveness while a reply streams.

Two figures, both on the real ``ChatView`` (markdown, code highlighting, HUD) fed with synthetic token
events shaped like the engine's:

- **Per-token rendering cost** at token 100 and at token 5000 of a 5000-token markdown reply
  (paragraphs, lists, code blocks), drawing after every token (the worst case; the app draws at most
  every ``RENDER_INTERVAL_MS``). Flat means the cost does not grow with the reply's length.
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
    cost_at_100_ms: float
    cost_at_end_ms: float
    cost_ratio: float
    latency_rate_tps: int
    latency_p50_ms: float
    latency_p99_ms: float
    latency_max_ms: float
    heartbeats: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def markdown(self) -> str:
        flat = "flat" if self.cost_ratio < 1.5 else "grows"
        p99 = "meets" if self.latency_p99_ms < 50 else "misses"
        return (
            "| figure | value |\n|---|---:|\n"
            f"| rendering cost per token at token 100, median (ms) | {self.cost_at_100_ms:.3f} |\n"
            f"| rendering cost per token at token {self.tokens}, median (ms) | {self.cost_at_end_ms:.3f} |\n"
            f"| **end / start** | **{self.cost_ratio:.2f}x** ({flat}) |\n"
            f"| event-loop latency p50 at {self.latency_rate_tps} tok/s (ms) | {self.latency_p50_ms:.2f} |\n"
            f"| **event-loop latency p99** (ms) | **{self.latency_p99_ms:.2f}** ({p99} the 50 ms target) |\n"
            f"| event-loop latency max (ms) | {self.latency_max_ms:.2f} |\n")


def _event(piece: str, i: int) -> dict[str, Any]:
    return {"kind": "token", "token": i, "piece": piece, "provenance": "draft" if i % 3 else "target",
            "stats": {"generated": i + 1, "rolling_tps": 50.0 + i % 7, "decode_tps": 50.0, "drafted": i,
                      "accepted": i * 3 // 4, "acceptance": 0.75, "tokens_per_pass": 2.5,
                      "prompt_tps": 900.0, "time_to_first_token": 0.08, "draft_time_share": 0.2}}


def run(tokens: int = 5000, rate: int = 1000, window: int = 100) -> GuiBenchResult:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen" if not os.environ.get("DISPLAY") else "xcb")
    from PySide6.QtCore import QElapsedTimer, QEventLoop, QTimer
    from PySide6.QtWidgets import QApplication

    from app.gui.chat_view import ChatView
    from app.gui.ops import Report, run_in_background

    app = QApplication.instance() or QApplication([])
    pieces = synthetic_pieces(tokens)

    # 1. rendering cost, drawing after every token
    view = ChatView()
    view.resize(900, 700)
    view.show()
    view.begin_reply()
    costs: list[float] = []
    for i, piece in enumerate(pieces):
        started = time.perf_counter()
        view.append_token(_event(piece, i))
        view.flush_render()
        costs.append(time.perf_counter() - started)
        if i % 200 == 0:
            app.processEvents()
    view.finish_reply({"kind": "done", "text": "".join(pieces), "stop_reason": "length", "stats": {}})
    start = statistics.median(costs[100 - window // 2: 100 + window // 2]) * 1000
    end = statistics.median(costs[-window:]) * 1000

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
    view.close()
    view2.close()
    return GuiBenchResult(tokens, round(start, 4), round(end, 4), round(end / start, 3), rate,
                          round(statistics.median(ordered), 3), round(p99, 3), round(ordered[-1], 3),
                          len(ordered))
