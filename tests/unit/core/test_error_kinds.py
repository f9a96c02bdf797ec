"""Every error carries a machine-readable kind: scripts (``--json``) and the window choose by it, never by the
English of a message. Exit codes come from one table in ``core/errors.py`` and stay what they were."""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import app
from app.core.child_job import ChildJob, ChildJobError
from app.core.errors import (
    EXIT_CODES,
    BackendError,
    BuildCancelled,
    DiskSpaceError,
    DownloadError,
    FastMTPError,
    GGUFError,
    JobCancelled,
    StorageError,
    TrustError,
    UnsafeInputError,
    VerificationError,
)

KEBAB = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
ROOT = Path(__file__).resolve().parents[3]


def _all_subclasses(cls: type[FastMTPError]) -> set[type[FastMTPError]]:
    found = set()
    for sub in cls.__subclasses__():
        found |= {sub, *_all_subclasses(sub)}
    return found


def _import_every_module() -> None:
    """Import the app's modules, so every FastMTPError subclass is defined (GUI and native ones included)."""
    for info in pkgutil.walk_packages(app.__path__, "app."):
        if info.name.endswith("__main__"):
            continue
        importlib.import_module(info.name)


def test_every_error_class_has_a_kebab_case_kind() -> None:
    _import_every_module()
    classes = {FastMTPError, *_all_subclasses(FastMTPError)}
    assert len(classes) > 25  # the whole hierarchy, not only core/errors.py's
    for cls in classes:
        assert isinstance(cls.kind, str) and KEBAB.match(cls.kind), (cls, cls.kind)


def test_every_error_class_of_the_core_has_its_own_default_kind() -> None:
    import app.core.errors as errors

    own = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, FastMTPError)]
    kinds = [c.__dict__.get("kind") for c in own]
    assert None not in kinds and len(set(kinds)) == len(kinds), kinds


@pytest.mark.parametrize(("make", "code"), [
    (lambda: FastMTPError("m"), 1), (lambda: StorageError("m"), 1), (lambda: BackendError("m"), 1),
    (lambda: BuildCancelled("m"), 1), (lambda: DiskSpaceError("m"), 1), (lambda: GGUFError("m"), 1),
    (lambda: DownloadError("m"), 3), (lambda: VerificationError("m"), 4), (lambda: TrustError("m"), 4),
    (lambda: UnsafeInputError("m"), 4), (lambda: JobCancelled("m"), 130),
    (lambda: DownloadError("m", kind="not-found"), 3),  # a specific kind keeps its class's exit code
    (lambda: VerificationError("m", kind="sha256-mismatch"), 4),
    (lambda: DiskSpaceError("m", kind="no-room"), 1),
    (lambda: ChildJobError("m", "", 130, "JobCancelled", kind="job-cancelled"), 130),
    (lambda: ChildJobError("m", "", 4, "VerificationError", kind="sha256-mismatch"), 4),
])
def test_exit_codes_stay_as_they_were(make: object, code: int) -> None:
    assert callable(make)
    assert make().exit_code == code


def test_exit_codes_of_error_classes_outside_the_core() -> None:
    from app.backend.cuda_wheels import CudaWheelsUnreachable
    from app.cli.release import FetchStopped
    from app.machines.remote_servers import RemoteError, RemoteNetworkError
    from app.release.catalog import CatalogError
    from app.release.fetcher import DownloadCancelled

    assert (CatalogError.exit_code, RemoteNetworkError.exit_code, CudaWheelsUnreachable.exit_code) == (2, 3, 3)
    assert (RemoteError.exit_code, DownloadCancelled.exit_code, VerificationError.exit_code) == (1, 3, 4)
    assert FetchStopped("m", "a", 130).exit_code == 130 and FetchStopped("m", "a", 1).exit_code == 1
    assert set(EXIT_CODES.values()) == {1, 2, 3, 4, 130}


def test_the_constructor_stays_backward_compatible() -> None:
    plain = VerificationError("message", "advice")
    assert (plain.message, plain.advice, plain.kind, str(plain)) == ("message", "advice", "verification-failed",
                                                                    "message\nadvice")
    specific = VerificationError("message", kind="size-mismatch")
    assert specific.kind == "size-mismatch" and VerificationError.kind == "verification-failed"
    assert specific.to_json() == {"error": "VerificationError", "kind": "size-mismatch", "message": "message",
                                  "advice": ""}
    # to_dict is spread into {"kind": "error", ...} engine events: it must not bring a "kind" of its own
    assert "kind" not in specific.to_dict()


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, FASTMTP_DATA_DIR=str(tmp_path / "data"), FASTMTP_CONFIG_DIR=str(tmp_path / "config"),
               FASTMTP_CACHE_DIR=str(tmp_path / "cache"), PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=120)


def test_the_cli_json_error_names_its_kind(tmp_path: Path) -> None:
    not_gguf = tmp_path / "notes.gguf"
    not_gguf.write_bytes(b"these are not the bytes of a GGUF file, just text long enough to be read\n" * 4)
    done = _cli(tmp_path, "gguf", "inspect", str(not_gguf), "--json")
    assert done.returncode == 1, done.stderr
    error = json.loads(done.stdout.strip().splitlines()[-1])
    assert error["error"] == "GGUFError" and error["kind"] == "not-gguf" and error["message"] and error["advice"]

    missing = _cli(tmp_path, "gguf", "inspect", str(tmp_path / "missing.gguf"), "--json")
    assert missing.returncode == 1 and json.loads(missing.stdout.strip().splitlines()[-1])["kind"] == "not-found"

    words = _cli(tmp_path, "gguf", "inspect", str(not_gguf))  # people get words, never the kind
    assert words.returncode == 1 and words.stderr.startswith("error: ") and "not-gguf" not in words.stderr


def test_a_child_jobs_error_carries_the_childs_kind(tmp_path: Path) -> None:
    not_gguf = tmp_path / "notes.gguf"
    not_gguf.write_bytes(b"not a GGUF file\n" * 8)
    job = ChildJob(["gguf", "inspect", str(not_gguf)],
                   env=dict(os.environ, FASTMTP_DATA_DIR=str(tmp_path / "data"),
                            FASTMTP_CONFIG_DIR=str(tmp_path / "config"), FASTMTP_CACHE_DIR=str(tmp_path / "cache")))
    with pytest.raises(ChildJobError) as caught:
        job.run()
    assert caught.value.kind == "not-gguf" and caught.value.error == "GGUFError" and caught.value.exit_code == 1
    assert ChildJobError("no kind from an older child").kind == "child-failed"
