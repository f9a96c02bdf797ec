"""Our FastMTP d2t patch: find it, fingerprint it, check it, apply it to a vendored llama.cpp tree."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from app.core.errors import PatchError
from app.core.hashing import sha256_file
from app.core.resources import patches_dir

DEFAULT_PATCH_NAME = "qwen35-d2t-4df29be.patch"


@dataclass(frozen=True)
class Patch:
    """A patch file against ``vendor/llama.cpp`` (paths relative to the llama.cpp root, -p1)."""

    path: Path

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def sha256(self) -> str:
        return sha256_file(self.path)


def default_patch() -> Patch:
    return Patch(patches_dir() / DEFAULT_PATCH_NAME)


def _git_apply(tree: Path, patch: Patch, *extra: str) -> subprocess.CompletedProcess[str]:
    git = shutil.which("git")
    if git is None:
        raise PatchError("git is needed to apply the d2t patch and was not found.",
                         "Install git (https://git-scm.com) and build again.")
    # outside any repository git apply works like patch -p1; never let it find a repo above the tree
    env = dict(os.environ, GIT_CEILING_DIRECTORIES=str(tree.parent))
    return subprocess.run([git, "apply", *extra, str(patch.path)], cwd=tree, env=env,
                          capture_output=True, text=True, check=False)


def is_applied(tree: Path, patch: Patch) -> bool:
    """True when the patch is already in ``tree`` (it would reverse cleanly)."""
    return _git_apply(tree, patch, "--check", "--reverse").returncode == 0


def check(tree: Path, patch: Patch) -> None:
    """Raise PatchError, with git's reason, unless the patch applies cleanly to ``tree``."""
    proc = _git_apply(tree, patch, "--check")
    if proc.returncode != 0:
        raise PatchError(
            f"The d2t patch {patch.name} does not apply to {tree}:\n{proc.stderr.strip()}",
            "This patch targets the llama.cpp vendored by llama-cpp-python 0.3.35 (commit 4df29be). "
            "Build from that pinned source, or update the patch for the newer tree.",
        )


def apply(tree: Path, patch: Patch) -> None:
    """Apply the patch after checking it; applying to an already patched tree is a no-op."""
    if is_applied(tree, patch):
        return
    check(tree, patch)
    proc = _git_apply(tree, patch)
    if proc.returncode != 0:
        raise PatchError(f"Applying {patch.name} failed:\n{proc.stderr.strip()}")
