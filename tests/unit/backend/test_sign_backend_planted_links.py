"""sign-backend writes its manifest and signature beside the archive without writing through links planted there
(the old fixed temporary name, or the final names themselves): the files they point to stay as they were."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

from app.backend.signing import manifest_name, sign_backend_archive, signature_name
from app.release.publish import keygen

NAME = "fastmtp-backend-0.1.0-cpu-linux-x86_64.tar.xz"
MANIFEST = {"id": "test-cpu", "llama_cpp_python_version": "0.3.0", "llama_cpp_commit": "abc", "sdist_sha256": "0" * 64,
            "patch_name": None, "patch_sha256": None, "flavor": "cpu", "cmake_args": [], "cuda_version": None,
            "cuda_archs": [], "compiler": "cc", "built_at": "2026-01-01T00:00:00Z", "build_seconds": 1.0}


def test_links_planted_beside_the_archive_are_never_written_through(tmp_path: Path) -> None:
    source = tmp_path / "src" / "test-cpu"
    source.mkdir(parents=True)
    (source / "fastmtp-backend.json").write_text(json.dumps(MANIFEST))
    folder = tmp_path / "release"
    folder.mkdir()
    archive = folder / NAME
    with tarfile.open(archive, "w:xz") as tar:
        tar.add(source, arcname="test-cpu")
    victims = []
    for planted in (f".{manifest_name(NAME)}.tmp", f".{signature_name(NAME)}.tmp", manifest_name(NAME),
                    signature_name(NAME)):
        victim = tmp_path / f"victim-{len(victims)}"
        victim.write_bytes(b"not yours")
        (folder / planted).symlink_to(victim)
        victims.append(victim)

    signed = sign_backend_archive(archive, keygen(tmp_path / "keys").private)

    assert all(victim.read_bytes() == b"not yours" for victim in victims)
    for written in (signed.manifest, signed.signature):
        assert not written.is_symlink() and written.stat().st_size > 0
    assert json.loads(signed.manifest.read_bytes())["archive"]["size"] == archive.stat().st_size
