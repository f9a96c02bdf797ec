"""Which platform this is, in the words the signed feeds use: ``linux``, ``windows``, ``macos`` (the backend
feed's archives name the system alone) and ``linux-x86_64``, ``windows-x86_64``, ``macos-arm64`` (the app feed's
downloads name the system and the processor). One home, so the two feeds can never name a system differently."""

from __future__ import annotations

import platform as host
import sys

_ARCH_NAMES = {"amd64": "x86_64", "x64": "x86_64", "aarch64": "arm64"}


def system_name(system: str | None = None) -> str:
    """``linux``, ``windows``, ``macos`` (others as Python names them, less a trailing version: ``freebsd``);
    ``system`` a ``sys.platform`` value, this machine's by default."""
    system = (system or sys.platform).lower()
    return "windows" if system.startswith("win") else "macos" if system == "darwin" else \
        system.rstrip("0123456789") or "unknown"


def current_platform(system: str | None = None, machine: str | None = None) -> str:
    """``linux-x86_64``, ``windows-x86_64``, ``macos-arm64``: the system and the processor (``machine`` a
    ``platform.machine()`` value, this machine's by default), as the app feed names a platform's download."""
    arch = (machine or host.machine()).lower() or "unknown"
    return f"{system_name(system)}-{_ARCH_NAMES.get(arch, arch)}"
