"""The CLI as a package (issue 16): one module per command group, one output helper, no import cycle, and the
engine options' defaults taken from app/engine/config.py (so chat in the terminal starts like chat in the window)."""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from app.cli import build_parser
from app.cli.common import emit, emit_line, reply_options
from app.engine.config import (
    CHAT_MAX_TOKENS,
    CHAT_SAMPLING,
    DEFAULT_DRAFT_DEPTH,
    DRAFT_DEPTH_MAX,
    DRAFT_DEPTH_MIN,
    MODES,
    SamplingParams,
)

ROOT = Path(__file__).resolve().parents[3]
CLI = ROOT / "app" / "cli"
GROUPS = sorted(p.stem for p in CLI.glob("*.py") if p.stem not in ("__init__", "common"))
COMMANDS = ["window", "backend", "gpu-check", "gpu-prepare", "gguf", "sidecar", "models", "fit", "context", "token",
            "mirror", "quickstart", "demo-model", "generate", "chat", "depth-memory", "state-cache", "history", "bench",
            "fetch", "verify", "trust", "release", "update", "remote", "serve", "rpc-worker"]


def test_the_groups_are_the_ones_a_reader_looks_for() -> None:
    assert {"backend", "bench", "engine", "gguf", "history", "models", "release", "remote"} <= set(GROUPS)


@pytest.mark.parametrize("group", GROUPS)
def test_each_group_module_imports_alone(group: str) -> None:
    done = subprocess.run([sys.executable, "-c", f"import app.cli.{group}"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("path", sorted(CLI.glob("*.py")), ids=lambda p: p.name)
def test_groups_import_only_common_and_only_common_reads_json(path: Path) -> None:
    """Module-level imports inside app/cli go one way: the entry point to the groups, the groups to common."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported = {node.module for node in tree.body if isinstance(node, ast.ImportFrom) and node.module}
    imported |= {alias.name for node in tree.body if isinstance(node, ast.Import) for alias in node.names}
    inside = {name for name in imported if name == "app.cli" or name.startswith("app.cli.")}
    if path.stem == "common":
        assert inside == set()
    elif path.stem != "__init__":
        assert inside <= {"app.cli.common"}, inside
        source = path.read_text(encoding="utf-8")
        assert not re.search(r"\bargs\.json\b|\.json:|getattr\(args, \"json\"", source), "use common.emit / for_people"


def test_help_lists_every_command() -> None:
    done = subprocess.run([sys.executable, "-m", "app", "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    listed = re.search(r"\{([a-z,-]+)\}", done.stdout)
    assert listed is not None and listed.group(1).split(",") == COMMANDS


def test_generate_is_greedy_and_chat_starts_like_the_window() -> None:
    parser = build_parser()
    generate = parser.parse_args(["generate", "--prompt", "Hi"])
    chat = parser.parse_args(["chat"])
    greedy = SamplingParams()
    for args, sampling in ((generate, greedy), (chat, CHAT_SAMPLING)):
        assert args.draft_depth == DEFAULT_DRAFT_DEPTH and args.mtp == MODES[0]
        assert (args.temp, args.top_k, args.top_p, args.min_p, args.repeat_penalty) == (
            sampling.temperature, sampling.top_k, sampling.top_p, sampling.min_p, sampling.repeat_penalty)
    assert generate.temp == 0 and generate.seed == greedy.seed and generate.max_tokens == 256
    assert chat.temp == CHAT_SAMPLING.temperature > 0 and chat.max_tokens == CHAT_MAX_TOKENS and chat.seed is None
    serve = parser.parse_args(["serve"])
    assert serve.draft_depth == DEFAULT_DRAFT_DEPTH


@pytest.mark.parametrize("depth", [str(DRAFT_DEPTH_MAX + 1), str(DRAFT_DEPTH_MIN - 1), "three"])
def test_a_draft_depth_out_of_range_is_a_usage_error_naming_the_range(depth: str,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["generate", "--prompt", "Hi", "--n-max", depth], ["chat", "--n-max", depth],
                 ["serve", "--n-max", depth]):
        with pytest.raises(SystemExit) as stopped:
            build_parser().parse_args(argv)
        assert stopped.value.code == 2
        assert f"from {DRAFT_DEPTH_MIN} to {DRAFT_DEPTH_MAX}" in capsys.readouterr().err


def test_n_max_9_exits_2_from_the_command_line() -> None:
    done = subprocess.run([sys.executable, "-m", "app", "generate", "--prompt", "Hi", "--n-max", "9"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2
    assert "--n-max" in done.stderr and f"from {DRAFT_DEPTH_MIN} to {DRAFT_DEPTH_MAX}" in done.stderr


def test_chat_seeds_each_reply_as_the_window_does() -> None:
    from app.cli.common import chat_options

    parser = build_parser()
    drawn = parser.parse_args(["chat"])
    seeds = {reply_options(drawn, chat_options(drawn)).sampling.seed for _ in range(5)}
    assert len(seeds) > 1  # a fresh seed per reply at temperature 0.7
    fixed = parser.parse_args(["chat", "--seed", "42"])
    assert {reply_options(fixed, chat_options(fixed)).sampling.seed for _ in range(3)} == {42}
    greedy = parser.parse_args(["chat", "--temp", "0"])
    assert {reply_options(greedy, chat_options(greedy)).sampling.seed for _ in range(3)} == {SamplingParams().seed}


def test_the_output_helper_prints_json_or_text(capsys: pytest.CaptureFixture[str]) -> None:
    people, script = argparse.Namespace(json=False), argparse.Namespace(json=True)
    emit(people, {"a": 1}, "text for people")
    emit(script, {"a": 1}, lambda: pytest.fail("text is not made for --json"))
    emit(script, {"a": 1}, None, compact=True)
    emit_line(people, {"kind": "step"}, "a step")
    emit_line(script, {"kind": "step"}, "a step")
    out, err = capsys.readouterr()
    assert out == 'text for people\n{\n  "a": 1\n}\n{"a": 1}\n{"kind": "step"}\n'
    assert err == "a step\n"
