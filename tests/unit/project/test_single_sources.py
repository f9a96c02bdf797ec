"""One home per rule: the draft-depth range, the chat's sampling defaults, the break-even model and the
settings-file loader are each defined once, and every place that uses them agrees with that one definition."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

import json
import subprocess
import sys
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from app.bench import spec
from app.core import settings_file
from app.core.errors import EngineError
from app.engine import breakeven, verdict
from app.engine.config import (
    CHAT_MAX_TOKENS,
    CHAT_SAMPLING,
    DEFAULT_DRAFT_DEPTH,
    DRAFT_DEPTH_MAX,
    DRAFT_DEPTH_MIN,
    EngineConfig,
)
from app.gui.chat import hud
from app.gui.chat.chat_settings_dialog import ChatSettingsDialog
from app.gui.settings.settings_page import SettingsPage
from app.settings import app_settings
from app.settings.chat_settings import ChatSettings

ROOT = Path(__file__).resolve().parents[3]

# ------------------------------------------------------------------------------------------ the draft-depth range


def test_the_settings_clamp_to_the_draft_depth_range(tmp_path: Path) -> None:
    assert app_settings.Settings().draft_depth == DEFAULT_DRAFT_DEPTH
    assert app_settings.Settings(draft_depth=DRAFT_DEPTH_MIN - 1).validated().draft_depth == DRAFT_DEPTH_MIN
    assert app_settings.Settings(draft_depth=DRAFT_DEPTH_MAX + 1).validated().draft_depth == DRAFT_DEPTH_MAX
    file = tmp_path / "settings.json"
    file.write_text(json.dumps({"draft_depth": 1000}))
    assert app_settings.load(file).draft_depth == DRAFT_DEPTH_MAX


def test_the_settings_page_offers_the_draft_depth_range(qtbot: QtBot) -> None:
    page = SettingsPage(app_settings.Settings())
    qtbot.addWidget(page)
    assert (page.draft_depth.minimum(), page.draft_depth.maximum()) == (DRAFT_DEPTH_MIN, DRAFT_DEPTH_MAX)


@pytest.mark.parametrize("depth", [DRAFT_DEPTH_MIN - 1, DRAFT_DEPTH_MAX + 1])
def test_the_decoder_refuses_a_depth_outside_the_range_before_loading_anything(depth: int) -> None:
    from app.engine.speculative import SpeculativeDecoder

    with pytest.raises(EngineError, match=f"from {DRAFT_DEPTH_MIN} to {DRAFT_DEPTH_MAX}"):
        SpeculativeDecoder(EngineConfig(Path("x"), draft_depth=depth))  # "x" does not exist: nothing was loaded


# ------------------------------------------------------------------------------------------ the sampling defaults


def test_a_new_chat_samples_with_the_chat_defaults() -> None:
    chat = ChatSettings()
    sampling = chat.options().sampling
    for knob in ("temperature", "top_k", "top_p", "min_p", "repeat_penalty", "repeat_last_n"):
        assert getattr(sampling, knob) == getattr(CHAT_SAMPLING, knob), knob
    assert chat.max_tokens == CHAT_MAX_TOKENS


def test_the_dialog_on_default_settings_shows_the_chat_defaults(qtbot: QtBot) -> None:
    dialog = ChatSettingsDialog(ChatSettings())
    qtbot.addWidget(dialog)
    assert dialog.temperature.value() == pytest.approx(CHAT_SAMPLING.temperature)
    assert dialog.top_k.value() == CHAT_SAMPLING.top_k
    assert dialog.top_p.value() == pytest.approx(CHAT_SAMPLING.top_p)
    assert dialog.min_p.value() == pytest.approx(CHAT_SAMPLING.min_p)
    assert dialog.repeat_penalty.value() == pytest.approx(CHAT_SAMPLING.repeat_penalty)
    assert dialog.max_tokens.value() == CHAT_MAX_TOKENS


# ------------------------------------------------------------------------------------------ the break-even model


def test_the_break_even_model_loads_no_qt() -> None:
    code = "import sys, app.engine.breakeven; print(sorted(m for m in sys.modules if m.startswith('PySide6')))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_the_hud_and_bench_spec_use_the_one_formula() -> None:
    assert vars(spec)["expected_tokens_per_pass"] is breakeven.expected_tokens_per_pass  # imported, not copied
    assert hud.describe_mode is breakeven.describe_mode  # what the HUD itself uses
    for name in ("SampleLog", "condition_for", "mode_name"):  # its verdict: the same rules as quickstart's
        assert getattr(hud, name) is getattr(verdict, name), name
    assert breakeven.expected_tokens_per_pass(0.5, 2) == pytest.approx(1.75)  # 1 + 0.5 + 0.25
    assert breakeven.expected_tokens_per_pass(1.0, 3) == 4.0
    assert breakeven.expected_tokens_per_pass(0.0, 3) == 1.0
    even = breakeven.break_even_acceptance(0.5, 3)  # half the time drafting: a pass must yield 2 tokens
    assert even is not None and breakeven.expected_tokens_per_pass(even, 3) == pytest.approx(2.0, abs=1e-6)


def test_a_cli_holding_reply_stats_gets_the_windows_warning() -> None:
    from app.engine.stats import ReplyStats

    config = EngineConfig(Path("target.gguf"), mode="embedded", draft_depth=3)
    stats = ReplyStats(generated=40, decode_seconds=1.0)
    expected = breakeven.drafting_warning(config, stats.to_dict())
    assert expected is not None and "no tokens were drafted" in expected
    assert breakeven.reply_warning(config, stats.to_dict()) == expected
    assert breakeven.reply_warning(EngineConfig(Path("target.gguf")), stats.to_dict()) is None  # drafting off


# ------------------------------------------------------------------------------------------ the settings-file loader


def test_a_missing_settings_file_reads_as_none(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "settings.json"
    assert settings_file.read_json(missing) is None
    assert settings_file.load_json(missing) is None
    assert settings_file.load_json_object(missing) is None


@pytest.mark.parametrize("text", ["{not json", '{"x":' * 200_000 + "1" + "}" * 200_000, "\udcff"])
def test_a_damaged_settings_file_is_named_or_read_as_missing_and_set_aside(tmp_path: Path, text: str) -> None:
    file = tmp_path / "settings.json"
    file.write_bytes(text.encode("utf-8", "surrogateescape"))
    before = file.read_bytes()
    with pytest.raises(settings_file.DamagedFile):
        settings_file.read_json(file)
    assert settings_file.load_json(file) is None
    assert file.read_bytes() == before
    assert app_settings.load(file) == app_settings.Settings()
    assert not file.exists() and (tmp_path / "settings.json.bad").read_bytes() == before  # kept for a person


def test_a_folder_in_place_of_the_file_is_damaged(tmp_path: Path) -> None:
    (tmp_path / "settings.json").mkdir()
    with pytest.raises(settings_file.DamagedFile):
        settings_file.read_json(tmp_path / "settings.json")


def test_only_an_object_is_a_settings_object(tmp_path: Path) -> None:
    file = tmp_path / "state.json"
    file.write_text("[1, 2]")
    assert settings_file.load_json(file) == [1, 2]
    assert settings_file.load_json_object(file) is None


def test_writing_is_atomic_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    file = tmp_path / "settings.json"
    file.write_text('{"old": true}')
    settings_file.write_json(file, {"new": [1, 2]})
    assert settings_file.read_json(file) == {"new": [1, 2]}
    assert file.read_text().endswith("\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["settings.json"]


def test_a_failed_write_keeps_the_old_file_and_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "settings.json"
    target.mkdir()  # a non-empty folder where the file should go: the rename over it fails
    (target / "keep").write_text("kept")
    with pytest.raises(OSError):
        settings_file.write_json(target, {"new": 1})
    assert (target / "keep").read_text() == "kept"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["settings.json"]
