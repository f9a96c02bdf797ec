"""Making a FastMTP sidecar with progress, on the real patched CPU backend and the demo model written by our
writer: every step reported, the acceptance measured against the embedded head, and a cancel (in this process
or of the ``sidecar make`` child the window runs) leaving no file behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.backend.registry import BackendManifest
from app.core.child_job import ChildJob
from app.core.errors import JobCancelled
from app.gguftools.demo_model import DemoModel
from app.gguftools.inspect import inspect_gguf
from app.models.sidecar_job import Control, Corpus, Progress, make_sidecar
from tests.helpers.demo_copies import DemoCopies
from tests.helpers.module_folders import ModuleFolders


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders, default_demo: DemoCopies) -> DemoModel:
    return default_demo.copy_to(module_tmp.mktemp("make-demo"))


def _leftovers(out: Path) -> list[Path]:
    return [p for p in out.parent.iterdir() if p.name.startswith(out.name)]


def test_make_reports_each_step_and_measures_against_the_embedded_head(
        patched_backend: BackendManifest, demo: DemoModel, tmp_path: Path) -> None:
    corpus_file = tmp_path / "notes.txt"
    corpus_file.write_text("FastMTP drafts tokens with a small head; the target verifies them. " * 20)
    seen: list[Progress] = []
    out = tmp_path / "mine-FastMTP-16K.gguf"
    made = make_sidecar(demo.target, out, 16384, Corpus(prompt_sets=("document",), files=(corpus_file,)),
                        on_progress=seen.append)
    assert {p.step for p in seen} == {"tokenizing", "counting", "slicing", "writing", "checking"}
    fractions = [p.fraction for p in seen]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    report = inspect_gguf(out)
    assert report.kind == "mtp_sidecar_d2t" and report.d2t_length == made.vocab_size == 16384
    assert made.corpus == "the document prompts, notes.txt" and made.corpus_tokens > 100
    assert made.check is not None and made.check.positions == 256
    assert 0.0 <= made.check.sidecar_acceptance <= 1.0 and made.check.embedded_acceptance > 0.5
    assert _leftovers(out) == [out]


def test_cancel_while_slicing_rows_leaves_no_file(patched_backend: BackendManifest, demo: DemoModel,
                                                  tmp_path: Path) -> None:
    control = Control()
    out = tmp_path / "cancelled.gguf"

    def cancel_when_slicing(progress: Progress) -> None:
        if progress.step == "slicing":
            control.cancel()

    with pytest.raises(JobCancelled):
        make_sidecar(demo.target, out, 16384, Corpus(prompt_sets=("reasoning",)), on_progress=cancel_when_slicing,
                     control=control)
    assert _leftovers(out) == []


def test_the_window_s_child_job_cancels_with_nothing_left(patched_backend: BackendManifest, demo: DemoModel,
                                                          tmp_path: Path) -> None:
    out = tmp_path / "child.gguf"
    job = ChildJob(["sidecar", "make", "--target", str(demo.target), "--out", str(out), "--vocab", "16384",
                    "--prompts", "document"], leftovers=[out])
    steps: list[str] = []

    def on_event(event: dict[str, object]) -> None:
        steps.append(str(event["step"]))
        if event["step"] in ("slicing", "writing"):
            job.cancel()

    with pytest.raises(JobCancelled):
        job.run(on_event)
    assert "tokenizing" in steps and _leftovers(out) == []


def test_an_existing_file_is_never_overwritten(demo: DemoModel, tmp_path: Path) -> None:
    from app.core.errors import SidecarError

    out = tmp_path / "there.gguf"
    out.write_bytes(b"mine")
    with pytest.raises(SidecarError, match="already exists"):
        make_sidecar(demo.target, out, 16384, Corpus())
    assert out.read_bytes() == b"mine"
