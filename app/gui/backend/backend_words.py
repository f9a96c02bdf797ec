"""The Backend page's words for its jobs: how a build, the CUDA toolkit's download or a signed install is going and
how it ended, in one sentence each, with what was (or was not) installed. Each ending says whether it is bad (a
failure or a refusal, shown in the theme's bad colour); a cancel is not."""

from __future__ import annotations

from app.backend import cuda_wheels
from app.backend.build_estimate import duration_words
from app.backend.feed import Selection
from app.backend.prebuilt import InstalledPrebuilt
from app.backend.registry import BackendManifest
from app.core.errors import BuildCancelled, VerificationError
from app.gui.shell.build_job import BuildJob
from app.gui.shell.status_text import error_text

Words = tuple[str, bool]  # the sentence, and whether it is bad news


def build_running(job: BuildJob) -> str:
    """The window's build as it runs: its step, the time so far and the estimate of what is left."""
    left = job.remaining()
    return (f"Building the {job.flavor.upper()} backend: {job.step_text} · {duration_words(job.elapsed())} elapsed"
            + (f" · about {duration_words(left)} left" if left is not None else ""))


def build_done(manifest: BackendManifest, seconds: float) -> str:
    return f"Backend {manifest.id} built, self-tested and active ({duration_words(seconds)})."


def build_failed(exc: Exception) -> Words:
    if isinstance(exc, BuildCancelled):
        return "Build cancelled; nothing was installed. Building again resumes from the cached build tree.", False
    return "The build failed; nothing was installed. " + error_text(exc), True


def toolkit_ready(toolkit: cuda_wheels.AppToolkit) -> str:
    return (f"The CUDA {toolkit.cuda} build tools (nvcc {toolkit.nvcc_version} and cuBLAS) are in the app's cache, "
            f"{toolkit.root}; nothing was installed system-wide. CUDA builds use them.")


def toolkit_failed(exc: Exception) -> Words:
    if isinstance(exc, BuildCancelled):
        return ("Cancelled; no CUDA toolkit was installed. Wheels that finished downloading stay in the app's "
                "cache, so getting them again continues from there."), False
    return "Getting the CUDA build tools failed; nothing was installed. " + error_text(exc), True


def cancelling(getting_toolkit: bool, installing: bool) -> str:
    return ("Cancelling the CUDA build tools…" if getting_toolkit else
            "Cancelling the install…" if installing else "Cancelling the build…")


def installed(got: InstalledPrebuilt) -> str:
    """A signed prebuilt backend is in: which, whether it is active, and whose key signed it."""
    signer = ("Publisher-signed: the key that signed it ships with the app" if got.publisher_signed else
              "Signed by a key you trusted, not one shipped with the app")
    return (f"Prebuilt backend {got.manifest.id} is installed{' and active' if got.active else ''}. {signer} "
            f"({got.origin.fingerprint}, for {got.origin.repo}). Its self-test passed on this machine.")


def install_failed(exc: Exception) -> Words:
    if isinstance(exc, BuildCancelled):
        return "Install cancelled; nothing was installed.", False
    refused = "Refused" if isinstance(exc, VerificationError) else "The install failed"
    return f"{refused}: nothing was installed and the active backend is unchanged. " + error_text(exc), True


def nothing_fits(selection: Selection) -> str:
    return (f"No prebuilt backend fits this machine: {selection.reason} Nothing was downloaded or installed; the "
            "active backend is unchanged. Build here instead.")


def no_such_file(source: str) -> str:
    return f"There is no file at {source}. Pick the backend archive (.tar.xz) with Browse…, or give its https:// URL."
