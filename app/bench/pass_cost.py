"""Pass costs in CPU time, ours beside llama-server's (issue 39), for a machine shared with other jobs.

On a loaded machine wall-clock tok/s mostly measures the waits for a core; CPU clocks barely move with load. So:

- ``tokens``: CPU milliseconds per decoded token, ours (the decoding thread's ``thread_time``, after the first token)
  and llama-server's (its process's ``/proc/PID/stat`` utime+stime over ``n_predict`` N+1 less ``n_predict`` 1, so
  the prompt cancels out), the same prompt, model, threads and build, interleaved; off or d2t sidecar at depth 3;
- ``threads``: one-token passes and prompt passes of a plain target context with 1 thread against 2 (llama-server's
  default ``-t``: the physical cores), switched with ``llama_set_n_threads`` in one context, blocks interleaved A/B;
  wall and process CPU time;
- ``crop``: a plain target context's prompt pass with the last layer's FFN for every row (llama.cpp's default
  without nextn rows: ``llama_set_embeddings_nextn(ctx, false, false)``) against the rows with logits only (masked,
  what ``Context`` sets for plain decoding now); process CPU time and whether the logits are the same.

``python -m app.bench.pass_cost tokens|threads|crop [--mode off|d2t] [--runs N]``; the small demo model at
acceptance 0.8 (``bench spec --size small --acceptance 0.8``'s files) unless ``--dir`` names another demo folder.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np

from app.native.handles import Context, Model


def _proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tokens(folder: Path, mode: str, runs: int, n_tokens: int, threads: int) -> str:
    from app.backend.builder import BuildOptions
    from app.engine.config import EngineConfig
    from app.engine.speculative import SpeculativeDecoder
    from app.engine.stats import decode_tps
    from app.machines.upstream_server import UpstreamServer, server_binary

    draft = folder / "sidecar-d2t.gguf" if mode == "d2t" else None
    decoder = SpeculativeDecoder(EngineConfig(folder / "target.gguf", mode="sidecar" if draft else "off",
                                              draft=draft, draft_depth=3, n_ctx=2048, n_threads=threads))
    ours: list[float] = []
    theirs: list[float] = []
    ours_wall: list[float] = []  # wall ms a token (the one decode tok/s definition), beside the CPU
    theirs_wall: list[float] = []
    try:
        prompt = decoder.target.tokenize("<|im_start|>user\nTell me about the river and the town.<|im_end|>\n"
                                         "<|im_start|>assistant\nThe")
        decoder.generate(prompt, 8)
        binary = server_binary(BuildOptions(flavor="cpu"))
        with UpstreamServer(binary, folder / "target.gguf", draft=draft, draft_depth=3, threads=threads,
                            ctx_size=2048) as server:
            assert server.proc is not None
            pid = server.proc.pid
            server.complete(prompt, 8)
            for _ in range(runs):
                decoder.reset()
                stats = decoder.generate(prompt, n_tokens + 1).stats
                ours.append(1000 * stats.decode_cpu_seconds / max(1, stats.generated - 1))
                ours_wall.append(1000 / stats.decode_tps if stats.decode_tps > 0 else 0.0)
                c0 = _proc_cpu(pid)
                server.complete(prompt, 1)
                c1 = _proc_cpu(pid)
                done = server.complete(prompt, n_tokens + 1)
                c2 = _proc_cpu(pid)
                theirs.append(1000 * ((c2 - c1) - (c1 - c0)) / max(1, len(done.tokens) - 1))
                their_tps = decode_tps(done.generated, done.decode_span_seconds)
                theirs_wall.append(1000 / their_tps if their_tps > 0 else 0.0)
    finally:
        decoder.close()
    return (f"{mode}, {threads} thread(s): CPU ms per token, ours {statistics.median(ours):.2f} "
            f"({', '.join(f'{x:.1f}' for x in ours)}), llama-server {statistics.median(theirs):.2f} "
            f"({', '.join(f'{x:.1f}' for x in theirs)}); ours / llama-server "
            f"{statistics.median(ours) / statistics.median(theirs):.3f}; wall ms per token, ours "
            f"{statistics.median(ours_wall):.2f}, llama-server {statistics.median(theirs_wall):.2f}; "
            f"ours / llama-server {statistics.median(ours_wall) / statistics.median(theirs_wall):.3f}")


def threads(folder: Path, runs: int, prompt_tokens: int) -> str:
    model = Model(folder / "target.gguf")
    prompt = [int(t) for t in 1000 + np.arange(prompt_tokens) % 4000]
    steps = 8  # one-token passes a block
    lines = []
    try:
        for label, n in (("one-token pass", 1), (f"{prompt_tokens}-token prompt", prompt_tokens)):
            wall: dict[int, list[float]] = {1: [], 2: []}
            cpu: dict[int, list[float]] = {1: [], 2: []}
            # one context per kind of pass: one-token passes go on from position to position (no rollback)
            n_ctx = prompt_tokens + 16 if n > 1 else 64 + 2 * (runs + 1) * steps + 16
            with Context(model, n_ctx=n_ctx, n_batch=512, n_threads=1) as ctx:
                pos = 64
                if n == 1:
                    ctx.decode(prompt[:64], 0)
                for r in range(runs + 1):
                    for count in ((1, 2) if r % 2 else (2, 1)):
                        ctx.set_threads(count)
                        w, c = time.perf_counter(), time.process_time()
                        if n == 1:
                            for i in range(steps):
                                ctx.decode([1000 + i], pos)
                                pos += 1
                        else:
                            ctx.truncate(0)
                            w, c = time.perf_counter(), time.process_time()
                            for s in range(0, n, 512):
                                ctx.decode(prompt[s:s + 512], s, logits="last" if s + 512 >= n else "none")
                        scale = steps if n == 1 else 1
                        if r:
                            wall[count].append((time.perf_counter() - w) * 1000 / scale)
                            cpu[count].append((time.process_time() - c) * 1000 / scale)
            one, two = statistics.median(wall[1]), statistics.median(wall[2])
            lines.append(f"{label}: 1 thread {one:.1f} ms wall ({statistics.median(cpu[1]):.1f} CPU), "
                         f"2 threads {two:.1f} ms wall ({statistics.median(cpu[2]):.1f} CPU); 2/1 {two / one:.3f}")
    finally:
        model.close()
    return "\n".join(lines)


def crop(folder: Path, runs: int, prompt_tokens: int) -> str:
    model = Model(folder / "target.gguf")
    prompt = [int(t) for t in 1000 + np.arange(prompt_tokens) % 4000]
    times: dict[bool, list[float]] = {False: [], True: []}
    last: dict[bool, np.ndarray] = {}
    try:
        contexts = {masked: Context(model, n_ctx=prompt_tokens + 16, n_batch=prompt_tokens, n_threads=1)
                    for masked in (False, True)}
        try:
            for masked, ctx in contexts.items():
                ctx.set_nextn_outputs(False, masked)
            for r in range(runs + 1):
                for masked in ((False, True) if r % 2 else (True, False)):
                    ctx = contexts[masked]
                    ctx.truncate(0)
                    c = time.process_time()
                    ctx.decode(prompt, 0, logits="last")
                    if r:
                        times[masked].append((time.process_time() - c) * 1000)
                    last[masked] = ctx.logits(-1)
        finally:
            for ctx in contexts.values():
                ctx.close()
    finally:
        model.close()
    full, cropped = statistics.median(times[False]), statistics.median(times[True])
    return (f"{prompt_tokens}-token prompt pass, CPU ms: every row {full:.0f}, rows with logits {cropped:.0f} "
            f"({cropped / full:.3f}x); the same logits: {bool(np.array_equal(last[False], last[True]))}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m app.bench.pass_cost", description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=["tokens", "threads", "crop"])
    parser.add_argument("--dir", type=Path, help="a demo model folder (target.gguf, sidecar-d2t.gguf)")
    parser.add_argument("--mode", choices=["off", "d2t"], default="off")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--prompt-tokens", type=int, default=512)
    args = parser.parse_args()
    folder = args.dir
    if folder is None:  # bench spec --size small --acceptance 0.8's files (issue 39's figures)
        from app.core import paths
        from app.gguftools.builtin_demo import ensure_demo_model

        folder = ensure_demo_model(paths.cache_dir() / "bench-models" / "small-a0.8", size="small", acceptance=0.8,
                                   language="words").target.parent
    if args.what == "tokens":
        print(tokens(folder, args.mode, args.runs, args.tokens, args.threads))
    elif args.what == "threads":
        print(threads(folder, args.runs, args.prompt_tokens))
    else:
        print(crop(folder, args.runs, args.prompt_tokens))


if __name__ == "__main__":
    main()
