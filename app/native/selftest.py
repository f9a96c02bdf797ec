"""The backend self-test, run in a child process right after a build: ``python -m app.native.selftest DIR``.

It loads the built-in tiny demo model through the new backend and proves the three things the app
relies on: the target decodes as its table says, a d2t sidecar loads and its draft logits are the
full sidecar's at the d2t ids and -inf elsewhere (patched builds), or the d2t sidecar is refused with
the plain unpatched-backend message (unpatched builds). Prints one JSON line as its result.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

from app.backend.registry import BackendManifest
from app.core import paths
from app.core.errors import UnpatchedBackendError

SELFTEST_TOKENS = 24


def selftest_model_dir(version: str) -> Path:
    return paths.cache_dir() / "selftest-model" / version


def run(folder: Path) -> dict[str, Any]:
    os.environ["FASTMTP_BACKEND_DIR"] = str(folder)
    from app.gguftools.builtin_demo import d2t_ids, ensure_demo_model, table_agreement, table_prompt
    from app.native import draft_probe
    from app.native.handles import Model, system_info
    from app.native.loader import gpu_devices

    manifest = BackendManifest.read(folder)
    started = time.monotonic()
    result: dict[str, Any] = {
        "ok": False,
        "system_info": system_info(),
        "gpu_offload": bool(gpu_devices()),
    }
    n_gpu_layers = -1 if manifest.flavor == "cuda" and result["gpu_offload"] else 0
    demo = ensure_demo_model(selftest_model_dir(manifest.llama_cpp_python_version), size="tiny", language="words")

    with Model(demo.target, load_mtp=False, n_gpu_layers=n_gpu_layers) as target:
        prompt = table_prompt(demo)
        generated = draft_probe.greedy(target, prompt, SELFTEST_TOKENS)
        follows = table_agreement(demo, prompt[-1], generated)
        result["greedy_table_agreement"] = follows
        if follows < 0.9:
            result["error"] = f"greedy decoding followed the demo table on only {follows:.0%} of steps"
            return result
        sequence = prompt + generated
        full = draft_probe.probe(target, sequence, demo.sidecar_full, n_gpu_layers=n_gpu_layers)
        if manifest.patched:
            d2t = draft_probe.probe(target, sequence, demo.sidecar_d2t, n_gpu_layers=n_gpu_layers)
            ids = d2t_ids(demo.sidecar_d2t)
            outside = np.ones(d2t.draft_logits.shape[1], dtype=bool)
            outside[ids] = False
            max_diff = float(np.max(np.abs(d2t.draft_logits[:, ids] - full.draft_logits[:, ids])))
            result["d2t"] = {
                "loaded": True,
                "max_abs_diff_at_d2t_ids": max_diff,
                "all_minus_inf_elsewhere": bool(np.all(np.isneginf(d2t.draft_logits[:, outside]))),
                "acceptance_depth1": d2t.acceptance(len(prompt)),
            }
            if not result["d2t"]["all_minus_inf_elsewhere"] or max_diff > 1e-3:
                result["error"] = "d2t draft logits differ from the full sidecar's"
                return result
        else:
            try:
                draft_probe.probe(target, sequence, demo.sidecar_d2t)
                result["error"] = "an unpatched build loaded a d2t sidecar"
                return result
            except UnpatchedBackendError as exc:
                result["d2t"] = {"loaded": False, "refused_with": exc.message}
    result["seconds"] = round(time.monotonic() - started, 2)
    result["ok"] = True
    return result


def main() -> int:
    folder = Path(sys.argv[1]).resolve()
    try:
        result = run(folder)
    except Exception as exc:  # the parent needs one JSON answer whatever went wrong
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
    print(json.dumps(result), flush=True)
    return 0 if result.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
