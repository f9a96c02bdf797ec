"""``sidecar make`` counts its corpus by streaming it in pieces cut only where the Qwen pre-tokenizer is proven to
split anyway, so the counts are the ones of tokenizing each text whole, with bounded memory for any corpus size;
a corpus that is not a regular file (a FIFO, a device) is refused before anything waits on it, and SIGTERM stops
the tokenizing at once. On the real patched CPU backend with the demo model's real Qwen tokenizer.

The memory cap is measured: ``sidecar make`` runs in a child process under ``RLIMIT_AS`` and its peak resident
set with a 64 MiB junk corpus is compared with the same command on a small text.
"""

from __future__ import annotations

import json
import os
import random
import resource
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from app.backend.registry import BackendManifest
from app.gguftools.demo_model import DemoModel
from app.models.sidecar_job import Corpus
from tests.helpers import peak_rss
from tests.helpers.demo_copies import DemoCopies
from tests.helpers.module_folders import ModuleFolders

ROOT = Path(__file__).resolve().parents[3]
OVER_BASELINE_MIB = 300  # the stated cap: docs/security.md, "Sidecar corpus"
AS_LIMIT_MIB = 3072  # today's whole-corpus tokenizing needs 4.4 GB for 64 MiB: it dies here instead
TRICKY = ("a\u00a0b  c\n\n\n  x 1234 5,6  \t\r\n 'se 's 'S Ünïcödé 中文字符 ‘quotes’ \u3000 wide space\n"
          "    indented(code) {x: [1, 2]}\n\n\t\ttabs\r\rcr 3.14159 1e10 ...!!! ??? a's b'S  'll 'VE\n")


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders, default_demo: DemoCopies) -> DemoModel:
    return default_demo.copy_to(module_tmp.mktemp("corpus-demo"))


@pytest.fixture(scope="module")
def junk(module_tmp: ModuleFolders) -> Path:
    """64 MiB of seeded random bytes: invalid UTF-8, few spaces, about one token per byte."""
    path = module_tmp.mktemp("junk") / "junk.bin"
    rng = random.Random(27)
    with path.open("wb") as handle:
        for _ in range(64):
            handle.write(rng.randbytes(1 << 20))
    return path


def _real_corpus() -> bytes:
    """Our own prose and code, the prompt sets, tricky whitespace and scripts, and 256 KiB of invalid UTF-8."""
    parts = [ROOT / "README.md", ROOT / "CHANGELOG.md", ROOT / "app" / "machines" / "remote_client.py",
             *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "resources" / "prompts").glob("*.txt"))]
    rng = random.Random(5)
    return b"".join([*(p.read_bytes() for p in parts), TRICKY.encode() * 50, rng.randbytes(256 << 10),
                     TRICKY.encode()])


def _blocks(data: bytes, size: int) -> list[bytes]:
    return [data[i:i + size] for i in range(0, len(data), size)]


def test_pieces_join_to_the_input_and_cut_only_at_proven_boundaries() -> None:
    from app.gguftools.counts import text_pieces

    data = _real_corpus()
    pieces = list(text_pieces(_blocks(data, 1000), target=4096, most=16384))
    assert b"".join(p.data for p in pieces) == data
    assert len(pieces) > 100 and not any(p.forced for p in pieces)
    assert max(len(p.data) for p in pieces) <= 16384
    wall = "中".encode() * 20_000  # no space, no newline, no digit: nowhere proven, so cut where it must be
    forced = list(text_pieces(_blocks(wall, 1000), target=4096, most=16384))
    assert b"".join(p.data for p in forced) == wall and any(p.forced for p in forced)
    assert all(len(p.data) <= 16384 for p in forced)
    assert all(p.data.decode("utf-8") for p in forced)  # never inside a character


def test_streamed_counts_equal_the_counts_of_the_whole_text(patched_backend: BackendManifest, demo: DemoModel,
                                                             tmp_path: Path) -> None:
    from app.models.sidecar_job import corpus_texts, count_corpus
    from app.native.handles import Model

    data = _real_corpus()
    corpus_file = tmp_path / "corpus.txt"
    corpus_file.write_bytes(data)
    with Model(demo.target, vocab_only=True) as model:
        def tokenize(text: str) -> list[int]:
            return model.tokenize(text, add_special=False, parse_special=False)

        whole = Counter(tokenize(data.decode("utf-8", errors="replace")))
        for piece_bytes in (4096, 65536):
            counted = count_corpus(tokenize, Corpus(files=(corpus_file,)), piece_bytes=piece_bytes)
            assert counted.forced_cuts == 0
            assert counted.counts is not None and counted.counts.as_dict() == dict(whole)
            assert counted.tokens == sum(whole.values())
        prompts = Corpus(prompt_sets=("document", "reasoning"))
        by_text = Counter(t for text in corpus_texts(prompts) for t in tokenize(text))
        counted = count_corpus(tokenize, prompts, piece_bytes=512)
        assert counted.counts is not None and counted.counts.as_dict() == dict(by_text)


def _make(demo: DemoModel, corpus: Path, out: Path) -> list[str]:
    return ["sidecar", "make", "--target", str(demo.target), "--out", str(out), "--vocab", "16384",
            "--corpus", str(corpus), "--no-check", "--json"]


def test_make_on_a_64_MiB_junk_corpus_stays_under_the_memory_cap(patched_backend: BackendManifest, demo: DemoModel,
                                                                 junk: Path, tmp_path: Path) -> None:
    small = tmp_path / "small.txt"
    small.write_text(TRICKY * 20)
    baseline = peak_rss.run(_make(demo, small, tmp_path / "small.gguf"), as_limit_mib=AS_LIMIT_MIB)
    assert baseline.returncode == 0, baseline.stderr[-3000:]
    big = peak_rss.run(_make(demo, junk, tmp_path / "junk.gguf"), as_limit_mib=AS_LIMIT_MIB, timeout=900)
    assert big.returncode == 0, big.stderr[-3000:]
    result = json.loads(big.stdout.splitlines()[-1])
    assert result["kind"] == "result" and result["corpus_tokens"] > 40_000_000
    assert 0 < big.peak_mib < baseline.peak_mib + OVER_BASELINE_MIB, (big.peak_mib, baseline.peak_mib)


@pytest.mark.parametrize("kind", ["fifo", "device", "folder"])
def test_a_corpus_that_is_not_a_regular_file_is_refused_before_anything_waits(demo: DemoModel, tmp_path: Path,
                                                                              kind: str) -> None:
    if kind == "fifo":
        corpus = tmp_path / "corpus.txt"
        os.mkfifo(corpus)  # no writer ever comes: opening it to read would wait for ever
        words = "a pipe (FIFO)"
    elif kind == "device":
        corpus, words = Path("/dev/zero"), "a device"
    else:
        corpus, words = tmp_path, "a folder"
    out = tmp_path / "never.gguf"
    done = subprocess.run([sys.executable, "-m", "app", *_make(demo, corpus, out)[:-1]], capture_output=True,
                          text=True, timeout=120)
    assert "Traceback" not in done.stderr and done.returncode == 1, done.stderr
    assert f"error: The corpus file {corpus} is not a regular file ({words})" in done.stderr
    assert "what to do: " in done.stderr and not out.exists()


def _limit_memory() -> None:
    limit = AS_LIMIT_MIB << 20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def test_sigterm_while_tokenizing_stops_at_once_with_nothing_left(patched_backend: BackendManifest,
                                                                  demo: DemoModel, junk: Path,
                                                                  tmp_path: Path) -> None:
    out = tmp_path / "stopped.gguf"
    proc = subprocess.Popen([sys.executable, "-m", "app", *_make(demo, junk, out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=_limit_memory)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if json.loads(line).get("step") == "tokenizing":
                break
        proc.send_signal(signal.SIGTERM)
        rest, err = proc.communicate(timeout=30)  # one piece to finish, not the rest of 64 MiB
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err[-3000:]
    assert json.loads(rest.splitlines()[-1])["message"] == "Stopped: no sidecar was written."
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(out.name)]
