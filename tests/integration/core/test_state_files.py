"""State files are advisory: a damaged window-state or depth-memory file never keeps the window from starting or
adaptive generation from loading, never blocks (a FIFO) or fills memory (a link to /dev/zero), and is moved aside
as ``<name>.bad`` for a person to look at. Real files, real FIFOs, the real window in a subprocess (``window
--check``), the real backend for the loads."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from app.core import settings_file
from app.engine.config import EngineConfig, SamplingParams
from app.engine.sampling import Sampler
from app.engine.speculative import SpeculativeDecoder
from app.gguftools.builtin_demo import ensure_demo_model, table_prompt
from app.gguftools.demo_model import DemoModel
from app.gui.shell import window_state
from app.settings import app_settings
from tests.helpers.module_folders import ModuleFolders


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _dev_zero(path: Path) -> None:
    path.symlink_to("/dev/zero")


def _text(text: str) -> Callable[[Path], None]:
    return lambda path: path.write_text(text, encoding="utf-8")


DAMAGED_WINDOW_STATES = {
    "non-ASCII geometry": _text(json.dumps({"geometry": "AdnQyw\u00e9AAwAA"})),
    "non-ASCII splitter": _text(json.dumps({"splitter": "\u2603\u2603"})),
    "chat id 10**23": _text(json.dumps({"history": "x", "conversation": 10**23})),
    "a FIFO": _fifo,
    "a link to /dev/zero": _dev_zero,
}


@pytest.mark.parametrize("damage", list(DAMAGED_WINDOW_STATES))
def test_a_damaged_window_state_lets_the_window_start_and_is_set_aside(tmp_path: Path, damage: str) -> None:
    config = tmp_path / "config"
    config.mkdir()
    state = config / "window-state.json"
    DAMAGED_WINDOW_STATES[damage](state)
    env = {**os.environ, "FASTMTP_CONFIG_DIR": str(config), "FASTMTP_DATA_DIR": str(tmp_path / "data"),
           "FASTMTP_CACHE_DIR": str(tmp_path / "cache"), "QT_QPA_PLATFORM": "offscreen"}
    done = subprocess.run([sys.executable, "-m", "app", "window", "--check"], capture_output=True, text=True,
                          env=env, timeout=180)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["window"] == "shown"
    assert "Traceback" not in done.stderr
    bad = config / "window-state.json.bad"
    assert bad.exists() or bad.is_symlink()
    if damage == "a FIFO":
        assert bad.is_fifo()
    elif damage == "a link to /dev/zero":
        assert bad.is_symlink()


def test_window_state_keeps_good_values_and_refuses_what_qt_or_sqlite_could_not_take(tmp_path: Path) -> None:
    path = tmp_path / "window-state.json"
    path.write_text(json.dumps({"geometry": "AdnQywADAAA=", "hud_corner": "bottom-left", "conversation": 7}))
    state = window_state.load(path)
    assert (state.geometry, state.hud_corner, state.conversation) == ("AdnQywADAAA=", "bottom-left", 7)
    assert path.exists()
    path.write_text(json.dumps({"hud_collapsed": 1, "geometry": "not base64!", "hud_corner": "bottom-left"}))
    state = window_state.load(path)  # a wrong type is that field's default; ASCII Qt ignores where not base64
    assert (state.hud_collapsed, state.geometry, state.hud_corner) == (False, "not base64!", "bottom-left")
    for bad in ({"conversation": -1}, {"conversation": 2**63}, {"splitter": "caf\u00e9"}, {"geometry": "A" * 70_000}):
        path.write_text(json.dumps(bad))
        assert window_state.load(path) == window_state.WindowState()
        assert not path.exists() and json.loads(path.with_name("window-state.json.bad").read_text()) == bad


def test_the_helper_refuses_what_is_not_a_small_regular_json_object(tmp_path: Path,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    cases: dict[str, Callable[[Path], None]] = {
        "fifo": _fifo, "zero": _dev_zero, "inf": _text('{"a": 1e999}'), "nan": _text('{"a": NaN}'),
        "list": _text("[1]"), "big": _text('{"a": "' + "x" * (settings_file.MAX_BYTES + 1) + '"}'),
        "folder": lambda p: p.mkdir(),
    }
    for name, make in cases.items():
        path = tmp_path / f"{name}.json"
        make(path)
        with caplog.at_level(logging.WARNING, logger="app.core.settings_file"):
            data, reason = settings_file.check_state(path)
        assert data is None and reason, name
        assert not os.path.lexists(path) and os.path.lexists(tmp_path / f"{name}.json.bad"), name
        assert f"{name}.json.bad" in caplog.text
    assert settings_file.check_state(tmp_path / "missing.json") == (None, None)


def test_damaged_settings_are_set_aside_and_the_defaults_used(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    os.mkfifo(path)
    assert app_settings.load(path) == app_settings.Settings()
    assert (tmp_path / "settings.json.bad").is_fifo()


# ------------------------------------------------------------------ on the real backend

@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders) -> DemoModel:
    return ensure_demo_model(module_tmp.mktemp("state-demo"), size="tiny", acceptance=0.9, seed=4, language="words")


@pytest.mark.usefixtures("patched_backend")
def test_a_damaged_depth_memory_record_lets_adaptive_generation_load_and_is_set_aside(demo: DemoModel,
                                                                                      tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    # one thread set: records are kept per thread count, and a default that followed the machine's load from one
    # decoder to the next read another record (this one was then never read, so never set aside)
    config = EngineConfig(demo.target, mode="sidecar", draft=demo.sidecar_d2t, adaptive=True, n_ctx=512,
                          depth_memory=memory, n_threads=1)
    first = SpeculativeDecoder(config)
    first.generate(table_prompt(demo), 16, Sampler(SamplingParams()))
    first.close()
    record = next(memory.glob("*.depth.json"))
    good = json.loads(record.read_text())
    damages: dict[str, Callable[[Path], None]] = {
        "current 1e999": _text(json.dumps(good).replace('"current": ', '"current": 1e999, "was": ')),
        "a link to /dev/zero": _dev_zero, "a FIFO": _fifo,
    }
    for name, make in damages.items():
        record.unlink()
        make(record)
        decoder = SpeculativeDecoder(replace(config))
        try:
            assert decoder.adaptive is not None and not decoder.adaptive.warm, name
            assert decoder.generate(table_prompt(demo), 8, Sampler(SamplingParams())).tokens, name
        finally:
            decoder.close()
        bad = record.with_name(record.name + ".bad")
        assert os.path.lexists(bad), name
        bad.unlink()
