"""Commands on the models you have and how to get them: ``models`` (list) and ``models add|scan|remove``,
``fit`` (which quantization fits), ``context`` (the largest context a model fits here), ``token`` (the hub
token), ``mirror`` (where downloads come from), ``demo-model`` and ``quickstart`` (the built-in demo model).

``models add|scan|remove`` are the Models page's "Add a model file…" and "Scan for models".
"""

from __future__ import annotations

import argparse
import getpass
import sys
from pathlib import Path
from typing import Any

from app.cli.common import Subparsers, command, context_argument, emit, emit_line, for_people, group
from app.core import defaults
from app.core.errors import FastMTPError
from app.core.units import format_bytes

# ----------------------------------------------------------------------------- models [add | scan | remove]


def cmd_models(args: argparse.Namespace) -> int:
    """With ``--dir`` that folder's releases; else the releases and your own added files."""
    from app.models.installed import list_installed, model_roots

    models = list_installed(*([args.dir] if args.dir else []))

    def text() -> None:
        if not args.dir:
            print_local_models()
        if not models:
            where = args.dir or " or ".join(str(root) for root in model_roots())
            print(f"No downloaded model in {where}. Get one with `python -m app fetch`.")
        for m in models:
            sidecars = ", ".join(f"{kind} {path.name}" for kind, path in (("d2t", m.sidecar_d2t),
                                                                          ("full", m.sidecar_full))
                                 if path is not None) or "no sidecar"
            state = "verified (publisher-signed)" if m.verified else "NOT VERIFIED"
            print(f"{m.quant:8} release {m.version}  {format_bytes(m.size_bytes)}  {state}  {m.target}\n"
                  f"         sidecars: {sidecars}")
            if m.problem:
                print("         " + m.problem.replace("\n", "\n         "))

    emit(args, [m.to_dict() for m in models] + ([] if args.dir else local_rows()), text)
    return 0


def cmd_models_add(args: argparse.Namespace) -> int:
    from app.models import local_models
    from app.release.hub_hash import HubOrigin, origin_from_path

    origin = None
    if args.repo:
        guessed = origin_from_path(args.file)
        origin = HubOrigin(args.repo, args.revision,
                           args.path_in_repo or (guessed.path_in_repo if guessed else args.file.name))
    model = local_models.add(args.file, copy=args.copy, origin=origin, sidecars=args.sidecar or [])

    def text() -> None:
        print(f"Added {model.path}" + (f" (copied from {model.copied_from})" if model.copied_from else " (in place)"))
        _print_local(model)

    emit(args, model.to_dict(), text)
    return 0


def cmd_models_scan(args: argparse.Namespace) -> int:
    from app.models import local_models

    roots = local_models.scan_roots(args.dir or [])
    if args.only_dirs:
        roots = [r for r in roots if r.label == "folder"]
    found = local_models.scan(roots)

    def text() -> None:
        if not found:
            print("No .gguf files in: " + ", ".join(str(r.path) for r in roots if r.path.is_dir()))
        for item in found:
            facts = item.facts
            summary = (f"{facts.architecture}, {facts.quantization}, {format_bytes(facts.size_bytes)}, "
                       f"MTP head {'yes' if facts.mtp_head else 'no'}, sidecar: {facts.sidecar}") if facts \
                else "unreadable"
            mark = "usable" if item.usable else "not usable"
            added = "  (added)" if item.added else ""
            print(f"{item.path}  [{item.where}]{added}\n    {summary}\n    {mark}: {item.reason}")

    emit(args, [f.to_dict() for f in found], text)
    return 0


def cmd_models_remove(args: argparse.Namespace) -> int:
    from app.models import local_models

    model = local_models.remove(args.file, delete_copy=args.delete_copy)
    deleted = bool(args.delete_copy and model.copied_from)
    emit(args, {"removed": str(model.path), "deleted": deleted},
         f"Removed {model.path} from your models (the file itself is untouched"
         + (", except the copy, deleted)." if deleted else ")."))
    return 0


def _print_local(model: Any) -> None:
    facts = model.facts
    sidecars = ", ".join(f"{kind} {path.name}" for kind, path in (("d2t", model.sidecar_d2t),
                                                                  ("full", model.sidecar_full)) if path) or "none"
    print(f"    {facts.architecture}, {facts.quantization}, {format_bytes(facts.size_bytes)}, MTP head "
          f"{'yes' if facts.mtp_head else 'no'}; FastMTP sidecars: {sidecars}\n"
          f"    {model.verification.label if model.state == model.verification.state else 'unverified local file'}"
          f"{'' if model.offered else '  NOT OFFERED: ' + model.problem}")


def local_rows() -> list[dict[str, Any]]:
    """The registered local models as ``models --json`` lists them (``source: local``)."""
    from app.models import local_models

    return [dict(m.to_dict(), source="local") for m in local_models.load_registry()]


def print_local_models() -> None:
    from app.models import local_models

    models = local_models.load_registry()
    if models:
        print("\nYour own model files (`models add`):")
    for model in models:
        print(f"  {model.path}")
        _print_local(model)


# ----------------------------------------------------------------------------- fit


def cmd_fit(args: argparse.Namespace) -> int:
    from app.models import fit

    if args.vram_gib is not None:
        if args.vram_gib <= 0:
            raise FastMTPError(f"--vram-gib {args.vram_gib} is not an amount of memory.", "Give e.g. --vram-gib 24.")
        vram, source = int(args.vram_gib * fit.GIB), "given with --vram-gib"
    else:
        vram, source = fit.detected_vram()
    report = fit.fit(vram, args.context, source)
    emit(args, report.to_dict(), lambda: "\n".join(fit.format_report(report)))
    return 0


def cmd_context(args: argparse.Namespace) -> int:
    from app.models import context_size

    for flag, path in (("--model", args.model), ("--draft", args.draft)):
        if path is not None and not path.is_file():
            raise FastMTPError(f"{flag} {path} is not a file.", "Give the path of a GGUF file.", kind="bad-usage")
    budget = None
    if args.memory_gib is not None:
        if not 0 < args.memory_gib < 1 << 20:
            raise FastMTPError(f"--memory-gib {args.memory_gib} is not an amount of memory.",
                               "Give e.g. --memory-gib 24.", kind="bad-usage")
        budget = context_size.given_budget(args.memory_gib, args.gpu_layers)
    plan = context_size.plan_context(args.model, args.draft, args.gpu_layers, budget)
    fit = plan.fit(args.ctx)

    def text() -> str:
        head = "Auto" if fit.auto else "Your context"
        lines = [f"{head}: {fit.summary}", ""] + ["  " + line for line in fit.formula]
        warning = fit.warning()
        return "\n".join(lines + (["", warning] if warning else []))

    emit(args, fit.to_dict(), text)
    return 0


# ----------------------------------------------------------------------------- token


def cmd_token_set(args: argparse.Namespace) -> int:
    from app.core import secrets

    token = getpass.getpass("Hub token (not shown): ") if sys.stdin.isatty() else sys.stdin.readline()
    secrets.set_token(token)
    emit(args, {"token": "stored", "backend": secrets.status().backend}, "Token stored in the system keyring.")
    return 0


def cmd_token_clear(args: argparse.Namespace) -> int:
    from app.core import secrets

    removed = secrets.clear_token()
    emit(args, {"removed": removed}, "Token removed from the keyring." if removed else "No token was stored.")
    return 0


def cmd_token_status(args: argparse.Namespace) -> int:
    from app.core import secrets

    status = secrets.status()

    def text() -> str:
        where = {"env": f"from the {secrets.ENV_VAR} environment variable", "keyring": "stored in the keyring",
                 None: "not set (public repositories need none)"}[status.source]
        lines = [f"Hub token: {where}."]
        if not status.keyring_available:
            lines.append(f"No keyring backend is available; set {secrets.ENV_VAR} for runs that need a token.")
        return "\n".join(lines)

    emit(args, status.to_dict(), text)
    return 0


# ----------------------------------------------------------------------------- mirror


def cmd_mirror_list(args: argparse.Namespace) -> int:
    from app.release.catalog import endpoints_for

    endpoints = [e.to_dict() for e in endpoints_for()]
    emit(args, endpoints, lambda: "\n".join(f"{e['kind']:5} {e['url']}  {e['name']}" for e in endpoints) or None)
    return 0


def cmd_mirror_add(args: argparse.Namespace) -> int:
    from app.release.catalog import add_user_endpoint

    endpoint = add_user_endpoint("hf" if args.hf else "plain", args.hf or args.plain)
    emit(args, endpoint.to_dict(), f"Added {endpoint.kind} mirror {endpoint.url} (tried before the hub).")
    return 0


def cmd_mirror_remove(args: argparse.Namespace) -> int:
    from app.release.catalog import remove_user_endpoint

    removed = remove_user_endpoint(args.url)
    emit(args, {"removed": removed}, f"Removed {args.url}." if removed else f"{args.url} was not in the mirror list.")
    return 0


# ----------------------------------------------------------------------------- demo-model, quickstart


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
    emit(args, data, "\n".join(f"{key:20} {value}" for key, value in data.items()))
    return 0


def cmd_quickstart(args: argparse.Namespace) -> int:
    from app.cli import quickstart

    def on_event(event: Any) -> None:
        if event.kind == "step":
            emit_line(args, None, f"==> [{event.percent:5.1f}%] {event.message}", file=sys.stdout)

    result = quickstart.run(args.message, args.max_tokens, for_people(args, on_event),
                            say=for_people(args, print) or (lambda _text: None))

    def text() -> None:
        print(f"backend: {result.backend_id}\nmodel:   {result.model} (built-in demo)\n")
        print(f"you:       {args.message}\nassistant: {result.reply}\n")
        ended = "ended on its own" if result.stop_reason == "eos" else f"stopped: {result.stop_reason}"
        runs = f"median of {len(result.verdict.get('b_tps') or [])} replies, {result.sampling}"
        print(f"{result.reply_tokens} tokens ({ended}) with FastMTP d2t drafting at {result.depth}: "
              f"{result.draft_tps:.0f} tok/s ({runs}), {result.draft_acceptance:.0%} of drafted tokens accepted, "
              f"{result.tokens_per_pass:.2f} tokens per target pass")
        same = "the same text" if result.same_as_plain else "a DIFFERENT text (please report this)"
        print(f"the same reply without drafting: {result.plain_tps:.0f} tok/s ({runs}), {same}")
        print(result.note)

    emit(args, result.to_dict(), text)
    return 0


# ----------------------------------------------------------------------------- registration


def add_commands(sub: Subparsers) -> None:
    """``models [add|scan|remove]``, ``fit``, ``context``, ``token``, ``mirror``, ``quickstart`` and ``demo-model``."""
    md = command(sub, "models", cmd_models, "list the downloaded models: target, FastMTP sidecars, checks passed "
                 "(signatures and sizes; `verify DIR` re-hashes)")
    md.add_argument("--dir", type=Path, help="the models folder to list (default: the one in the settings, and the "
                    "one downloads go to)")
    msub = md.add_subparsers(dest="models_command")  # optional: a bare `models` lists them
    add = command(msub, "add", cmd_models_add, "add a GGUF already on disk (referenced in place unless --copy)")
    add.add_argument("file", type=Path)
    add.add_argument("--copy", action="store_true", help="copy it into the models folder instead")
    add.add_argument("--sidecar", type=Path, action="append", help="a FastMTP sidecar made for it (repeatable)")
    add.add_argument("--repo", help="the hub repository it came from (for `verify FILE`)")
    add.add_argument("--revision", default="main", help="the revision on the hub (default main)")
    add.add_argument("--path-in-repo", help="its path in the repository (default: its file name)")
    scan = command(msub, "scan", cmd_models_scan, "find GGUF files in LM Studio's folders, the Hugging Face cache, "
                   "~/Downloads and the models folder, and say what each is and whether it can be used")
    scan.add_argument("--dir", type=Path, action="append", help="scan this folder too (repeatable)")
    scan.add_argument("--only-dirs", action="store_true", help="scan only the --dir folders")
    rm = command(msub, "remove", cmd_models_remove, "forget an added file (the file itself stays)")
    rm.add_argument("file", type=Path)
    rm.add_argument("--delete-copy", action="store_true", help="also delete the copy `add --copy` made")

    ft = command(sub, "fit", cmd_fit, "recommend the largest quantization that fits the GPU, with the arithmetic")
    ft.add_argument("--vram-gib", type=float, help="GPU memory in GiB (default: detected with nvidia-smi)")
    ft.add_argument("--context", type=int, default=defaults.FIT_CONTEXT,
                    help=f"context length in tokens (default {defaults.FIT_CONTEXT})")
    cx = command(sub, "context", cmd_context, "the largest context a model fits on this machine (Auto, the default "
                 "context), or whether your own fits, with the arithmetic")
    cx.add_argument("--model", type=Path, required=True, help="target GGUF")
    cx.add_argument("--draft", type=Path, help="its FastMTP sidecar GGUF (d2t or full), loaded beside it")
    cx.add_argument("--gpu-layers", type=int, default=0,
                    help="layers offloaded to the GPU as `chat` takes it (default 0: sized to the RAM; -1: all, sized "
                         "to the GPU's memory)")
    cx.add_argument("--ctx", type=context_argument, default=defaults.CONTEXT_AUTO, metavar="TOKENS|auto",
                    help="check this context instead of working out Auto's")
    cx.add_argument("--memory-gib", type=float, help="size for this much memory (GiB) instead of measuring it")

    ksub = group(sub, "token", "the Hugging Face hub token, kept in the system keyring")
    command(ksub, "set", cmd_token_set, "store the token (read from the terminal without echo, or stdin)")
    command(ksub, "clear", cmd_token_clear, "remove the stored token")
    command(ksub, "status", cmd_token_status, "say whether a token is set and where from (never the token)")

    msub = group(sub, "mirror", "mirrors tried before the Hugging Face hub")
    command(msub, "list", cmd_mirror_list, "list the endpoints a fetch tries, in order")
    ma = command(msub, "add", cmd_mirror_add, "add an HF-compatible mirror or a plain base URL")
    kind = ma.add_mutually_exclusive_group(required=True)
    kind.add_argument("--hf", metavar="URL", help="HF-compatible host")
    kind.add_argument("--plain", metavar="URL", help="plain base URL holding the release files")
    mr = command(msub, "remove", cmd_mirror_remove, "remove a mirror")
    mr.add_argument("url")

    quick = command(sub, "quickstart", cmd_quickstart, "build the backend if needed and chat once with the demo model")
    quick.add_argument("--message", default="Hello! Tell me something about FastMTP.")
    quick.add_argument("--max-tokens", type=int, default=256, help="cap on the reply (the demo's ends on its own)")

    demo = command(sub, "demo-model", cmd_demo_model, "write the synthetic demo target and its sidecars")
    demo.add_argument("--out", type=Path, required=True)
    demo.add_argument("--size", choices=["tiny", "small", "scaled", "27b"], default="tiny")
    demo.add_argument("--acceptance", type=float, default=0.9)
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--language", choices=["words", "english"], default="words",
                      help="words: a table that never stops (benchmarks); english: the chat demo's passage, then stop")
