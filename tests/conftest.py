"""Shared fixtures: isolated data/config folders, the real patched and unpatched CPU backends, the demo model.

The tiers are folders. tests/unit/<package>/ runs in the test process: no backend built or loaded, no process
started, no model file written (but the cached default demo), no server driven through its time-outs, so that
``make check`` runs it in under two minutes on 2 cores. tests/integration/<package>/ may build or load the backend,
start the CLI or the engine as processes and write models; every test there is marked ``integration``.

The cache folder stays the user's own (or ``FASTMTP_CACHE_DIR``), so the backend build trees and the
pinned sdist are reused between runs: the first run builds (minutes), later runs re-link (seconds).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # every Qt test, also one run alone: no display needed

from app.backend.builder import BuildOptions, build_backend
from app.backend.registry import BackendManifest, backend_dir
from app.chats.history import HistoryStore
from tests.helpers.demo_copies import DemoCopies, master_folder
from tests.helpers.module_folders import ModuleFolders

INTEGRATION = Path(__file__).parent / "integration"
NATIVE_FIXTURES = {"patched_backend", "unpatched_backend", "unpatched_dir"}


# The files whose tests take the longest (minutes each under `make test`: the slowest-15 lists of CI and of the
# loaded runs), slowest first. `make test` hands whole files to its workers (--dist loadfile), and pytest-xdist would
# order them by their number of tests, which puts these few-test files near the end, where one of them alone keeps a
# worker busy for minutes while the rest wait (issue 38: a quiet `make test` within 40 minutes). Started first, they
# run beside the many short files instead. `--no-loadscope-reorder` (Makefile) keeps this order.
SLOWEST_FIRST = (
    "integration/models/test_demo_27b.py",
    "integration/bench/test_gpu_check.py",
    "integration/models/test_sidecar_corpus.py",
    "integration/models/test_sidecar_replace.py",
    "integration/native/test_d2t_checks.py",
    "integration/gui/window/test_gui_auto_drafting.py",
    "integration/gui/models/test_gui_local_models.py",
    "integration/cli/test_cli.py",
    "integration/cli/test_quickstart.py",
    "integration/models/test_demo_english.py",
    "integration/models/test_sidecar_make.py",
    "integration/bench/test_bench_gguf.py",
    "integration/bench/test_bench_adaptive_load.py",
    "integration/engine/test_verdicts.py",
    "integration/backend/test_cuda_wheels.py",
    "integration/cli/test_small_refusals.py",
    "integration/native/test_native_sampling.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the integration folder's tests, refuse a unit test that asks for a built backend, and order the files:
    ``SLOWEST_FIRST``, then the others by their number of tests, most first (pytest-xdist's own default)."""
    for item in items:
        if item.path.is_relative_to(INTEGRATION):
            item.add_marker(pytest.mark.integration)
        elif NATIVE_FIXTURES & set(getattr(item, "fixturenames", ())):
            raise pytest.UsageError(f"{item.nodeid} needs a built backend: move it to tests/integration/.")
    tests = Path(__file__).parent
    missing = [name for name in SLOWEST_FIRST if not (tests / name).is_file()]
    if missing:
        raise pytest.UsageError(f"tests/conftest.py's SLOWEST_FIRST names files that are gone: {missing}")
    rank = {tests / name: i for i, name in enumerate(SLOWEST_FIRST)}
    counts = Counter(item.path for item in items)
    first_seen = {path: i for i, path in reversed(list(enumerate(item.path for item in items)))}
    items.sort(key=lambda item: (rank.get(item.path, len(rank)), -counts[item.path], first_seen[item.path]))


@pytest.fixture(scope="session", autouse=True)
def isolated_dirs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    saved = {key: os.environ.get(key) for key in ("FASTMTP_DATA_DIR", "FASTMTP_CONFIG_DIR", "FASTMTP_BACKEND_DIR")}
    os.environ["FASTMTP_DATA_DIR"] = str(tmp_path_factory.mktemp("data"))
    os.environ["FASTMTP_CONFIG_DIR"] = str(tmp_path_factory.mktemp("config"))
    os.environ.pop("FASTMTP_BACKEND_DIR", None)
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(autouse=True)
def cycles_collected_on_the_gui_thread(request: pytest.FixtureRequest) -> Iterator[None]:
    """A Qt test collects reference cycles as the window does, on the GUI thread only (``gui_thread_gc``); after
    it, one full collection here and Python's own collector again for the tests without Qt in the same process."""
    if not {"qtbot", "qapp"} & set(request.fixturenames):
        yield
        return
    from app.gui.shell.gui_thread_gc import collect_cycles_on_gui_thread

    collector = collect_cycles_on_gui_thread(request.getfixturevalue("qapp"))
    yield
    collector.stop()


@pytest.fixture
def steady_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """The machine's load, as a remembered record (adaptive depth's, Auto's) notes it at a save and compares it at a
    recall, held still in this process. Tests of keys, damage, saves and warm starts recall right after a save; the
    suite's other worker can move the load read over 0.1 s by 2x in between, and the record turns stale (a failed
    run of the whole suite, 2026-12-05). Staleness itself: ``tests/unit/engine/test_decisions_recheck.py``."""
    from app.engine import depth_memory

    monkeypatch.setattr(depth_memory, "machine_load", lambda window_s=0.1: 0.1)


@pytest.fixture(scope="module")
def module_tmp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleFolders]:
    """Where a module's fixtures write (demo models, packed backends): removed once the module is done."""
    folders = ModuleFolders(tmp_path_factory)
    yield folders
    folders.remove_all()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[HistoryStore]:
    """A history file of the test's own, closed after the test (and after any window on it has closed)."""
    history = HistoryStore(tmp_path / "history.sqlite3")
    yield history
    history.close()


# taken when the run starts: a test that points the cache folder elsewhere must not move the master
_DEMO_MASTER = master_folder()


@pytest.fixture(scope="session")
def default_demo() -> DemoCopies:
    """The default demo model, written on first use (kept between runs) and copied into each module that asks."""
    return DemoCopies(_DEMO_MASTER)


@pytest.fixture(scope="session")
def qwen_vocab_path() -> Path:
    from app.gguftools.vocab import qwen35_vocab_path

    return qwen35_vocab_path()


@pytest.fixture(scope="session")
def patched_backend() -> BackendManifest:
    """The real d2t-patched CPU build, installed and active in the test data folder."""
    return build_backend(BuildOptions(flavor="cpu"))


@pytest.fixture(scope="session")
def unpatched_backend() -> BackendManifest:
    """The same version built without our patch; installed but never active."""
    return build_backend(BuildOptions(flavor="cpu", patched=False, activate=False))


@pytest.fixture(scope="session")
def unpatched_dir(unpatched_backend: BackendManifest) -> Path:
    return backend_dir(unpatched_backend.id)
