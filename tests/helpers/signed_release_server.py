"""A signed release served on 127.0.0.1 to a user of its own, for the Models page's download tests.

The user's folders and keyring are the test's (a plaintext keyring file, no hub token in the environment), the
publisher key is made and pinned, ``payload`` (release name -> bytes) is signed as version 1 and served.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from app.core import secrets
from app.release import signing, trust
from app.release.catalog import load_catalog
from app.release.publish import keygen, sign_release
from tests.helpers.file_keyring import plaintext_keyring
from tests.helpers.release_server import ReleaseServer


@contextmanager
def own_user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Data and config folders under ``tmp_path`` and a keyring file there; the user's keyring is back after."""
    monkeypatch.setenv("FASTMTP_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("FASTMTP_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.delenv(secrets.ENV_VAR, raising=False)
    with plaintext_keyring(tmp_path / "keyring.cfg"):
        yield


def serve_signed_release(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                         payload: dict[str, bytes]) -> Iterator[ReleaseServer]:
    """The body of a ``server`` fixture: ``payload`` signed by a pinned key and served, for a user of its own."""
    repo = load_catalog().repo
    with own_user(tmp_path, monkeypatch):
        pair = keygen(tmp_path / "keys")
        trust.pin_key(repo, signing.load_public_key(pair.public.read_bytes(), str(pair.public)))
        with ReleaseServer(signed_release_files(tmp_path / "release", payload, pair.private)) as srv:
            yield srv


def signed_release_files(folder: Path, payload: dict[str, bytes], private_key: Path,
                         version: str = "1") -> dict[str, bytes]:
    """``payload`` written to ``folder`` (new) and signed there as ``version``: every file of the release by name,
    ready for a ReleaseServer."""
    folder.mkdir()
    for name, data in payload.items():
        (folder / name).write_bytes(data)
    sign_release(folder, private_key, version=version)
    return {p.name: p.read_bytes() for p in folder.iterdir()}
