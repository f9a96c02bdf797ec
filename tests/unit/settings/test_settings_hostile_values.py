"""Issue 37 item 2: settings of the right type and the wrong size are set aside or clamped, never a crash.

Real files in a private config folder; Qt-free (the window itself: tests/unit/gui/chat/test_hostile_values_window.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.settings import app_settings
from app.settings.chat_settings import RANGES, ChatSettings


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FASTMTP_CONFIG_DIR", str(tmp_path / "config"))
    (tmp_path / "config").mkdir()


def write_settings(**values: object) -> None:
    app_settings.settings_path().write_text(json.dumps(values))


@pytest.mark.parametrize(("name", "value", "expected"), [
    ("gpu_layers", 10**10, app_settings.GPU_LAYERS_MAX), ("gpu_layers", -10**30, -1),
    ("threads", 3 * 10**9, app_settings.THREADS_MAX), ("threads", -5, 0),
    ("p_min", 10**400, 0.0), ("p_min", -(10**400), 0.0), ("context_size", 10**50, 262_144),
    ("serve_port", 10**20, 65_535), ("state_cache_mb", 10**30, app_settings.STATE_CACHE_MB_MAX)])
def test_settings_json_numbers_are_clamped_to_what_their_consumer_takes(name: str, value: object,
                                                                        expected: object) -> None:
    default = getattr(app_settings.Settings(), name)
    write_settings(**{name: value})
    loaded = getattr(app_settings.load(), name)
    assert loaded == (default if name == "p_min" else expected)
    assert abs(loaded) < 2**31  # fits Qt's int (a QSpinBox) and llama.cpp's int32 counts


def test_a_400_digit_p_min_takes_its_default_and_the_rest_is_kept() -> None:
    write_settings(p_min=10**400, threads=4)
    loaded = app_settings.load()
    assert loaded.p_min == app_settings.Settings().p_min and loaded.threads == 4


@pytest.mark.parametrize("value", [10**401, -(10**401), 1e308, float("nan"), float("inf"), 3.5, -1, True, "0.7"])
def test_a_chats_temperature_out_of_range_or_not_finite_takes_the_default(value: object) -> None:
    chat = ChatSettings.from_conversation("", {"temperature": value, "top_k": 4})
    assert chat.temperature == ChatSettings().temperature and chat.top_k == 4


@pytest.mark.parametrize("name", sorted(RANGES))
def test_every_number_of_a_chat_is_kept_only_inside_the_dialogs_range(name: str) -> None:
    low, high = RANGES[name]
    default = getattr(ChatSettings(), name)
    kind = type(default)
    for outside in (kind(high) + 1, kind(low) - 1, 10**400, -(10**400)):
        assert getattr(ChatSettings.from_conversation("", {name: outside}), name) == default, outside
    for inside in (kind(low), kind(high)):
        assert getattr(ChatSettings.from_conversation("", {name: inside, "seed_mode": "fixed"}), name) == inside
