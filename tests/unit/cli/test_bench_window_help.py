"""``bench window --help`` states its real defaults (issue 36 item 9): every option with a default names it, the
reply length is not called "the chat's default" (the chat has no cap by default), and the defaults named are the
ones the parser and ``bench.window.run`` use."""

from __future__ import annotations

import inspect

from app.bench import window
from app.core import defaults
from tests.helpers.cli_in_process import command_parser


def test_the_help_names_the_defaults_it_runs_with() -> None:
    parser = command_parser("bench", "window")
    text = parser.format_help()
    options = {a.dest: a for a in parser._actions}
    for dest in ("size", "mode", "depth", "tokens", "runs", "turns"):
        assert f"(default: {options[dest].default}" in " ".join(text.split()), dest
    assert "the chat's default)" not in text  # 256 is not the chat's cap: it has none
    assert defaults.CHAT_MAX_TOKENS == 0 and "no cap by default" in " ".join(text.split())
    assert "automatic" in (options["threads"].help or "")
    run = inspect.signature(window.run).parameters
    assert run["warmup"].default == 1 and "one warm-up reply each" in (options["runs"].help or "")
    assert options["runs"].default == run["samples"].default and options["tokens"].default == run["max_tokens"].default
    assert options["turns"].default == run["turns"].default
