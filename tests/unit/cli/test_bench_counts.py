"""The benchmarks' counts from the command line (runs, tokens, turns, threads, depths ...) are whole numbers in a range
that makes sense: a run count of 0 once reached numpy and ended in a traceback. Every whole-number option of every
``bench`` command and of ``gpu-check`` refuses 0 (where 0 means nothing), a negative number and a number past any
range in words with exit 2 while the arguments are read (so before anything loads); and its own default passes its
own check."""

from __future__ import annotations

import argparse

import pytest

from app.cli import build_parser

PARSER = build_parser()  # once: building it takes a quarter of a second, and parsing leaves it as it was
# 0 means something here: the automatic choice, or none
ZERO_MEANS_SOMETHING = {"--threads", "--gpu-layers", "--decode-tokens", "--busy-cores", "--adaptive-max", "--context"}


def _commands() -> list[tuple[list[str], argparse.ArgumentParser]]:
    """``bench X`` for every X, and ``gpu-check``: their argv prefix and parser."""
    found: list[tuple[list[str], argparse.ArgumentParser]] = []

    def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                return dict(action.choices)
        return {}

    top = subparsers(PARSER)
    for name, parser in subparsers(top["bench"]).items():
        found.append((["bench", name], parser))
    found.append((["gpu-check", "--out", "unused"], top["gpu-check"]))
    return found


def _number_options(parser: argparse.ArgumentParser, kind: type) -> list[argparse.Action]:
    """The options that take one number of ``kind`` (their ``type`` turns "1" into 1 or 1.0, or, for a share below
    one, "0.5" into 0.5)."""
    options = []
    for action in parser._actions:
        if not action.option_strings or action.type is None or action.nargs not in (None, 1):
            continue
        for text in ("1", "0.5"):
            try:
                if type(action.type(text)) is kind:  # type: ignore[operator]
                    options.append(action)
                break
            except (argparse.ArgumentTypeError, ValueError, TypeError):
                continue
    return options


PREFIXED = _commands()
COMMANDS = [(" ".join(prefix), parser) for prefix, parser in PREFIXED]
CASES = [(prefix, action.option_strings[-1]) for prefix, parser in PREFIXED for action in _number_options(parser, int)]
REAL_CASES = [(prefix, action.option_strings[-1]) for prefix, parser in PREFIXED
              for action in _number_options(parser, float)]


def test_every_benchmark_has_number_options_to_check() -> None:
    flags = {flag for _, flag in CASES}
    assert {"--runs", "--tokens", "--threads", "--depth", "--turns", "--gpu-layers"} <= flags, flags
    assert len(CASES) >= 40
    assert {"--acceptance", "--budget", "--time-limit", "--bandwidth-gbs", "--screen"} <= {f for _, f in REAL_CASES}


@pytest.mark.parametrize(("prefix", "flag"), CASES, ids=[f"{' '.join(p[:2])} {f}" for p, f in CASES])
def test_a_count_out_of_range_is_refused_in_words(prefix: list[str], flag: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    bad = ["-5", "99999999999", "1e9", "many"] + ([] if flag in ZERO_MEANS_SOMETHING else ["0"])
    for value in bad:  # parsed only: a value let through would not start a benchmark here
        with pytest.raises(SystemExit) as refused:
            PARSER.parse_args([*prefix, f"{flag}={value}"])  # "-inf" alone would read as an option
        text = capsys.readouterr().err
        assert refused.value.code == 2 and flag in text and "whole number" in text, (flag, value, text)
        assert value in text and "Traceback" not in text, (flag, value, text)


@pytest.mark.parametrize(("prefix", "flag"), REAL_CASES, ids=[f"{' '.join(p[:2])} {f}" for p, f in REAL_CASES])
def test_a_fraction_or_a_time_out_of_range_is_refused_in_words(prefix: list[str], flag: str,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Acceptances, seconds and bandwidths: NaN slips past a plain range check (no comparison holds for it)."""
    for value in ["-1", "nan", "inf", "-inf", "1e999", "many"]:
        with pytest.raises(SystemExit) as refused:
            PARSER.parse_args([*prefix, f"{flag}={value}"])  # "-inf" alone would read as an option
        text = capsys.readouterr().err
        assert refused.value.code == 2 and flag in text and "is a number" in text and value in text, (flag, text)


@pytest.mark.parametrize(("prefix", "flag"), CASES + REAL_CASES,
                         ids=[f"{' '.join(p[:2])} {f}" for p, f in CASES + REAL_CASES])
def test_the_default_passes_its_own_check(prefix: list[str], flag: str) -> None:
    parser = dict(COMMANDS)[" ".join(prefix)]
    action = next(a for a in parser._actions if flag in a.option_strings)
    if action.default is not None:
        assert action.type(str(action.default)) == action.default  # type: ignore[misc,operator]

