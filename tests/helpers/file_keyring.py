"""A real keyring backend for tests: keyrings.alt's plaintext file, in the test's own folder.

In-process (``plaintext_keyring``: the keyring module's backend is swapped, and the user's is back afterwards) and for
child processes (``child_keyring_env``: the environment that makes a child ``python -m app`` pick the same kind of
backend, with its file under the test's folder instead of the user's).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import keyring
from keyrings.alt.file import PlaintextKeyring

CHILD_BACKEND = "keyrings.alt.file.PlaintextKeyring"


@contextmanager
def plaintext_keyring(path: Path) -> Iterator[PlaintextKeyring]:
    """This process's keyring is a plaintext file at ``path`` until the block ends."""
    previous = keyring.get_keyring()
    backend = PlaintextKeyring()
    backend.file_path = str(path)  # type: ignore[misc]
    keyring.set_keyring(backend)
    try:
        yield backend
    finally:
        keyring.set_keyring(previous)


def child_keyring_env(folder: Path) -> dict[str, str]:
    """Environment entries for a child process: the plaintext backend, its file under ``folder``."""
    return {"PYTHON_KEYRING_BACKEND": CHILD_BACKEND, "XDG_DATA_HOME": str(folder / "xdg")}
