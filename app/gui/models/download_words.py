"""The Models page's words for a download: a file's failed check in one plain sentence, the time left, and the
advice for each kind of download error in this window's terms ("press Download again", "the Hub token box below"),
chosen by the error's ``kind``, never by matching the core's sentences."""

from __future__ import annotations

from app.core import net_failures
from app.core.errors import FastMTPError
from app.core.units import format_bytes
from app.gui.shell.status_text import error_text
from app.release.fetcher import NetworkDownloadError


def human_eta(seconds: float | None) -> str:
    """``42 s``, ``3 min 05 s``, ``1 h 20 min``; a dash while the speed is unknown."""
    if seconds is None:
        return "—"
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


# which check a failed file's row marks, chosen by the error's kind, and the plain sentence for its row
_FAILED_CHECK: dict[str, str] = {"size-mismatch": "size", "sha256-mismatch": "sha256"}
_FAILED_WORDS: dict[str, str] = {
    "size": "Wrong size: the mirror sent a different file. It was deleted; nothing was installed.",
    "sha256": "Failed the sha256 check: the bytes differ from what the publisher signed. "
              "The file was deleted; nothing was installed.",
}


def plain_failure(kind: str, message: str) -> tuple[str | None, str]:
    """Which check a file failed (``"size"``, ``"sha256"`` or None), from the error's ``kind``, and one plain
    sentence for its row (the message's first line when the kind names no check)."""
    check = _FAILED_CHECK.get(kind)
    if check is None:
        return None, message.splitlines()[0] if message else ""
    return check, _FAILED_WORDS[check]


# This page's advice for each kind of download error: the core's advice suits the terminal (or names a command);
# the window says "press Download again" and points at its own boxes. Chosen by kind, never by the core's words.
WINDOW_ADVICE: dict[str, str] = {
    "download-denied": "The repository may be gated or private: accept its terms on the hub, then save your hub "
                       "token in the Hub token box below (or set HF_TOKEN) and press Download again. A token "
                       "that lacks access gives the same error.",
    "download-network": "Check the network connection or try another mirror. Press Download again to resume: it "
                        "goes on where it stopped.",
    "download-cancelled": "Press Download again to resume: it goes on where it stopped.",
    "disk-full": "Free some space, then press Download again: the part already downloaded is kept and the download "
                 "resumes.",
    "no-room": "Free some space on that disk, then press Download again; parts already downloaded are kept.",
    "install-no-room": "Free some space on the models folder's disk, then press Download again.",
    "download-cancelled-start-over": "Press Download again to start over.",
    "download-cancelled-kept": "Press Download again to resume: model files already downloaded are kept.",
    "quant-missing": "Pick another quantization in the table above: the release's signed manifest lists the ones "
                     "it has.",
}


def window_advice(exc: FastMTPError) -> str:
    """The advice this page shows for ``exc``: its own words for the kinds it knows, else the core's advice."""
    return WINDOW_ADVICE.get(exc.kind, exc.advice)


def network_failure_text(exc: NetworkDownloadError) -> str:
    """A network failure in words, from the one place that words them (:mod:`app.core.net_failures`): every
    endpoint tried and what failed there, what to do, then retry or resume: "resume" only when the download's
    ``.part`` files hold bytes, since with nothing kept there is nothing to resume."""
    words = f"{net_failures.joined(exc.failures)} {net_failures.advice(exc.failures)}"
    if exc.kept_bytes > 0:
        return (f"{words}\nPress Download again to resume: {format_bytes(exc.kept_bytes)} already downloaded is "
                "kept and it goes on from there.")
    return f"{words}\nPress Download again to retry."


def download_error_text(exc: Exception) -> str:
    """What went wrong with a download and what to do about it in this window."""
    return error_text(exc, WINDOW_ADVICE)
