"""Signed releases made of real files (the tiny demo model's), installed the way ``fetch`` installs them.

``install_release`` signs a folder holding ``files`` (release name -> source file) and the patch,
verifies it with the publisher key (sizes and sha256 included) and moves it into ``models`` with
:func:`app.release.install.install`. Sources are hard-linked, never moved or changed.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from app.release import signing
from app.release.catalog import load_catalog, repo_slug
from app.release.install import Installed, install
from app.release.publish import KeyPair, sign_release
from app.release.verify import verify_files, verify_metadata

CATALOG = load_catalog()
MODEL = CATALOG.quant("Q4_K_P").file
SIDECAR = CATALOG.sidecar.file  # the FastMTP d2t sidecar
FULL_SIDECAR = SIDECAR.replace("-32K.gguf", "-full.gguf")
PATCH = CATALOG.integrity.patch


def _link(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def install_release(work: Path, key: KeyPair, models: Path, files: dict[str, Path], *, repo: str | None = None,
                    version: str = "1") -> Installed:
    """Sign, verify and install a release of ``files`` into ``models/<repo slug>``."""
    repo = repo or CATALOG.repo
    release, staging = work / "release", work / "staging"
    for folder in (release, staging):
        folder.mkdir(parents=True)
    for name, source in files.items():
        _link(source, release / name)
    (release / PATCH).write_bytes(b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n")
    sign_release(release, key.private, version=version, repo=repo)
    for path in release.iterdir():
        _link(path, staging / path.name)
    fingerprint = signing.fingerprint(signing.load_public_key(key.public.read_bytes(), str(key.public)))
    meta = verify_metadata(staging, repo=repo, trust_fingerprint=fingerprint)
    verified = verify_files(meta, staging, [*files, PATCH])
    return install(meta, verified, models / repo_slug(repo))
