"""App settings and per-chat settings: JSON round trips, damaged files, old chats."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from app.core import defaults
from app.settings import app_settings
from app.settings.app_settings import Settings
from app.settings.chat_settings import CUSTOM, PRESETS, ChatSettings


def test_settings_round_trip_in_the_config_folder(tmp_path: Path, monkeypatch: object) -> None:
    assert app_settings.settings_path().parent.exists()  # the config folder (FASTMTP_CONFIG_DIR in tests)
    path = tmp_path / "settings.json"
    assert app_settings.load(path) == Settings()  # nothing saved yet: defaults
    wanted = Settings(models_dir=str(tmp_path / "models"), context_size=8192, gpu_layers=20, threads=6,
                      draft_depth=4, adaptive_depth=False, p_min=0.3, theme="dark")
    app_settings.save(wanted, path)
    assert app_settings.load(path) == wanted
    assert app_settings.load(path).models_path() == tmp_path / "models"
    assert app_settings.engine_fields(wanted) == {"n_ctx": 8192, "n_gpu_layers": 20, "n_threads": 6, "draft_depth": 4,
                                                  "adaptive": False, "p_min": 0.3,
                                                  "state_cache_dir": app_settings.paths.chat_states_dir(),
                                                  "state_cache_bytes": wanted.state_cache_mb * 1024 * 1024}
    # with adaptive depth, what it learns about a model is kept for the model's next load
    assert app_settings.engine_fields(replace(wanted, adaptive_depth=True))["depth_memory"] == \
        app_settings.paths.depth_memory_dir()


def test_a_damaged_or_foreign_settings_file_gives_defaults_where_it_is_wrong(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text("{not json")
    assert app_settings.load(path) == Settings()
    path.write_text(json.dumps({"context_size": "big", "theme": "purple", "draft_depth": 99, "p_min": 1,
                                "unknown": True, "adaptive_depth": 1}))
    loaded = app_settings.load(path)
    assert loaded.context_size == Settings().context_size and loaded.theme == "system" and loaded.draft_depth == 8
    assert loaded.p_min == 1.0 and loaded.adaptive_depth is Settings().adaptive_depth  # 1 is not a bool


def test_the_context_is_auto_by_default_and_a_users_own_value_is_kept(tmp_path: Path) -> None:
    """Issue 34: 0 is Auto (the largest that fits, worked out per model); an older file's number is the user's."""
    path = tmp_path / "settings.json"
    assert Settings().context_size == defaults.CONTEXT_AUTO == 0
    path.write_text(json.dumps({"theme": "dark"}))  # an older file without the key: Auto
    assert app_settings.load(path).context_size == defaults.CONTEXT_AUTO
    path.write_text(json.dumps({"context_size": 4096}))  # the old default, written by an older app: kept
    assert app_settings.load(path).context_size == 4096
    app_settings.save(Settings(), path)
    assert json.loads(path.read_text())["context_size"] == 0 and app_settings.load(path) == Settings()
    assert app_settings.engine_fields(Settings())["n_ctx"] == defaults.CONTEXT_AUTO  # resolved per model file


@pytest.mark.parametrize(("stored", "loaded"), [
    (-5, defaults.CONTEXT_AUTO), (0, defaults.CONTEXT_AUTO), (100, defaults.CONTEXT_MIN), (8192, 8192),
    (10**30, defaults.CONTEXT_MAX), (2**63, defaults.CONTEXT_MAX), (4096.0, defaults.CONTEXT_AUTO),
    ("32768", defaults.CONTEXT_AUTO), (True, defaults.CONTEXT_AUTO), (None, defaults.CONTEXT_AUTO),
])
def test_a_stored_context_is_range_checked(tmp_path: Path, stored: object, loaded: int) -> None:
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"context_size": stored}))
    assert app_settings.load(path).context_size == loaded
    assert Settings(context_size=loaded).validated().context_size == loaded


def test_the_fit_advice_sizes_for_the_users_context_or_the_fit_default() -> None:
    assert app_settings.fit_context(Settings()) == defaults.FIT_CONTEXT
    assert app_settings.fit_context(Settings(context_size=8192)) == 8192


def test_chat_settings_make_the_engine_options_and_survive_the_history_format() -> None:
    chat = ChatSettings(preset="Concise", system_prompt=PRESETS["Concise"], thinking=False, temperature=0.2,
                        top_k=20, top_p=0.8, min_p=0.1, repeat_penalty=1.1, seed=7, max_tokens=99)
    options = chat.options()
    assert options.thinking is False and options.max_tokens == 99
    assert (options.sampling.temperature, options.sampling.top_k, options.sampling.seed) == (0.2, 20, 7)
    stored = json.loads(json.dumps(chat.to_dict()))
    assert "system_prompt" not in stored
    assert ChatSettings.from_conversation(chat.system_prompt, stored) == chat
    old = ChatSettings.from_conversation("Talk like a pirate.", {"temperature": "hot"})
    assert old.preset == CUSTOM and old.temperature == ChatSettings().temperature


def test_downloads_go_to_the_models_folder_chosen_in_settings(tmp_path: Path) -> None:
    from app.models.installed import default_destination

    saved = app_settings.load()
    try:
        assert default_destination("Owner/Model").parent == app_settings.load().models_path()
        app_settings.save(Settings(models_dir=str(tmp_path / "big-disk")))
        assert default_destination("Owner/Model") == tmp_path / "big-disk" / "Owner--Model"
    finally:
        app_settings.save(saved)
