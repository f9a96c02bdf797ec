"""``python -m app bench draft-head | ops | gui | fetch | lossless | matrix | sampler | attention | spec | prompt |
threads``: the benchmarks."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.cli.common import (
    Subparsers,
    acceptance_argument,
    adaptive_max_argument,
    bandwidth_argument,
    bench_context_argument,
    command,
    context_list_argument,
    count_argument,
    depth_argument,
    emit,
    emit_line,
    group,
    log_stderr,
    megabytes_argument,
    optional_tokens_argument,
    runs_argument,
    stop_on_signals,
    time_limit_argument,
    tokens_argument,
)
from app.core import engine_limits, paths
from app.engine.config import DRAFT_DEPTH_MAX
from app.models.sidecar_job import Control

if TYPE_CHECKING:
    from app.gguftools.demo_model import DemoModel, Size


def write_json(path: Path | None, data: Any) -> None:
    """``--out``: the result as indented JSON (nothing without the option)."""
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def report(args: argparse.Namespace, data: Any, markdown: Callable[[], str], title: str, note: str = "") -> None:
    """A benchmark's result: printed (``--json`` or its table), written to ``--out``, appended to ``--record``."""
    from app.bench.report import record, this_command

    emit(args, data, markdown)
    write_json(args.out, data)
    if args.record:
        record(args.record, title, this_command(), markdown(), note)


def bench_demo(size: Size, acceptance: float | None = None) -> DemoModel:
    """The demo model a benchmark runs on, kept in the cache (written once); the default acceptance unless given."""
    from app.gguftools.builtin_demo import ensure_demo_model

    if acceptance is None:
        folder = paths.cache_dir() / "bench-models" / size
        print(f"preparing the {size} demo model in {folder} ...", file=sys.stderr, flush=True)
        return ensure_demo_model(folder, size=size, language="words")
    folder = paths.cache_dir() / "bench-models" / f"{size}-a{acceptance}"
    print(f"preparing the {size} demo model (acceptance {acceptance}) in {folder} ...", file=sys.stderr, flush=True)
    return ensure_demo_model(folder, size=size, acceptance=acceptance, language="words")


def bench_files(args: argparse.Namespace, acceptance: float | None = None) -> tuple[Path, Path, Path, str]:
    """Target, full and d2t sidecar and a name for the report: ``--target/--full/--d2t`` (all three, d2t checked),
    else the demo model of ``--size``."""
    if args.target:
        if not (args.full and args.d2t):
            raise SystemExit("--target needs --full and --d2t too")
        from app.gguftools.d2t import check_sidecars_for  # numpy and gguf: only when needed
        check_sidecars_for(args.target, args.full, args.d2t)
        return args.target, args.full, args.d2t, args.target.name
    demo = bench_demo(args.size, acceptance)
    name = f"{args.size} demo model" + (f", acceptance {acceptance}" if acceptance is not None else "")
    return demo.target, demo.sidecar_full, demo.sidecar_d2t, name


def cmd_bench_draft_head(args: argparse.Namespace) -> int:
    from app.bench import draft_head
    from app.bench.report import record, this_command

    target, full, d2t, _name = bench_files(args)
    result = draft_head.run(target, {"full": full, "d2t": d2t}, runs=args.runs,
                            n_threads=args.threads, n_gpu_layers=args.gpu_layers)
    emit(args, result.to_dict(), result.markdown)
    if args.record:
        record(args.record, f"Draft head: full vs d2t ({args.size if not args.target else target.name})",
               this_command(), result.markdown(),
               f"Medians of {result.runs} interleaved runs. The head matmul is timed inside the step with "
               "llama.cpp's eval callback. Arithmetic bound for the head: 248320 / 32768 = 7.58x.")
    return 0


def cmd_bench_fetch(args: argparse.Namespace) -> int:
    from app.bench import fetch
    from app.bench.report import record, this_command

    result = fetch.run(args.size_mb * 1024 * 1024, args.runs, paths.cache_dir() / "bench-fetch")
    emit(args, result.to_dict(), result.markdown)
    if args.record:
        record(args.record, f"Fetcher vs curl ({args.size_mb} MiB from 127.0.0.1)", this_command(),
               result.markdown(),
               "MB/s are 10^6 bytes per second. Ours is timed inside fetch_files (sha256 while streaming, size "
               "check, fsync, rename); curl from spawn to exit, writing the same disk. Peak RSS is each child's "
               "ru_maxrss.")
    return 0


def cmd_bench_spec(args: argparse.Namespace) -> int:
    from app.backend.builder import BuildOptions
    from app.bench import spec
    from app.bench.report import record, this_command

    target, full, d2t, name = bench_files(args, args.acceptance)
    depths = [int(d) for d in args.depths.split(",")]
    modes = args.modes.split(",")
    variants = spec.default_variants(depths, modes, upstream=not args.no_upstream, adaptive_max=args.adaptive_max)
    remote = _remote_server(args.remote) if args.remote else None
    if remote is not None:
        variants.append(spec.Variant("remote", "off", remote=remote.name))
    server = args.server
    if not args.no_upstream and server is None:
        from app.machines.upstream_server import build_server

        print("building (or reusing) llama-server from the patched tree ...", file=sys.stderr, flush=True)
        server = build_server(BuildOptions(flavor="cuda" if args.gpu_layers != 0 else "cpu"))
    out = args.out or paths.cache_dir() / "bench-spec"
    decisions = out / "adaptive-decisions.jsonl" if any(v.adaptive for v in variants) else None
    result = spec.run(target, {"full": full, "d2t": d2t}, variants=variants, n_tokens=args.tokens, runs=args.runs,
                      n_threads=args.threads, n_gpu_layers=args.gpu_layers, server_binary=server,
                      time_limit_s=args.time_limit, remote=remote, interleave=args.interleave, decisions=decisions,
                      depth_memory=out / "depth-memory" if args.adaptive_start == "warm" else None, log=log_stderr,
                      context=args.context)
    result.model = name
    out.mkdir(parents=True, exist_ok=True)
    (out / "spec.json").write_text(json.dumps(result.to_dict(), indent=2) + "\n")
    (out / "spec.md").write_text(result.markdown())
    chart = result.chart(args.chart or out / "spec.png")
    drawn = spec.decision_charts(decisions, out) if decisions is not None else []
    emit(args, result.to_dict(), result.markdown)
    print(f"wrote {out / 'spec.json'}, {out / 'spec.md'} and {chart}"
          + (f"; adaptive depth's decisions in {decisions} and {', '.join(p.name for p in drawn)}" if drawn else ""),
          file=sys.stderr)
    if args.record:
        link = ""
        if args.chart:
            link = f"![bench spec chart]({Path(args.chart).resolve().relative_to(args.record.resolve().parent)})\n\n"
        record(args.record, f"Speculative decoding matrix ({name})", this_command(), result.markdown(),
               link + f"Decode tok/s medians of {result.runs} interleaved runs, {result.n_tokens} tokens per prompt, "
               "greedy, each prompt a fresh conversation; decode tok/s is the tokens after each reply's first over "
               "the time from its first token to its last. Acceptance counts the drafts actually tested. Bound: the "
               "speedup over off that the measured acceptance and the measured draft-step and verify-pass costs "
               "allow with zero loop overhead; efficiency = measured speedup / bound. Each round splits into the "
               "verify pass (ms/pass), the draft steps (ms per draft token) and Python ms/round (decode time "
               "outside llama.cpp); native times are taken after llama_synchronize, so device work is in them.")
    return 0


def _remote_server(value: str) -> Any:
    """``--remote``: a saved server's name (its key from the keyring), or a URL (no key)."""
    from app.machines.remote_servers import RemoteServer, check_url, get_server, load_servers

    if any(server.name == value for server in load_servers()) or "://" not in value:
        return get_server(value)
    url, _warning = check_url(value)
    return RemoteServer(url.split("://", 1)[1].replace(":", "-").replace("/", "-")[:64], url)


def cmd_bench_ops(args: argparse.Namespace) -> int:
    from app.bench import ops

    if args.model:
        target, draft = args.model, args.draft
        name = target.name
        from app.gguftools.d2t import check_sidecars_for  # numpy and gguf: only when needed
        check_sidecars_for(target, None if args.no_draft else draft)
    else:
        demo = bench_demo(args.size)
        target, draft = demo.target, args.draft or demo.sidecar_d2t
        name = f"{args.size} demo model"
    if args.no_draft:
        draft = None
    try:
        sizes = [int(n) for n in args.tokens_per_pass.split(",") if n.strip()]
    except ValueError:
        raise SystemExit(f"--tokens-per-pass takes numbers separated by commas, not {args.tokens_per_pass!r}") from None
    if not all(1 <= n <= 9 for n in sizes):
        raise SystemExit("--tokens-per-pass takes passes of 1 to 9 tokens (k+1 for draft depths up to 8)")
    result = ops.run(target, draft, tokens_per_pass=sizes, prompt_tokens=args.prompt_tokens, runs=args.runs,
                     profile_runs=args.profile_runs, n_threads=args.threads, n_gpu_layers=args.gpu_layers,
                     bandwidth_gbs=args.bandwidth_gbs, log=log_stderr)
    result.model = name
    report(args, result.to_dict(), result.markdown, f"Per-op profile of a target pass ({name})",
           f"Plain passes: medians of {result.runs} synchronized passes in a context without callbacks, rolled "
               "back after each. Profiled: the eval callback computes one node at a time and synchronizes after "
               "each, so its sums exceed the plain times; read the shares.")
    return 0


def cmd_bench_gui(args: argparse.Namespace) -> int:
    from app.bench import gui

    result = gui.run(tokens=args.tokens, rate=args.rate)
    report(args, result.to_dict(), result.markdown, f"GUI responsiveness ({args.tokens}-token markdown reply)",
           "Real ChatView (markdown, pygments, HUD), offscreen Qt, synthetic token events. Cost: append + draw "
               "after every token, median of 100 tokens around each point. Latency: a 10 ms heartbeat timer's "
               "lateness while a worker thread streams tokens through the GUI's queued-signal path.")
    return 0


def cmd_bench_sampler(args: argparse.Namespace) -> int:
    from app.bench import sampler

    target = args.target or bench_demo(args.size).target
    result = sampler.run(target, runs=args.runs, rows=args.rows, n_threads=args.threads, gpu_layers=args.gpu_layers,
                         decode_tokens=args.decode_tokens)
    report(args, result.to_dict(), result.markdown, f"Sampling: host time per emitted token ({target.name})",
           "Each sample: one native chain picking every row of one batched pass, as the "
               "verify loop does; medians over interleaved runs.")
    return 0


def cmd_bench_attention(args: argparse.Namespace) -> int:
    from app.bench import attention

    target, _full, d2t, name = bench_files(args, None if args.target else args.acceptance)
    table = None if args.target else bench_demo(args.size, args.acceptance).table
    result = attention.run(target, d2t, contexts=args.contexts, tokens=args.tokens, runs=args.runs,
                           depth=args.depth, threads=args.threads, prompt=list(table.cycle) if table else None)
    result.model = name
    report(args, result.to_dict(), result.markdown, f"Attention kernels by context length ({name})",
           "Each run fills the context with a prompt of that many tokens and decodes one reply, every mode and "
               "kernel in turn (the order reversed every other run); medians after one warm-up round.")
    return 0


def cmd_bench_window(args: argparse.Namespace) -> int:
    from app.bench import window
    from app.engine.config import EngineConfig

    target, _full, d2t, name = bench_files(args)
    config = EngineConfig(target, mode="sidecar" if args.mode == "d2t" else "off",
                          draft=d2t if args.mode == "d2t" else None, draft_depth=args.depth, n_threads=args.threads)
    result = window.run(config, name, max_tokens=args.tokens, samples=args.runs, log=log_stderr, turns=args.turns)
    report(args, result.to_dict(), result.markdown, f"The window's speed ({name})")
    return 0


def cmd_bench_mode_switch(args: argparse.Namespace) -> int:
    from app.bench import mode_switch
    from app.engine.config import EngineConfig

    target, _full, d2t, name = bench_files(args)
    config = EngineConfig(target, draft=d2t, draft_depth=args.depth, n_threads=args.threads,
                          n_gpu_layers=args.gpu_layers)
    result = mode_switch.run(config, name, rounds=args.rounds)
    report(args, result.to_dict(), result.markdown, f"Drafting-mode switches ({name})")
    return 0


def cmd_bench_threads(args: argparse.Namespace) -> int:
    from app.bench import spec, threads
    from app.engine.config import EngineConfig, Mode
    from app.native.handles import default_threads

    target, _full, d2t, name = bench_files(args, args.acceptance)
    named: dict[str, Mode] = {"off": "off", "d2t": "sidecar"}
    modes = [named[m] for m in args.modes.split(",")]
    count = args.threads or default_threads()
    sets = spec.tokenize_prompts(target, {prompt_set: spec.load_prompts(prompt_set) for prompt_set in spec.PROMPT_SETS})
    prompts = [prompt for prompt_set in sets.values() for prompt in prompt_set]  # bench spec's 8 prompts
    config = EngineConfig(target, draft=d2t, draft_depth=args.depth)
    result = threads.run(config, name, count, modes, prompts, tokens=args.tokens, runs=args.runs)
    report(args, result.to_dict(), result.markdown, f"One-token passes' threads ({name})",
           "Decode tok/s medians of interleaved runs (the variants' order rotating prompt by prompt, fresh engines "
           "each run), greedy; batches always take every decode thread.")
    return 0


def cmd_bench_long_chat(args: argparse.Namespace) -> int:
    from app.bench import long_chat
    from app.engine.config import EngineConfig

    if args.reopen_tokens + 2 * max(args.max_tokens, 64) + 160 > args.ctx:
        raise SystemExit(f"--reopen-tokens {args.reopen_tokens} leaves too little of --ctx {args.ctx} for the chat's "
                         "last turns and the reopened one: lower it or raise --ctx")
    target, _full, d2t, name = bench_files(args)
    config = EngineConfig(target, mode="sidecar" if args.mode == "d2t" else "off",
                          draft=d2t if args.mode == "d2t" else None, draft_depth=args.depth, n_ctx=args.ctx,
                          n_threads=args.threads, n_gpu_layers=args.gpu_layers)
    result = long_chat.run(config, name, turns=args.turns, max_tokens=args.max_tokens, reread_every=args.reread_every,
                           reopen_tokens=args.reopen_tokens, runs=args.runs, log=log_stderr)
    report(args, result.to_dict(), result.markdown, f"Long chats (issue 34; {name})",
           "Times to first token are the caller's, from the request to the first token event (a restore's file "
           "read and the worker's state lookup are in them). Re-read: a second engine worker, emptied before each "
           "measurement, reads the same prompt (the messages that turn kept) from scratch. Reopen: each run's chat "
           "was built and left, the worker process restarted (no memory copy left) and warmed with one reply outside "
           "any chat; the restored and the re-read turn take turns going first. State size: file bytes over the "
           "tokens in the file.")
    return 0


def cmd_bench_lossless(args: argparse.Namespace) -> int:
    from app.bench import lossless
    from app.bench.spec import PROMPT_SETS, load_prompts, tokenize_prompts
    from app.gguftools.inspect import inspect_gguf

    if not args.target:  # a real target alone is fine here: its embedded head is checked
        demo = bench_demo(args.size, args.acceptance)
        args.target, args.full, args.d2t = demo.target, demo.sidecar_full, demo.sidecar_d2t
    from app.gguftools.d2t import check_sidecars_for  # numpy and gguf: only when needed
    check_sidecars_for(args.target, args.full, args.d2t)
    prompts = tokenize_prompts(args.target, {name: load_prompts(name)[:args.prompts] for name in PROMPT_SETS})
    info = inspect_gguf(args.target)
    variants = lossless.default_variants(bool(info.nextn_layers), args.d2t, args.full)
    result = lossless.run(args.target, [p for group in prompts.values() for p in group], variants,
                          n_tokens=args.tokens, n_gpu_layers=args.gpu_layers, n_threads=args.threads)
    emit(args, result.to_dict(), result.markdown)
    return 0 if result.ok else 1


def cmd_bench_matrix(args: argparse.Namespace) -> int:
    """The Benchmark page's job: with ``--json`` one event per line, then ``{"kind": "result", ...}``."""
    from app.bench.matrix import MatrixRequest, run_matrix, write_outputs

    control = stop_on_signals(Control())
    sidecars = {kind: path for kind, path in (("d2t", args.d2t), ("full", args.full)) if path is not None}
    request = MatrixRequest(target=args.target, sidecars=sidecars, modes=tuple(args.modes.split(",")),
                            depths=tuple(int(d) for d in args.depths.split(",") if d), n_tokens=args.tokens,
                            runs=args.runs, prompt_sets=tuple(args.prompt_sets.split(",")), n_threads=args.threads,
                            n_gpu_layers=args.gpu_layers, name=args.name or args.target.name)
    result = run_matrix(request, lambda p: emit_line(args, p.to_dict(), f"[{p.done}/{p.total}] {p.message}"),
                        control)
    files = write_outputs(result, request, args.out or paths.cache_dir() / "bench-matrix")

    def text() -> None:
        print(result.markdown())
        print(f"wrote {files['json']}, {files['markdown']} and {files['png']}", file=sys.stderr)

    emit(args, dict(result.to_dict(), kind="result", files=files), text, compact=True)
    return 0


def cmd_bench_prompt(args: argparse.Namespace) -> int:
    from app.backend.builder import BuildOptions
    from app.bench import prompt

    if args.target:
        if not args.d2t:
            raise SystemExit("--target needs --d2t too")
        from app.gguftools.d2t import check_sidecars_for  # numpy and gguf: only when needed
        check_sidecars_for(args.target, args.d2t)
        target, d2t, name = args.target, args.d2t, args.target.name
    else:
        demo = bench_demo(args.size)
        target, d2t, name = demo.target, demo.sidecar_d2t, f"{args.size} demo model"
    try:
        lengths = [int(n) for n in args.lengths.split(",") if n.strip()]
        batches = [int(n) for n in args.batches.split(",") if n.strip()]
        ubatches = [int(n) for n in args.server_ubatches.split(",") if n.strip()]
    except ValueError:
        raise SystemExit("--lengths, --batches and --server-ubatches take numbers separated by commas") from None
    if not lengths or min(lengths + batches + ubatches) < 1:
        raise SystemExit("prompt lengths and batch sizes must be 1 or more")
    variants = prompt.default_variants(batches, draft=not args.no_draft, upstream_too=not args.no_upstream,
                                       server_ubatches=ubatches)
    server = args.server
    if not args.no_upstream and server is None:
        from app.machines.upstream_server import build_server

        print("building (or reusing) llama-server from the patched tree ...", file=sys.stderr, flush=True)
        server = build_server(BuildOptions(flavor="cpu"))
    result = prompt.run(target, d2t, variants=variants, lengths=lengths, runs=args.runs, n_threads=args.threads,
                        server_binary=server, log=log_stderr)
    result.model = name
    report(args, result.to_dict(), result.markdown, f"Prompt processing against llama-server ({name})",
           f"Prompt tok/s from an empty context, medians of {result.runs} interleaved runs. Ours: a chat turn's "
           "prefill (SpeculativeDecoder.generate, max_tokens 1), its prompt_seconds, split into the target's and the "
           "draft context's synchronized llama_decode time and the host time between them; llama-server: "
           "/completion with n_predict 1 and cache_prompt false, its timings.prompt_ms. vs llama-server: the ratio "
           "of the medians against llama-server at its defaults drafting the same way; d2t cost: the prompt's extra "
           "time with the d2t sidecar over drafting off at the same batch sizes.")
    return 0


def cmd_bench_gguf(args: argparse.Namespace) -> int:
    from app.bench import headers

    result = headers.run(args.size, args.runs)
    emit(args, result.to_dict(), result.markdown)
    return 0


def add_commands(sub: Subparsers) -> None:
    """``bench draft-head|ops|gui|fetch|lossless|matrix|spec``."""
    bsub = group(sub, "bench", "benchmarks (results as JSON and markdown)")
    dh = command(bsub, "draft-head", cmd_bench_draft_head, "time the MTP draft step: full head vs d2t head")
    dh.add_argument("--size", choices=["tiny", "small", "scaled", "27b"], default="small", help="demo model to time on")
    dh.add_argument("--target", type=Path, help="time real files instead: the target ...")
    dh.add_argument("--full", type=Path, help="... its full sidecar ...")
    dh.add_argument("--d2t", type=Path, help="... and its d2t sidecar")
    dh.add_argument("--runs", type=runs_argument, default=50)
    dh.add_argument("--threads", type=engine_limits.threads_argument)
    dh.add_argument("--gpu-layers", type=engine_limits.gpu_layers_argument, default=0,
                    help="-1 offloads everything (CUDA backends)")
    dh.add_argument("--record", type=Path, help="append the result to this markdown file (docs/benchmarks.md)")
    op = command(bsub, "ops", cmd_bench_ops,
                 "per-op profile of target passes of 1 and k+1 tokens and a prompt; verify-pass cost ratio")
    op.add_argument("--size", choices=["tiny", "small", "scaled", "27b"], default="small", help="demo model to profile")
    op.add_argument("--model", type=Path, help="profile this target instead of a demo model")
    op.add_argument("--draft", type=Path, help="MTP sidecar for the draft-step profile (the target itself: its "
                                               "embedded head); the demo's d2t sidecar by default")
    op.add_argument("--no-draft", action="store_true", help="no draft-step profile")
    op.add_argument("--gpu-layers", type=engine_limits.gpu_layers_argument, default=0,
                    help="-1 offloads everything (CUDA backends)")
    op.add_argument("--tokens-per-pass", default="1,2,3,4,5", help="pass sizes to time (1 is always added)")
    op.add_argument("--prompt-tokens", type=tokens_argument, default=512,
                    help="the prompt pass, and the position of the others")
    op.add_argument("--runs", type=runs_argument, default=10,
                    help="plain passes per size; the figures are medians")
    op.add_argument("--profile-runs", type=runs_argument, default=1,
                    help="profiled passes per size (per-node medians)")
    op.add_argument("--threads", type=engine_limits.threads_argument)
    op.add_argument("--bandwidth-gbs", type=bandwidth_argument,
                    help="the device's memory bandwidth, for the decode floor")
    op.add_argument("--out", type=Path, help="write the result JSON here")
    op.add_argument("--record", type=Path, help="append the result to this markdown file (docs/benchmarks.md)")
    sm = command(bsub, "sampler", cmd_bench_sampler,
                 "host time per emitted token of the target's sampler (llama.cpp's chain) over the whole vocabulary")
    sm.add_argument("--size", choices=["tiny", "small", "scaled", "27b"], default="small", help="demo model to time on")
    sm.add_argument("--target", type=Path, help="time on this target instead of a demo model")
    sm.add_argument("--runs", type=runs_argument, default=15)
    sm.add_argument("--rows", type=count_argument, default=16, help="logit rows per run (one batched pass)")
    sm.add_argument("--threads", type=engine_limits.threads_argument)
    sm.add_argument("--gpu-layers", type=engine_limits.gpu_layers_argument, default=0,
                    help="-1 offloads everything (CUDA backends)")
    sm.add_argument("--decode-tokens", type=optional_tokens_argument, default=0,
                    help="also time plain decoding of this many tokens, picks on the host vs inside the graph")
    sm.add_argument("--out", type=Path, help="write the result JSON here")
    sm.add_argument("--record", type=Path, help="append the result to this markdown file (docs/benchmarks.md)")
    gu = command(bsub, "gui", cmd_bench_gui, "chat view: event-loop latency and per-token rendering cost")
    gu.add_argument("--tokens", type=tokens_argument, default=5000,
                    help="length of the synthetic markdown reply")
    gu.add_argument("--rate", type=count_argument, default=1000, help="tokens per second of the latency stream")
    gu.add_argument("--out", type=Path, help="write the result JSON here")
    gu.add_argument("--record", type=Path, help="append the result to this markdown file (docs/benchmarks.md)")
    at = command(bsub, "attention", cmd_bench_attention,
                 "decode speed with flash attention against llama.cpp's plain kernel as the context fills, drafting "
                 "off and with the d2t sidecar, interleaved")
    at.add_argument("--size", choices=["tiny", "small", "scaled", "27b"], default="scaled",
                    help="demo model to run (default: %(default)s)")
    at.add_argument("--acceptance", type=acceptance_argument, default=0.8, help="the demo model's draft agreement")
    at.add_argument("--target", type=Path, help="run real files instead: the target ...")
    at.add_argument("--full", type=Path, help="... its full sidecar ...")
    at.add_argument("--d2t", type=Path, help="... and its d2t sidecar")
    at.add_argument("--contexts", type=context_list_argument, default=[150, 1000, 3000],
                    help="tokens of context before each reply, comma-separated (default: 150,1000,3000)")
    at.add_argument("--tokens", type=tokens_argument, default=128, help="tokens a reply (default: %(default)s)")
    at.add_argument("--runs", type=runs_argument, default=3, help="interleaved runs after a warm-up (default: 3)")
    at.add_argument("--depth", type=depth_argument, default=3, help="the d2t sidecar's draft depth")
    at.add_argument("--threads", type=engine_limits.threads_argument)
    at.add_argument("--out", type=Path, help="write the result JSON here")
    at.add_argument("--record", type=Path, help="append the result to this markdown file (docs/benchmarks.md)")
    wi = command(bsub, "window", cmd_bench_window, "decode tok/s of replies streamed through the real window "
                 "(offscreen, or Xvfb when a display is set; 1180x700), a chat of several turns, beside the headless "
                 "engine's on the same conversation and `generate`'s on each prompt alone, greedy and at the chat's "
                 "default sampling, interleaved, with the GUI's and the engine's CPU per token; the window's "
                 "remembered state is left alone")
    wi.add_argument("--size", choices=["tiny", "small", "scaled", "27b"], default="small",
                    help="demo model to run (default: %(default)s)")
    wi.add_argument("--target", type=Path, help="run real files instead: the target ...")
    wi.add_argument("--full", type=Path, help="... its full sidecar ...")
    wi.add_argument("--d2t", type=Path, help="... and its d2t sidecar")
    wi.add_argument("--mode", choices=["off", "d2t"], default="off",
                    help="drafting off, or the d2t sidecar (default: %(default)s)")
    wi.add_argument("--depth", type=depth_argument, default=3,
                    help="draft depth with --mode d2t (default: %(default)s)")
    wi.add_argument("--tokens", type=tokens_argument, default=256,
                    help="tokens a reply (default: %(default)s; the chat itself has no cap by default)")
    wi.add_argument("--runs", type=runs_argument, default=3,
                    help="interleaved samples per variant, after one warm-up reply each (default: %(default)s)")
    wi.add_argument("--turns", type=count_argument, default=3,
                    help="turns of each sample's conversation: the window's chat and its history, the same "
                         "conversation headless, each prompt alone as `generate` runs it (default: %(default)s)")
    wi.add_argument("--threads", type=engine_limits.threads_argument,
                    help="engine threads (default: the engine's automatic choice)")
    wi.add_argument("--out", type=Path, help="write the result JSON here")
    wi.add_argument("--record", type=Path, help="append the result to this markdown file (docs/benchmarks.md)")
    ms = command(bsub, "mode-switch", cmd_bench_mode_switch, "seconds a drafting-mode switch (off, embedded "
                 "head, d2t sidecar) takes through the engine worker, the window's path")
    ms.add_argument("--size", choices=["tiny", "small", "scaled", "27b"], default="small", help="demo model to run")
    ms.add_argument("--target", type=Path, help="run real files instead: the target ...")
    ms.add_argument("--full", type=Path, help="... its full sidecar ...")
    ms.add_argument("--d2t", type=Path, help="... and its d2t sidecar")
    ms.add_argument("--depth", type=depth_argument, default=3, help="draft depth")
    ms.add_argument("--rounds", type=count_argument, default=5,
                    help="times round the three modes; figures are medians")
    ms.add_argument("--threads", type=engine_limits.threads_argument)
    ms.add_argument("--gpu-layers", type=engine_limits.gpu_layers_argument, default=0,
                    help="-1 offloads everything (CUDA backends)")
    ms.add_argument("--out", type=Path, help="write the result JSON here")
    ms.add_argument("--record", type=Path, help="append the result to this markdown file (docs/benchmarks.md)")
    th = command(bsub, "threads", cmd_bench_threads, "one-token passes at one thread, at all of them and at the "
                 "count each context measures: plain decoding and d2t drafting, side by side")
    th.add_argument("--size", choices=["tiny", "small", "scaled", "27b"], default="scaled", help="demo model to run")
    th.add_argument("--acceptance", type=acceptance_argument, default=0.8, help="the demo model's draft agreement")
    th.add_argument("--target", type=Path, help="run real files instead: the target ...")
    th.add_argument("--full", type=Path, help="... its full sidecar ...")
    th.add_argument("--d2t", type=Path, help="... and its d2t sidecar")
    th.add_argument("--modes", choices=["off", "d2t", "off,d2t"], default="off,d2t",
                    help="plain decoding, d2t drafting or both (default: %(default)s)")
    th.add_argument("--depth", type=depth_argument, default=3, help="d2t draft depth (default: %(default)s)")
    th.add_argument("--tokens", type=tokens_argument, default=64, help="tokens per prompt (default: %(default)s)")
    th.add_argument("--runs", type=runs_argument, default=3, help="interleaved runs; figures are medians")
    th.add_argument("--threads", type=engine_limits.threads_argument,
                    help="decode threads (default: the engine's automatic choice now)")
    th.add_argument("--out", type=Path, help="write the result JSON here")
    th.add_argument("--record", type=Path, help="append the result to this markdown file (docs/benchmarks.md)")
    pr = command(bsub, "prompt", cmd_bench_prompt, "prompt processing (a chat turn's prefill) from an empty context: "
                 "ours against llama-server on the same build, model and threads, off and with the d2t sidecar, "
                 "and our n_batch sizes (interleaved runs)")
    pr.add_argument("--size", choices=["tiny", "small", "scaled", "27b"], default="small", help="demo model to run")
    pr.add_argument("--target", type=Path, help="run real files instead: the target ...")
    pr.add_argument("--d2t", type=Path, help="... and its d2t sidecar")
    pr.add_argument("--lengths", default="512,2048", help="prompt lengths in tokens, comma-separated")
    pr.add_argument("--runs", type=runs_argument, default=3, help="interleaved runs; figures are medians")
    pr.add_argument("--batches", default="256,1024,2048",
                    help="our other n_batch sizes to time (drafting off) beside EngineConfig's default")
    pr.add_argument("--server-ubatches", default="",
                    help="llama-server's other -ub sizes to time (at -b 2048, drafting off) beside its default 512")
    pr.add_argument("--no-draft", action="store_true", help="drafting off only (no d2t sidecar rows)")
    pr.add_argument("--no-upstream", action="store_true", help="skip llama-server")
    pr.add_argument("--server", type=Path, help="llama-server binary to use (default: built from the active tree)")
    pr.add_argument("--threads", type=engine_limits.threads_argument,
                    help="threads for both engines (default: the engine's own choice)")
    pr.add_argument("--out", type=Path, help="write the result JSON here")
    pr.add_argument("--record", type=Path, help="append the result to this markdown file (docs/benchmarks.md)")
    gg = command(bsub, "gguf", cmd_bench_gguf, "read a demo model's GGUF header: the lazy reader vs GGUFReader, "
                 "and `models add` of it (interleaved runs)")
    gg.add_argument("--size", choices=["tiny", "small", "scaled", "27b"], default="small",
                    help="demo model to write and read")
    gg.add_argument("--runs", type=runs_argument, default=5, help="interleaved runs; figures are medians")
    fe = command(bsub, "fetch", cmd_bench_fetch, "download a generated file with our fetcher and with curl")
    fe.add_argument("--size-mb", type=megabytes_argument, default=2048, help="size of the generated file in MiB")
    fe.add_argument("--runs", type=runs_argument, default=3, help="runs per client, alternating")
    fe.add_argument("--record", type=Path, help="append the result to this markdown file (docs/benchmarks.md)")
    lc = command(bsub, "long-chat", cmd_bench_long_chat, "a scripted long chat through the engine worker "
                 "(issue 34): time to first token with the kept state against re-reading the history, a chat "
                 "reopened from its disk state after a restart, the state's size on disk")
    lc.add_argument("--size", choices=["tiny", "small", "scaled", "27b"], default="small", help="demo model to run")
    lc.add_argument("--target", type=Path, help="run real files instead: the target ...")
    lc.add_argument("--full", type=Path, help="... its full sidecar ...")
    lc.add_argument("--d2t", type=Path, help="... and its d2t sidecar")
    lc.add_argument("--mode", choices=["off", "d2t"], default="d2t", help="drafting off, or the d2t sidecar")
    lc.add_argument("--depth", type=depth_argument, default=3, help="draft depth with --mode d2t")
    lc.add_argument("--ctx", type=bench_context_argument, default=2048,
                    help="context size in tokens (overflow policy: trim)")
    lc.add_argument("--turns", type=count_argument, default=24,
                    help="user messages in the scripted chat (40-60 words each)")
    lc.add_argument("--max-tokens", type=tokens_argument, default=64, help="tokens a reply (greedy)")
    lc.add_argument("--reread-every", type=count_argument, default=4,
                    help="every this many turns, the same prompt is also read from scratch by a second worker")
    lc.add_argument("--reopen-tokens", type=tokens_argument, default=1500,
                    help="tokens a reopened chat has at least")
    lc.add_argument("--runs", type=runs_argument, default=3,
                    help="reopens (each a worker restart), interleaved with re-reads")
    lc.add_argument("--threads", type=engine_limits.threads_argument)
    lc.add_argument("--gpu-layers", type=engine_limits.gpu_layers_argument, default=0,
                    help="-1 offloads everything (CUDA backends)")
    lc.add_argument("--out", type=Path, help="write the result JSON here")
    lc.add_argument("--record", type=Path, help="append the result to this markdown file (docs/benchmarks.md)")
    ll = command(bsub, "lossless", cmd_bench_lossless,
                 "every drafting variant vs plain decoding, token for token, at temperature 0 and 0.8")
    ll.add_argument("--size", choices=["tiny", "small", "scaled", "27b"], default="tiny", help="demo model to use")
    ll.add_argument("--acceptance", type=acceptance_argument, default=0.8,
                    help="the demo model's draft agreement")
    ll.add_argument("--target", type=Path, help="real files instead: the target ...")
    ll.add_argument("--full", type=Path, help="... its full sidecar ...")
    ll.add_argument("--d2t", type=Path, help="... and its d2t sidecar")
    ll.add_argument("--prompts", type=count_argument, default=2, help="prompts per prompt set")
    ll.add_argument("--tokens", type=tokens_argument, default=64)
    ll.add_argument("--threads", type=engine_limits.threads_argument)
    ll.add_argument("--gpu-layers", type=engine_limits.gpu_layers_argument, default=0,
                    help="-1 offloads everything (CUDA backends)")
    mx = command(bsub, "matrix", cmd_bench_matrix, "the bench spec matrix for your model on this machine, variant "
                 "by variant with progress (the Benchmark page's job): JSON, markdown, PNG")
    mx.add_argument("--target", type=Path, required=True)
    mx.add_argument("--d2t", type=Path, help="its FastMTP d2t sidecar")
    mx.add_argument("--full", type=Path, help="its full sidecar")
    mx.add_argument("--modes", default="off,embedded,d2t", help="comma-separated: off, embedded, full, d2t")
    mx.add_argument("--depths", default="1,2,3,4", help="draft depths")
    mx.add_argument("--tokens", type=tokens_argument, default=64, help="tokens generated per prompt")
    mx.add_argument("--runs", type=runs_argument, default=3,
                    help="runs, interleaved (each variant once per run, the order "
                    "rotating); figures are medians; a verdict against off needs 3")
    mx.add_argument("--prompt-sets", default="document", help="comma-separated: document, reasoning")
    mx.add_argument("--threads", type=engine_limits.threads_argument)
    mx.add_argument("--gpu-layers", type=engine_limits.gpu_layers_argument, default=0,
                    help="-1 offloads everything (CUDA backends)")
    mx.add_argument("--name", help="the model's name in the report")
    mx.add_argument("--out", type=Path, help="folder for matrix.json, matrix.md, matrix.png")
    sp = command(bsub, "spec", cmd_bench_spec,
                 "modes x draft depths x prompt sets, ours and llama-server side by side")
    sp.add_argument("--size", choices=["tiny", "small", "scaled", "27b"], default="small", help="demo model to run")
    sp.add_argument("--acceptance", type=acceptance_argument, default=0.8,
                    help="the demo model's draft agreement")
    sp.add_argument("--target", type=Path, help="run real files instead: the target ...")
    sp.add_argument("--full", type=Path, help="... its full sidecar ...")
    sp.add_argument("--d2t", type=Path, help="... and its d2t sidecar")
    sp.add_argument("--tokens", type=tokens_argument, default=128, help="tokens generated per prompt")
    sp.add_argument("--context", type=optional_tokens_argument, default=0,
                    help="tokens of an earlier conversation before every prompt, kept between prompts by both engines, "
                         "so replies are decoded as deep into a chat (default 0: none)")
    sp.add_argument("--runs", type=runs_argument, default=3, help="interleaved runs; figures are medians")
    sp.add_argument("--depths", default="1,2,3,4", help="fixed draft depths")
    sp.add_argument("--adaptive-max", type=adaptive_max_argument, default=DRAFT_DEPTH_MAX,
                    help="deepest depth adaptive may choose (0: no adaptive rows)")
    sp.add_argument("--adaptive-start", choices=["warm", "cold"], default="warm",
                    help="warm (default): the first run's adaptive rows start cold and each later run's from what the "
                         "runs before learned (kept in OUT/depth-memory, emptied first), as every load after a "
                         "model's first does in the app; cold: every run starts from nothing")
    sp.add_argument("--modes", default="off,embedded,full,d2t", help="comma-separated subset of the modes")
    sp.add_argument("--no-upstream", action="store_true", help="skip llama-server")
    sp.add_argument("--time-limit", type=time_limit_argument, metavar="S",
                    help="start no variant after S seconds; keep what was measured (marked cut short)")
    sp.add_argument("--server", type=Path, help="llama-server binary to use (default: built from the active tree)")
    sp.add_argument("--remote", metavar="NAME|URL",
                    help="a remote server (`remote add` name, or a URL) measured with the same prompts, beside ours")
    sp.add_argument("--threads", type=engine_limits.threads_argument)
    sp.add_argument("--gpu-layers", type=engine_limits.gpu_layers_argument, default=0,
                    help="-1 offloads everything (CUDA backends)")
    sp.add_argument("--interleave", choices=["prompt", "variant"],
                    help="our variants side by side prompt by prompt (default on a CPU), or one after another "
                         "(default with --gpu-layers or --time-limit)")
    sp.add_argument("--out", type=Path, help="folder for spec.json, spec.md, spec.png and adaptive depth's decisions "
                    "(adaptive-decisions.jsonl, adaptive-*.png)")
    sp.add_argument("--chart", type=Path, help="where to write the PNG chart (e.g. docs/bench-spec.png)")
    sp.add_argument("--record", type=Path, help="append the table to this markdown file (docs/benchmarks.md)")

    from app.cli.bench_adaptive_load import add_command as add_adaptive_load
    add_adaptive_load(bsub)  # ``bench adaptive-load`` (issue 36): its own module
