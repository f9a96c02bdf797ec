"""`bench gguf`: the header reader against gguf's GGUFReader on a tiny demo model it writes itself (248,320
tokens: over 100 MB), in a folder and a config of its own."""

from __future__ import annotations

import io
import os
from pathlib import Path


def test_bench_gguf_times_every_variant_and_leaves_the_registry_alone(tmp_path: Path) -> None:
    from app.bench import headers
    from app.models import local_models

    before = local_models.load_registry()
    config = os.environ.get("FASTMTP_CONFIG_DIR")
    log = io.StringIO()
    result = headers.run("tiny", runs=2, folder=tmp_path, log=log)
    assert "run 2/2: lazy" in log.getvalue()
    data = result.to_dict()
    assert (data["vocab_size"], data["runs"]) == (248320, 2) and data["file_bytes"] > 100_000_000
    timings = data["timings"]
    assert set(timings) == {"lazy_inspect_cold", "gguf_reader", "lazy_inspect_cached", "models_add_cold"}
    assert all(len(t["seconds"]) == 2 and 0 < t["min_s"] <= t["median_s"] <= t["max_s"] for t in timings.values())
    assert data["speedup_median"] > 0  # no verdict on speed here: `bench gguf` is where speed is measured
    assert "| `models add`" in result.markdown() and "248,320 tokens" in result.markdown()
    assert os.environ.get("FASTMTP_CONFIG_DIR") == config and local_models.load_registry() == before
    assert local_models.find(tmp_path / "model" / "target.gguf") is None
    assert (tmp_path / "config" / local_models.FILE_NAME).is_file()  # it added the model in its own folder
