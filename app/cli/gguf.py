"""Commands on GGUF files: ``gguf inspect`` and ``sidecar build|check|make`` (the FastMTP draft sidecars)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from app.cli.common import Subparsers, command, emit, emit_line, group, stop_on_signals
from app.core import defaults
from app.core.errors import FastMTPError
from app.models.sidecar_job import Control


def cmd_gguf_inspect(args: argparse.Namespace) -> int:
    from app.gguftools.inspect import inspect_gguf

    report = inspect_gguf(args.file)
    emit(args, report.to_dict(), lambda: _describe(report))
    if report.problem:  # the facts are shown, and the exit says the file is unusable (issue 37)
        emit_line(args, None, f"problem: {Path(report.path).name} cannot be used: {report.problem}. Download or "
                  "build the sidecar again.")
        return 1
    return 0


def _describe(report: Any) -> str:
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
    return "\n".join(f"{name:14} {value}" for name, value in rows)


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
    emit(args, report.to_dict(), f"wrote {report.path}: {report.kind}, {report.n_draft} of {report.n_vocab} tokens, "
                                 f"head {report.head_type}, {report.file_size / 2**20:.1f} MiB")
    return 0


def cmd_sidecar_check(args: argparse.Namespace) -> int:
    """Load a target + sidecar pair through the active backend: the check a user runs after a download."""
    from app.engine.stats import wrong_pair_warning
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
    acceptance = probe.acceptance(1)
    # the same words the window uses for a sidecar made from another model (its drafts are almost never taken)
    warning = wrong_pair_warning({"drafted": len(tokens), "accepted": round(acceptance * len(tokens)),
                                  "acceptance": acceptance}, Path(args.draft).name)
    result = {"target": target_report.to_dict(), "sidecar": sidecar_report.to_dict(), "loaded": True,
              "positions": len(tokens), "acceptance_depth1": acceptance, "warning": warning}

    def for_people() -> None:
        print(f"{Path(args.draft).name} loads with {Path(args.target).name}: {sidecar_report.kind}, "
              f"one-token draft acceptance {acceptance:.1%} over {len(tokens)} positions")
        if warning:
            print(f"warning: {warning}")

    emit(args, result, for_people)
    return 0


def _demo_sequence(args: argparse.Namespace, target: Any) -> list[int]:
    from app.gguftools.demo_model import read_demo_table
    from app.native.draft_probe import greedy

    table = read_demo_table(args.target)
    if table is None:
        raise FastMTPError(f"{args.target} is not a demo model with a table.", "Drop --demo-table.")
    prompt = list(table.cycle[:8])
    return prompt + greedy(target, prompt, args.tokens)


def cmd_sidecar_make(args: argparse.Namespace) -> int:
    """The window's "Make FastMTP sidecar": with ``--json`` one event per line, then ``{"kind": "result", ...}``."""
    from app.models import local_models
    from app.models.sidecar_job import Corpus, free_out, make_sidecar, replaces_current

    control = stop_on_signals(Control())
    out = args.out or free_out(args.target.absolute(), args.vocab)  # a free name, never "already exists"
    corpus = Corpus(prompt_sets=tuple(args.prompts or ()), history=args.history, files=tuple(args.corpus or ()))
    model = local_models.find(args.target.absolute())
    current = model.sidecar_d2t if model is not None else None  # measured beside the new one, kept unless beaten
    made = make_sidecar(args.target, out, args.vocab, corpus, check=not args.no_check, control=control,
                        history_path=args.history_file, current=current,
                        on_progress=lambda p: emit_line(args, p.to_dict(), f"[{p.fraction:5.1%}] {p.message}"))
    attached, attach_note = False, ""
    if model is not None:
        better, attach_note = replaces_current(made.check, current, Path(made.path))
        if better or args.attach:
            local_models.attach_sidecar(args.target.absolute(), Path(made.path))
            attached = True
            if not better:
                attach_note = f"{Path(made.path).name} is this model's d2t drafting mode (--attach). {attach_note}"

    def text() -> None:
        print(f"wrote {made.path}: {made.vocab_size} draft tokens from {made.corpus}")
        if made.check is not None:
            print(f"one-token acceptance along {made.check.positions} tokens of the model's own text: this sidecar "
                  f"{made.check.sidecar_acceptance:.1%}, the embedded head {made.check.embedded_acceptance:.1%}")
        for warning in made.warnings:
            print("note: " + warning)
        if attach_note:
            print(attach_note)

    emit(args, dict(made.to_dict(), kind="result", attached=attached, attach_note=attach_note), text, compact=True)
    return 0


def add_commands(sub: Subparsers) -> None:
    """``gguf inspect`` and ``sidecar build|check|make``."""
    gsub = group(sub, "gguf", "look inside GGUF files")
    inspect = command(gsub, "inspect", cmd_gguf_inspect, "describe a GGUF: target, full or d2t sidecar")
    inspect.add_argument("file", type=Path)

    ssub = group(sub, "sidecar", "build and check FastMTP draft sidecars")
    build = command(ssub, "build", cmd_sidecar_build, "write a FastMTP sidecar from a qwen35 target's MTP head")
    build.add_argument("--target", type=Path, required=True)
    build.add_argument("--out", type=Path, required=True)
    build.add_argument("--vocab", type=int, default=defaults.DRAFT_VOCAB,
                       help=f"draft vocabulary size (default {defaults.DRAFT_VOCAB})")
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
    mk = command(ssub, "make", cmd_sidecar_make, "make a FastMTP d2t sidecar with progress, then measure its "
                 "acceptance against the embedded head (the window's job)")
    mk.add_argument("--target", type=Path, required=True)
    mk.add_argument("--out", type=Path, help="default: <target>-FastMTP-<N>K.gguf beside the target (or the first "
                    "free <target>-FastMTP-<N>K-2.gguf, -3, ... when that file exists)")
    mk.add_argument("--vocab", type=int, choices=list(defaults.DRAFT_VOCAB_SIZES), default=defaults.DRAFT_VOCAB,
                    help="draft vocabulary size")
    mk.add_argument("--prompts", nargs="+", metavar="SET", help="built-in prompt sets (document, reasoning)")
    mk.add_argument("--history", action="store_true", help="your own chats (user and assistant messages)")
    mk.add_argument("--history-file", type=Path, help="the chat history to read (default: the app's)")
    mk.add_argument("--corpus", type=Path, nargs="+", help="text files")
    mk.add_argument("--no-check", action="store_true", help="skip the acceptance check")
    mk.add_argument("--attach", action="store_true",
                    help="make it the model's d2t mode even when it measured worse than the current one")

