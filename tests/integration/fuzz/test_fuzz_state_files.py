"""Issue 37 item 4: every state file and every small value from outside, fed values of the right type and the
wrong size (huge ints, NaN/inf, negative, deep nesting, wrong inner types) and things that are not files (a FIFO,
a link to /dev/zero, a folder). Each reader answers with its defaults or a value in range, or refuses in words;
the CLI exits 0-4 without a traceback; nothing is written outside the private folders."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from app.core.bounded_http import HEADER_DIGITS_MAX, header_int
from app.core.errors import FastMTPError
from app.core.netaddr import BadUrl, web_url
from tests.helpers.cli_in_process import run_cli

NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)  # a failure is reported as found: no minutes of shrinking
FAST = settings(max_examples=40, derandomize=True, deadline=None, phases=NO_SHRINK,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

HUGE = st.sampled_from([10**400, -(10**400), 2**63, 2**64, -(2**63) - 1, 3 * 10**9, 10**10, -1, 0, 1e308, -1e308,
                        1e-320, float("nan"), float("inf"), float("-inf"), True, False, None, "", "x" * 5000,
                        "NaN", "1e999", [], {}, [[[]]]])
LEAF = st.one_of(HUGE, st.integers(), st.floats(), st.text(max_size=12), st.booleans(), st.none())
VALUE = st.recursive(LEAF, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                        max_size=4), max_leaves=12)


def fields_of(names: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(st.sampled_from(names) | st.text(max_size=6), VALUE, max_size=len(names))


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Every folder the app writes in, under the test's own: HOME too, and the working folder."""
    for name, sub in (("FASTMTP_DATA_DIR", "data"), ("FASTMTP_CONFIG_DIR", "config"), ("FASTMTP_CACHE_DIR", "cache"),
                      ("HOME", "home"), ("XDG_CONFIG_HOME", "home/.config"), ("XDG_DATA_HOME", "home/.local/share"),
                      ("XDG_CACHE_HOME", "home/.cache")):
        (tmp_path / sub).mkdir(parents=True, exist_ok=True)
        monkeypatch.setenv(name, str(tmp_path / sub))
    monkeypatch.chdir(tmp_path)
    yield tmp_path


def write(path: Path, content: Any) -> None:
    """``content`` as JSON (NaN and Infinity as Python writes them), a raw string, or a thing that is not a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for leftover in (path, path.with_name(path.name + ".bad")):
        if os.path.lexists(leftover) and not stat.S_ISDIR(leftover.lstat().st_mode):
            leftover.unlink()
    if content == "<fifo>":
        os.mkfifo(path)
    elif content == "<zero>":
        path.symlink_to("/dev/zero")
    elif isinstance(content, str) and content.startswith("<raw>"):
        path.write_text(content[5:])
    else:
        try:
            path.write_text(json.dumps(content))
        except (ValueError, RecursionError):
            path.write_text("[" * 100_000)


NOT_JSON = st.sampled_from(["<fifo>", "<zero>", "<raw>" + "[" * 200_000, "<raw>" + '{"a":' * 100_000, "<raw>",
                            "<raw>\xff\xfe", "<raw>NaN", "<raw>1e999", "<raw>" + "9" * 5000])




def in_range(value: Any) -> bool:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return True
    if isinstance(value, int):
        return abs(value) < 2**31  # Qt's int, llama.cpp's int32 counts
    if isinstance(value, float):
        return math.isfinite(value)
    return True


# ----------------------------------------------------------------------------- settings.json


SETTING_NAMES = ["context_size", "gpu_layers", "threads", "draft_depth", "adaptive_depth", "p_min", "theme",
                 "serve_port", "serve_parallel", "state_cache_mb", "overflow_policy", "models_dir", "chat_model",
                 "rpc_workers", "serve_host", "first_run_done", "check_for_updates"]


@FAST
@given(fields_of(SETTING_NAMES) | NOT_JSON)
def test_settings_json_of_any_size_loads_in_range(home: Path, content: Any) -> None:
    from app.settings import app_settings

    write(app_settings.settings_path(), content)
    loaded = app_settings.load()
    for f in dataclasses.fields(loaded):
        assert in_range(getattr(loaded, f.name)), (f.name, getattr(loaded, f.name))


# ----------------------------------------------------------------------------- local-models.json, Auto records


MODEL_ENTRY = fields_of(["path", "added", "facts", "copied_from", "origin", "sidecar_d2t", "sidecar_full",
                         "verification", "mtime_ns"])


@FAST
@given(st.fixed_dictionaries({"models": st.lists(MODEL_ENTRY, max_size=3) | VALUE}) | VALUE | NOT_JSON)
def test_local_models_json_of_any_shape_lists_in_words(home: Path, capsys: pytest.CaptureFixture[str],
                                                       content: Any) -> None:
    from app.models.local_models import load_registry, registry_path

    write(registry_path(), content)
    assert isinstance(load_registry(), list)
    run_cli(capsys, "models", "--json")


RECORD = fields_of(["key", "state", "current", "tps", "modes", "measured", "conditions", "version", "samples",
                    "depth", "acceptance", "mode", "winner", "turns"])


@FAST
@given(RECORD | VALUE | NOT_JSON, RECORD | VALUE | NOT_JSON)
@pytest.mark.usefixtures("steady_load")  # a record's notes of any size, not the machine's load (read again over 1 s)
def test_depth_and_auto_records_of_any_size_list_in_words(home: Path, capsys: pytest.CaptureFixture[str],
                                                          depth: Any, auto: Any) -> None:
    from app.core.paths import depth_memory_dir

    write(depth_memory_dir() / ("a" * 16 + ".depth.json"), depth)
    write(depth_memory_dir() / ("b" * 16 + ".auto.json"), auto)
    run_cli(capsys, "depth-memory", "list", "--json")
    run_cli(capsys, "depth-memory", "list")


# ----------------------------------------------------------------------------- build-times.json, the update floor


@FAST
@given(st.lists(fields_of(["flavor", "cached", "seconds", "archs", "cores", "when"]), max_size=4) | VALUE | NOT_JSON)
def test_build_times_of_any_size_give_a_finite_estimate(home: Path, content: Any) -> None:
    from app.backend import build_estimate
    from app.backend.builder import BuildOptions

    write(build_estimate._history_path(), content)
    estimate = build_estimate.estimate(BuildOptions(), cached=False, cores=2, load=0.0)
    assert all(in_range(v) for v in dataclasses.asdict(estimate).values() if not isinstance(v, dict | list))


@FAST
@given(st.dictionaries(st.text(max_size=20), VALUE, max_size=3) | VALUE | NOT_JSON)
def test_an_update_floor_of_any_size_is_kept_or_set_aside_with_a_warning(home: Path, content: Any) -> None:
    from app.release import updates

    write(updates._floor_path(), content)
    floors, warning = updates._load_floors()
    assert isinstance(floors, dict) and isinstance(warning, str)


# ----------------------------------------------------------------------------- header numbers and URLs


@settings(max_examples=300, derandomize=True, deadline=None, phases=NO_SHRINK)
@given(st.one_of(st.text(max_size=30), st.integers(-(10**30), 10**30).map(str), st.sampled_from(
    ["²", "٣", "1_000", " 12 ", "+5", "-5", "0x10", "1e3", "9" * 19, "9" * 20, "١٢", "12\n", "", "  "])))
def test_header_numbers_are_ascii_digits_within_an_int64(text: str) -> None:
    value = header_int(text)
    digits = text.strip(" \t")
    assert value is None or (digits.isascii() and digits.isdigit() and value == int(digits) < 10**HEADER_DIGITS_MAX)


HOSTS = st.sampled_from(["127.0.0.1", "[::1]", "[::1", "::1", "host", "", "[zz::1]", "ex ample", "a@b", "[::1]x",
                         "host\x00", "例え.jp", "%41"])
PORTS = st.sampled_from(["", ":0", ":1", ":65535", ":65536", ":99999", ":-1", ":²", ":080", ":" + "9" * 30, ":x",
                         ":١٢"])


@settings(max_examples=300, derandomize=True, deadline=None, phases=NO_SHRINK)
@given(st.sampled_from(["http://", "https://", "ftp://", "", "HTTP://", "file://"]), HOSTS, PORTS,
       st.text(max_size=10))
def test_urls_have_a_port_in_1_to_65535_or_are_refused_in_words(scheme: str, host: str, port: str, path: str) -> None:
    url = f"{scheme}{host}{port}/{path}"
    try:
        parts = web_url(url)
    except BadUrl as exc:
        assert str(exc) and "Traceback" not in str(exc)
        return
    assert parts.port is None or 1 <= parts.port <= 65_535


# ----------------------------------------------------------------------------- backend feeds


FEED_ARCHIVE = fields_of(["name", "url", "sha256", "size", "platform", "flavor", "cuda", "archs", "min_driver",
                          "backend_id", "version"])


@FAST
@given(st.fixed_dictionaries({"archives": st.lists(FEED_ARCHIVE, max_size=3) | VALUE},
                             optional={"version": VALUE, "expires": VALUE, "format": VALUE}) | VALUE | NOT_JSON)
def test_a_feed_of_any_shape_parses_or_is_refused_in_words(content: Any) -> None:
    from app.backend.feed import parse_feed

    if content in ("<fifo>", "<zero>"):
        return
    raw = content[5:].encode("utf-8", "surrogatepass") if isinstance(content, str) and content.startswith("<raw>") \
        else json.dumps(content).encode()
    try:
        parse_feed(raw)
    except FastMTPError as exc:
        assert exc.message and "Traceback" not in exc.message


# ----------------------------------------------------------------------------- signed backend manifests


@FAST
@given(st.fixed_dictionaries({"archive": fields_of(["name", "size", "sha256"]) | VALUE,
                              "backend": fields_of(["id", "flavor", "version", "platform", "cuda"]) | VALUE},
                             optional={"repo": VALUE, "date": VALUE,
                                       "unpacked": fields_of(["bytes", "members"]) | VALUE})
       | VALUE | NOT_JSON)
def test_a_backend_manifest_of_any_shape_parses_or_is_refused_in_words(content: Any) -> None:
    from app.backend.signing import FORMAT, parse_claim

    if content in ("<fifo>", "<zero>"):
        return
    if isinstance(content, dict) and "archive" in content:
        content = {"format": FORMAT, **content}
    raw = content[5:].encode("utf-8", "surrogatepass") if isinstance(content, str) and content.startswith("<raw>") \
        else json.dumps(content).encode()
    try:
        claim = parse_claim(raw, "x.tar.xz.manifest.json")
    except FastMTPError as exc:
        assert exc.message and "Traceback" not in exc.message
    else:
        assert claim.size >= 0 and "/" not in claim.archive
