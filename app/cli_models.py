"""CLI commands for model files: ``gguf inspect``, ``sidecar build|check``, ``demo-model``, ``quickstart``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from app import cli_local
from app.cli import print_json as _print_json
from app.errors import FastMTPError


def cmd_gguf_inspect(args: argparse.Namespace) -> int:
    from app.gguftools.inspect import inspect_gguf

    report = inspect_gguf(args.file)
    if args.json:
        _print_json(report.to_dict())
        return 0
    rows = [
        ("file", f"{report.path} ({report.file_size / 2**20:.1f} MiB, {report.n_tensors} tensors)"),
        ("architecture", report.architecture),
        ("kind", report.kind),
        ("vocabulary", report.vocab_size),
        ("n_embd", report.n_embd),
        ("layers", f"{report.trunk_layers} trunk + {report.nextn_layers} nextn (block_count {report.block_count})"),
        ("output.weight", report.output_shape),
        ("tensor types", ", ".join(f"{k} x{v}" for k, v in sorted(report.tensor_types.items()))),
    ]
    if report.d2t_length is not None:
        rows.append(("d2t", f"{report.d2t_length} ids in [{report.d2t_min}, {report.d2t_max}], "
                            f"{'unique' if report.d2t_unique else 'NOT unique'}"))
    for name, value in rows:
        print(f"{name:14} {value}")
    return 0


def _tokenizer_of(target: Path) -> Any:
    """Tokenize with the target's own tokenizer, through the active backend (vocab only: no weights)."""
    from app.native.handles import Model

    model = Model(target, vocab_only=True)
    return lambda text: model.tokenize(text, add_special=False, parse_special=False)


def cmd_sidecar_build(args: argparse.Namespace) -> int:
    from app.gguftools.counts import TokenCounts
    from app.gguftools.sidecar import build_sidecar

    counts: TokenCounts | None = None
    for path in args.counts or []:
        loaded = TokenCounts.load(path)
        counts = loaded if counts is None else counts.merge(loaded)
    if args.corpus:
        tokenize = _tokenizer_of(args.target)
        texts = (Path(p).read_text(encoding="utf-8", errors="replace") for p in args.corpus)
        fresh = TokenCounts.from_texts(texts, tokenize)
        counts = fresh if counts is None else counts.merge(fresh)
    if args.save_counts and counts is not None:
        counts.save(args.save_counts)
    report = build_sidecar(args.target, args.out, vocab_size=args.vocab, counts=counts, full=args.full)
    if args.json:
        _print_json(report.to_dict())
    else:
        print(f"wrote {report.path}: {report.kind}, {report.n_draft} of {report.n_vocab} tokens, "
              f"head {report.head_type}, {report.file_size / 2**20:.1f} MiB")
    return 0


def cmd_sidecar_check(args: argparse.Namespace) -> int:
    """Load a target + sidecar pair through the active backend: the check a user runs after a download."""
    from app.gguftools.inspect import inspect_gguf
    from app.gguftools.sidecar import check_pair
    from app.native import draft_probe
    from app.native.handles import Model

    target_report, sidecar_report = inspect_gguf(args.target), inspect_gguf(args.draft)
    check_pair(target_report, sidecar_report)
    with Model(args.target) as target:
        text = args.text or "The quick brown fox jumps over the lazy dog. " * 4
        tokens = target.tokenize(text)[: args.tokens] if not args.demo_table else _demo_sequence(args, target)
        probe = draft_probe.probe(target, tokens, args.draft)
    result = {"target": target_report.to_dict(), "sidecar": sidecar_report.to_dict(), "loaded": True,
              "positions": len(tokens), "acceptance_depth1": probe.acceptance(1)}
    if args.json:
        _print_json(result)
    else:
        print(f"{Path(args.draft).name} loads with {Path(args.target).name}: {sidecar_report.kind}, "
              f"one-token draft acceptance {result['acceptance_depth1']:.1%} over {len(tokens)} positions")
    return 0


def _demo_sequence(args: argparse.Namespace, target: Any) -> list[int]:
    from app.gguftools.demo_model import read_demo_table
    from app.native.draft_probe import greedy

    table = read_demo_table(args.target)
    if table is None:
        raise FastMTPError(f"{args.target} is not a demo model with a table.", "Drop --demo-table.")
    prompt = list(table.cycle[:8])
    return prompt + greedy(target, prompt, args.tokens)


def cmd_demo_model(args: argparse.Namespace) -> int:
    from app.gguftools.demo_model import write_demo_model
    from app.gguftools.vocab import qwen35_vocab_path

    demo = write_demo_model(args.out, qwen35_vocab_path(), size=args.size, acceptance=args.acceptance,
                            seed=args.seed, language=args.language)
    data = {"target": str(demo.target), "sidecar_full": str(demo.sidecar_full),
            "sidecar_d2t": str(demo.sidecar_d2t), "size": demo.size, "language": args.language,
            "table_words": len(demo.table.cycle) if demo.table else 0,
            "acceptance_requested": args.acceptance,
            "acceptance_table": demo.table.acceptance if demo.table else None}
    if args.json:
        _print_json(data)
    else:
        for key, value in data.items():
            print(f"{key:20} {value}")
    return 0


def cmd_quickstart(args: argparse.Namespace) -> int:
    from app import quickstart

    def on_event(event: Any) -> None:
        if event.kind == "step":
            print(f"==> [{event.percent:5.1f}%] {event.message}", flush=True)

    result = quickstart.run(args.message, args.max_tokens, on_event if not args.json else None,
                            say=print if not args.json else (lambda _text: None))
    if args.json:
        _print_json(result.to_dict())
        return 0
    print(f"backend: {result.backend_id}\nmodel:   {result.model} (built-in demo)\n")
    print(f"you:       {args.message}\nassistant: {result.reply}\n")
    ended = "ended on its own" if result.stop_reason == "eos" else f"stopped: {result.stop_reason}"
    print(f"{result.reply_tokens} tokens ({ended}) with FastMTP d2t drafting: {result.draft_tps:.0f} tok/s, "
          f"{result.draft_acceptance:.0%} of drafted tokens accepted, {result.tokens_per_pass:.2f} tokens per "
          f"target pass")
    same = "the same text" if result.same_as_plain else "a DIFFERENT text (please report this)"
    print(f"the same reply without drafting: {result.plain_tps:.0f} tok/s, {same}")
    print(result.note)
    return 0


def add_commands(sub: Any, command: Any) -> None:
    """Register the model-file commands on the top-level subparsers."""
    gguf = sub.add_parser("gguf", help="look inside GGUF files")
    gsub = gguf.add_subparsers(dest="gguf_command", required=True)
    inspect = command(gsub, "inspect", cmd_gguf_inspect, "describe a GGUF: target, full or d2t sidecar")
    inspect.add_argument("file", type=Path)

    sidecar = sub.add_parser("sidecar", help="build and check FastMTP draft sidecars")
    ssub = sidecar.add_subparsers(dest="sidecar_command", required=True)
    build = command(ssub, "build", cmd_sidecar_build, "write a FastMTP sidecar from a qwen35 target's MTP head")
    build.add_argument("--target", type=Path, required=True)
    build.add_argument("--out", type=Path, required=True)
    build.add_argument("--vocab", type=int, default=32768, help="draft vocabulary size (default 32768)")
    build.add_argument("--corpus", type=Path, nargs="+", help="text files whose token frequencies pick the vocabulary")
    build.add_argument("--counts", type=Path, action="append", help="saved token counts (JSON); repeat to merge")
    build.add_argument("--save-counts", type=Path, help="save the (merged) counts for a later rebuild")
    build.add_argument("--full", action="store_true", help="untrimmed sidecar (whole LM head, no d2t)")
    check = command(ssub, "check", cmd_sidecar_check, "load a target + sidecar through the active backend")
    check.add_argument("--target", type=Path, required=True)
    check.add_argument("--draft", type=Path, required=True)
    check.add_argument("--text", help="text to probe along (default: a stock sentence)")
    check.add_argument("--tokens", type=int, default=64)
    check.add_argument("--demo-table", action="store_true", help="probe along the demo model's own table")
    cli_local.add_sidecar_commands(ssub, command)

    quick = command(sub, "quickstart", cmd_quickstart, "build the backend if needed and chat once with the demo model")
    quick.add_argument("--message", default="Hello! Tell me something about FastMTP.")
    quick.add_argument("--max-tokens", type=int, default=256, help="cap on the reply (the demo's ends on its own)")

    demo = command(sub, "demo-model", cmd_demo_model, "write the synthetic demo target and its sidecars")
    demo.add_argument("--out", type=Path, required=True)
    demo.add_argument("--size", choices=["tiny", "small", "27b"], default="tiny")
    demo.add_argument("--acceptance", type=float, default=0.9)
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--language", choices=["words", "english"], default="words",
                      help="words: a table that never stops (benchmarks); english: the chat demo's passage, then stop")
