"""One exception hierarchy for the app: every error carries words for the user, what to do next, and a ``kind``.

``kind`` is a short kebab-case name of the situation ("sha256-mismatch", "disk-full", …) that scripts (the
CLI's ``--json`` error object) and the window choose by, so neither ever matches the English of a message:
the words may change, the kind does not. Each class has a default kind; a raise site passes a more specific
``kind=`` where one class covers situations that must be told apart.
"""

from __future__ import annotations

from typing import Any

# The CLI's exit code of an error, chosen by its kind: the instance's own, else the default kind of its class
# or of the nearest base class listed here. Kinds not listed (and plain job failures) exit 1.
# 1 a failure of the job itself, 2 bad usage, 3 the network, 4 verification, 130 cancelled by the user.
EXIT_CODES: dict[str, int] = {
    "job-failed": 1,
    "bad-usage": 2,
    "catalog-invalid": 2,
    "download-network": 3,
    "remote-network": 3,
    "cuda-wheels-unreachable": 3,
    "verification-failed": 4,
    "job-cancelled": 130,
}


def exit_code_of(kind: str | None, cls: type[BaseException]) -> int:
    """The exit code for ``kind`` raised as ``cls``: the kind's own entry, else the first class default
    kind along ``cls``'s bases that has one, else 1."""
    if kind is not None and kind in EXIT_CODES:
        return EXIT_CODES[kind]
    for base in cls.__mro__:
        default = base.__dict__.get("kind")
        if isinstance(default, str) and default in EXIT_CODES:
            return EXIT_CODES[default]
    return 1


class FastMTPError(Exception):
    """Base of all errors the app raises on purpose.

    ``message`` says what went wrong, ``advice`` says what the user can do about it, ``kind`` names the
    situation for machines. ``exit_code`` is what the CLI exits with, from :data:`EXIT_CODES` (a subclass or
    an instance may still set its own, e.g. a child's exit code passed on).
    """

    kind: str = "job-failed"
    exit_code: int = 1

    def __init_subclass__(cls, **kwargs: object) -> None:
        """Each subclass's exit code comes from the table unless it states its own."""
        super().__init_subclass__(**kwargs)
        if "exit_code" not in cls.__dict__:
            cls.exit_code = exit_code_of(None, cls)

    def __init__(self, message: str, advice: str = "", *, kind: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.advice = advice
        if kind is not None:
            self.kind = kind  # a more specific kind than the class default
            if kind in EXIT_CODES:
                self.exit_code = EXIT_CODES[kind]

    def __str__(self) -> str:
        return f"{self.message}\n{self.advice}" if self.advice else self.message

    def to_dict(self) -> dict[str, Any]:
        """Class name, message and advice: the fields an in-process event (``{"kind": "error", **...}``) spreads,
        so it has no ``kind`` key of its own; :meth:`to_json` is the CLI's error object."""
        return {"error": type(self).__name__, "message": self.message, "advice": self.advice}

    def to_json(self) -> dict[str, Any]:
        """The CLI's ``--json`` error object: :meth:`to_dict` (a subclass's extra fields too) plus the
        machine-readable ``kind``."""
        return {**self.to_dict(), "kind": self.kind}


class StorageError(FastMTPError):
    """A folder or file of the app's own state (config, data, settings, history) cannot be used."""

    kind = "storage"


class GGUFError(FastMTPError):
    """A GGUF file is unreadable, truncated or not what the command needs."""

    kind = "gguf-invalid"


class SidecarError(GGUFError):
    """A sidecar cannot be built, or does not fit its target."""

    kind = "sidecar-invalid"


class BackendError(FastMTPError):
    """The llama.cpp backend cannot be fetched, patched, built, found or loaded."""

    kind = "backend"


class ToolchainError(BackendError):
    """A compiler, CMake, ninja or the CUDA toolkit is missing or unusable."""

    kind = "toolchain-missing"


class BuildCancelled(BackendError):
    """The user cancelled a backend build; nothing was installed."""

    kind = "build-cancelled"


class PatchError(BackendError):
    """Our d2t patch does not apply to the backend source."""

    kind = "patch-failed"


class UnpatchedBackendError(BackendError):
    """A d2t sidecar met a backend built without the FastMTP d2t patch."""

    kind = "unpatched-backend"


class ModelLoadError(FastMTPError):
    """llama.cpp refused to load a model file."""

    kind = "model-load"


class DownloadError(FastMTPError):
    """A file could not be fetched: network, server or mirror trouble (CLI exit code 3)."""

    kind = "download-network"


class DiskSpaceError(FastMTPError):
    """Not enough free space for what must be written; nothing was started or kept."""

    kind = "disk-full"


class VerificationError(FastMTPError):
    """A file, a checksum list, a manifest or a signature failed its check (CLI exit code 4). ``file`` names the
    file that failed, where there is one, so the window marks its row without reading the message."""

    kind = "verification-failed"

    def __init__(self, message: str, advice: str = "", *, kind: str | None = None, file: str | None = None) -> None:
        super().__init__(message, advice, kind=kind)
        self.file = file


class UnsafeInputError(VerificationError):
    """A name or an archive from a file or the network would reach outside its folder or beyond its limits: a path
    where a name belongs, a link out, too many bytes or members. Refused before anything is written (exit code 4)."""

    kind = "unsafe-input"


class TrustError(VerificationError):
    """The publisher key is not trusted, or differs from the one trusted before."""

    kind = "untrusted-key"


class EngineError(FastMTPError):
    """The chat engine cannot go on: a full context, a bad model pair, a crashed worker."""

    kind = "engine"


class ContextFullError(EngineError):
    """The conversation no longer fits in the context window.

    ``policy`` is the chat's overflow policy that refused it (``"stop"``: the window offers a new chat carrying
    the last exchange), ``used`` and ``context`` the tokens the conversation needs and the context holds."""

    kind = "context-full"

    def __init__(self, message: str, advice: str = "", *, policy: str = "", used: int = 0, context: int = 0) -> None:
        super().__init__(message, advice)
        self.policy, self.used, self.context = policy, used, context

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "policy": self.policy, "used": self.used, "context": self.context}


class JobCancelled(FastMTPError):
    """The user stopped the job; nothing was kept (CLI exit code 130)."""

    kind = "job-cancelled"
