"""Loaded models kept between loads of the engine, so a drafting-mode switch loads only what changed.

Auto drafting gives a model's first replies to drafting off, the embedded head and the d2t sidecar in turn, and
the selector switches modes at a click: each switch used to load the target again (seconds for the small demo,
much longer for a 27B model offloaded to a GPU). The target's weights do not depend on the mode, except that the
embedded head needs its MTP layers loaded (``load_mtp``); a target loaded with them decodes exactly as one
without (the same logits), so once loaded with them it serves every mode. Contexts are never pooled: each load
makes its own, so nothing of one conversation leaks into the next.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from app.engine.config import EngineConfig
from app.native.handles import LoadProgress, Model


@dataclass(frozen=True)
class ModelSlot:
    """What decides whether a loaded model can be used again: the file (and whether it is still the same file),
    how many layers went to the GPU, and which RPC workers share them."""

    path: str
    size: int
    mtime_ns: int
    n_gpu_layers: int
    rpc: tuple[str, ...]
    # a file replaced by another of the same size and mtime (a copy with ``cp -p``, ``touch -r``) is another inode,
    # or the same inode changed (a later ctime, which no one can set back): either is a new file (issue 37)
    inode: tuple[int, int] = (-1, -1)  # (st_dev, st_ino)
    ctime_ns: int = -1

    @classmethod
    def of(cls, path: Path, n_gpu_layers: int, rpc: tuple[str, ...] = ()) -> ModelSlot:
        resolved = Path(os.path.realpath(path))
        try:
            info = resolved.stat()
        except OSError:  # a missing file: no slot matches it, and loading it says what is wrong
            return cls(str(resolved), -1, -1, n_gpu_layers, rpc)
        return cls(str(resolved), info.st_size, info.st_mtime_ns, n_gpu_layers, rpc, (info.st_dev, info.st_ino),
                   info.st_ctime_ns)


class ModelPool:
    """The engine process's loaded models by slot: one target and the sidecars loaded with it."""

    def __init__(self) -> None:
        self._models: dict[ModelSlot, Model] = {}
        self._target: ModelSlot | None = None  # the target whose files are kept
        self.loads = 0  # models actually loaded from disk (the rest were reused)

    def get(self, path: Path, *, n_gpu_layers: int, rpc: tuple[str, ...] = (), load_mtp: bool,
            on_progress: LoadProgress | None = None) -> Model:
        """A loaded ``path``: the one kept when it fits (loaded with MTP layers serves a request without), else a
        new load that replaces it, reporting its progress to ``on_progress`` (a kept model reports nothing)."""
        slot = ModelSlot.of(path, n_gpu_layers, rpc)
        model = self._models.get(slot)
        if model is not None and (model.load_mtp or not load_mtp):
            return model
        if model is not None:  # loaded without the MTP layers the embedded head needs: free it before reloading
            model.close()
            del self._models[slot]
        model = Model(path, n_gpu_layers=n_gpu_layers, load_mtp=load_mtp, on_progress=on_progress)
        self._models[slot] = model
        self.loads += 1
        return model

    def retain(self, target: ModelSlot) -> None:
        """Before a load of ``target``: keep what was loaded with it (itself, its sidecars: a switch back to the
        sidecar loads nothing), free everything loaded with another target first, so a GPU's memory holds one
        model's files at a time."""
        if target != self._target:
            self.close()
            self._target = target

    def close(self) -> None:
        """Free every model."""
        for model in self._models.values():
            model.close()
        self._models.clear()
        self._target = None


def target_slot(config: EngineConfig) -> ModelSlot:
    """The target a load of ``config`` uses, as the pool knows it."""
    return ModelSlot.of(config.target, config.n_gpu_layers, config.rpc)
