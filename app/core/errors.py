"""One exception hierarchy for the app: every error carries words for the user and what to do next."""

from __future__ import annotations


class FastMTPError(Exception):
    """Base of all errors the app raises on purpose.

    ``message`` says what went wrong, ``advice`` says what the user can do about it. ``exit_code`` is
    what the CLI exits with: 1 for a failure of the job itself (2 is kept for bad usage, 3 for the
    network, 4 for verification).
    """

    exit_code = 1

    def __init__(self, message: str, advice: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.advice = advice

    def __str__(self) -> str:
        return f"{self.message}\n{self.advice}" if self.advice else self.message

    def to_dict(self) -> dict[str, str]:
        return {"error": type(self).__name__, "message": self.message, "advice": self.advice}


class StorageError(FastMTPError):
    """A folder or file of the app's own state (config, data, settings, history) cannot be used."""


class GGUFError(FastMTPError):
    """A GGUF file is unreadable, truncated or not what the command needs."""


class SidecarError(GGUFError):
    """A sidecar cannot be built, or does not fit its target."""


class BackendError(FastMTPError):
    """The llama.cpp backend cannot be fetched, patched, built, found or loaded."""


class ToolchainError(BackendError):
    """A compiler, CMake, ninja or the CUDA toolkit is missing or unusable."""


class BuildCancelled(BackendError):
    """The user cancelled a backend build; nothing was installed."""


class PatchError(BackendError):
    """Our d2t patch does not apply to the backend source."""


class UnpatchedBackendError(BackendError):
    """A d2t sidecar met a backend built without the FastMTP d2t patch."""


class ModelLoadError(FastMTPError):
    """llama.cpp refused to load a model file."""


class DownloadError(FastMTPError):
    """A file could not be fetched: network, server or mirror trouble (CLI exit code 3)."""

    exit_code = 3


class DiskSpaceError(FastMTPError):
    """Not enough free space for what must be written; nothing was started or kept."""


class VerificationError(FastMTPError):
    """A file, a checksum list, a manifest or a signature failed its check (CLI exit code 4)."""

    exit_code = 4


class UnsafeInputError(VerificationError):
    """A name or an archive from a file or the network would reach outside its folder or beyond its limits: a path
    where a name belongs, a link out, too many bytes or members. Refused before anything is written (exit code 4)."""


class TrustError(VerificationError):
    """The publisher key is not trusted, or differs from the one trusted before."""


class EngineError(FastMTPError):
    """The chat engine cannot go on: a full context, a bad model pair, a crashed worker."""


class ContextFullError(EngineError):
    """The conversation no longer fits in the context window."""


class JobCancelled(FastMTPError):
    """The user stopped the job; nothing was kept (CLI exit code 130)."""

    exit_code = 130
