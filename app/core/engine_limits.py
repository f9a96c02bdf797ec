"""The ranges llama.cpp's thread, batch, context and layer counts may take, checked before a value reaches it.

llama.cpp takes these as C ints (a larger Python int overflows in ctypes) and trusts them: 100,000 threads end
in SIGABRT inside it, a batch of millions asks for gigabytes at once. Every count from outside (a command-line
flag, settings.json, a chat's settings) goes through :func:`check_engine_numbers` (words, ``bad-usage``: exit 2)
or the argparse types below, the native layer checks again before its calls. Qt-free.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

from app.core import defaults
from app.core.errors import FastMTPError

THREADS_CEILING = 512
"""Never more threads than this, however many processors the machine reports."""
BATCH_MIN, BATCH_MAX = 1, 16_384
GPU_LAYERS_MIN, GPU_LAYERS_MAX = -1, 999  # -1 and anything past the model's layers: all of them


def threads_max() -> int:
    """The most decode threads worth asking for here: four per logical processor, at most :data:`THREADS_CEILING`."""
    return max(1, min(THREADS_CEILING, 4 * (os.cpu_count() or 1)))


def _problem(name: str, value: object, low: int, high: int) -> str | None:
    if type(value) is not int:
        return f"{name} {str(value)[:40]!r} is not a whole number"
    if not low <= value <= high:
        shown = str(value) if len(str(value)) <= 24 else f"a {len(str(value))}-digit number"
        return f"{name} {shown} is outside {low}..{high}"
    return None


def engine_number_problems(*, n_threads: int | None = None, n_batch: int | None = None, n_ctx: int | None = None,
                           n_gpu_layers: int | None = None, ctx_min: int = defaults.CONTEXT_MIN) -> list[str]:
    """What is out of range among the counts given (None: not checked; 0 threads: the app's own choice); empty
    when all are fine. ``ctx_min``: the native layer's small working contexts (a probe's) go below the chat's."""
    checks: list[tuple[str, object, int, int]] = []
    if n_threads is not None and n_threads != 0:
        checks.append(("the thread count", n_threads, 1, threads_max()))
    if n_batch is not None:
        checks.append(("the batch size", n_batch, BATCH_MIN, BATCH_MAX))
    if n_ctx is not None:
        checks.append(("the context size", n_ctx, ctx_min, defaults.CONTEXT_MAX))
    if n_gpu_layers is not None:
        checks.append(("the GPU layer count", n_gpu_layers, GPU_LAYERS_MIN, GPU_LAYERS_MAX))
    return [why for name, value, low, high in checks if (why := _problem(name, value, low, high)) is not None]


LIMITS_ADVICE = (f"Use a thread count of 1 up to four per processor (at most {THREADS_CEILING}), a batch of "
                 f"{BATCH_MIN}..{BATCH_MAX}, a context of {defaults.CONTEXT_MIN}..{defaults.CONTEXT_MAX} tokens and "
                 f"{GPU_LAYERS_MIN}..{GPU_LAYERS_MAX} GPU layers (-1: all).")


def check_engine_numbers(n_threads: int | None, n_batch: int, n_ctx: int, n_gpu_layers: int) -> None:
    """Refuse, in words, counts llama.cpp would overflow on or abort with (``bad-usage``: exit 2). A context of 0
    is Auto's, resolved before the load."""
    problems = engine_number_problems(n_threads=n_threads, n_batch=n_batch, n_ctx=n_ctx or None,
                                      n_gpu_layers=n_gpu_layers, ctx_min=1)  # Auto may fit less than a user may ask
    if problems:
        raise FastMTPError(f"Not loading the model: {'; '.join(problems)}.", LIMITS_ADVICE, kind="bad-usage")


def whole_number(name: str, low: int, high: int | None) -> Callable[[str], int]:
    """An argparse ``type``: a whole number in ``low..high`` (``high`` None: :func:`threads_max`), else words."""
    def parse(text: str) -> int:
        top = threads_max() if high is None else high
        stripped = text.strip()
        value = int(stripped) if len(stripped) <= 24 and stripped.lstrip("+-").isascii() \
            and stripped.lstrip("+-").isdigit() else None
        if value is None or not low <= value <= top:
            raise argparse.ArgumentTypeError(f"{name} is a whole number from {low} to {top}, not {text[:40]!r}")
        return value
    return parse


threads_argument = whole_number("the thread count", 0, None)  # 0: the app's own choice
batch_argument = whole_number("the batch size", BATCH_MIN, BATCH_MAX)
gpu_layers_argument = whole_number("the GPU layer count", GPU_LAYERS_MIN, GPU_LAYERS_MAX)
