"""The app's settings, saved as JSON in the config folder: models folder, engine sizes, drafting, theme,
the chat's model, whether the first-run panel was answered, whether to check for app updates daily, the RPC
workers and how to serve this machine.

Qt-free. ``load()`` never fails on a damaged or older file: unknown keys are dropped, bad values fall back
to their defaults (and the file is rewritten on the next ``save``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, Literal

from app.core import defaults, paths, settings_file
from app.core.errors import StorageError
from app.engine.config import DEFAULT_DRAFT_DEPTH, OVERFLOW_POLICIES, clamp_draft_depth

Theme = Literal["system", "light", "dark"]
THEMES: tuple[Theme, ...] = ("system", "light", "dark")
FILE_NAME = "settings.json"
STATE_CACHE_MB_MAX = 1024 * 1024  # a terabyte of kept chat states: the cap's ceiling
# what llama.cpp is given (and the Settings page's spin boxes, Qt ints, can show): -1 is every layer, and no model
# has 999; no machine runs more threads than this well (3*10^9 once stopped the Settings page from opening)
GPU_LAYERS_MAX = 999
THREADS_MAX = 256


@dataclass
class Settings:
    models_dir: str = ""  # "" means the default, ``paths.models_dir()``
    # 0 (``defaults.CONTEXT_AUTO``): Auto, the largest that fits the model on this machine, worked out where the
    # engine's configuration is made (``models/context_size.py``); else the user's own number of tokens. An older
    # file's own number (the old default, 4,096, too) is kept as the user's: it cannot be told apart from a choice.
    context_size: int = defaults.CONTEXT_AUTO
    gpu_layers: int = -1  # -1: everything that fits on the GPU (ignored by CPU backends)
    threads: int = 0  # 0: let llama.cpp choose
    draft_depth: int = DEFAULT_DRAFT_DEPTH
    adaptive_depth: bool = False
    p_min: float = 0.0
    theme: Theme = "system"
    first_run_done: bool = False  # the first-run panel was answered (the demo tried or the real set-up started)
    chat_model: str = ""  # the model the chat loads: "" the built-in demo, else an installed target's path
    check_for_updates: bool = False  # ask the signed release feed once a day at start; off: no network unasked
    rpc_workers: str = ""  # "host:port,host:port": llama.cpp RPC workers that take the offloaded layers
    serve_host: str = "127.0.0.1"  # "Serve this machine": the address llama-server listens on
    serve_port: int = defaults.SERVER_PORT
    serve_parallel: int = 1  # slots: replies served at once
    serve_keep_running: bool = False  # the server outlives the window (else it stops with the app)
    # the chats left keep their evaluated state on disk, in at most this many MiB (0: in memory only, for the last few)
    state_cache_mb: int = defaults.STATE_CACHE_MB
    # a chat longer than its context: "trim" (keep the system prompt and the latest turns) or "stop"; the default
    # of new chats (each chat's own choice is in its settings)
    overflow_policy: str = defaults.OVERFLOW_POLICY

    def models_path(self) -> Path:
        return Path(self.models_dir).expanduser() if self.models_dir else paths.models_dir()

    def validated(self) -> Settings:
        """A copy with every value inside its range."""
        return replace(
            self,
            models_dir=self.models_dir.strip(),
            context_size=valid_context(self.context_size),
            gpu_layers=min(max(self.gpu_layers, -1), GPU_LAYERS_MAX),
            threads=min(max(self.threads, 0), THREADS_MAX),
            draft_depth=clamp_draft_depth(self.draft_depth),
            adaptive_depth=self.adaptive_depth,
            p_min=min(max(self.p_min, 0.0), 1.0),
            theme=self.theme if self.theme in THEMES else "system",
            rpc_workers=",".join(part.strip() for part in self.rpc_workers.split(",") if part.strip()),
            serve_host=self.serve_host.strip() or "127.0.0.1",
            serve_port=min(max(self.serve_port, 1), 65_535),
            serve_parallel=min(max(self.serve_parallel, 1), 64),
            state_cache_mb=min(max(self.state_cache_mb, 0), STATE_CACHE_MB_MAX),
            overflow_policy=self.overflow_policy if self.overflow_policy in OVERFLOW_POLICIES
            else defaults.OVERFLOW_POLICY,
        )


def valid_context(tokens: int) -> int:
    """A context size inside its range: 0 or less is Auto, else at least ``CONTEXT_MIN`` and at most ``CONTEXT_MAX``."""
    if tokens <= defaults.CONTEXT_AUTO:
        return defaults.CONTEXT_AUTO
    return min(max(tokens, defaults.CONTEXT_MIN), defaults.CONTEXT_MAX)


def fit_context(settings: Settings) -> int:
    """The context the catalog's fit advice (the Models page, the first-run panel) sizes for: the user's own, or
    with Auto the `fit` command's usual ``FIT_CONTEXT`` (Auto itself is worked out per model file)."""
    return settings.context_size if settings.context_size > defaults.CONTEXT_AUTO else defaults.FIT_CONTEXT


def settings_path() -> Path:
    return paths.config_dir() / FILE_NAME


def load(path: Path | None = None) -> Settings:
    """The saved settings, or the defaults where there are none (a damaged file is set aside as
    ``settings.json.bad``, with a warning: ``settings_file.load_state``); a value of the wrong type its default."""
    data = settings_file.load_state(path or settings_path())  # None: missing or damaged
    if data is None:
        return Settings()
    settings = Settings()
    for f in fields(Settings):
        if f.name in data:
            value, default = data[f.name], getattr(settings, f.name)
            if isinstance(default, bool):
                ok = isinstance(value, bool)
            elif isinstance(default, float):
                ok = isinstance(value, int | float) and not isinstance(value, bool)
                try:
                    value = float(value) if ok else value
                except OverflowError:  # a 400-digit int: no float holds it
                    ok = False
                ok = ok and math.isfinite(value)
            else:
                ok = isinstance(value, type(default)) and not isinstance(value, bool)
            if ok:
                setattr(settings, f.name, value)
    return settings.validated()


def save(settings: Settings, path: Path | None = None) -> None:
    """Write the settings atomically (a temporary file renamed over the old one)."""
    path = path or settings_path()
    paths.ensure_dir(path.parent, "config")
    try:
        settings_file.write_json(path, asdict(settings.validated()))
    except OSError as exc:
        raise StorageError(f"The settings cannot be saved to {path}: {exc.strerror or type(exc).__name__}.",
                           "Check that the config folder is writable and the disk is not full.") from None


def engine_fields(settings: Settings) -> dict[str, Any]:
    """The ``EngineConfig`` fields these settings decide (``rpc`` only when RPC workers are set). ``n_ctx`` is 0 for
    Auto: whoever makes the configuration for a model file resolves it (``context_size.resolve_context``)."""
    fields: dict[str, Any] = {"n_ctx": settings.context_size, "n_gpu_layers": settings.gpu_layers,
                              "n_threads": settings.threads or None, "draft_depth": settings.draft_depth,
                              "adaptive": settings.adaptive_depth, "p_min": settings.p_min}
    if settings.adaptive_depth:  # what it learned about a model is kept for its next load
        fields["depth_memory"] = paths.depth_memory_dir()
    if settings.state_cache_mb > 0:  # the chats left keep their state on disk (else in memory only)
        fields["state_cache_dir"] = paths.chat_states_dir()
    fields["state_cache_bytes"] = settings.state_cache_mb * 1024 * 1024
    if settings.rpc_workers:
        fields["rpc"] = tuple(part for part in settings.rpc_workers.split(",") if part)
    return fields
