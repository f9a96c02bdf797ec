"""Benchmark: reading a GGUF model's header, the lazy reader against the ``gguf`` package's GGUFReader, and adding
the model (``models add``).

The issue's bar (26): ``gguf inspect`` of a 248,320-token-vocabulary header in <= 0.3 s on the 2-core Xeon, and
adding a 100 MB GGUF in under 2 s (it took 84 s). A demo model of the given size is written into a temporary
folder (target and its two sidecars side by side, as a download leaves them); then, run after run, the lazy
inspect and the GGUFReader parse are timed interleaved, A/B then B/A, each from a cleared cache (the file itself
is in the OS page cache for both after the warm-up), and ``models add`` of the target (which also inspects and
checks the two sidecars beside it) from a cleared cache and an empty registry in a temporary config folder.
The cached inspect (the unchanged file read again) is timed too. Times are in-process: no interpreter start.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from app.bench.report import device_description, spread

if TYPE_CHECKING:
    from app.gguftools.demo_model import Size


@dataclass
class Samples:
    """One variant's timings in seconds, in run order."""

    label: str
    seconds: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "seconds": [round(s, 6) for s in self.seconds], **spread(self.seconds, "s", 6)}


@dataclass
class HeaderBenchResult:
    size: Size
    file_bytes: int
    vocab_size: int | None
    runs: int
    load_average: tuple[float, float, float] | None
    lazy: Samples
    gguf_reader: Samples
    cached: Samples
    models_add: Samples
    device: str = field(default_factory=device_description)

    @property
    def speedup(self) -> float:
        return statistics.median(self.gguf_reader.seconds) / statistics.median(self.lazy.seconds)

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "size": self.size, "file_bytes": self.file_bytes,
                "vocab_size": self.vocab_size, "runs": self.runs, "load_average": self.load_average,
                "timings": {"lazy_inspect_cold": self.lazy.to_dict(), "gguf_reader": self.gguf_reader.to_dict(),
                            "lazy_inspect_cached": self.cached.to_dict(), "models_add_cold": self.models_add.to_dict()},
                "speedup_median": round(self.speedup, 1)}

    def markdown(self) -> str:
        rows = [
            "| what | median | min | max |",
            "|---|---|---|---|",
            *(f"| {s.label} | {_ms(statistics.median(s.seconds))} | {_ms(min(s.seconds))} | {_ms(max(s.seconds))} |"
              for s in (self.lazy, self.gguf_reader, self.cached, self.models_add)),
        ]
        load = "" if self.load_average is None else ", load average " + " / ".join(
            f"{x:.2f}" for x in self.load_average)
        return (f"{self.size} demo target, {self.file_bytes / 1e6:.0f} MB, {self.vocab_size or 0:,} tokens; "
                f"{self.runs} interleaved runs on {self.device}{load}. Lazy vs GGUFReader: {self.speedup:.0f}x "
                "(medians).\n\n"
                + "\n".join(rows) + "\n")


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.3f} ms" if seconds < 0.01 else f"{seconds * 1000:.0f} ms"


def _timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


@contextmanager
def _config_dir(folder: Path) -> Iterator[None]:
    """``models add`` writes its registry into the config folder: a temporary one, never the user's."""
    saved = os.environ.get("FASTMTP_CONFIG_DIR")
    os.environ["FASTMTP_CONFIG_DIR"] = str(folder)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("FASTMTP_CONFIG_DIR", None)
        else:
            os.environ["FASTMTP_CONFIG_DIR"] = saved


def run(size: Size = "small", runs: int = 5, folder: Path | None = None, log: TextIO = sys.stderr) -> HeaderBenchResult:
    """Write the demo model of ``size`` into ``folder`` (a temporary one by default, removed after) and time."""
    if runs < 1:
        raise ValueError("runs must be at least 1")
    if folder is None:
        with tempfile.TemporaryDirectory(prefix="fastmtp-bench-gguf-") as tmp:
            return run(size, runs, Path(tmp), log)
    from app.gguftools.demo_model import write_demo_model
    from app.gguftools.header import clear_caches
    from app.gguftools.inspect import inspect_gguf
    from app.gguftools.reader import array_length, open_gguf
    from app.gguftools.vocab import qwen35_vocab_path
    from app.models import local_models

    print(f"writing the {size} demo model into {folder} ...", file=log, flush=True)
    demo = write_demo_model(folder / "model", qwen35_vocab_path(), size)
    target = demo.target
    registry = folder / "config"

    def lazy() -> None:
        clear_caches()
        inspect_gguf(target)

    def old() -> None:
        array_length(open_gguf(target), "tokenizer.ggml.tokens")

    def add() -> None:
        clear_caches()
        (registry / local_models.FILE_NAME).unlink(missing_ok=True)
        local_models.add(target)

    result = HeaderBenchResult(
        size=size, file_bytes=target.stat().st_size, vocab_size=None, runs=runs, load_average=None,
        lazy=Samples("`gguf inspect`: lazy header reader, cold cache"),
        gguf_reader=Samples("the gguf package's GGUFReader parse (the old inspect)"),
        cached=Samples("`gguf inspect` again, unchanged file (cached)"),
        models_add=Samples("`models add` (inspects and pair-checks its 2 sidecars too), cold cache"))
    with _config_dir(registry):
        for warm_up in (lazy, old, add):  # imports, and the file in the page cache for every variant alike
            warm_up()
        for index in range(runs):
            pairs = [("lazy", lazy), ("old", old)]
            for name, fn in pairs if index % 2 == 0 else reversed(pairs):
                seconds = _timed(fn)
                (result.lazy if name == "lazy" else result.gguf_reader).seconds.append(seconds)
            result.cached.seconds.append(_timed(lambda: inspect_gguf(target)))
            result.models_add.seconds.append(_timed(add))
            print(f"run {index + 1}/{runs}: lazy {result.lazy.seconds[-1] * 1000:.1f} ms, GGUFReader "
                  f"{result.gguf_reader.seconds[-1]:.2f} s, cached {result.cached.seconds[-1] * 1e6:.0f} us, "
                  f"models add {result.models_add.seconds[-1] * 1000:.0f} ms", file=log, flush=True)
    result.vocab_size = inspect_gguf(target).vocab_size
    result.load_average = os.getloadavg() if hasattr(os, "getloadavg") else None
    return result
