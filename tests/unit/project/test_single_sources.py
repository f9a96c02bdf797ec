"""One home per rule: the draft-depth range, the chat's sampling defaults, the break-even model and the
settings-file loader are each defined once, and every place that uses them agrees with that one definition."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from app.bench import spec
from app.core import defaults, settings_file
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
    assert (page.context_size.minimum(), page.context_size.maximum()) == (defaults.CONTEXT_AUTO, defaults.CONTEXT_MAX)


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


# ------------------------------------------------------------------------------------------ the defaults

APP = ROOT / "app"
DEFAULTS_FILE = APP / "core" / "defaults.py"

# Each default whose number must be written only in ``app/core/defaults.py``; the pattern finds the number as a
# value in code. A port written inside an example URL (``https://gpu-box.example:8080``) is help text, not a
# default: ``(?<!:)`` skips it.
SINGLE_LITERALS = {
    "context size": (r"(?<![\w.:])4096(?![\w.])", defaults.CONTEXT_SIZE),
    "llama-server port": (r"(?<![\w.:])8080(?![\w.])", defaults.SERVER_PORT),
    "RPC port": (r"(?<![\w.:])50052(?![\w.])", defaults.RPC_PORT),
}
# Where one of those numbers is written on purpose, each with its reason (path relative to the repository):
ALLOWED: dict[tuple[str, str], str] = {
    # The Benchmark page's tokens-per-prompt ceiling (its runs load their own small context), not a context size.
    ("context size", "app/gui/benchmark/benchmark_page.py"): "the tokens-per-prompt ceiling",
    # The scaled demo's d2t draft vocabulary (rows of its trimmed head), not a context size.
    ("context size", "app/gguftools/demo_model.py"): "the scaled demo's draft vocabulary",
}


def _writes(pattern: str, under: Path = APP) -> list[str]:
    """Files under ``under`` (but the defaults module) that write ``pattern``."""
    found = []
    for path in sorted(under.rglob("*.py")):
        if path != DEFAULTS_FILE and re.search(pattern, path.read_text(encoding="utf-8")):
            found.append(path.relative_to(ROOT).as_posix())
    return found


@pytest.mark.parametrize("name", sorted(SINGLE_LITERALS))
def test_each_default_is_written_only_in_core_defaults(name: str) -> None:
    pattern, value = SINGLE_LITERALS[name]
    assert re.search(pattern, f"x = {value}")  # the pattern finds the value
    stray = [p for p in _writes(pattern) if (name, p) not in ALLOWED]
    assert stray == [], f"{name}: write app.core.defaults' value instead"


def test_no_chat_starts_with_a_cap_of_its_own() -> None:
    """The window's and the settings' chats start from the declared cap (``ChatSettings()``); the chat page once
    wrote 256 of its own. (1024 itself cannot be grepped for: it is also every KiB. The benchmarks pass the
    reply length they measure, on purpose, and so does the screenshot script, whose long-chat pictures need a
    reply cut by its cap to show Continue.)"""
    scripted = {"app/gui/screenshots.py"}
    for folder in (APP / "gui", APP / "settings"):
        assert [p for p in _writes(r"ChatSettings\([^)]*max_tokens\s*=", folder) if p not in scripted] == []


def test_the_allow_list_names_only_files_that_still_write_the_number() -> None:
    for (name, path), _reason in ALLOWED.items():
        assert path in _writes(SINGLE_LITERALS[name][0]), f"{path} no longer needs its exception for {name}"


def test_the_names_modules_keep_are_the_defaults_themselves() -> None:
    """The RPC worker's port and the sidecar builder's draft vocabulary are read from core/defaults, not copied."""
    import inspect

    from app.backend import rpc
    from app.gguftools import sidecar

    assert rpc.DEFAULT_PORT == defaults.RPC_PORT
    assert inspect.signature(sidecar.build_sidecar).parameters["vocab_size"].default == defaults.DRAFT_VOCAB


def test_the_records_and_settings_start_from_the_defaults() -> None:
    from app.engine.config import ChatOptions, SamplingParams
    from app.machines.serve import DEFAULT_PORT, ServePlan
    from app.models.sidecar_job import VOCAB_SIZES

    settings = app_settings.Settings()
    assert EngineConfig(Path("x")).n_ctx == ServePlan(Path("x")).ctx_size == defaults.CONTEXT_SIZE
    assert settings.context_size == defaults.CONTEXT_AUTO  # Auto: worked out per model on this machine
    assert settings.serve_port == DEFAULT_PORT == ServePlan(Path("x")).port == defaults.SERVER_PORT
    assert (DRAFT_DEPTH_MIN, DRAFT_DEPTH_MAX, DEFAULT_DRAFT_DEPTH) == (
        defaults.DRAFT_DEPTH_MIN, defaults.DRAFT_DEPTH_MAX, defaults.DRAFT_DEPTH)
    assert CHAT_MAX_TOKENS == defaults.CHAT_MAX_TOKENS and ChatOptions().max_tokens == defaults.ENGINE_MAX_TOKENS
    assert VOCAB_SIZES == defaults.DRAFT_VOCAB_SIZES
    greedy = SamplingParams()
    assert (greedy.temperature, CHAT_SAMPLING.temperature) == (defaults.GREEDY_TEMPERATURE, defaults.CHAT_TEMPERATURE)
    for sampling in (greedy, CHAT_SAMPLING):
        assert (sampling.top_k, sampling.top_p, sampling.min_p, sampling.repeat_penalty, sampling.repeat_last_n) == (
            defaults.TOP_K, defaults.TOP_P, defaults.MIN_P, defaults.REPEAT_PENALTY, defaults.REPEAT_LAST_N)


def test_the_cli_flags_default_to_the_defaults() -> None:
    from app.cli import build_parser

    parser = build_parser()
    serve = parser.parse_args(["serve"])
    assert (serve.port, serve.ctx) == (defaults.SERVER_PORT, defaults.CONTEXT_SIZE)
    for command in (["generate", "--prompt", "hi"], ["chat"]):  # Auto: the largest context that fits the model here
        assert parser.parse_args([*command, "--model", "m.gguf"]).ctx == defaults.CONTEXT_AUTO
    assert parser.parse_args(["fit"]).context == defaults.FIT_CONTEXT
    assert parser.parse_args(["context", "--model", "m.gguf"]).ctx == defaults.CONTEXT_AUTO
    assert parser.parse_args(["rpc-worker"]).port == defaults.RPC_PORT


def test_the_windows_new_chat_starts_with_the_declared_max_tokens(qtbot: QtBot, tmp_path: Path) -> None:
    """The chat page used to start its chats at 256 tokens while the declared default was 1024."""
    from PySide6.QtWidgets import QWidget

    from app.chats.history import HistoryStore
    from app.gui.chat.chat_page import ChatPage
    from app.gui.shell.engine_bridge import EngineBridge

    bridge = EngineBridge()  # no engine process starts until a model is loaded
    history = HistoryStore(tmp_path / "history.db")
    try:
        page = ChatPage(bridge, history, QWidget())
        qtbot.addWidget(page)
        assert page.chat_settings.max_tokens == CHAT_MAX_TOKENS == defaults.CHAT_MAX_TOKENS
        assert page.options.max_tokens == CHAT_MAX_TOKENS
        assert page.chat_settings == ChatSettings()
    finally:
        bridge.close()
        history.close()


def test_the_defaults_module_imports_nothing() -> None:
    """Every layer reads it, the engine's native-free records included: it must not pull anything in."""
    source = DEFAULTS_FILE.read_text(encoding="utf-8")
    assert re.findall(r"^\s*(?:from|import) (\S+)", source, re.M) == ["__future__"]
