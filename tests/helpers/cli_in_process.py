"""``python -m app ARGS`` in this process, for the fuzz tests: the exit code and everything it printed; and the
parser of one command, for tests of its options and help."""

from __future__ import annotations

import argparse

import pytest

from app.cli import build_parser, main


def command_parser(*names: str) -> argparse.ArgumentParser:
    """The parser of ``python -m app NAMES`` (``"bench", "window"``), as the command line builds it."""
    parser = build_parser()
    for name in names:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[name]
    return parser


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str, allow_success: bool = True) -> tuple[int, str]:
    """Run the CLI; any exception but argparse's SystemExit (a traceback a user would see) fails the test.

    The run must end in words: exit 1-4 (or 0 when ``allow_success``) with no traceback printed."""
    try:
        code = main(list(argv))
    except SystemExit as exit_:  # argparse's refusal of an argument: exit 2 with its words
        code = exit_.code if isinstance(exit_.code, int) else 2
    out = capsys.readouterr()
    text = out.out + out.err
    lowest = 0 if allow_success else 1
    assert lowest <= code <= 4 and "Traceback" not in text, (argv, code, text[-2000:])
    if code:
        assert text.strip(), (argv, code)  # a refusal says what went wrong
    return code, text
