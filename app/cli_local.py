"""CLI for your own model files: ``models add|scan|remove``, ``verify FILE``, ``sidecar make``, ``bench matrix``.

Each is what the window runs: the Models page's "Add a model file…", "Scan for models", the verification
badges and "Make FastMTP sidecar", and the Benchmark page. With ``--json`` the long jobs (``sidecar make``,
``bench matrix``) print one event per line and end with ``{"kind": "result", ...}``; SIGTERM or Ctrl-C stops
them with nothing half-written left behind (exit 130).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path
from typing import Any

from app.cli import print_json
from app.errors import VerificationError
from app.sidecar_job import Control


def _event(args: argparse.Namespace, data: dict[str, Any], human: str) -> None:
    if args.json:
        print(json.dumps(data), flush=True)
    elif human:
        print(human, file=sys.stderr, flush=True)


def _stop_on_signals(control: Control) -> None:
    """SIGTERM (the window's cancel) and SIGINT stop the job at its next check."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: control.cancel())


# ----------------------------------------------------------------------------- models add | scan | remove


def cmd_models_add(args: argparse.Namespace) -> int:
    from app import local_models
    from app.release.hub_hash import HubOrigin, origin_from_path

    origin = None
    if args.repo:
        guessed = origin_from_path(args.file)
        origin = HubOrigin(args.repo, args.revision,
                           args.path_in_repo or (guessed.path_in_repo if guessed else args.file.name))
    model = local_models.add(args.file, copy=args.copy, origin=origin, sidecars=args.sidecar or [])
    if args.json:
        print_json(model.to_dict())
        return 0
    print(f"Added {model.path}" + (f" (copied from {model.copied_from})" if model.copied_from else " (in place)"))
    _print_local(model)
    return 0


def cmd_models_scan(args: argparse.Namespace) -> int:
    from app import local_models

    roots = local_models.scan_roots(args.dir or [])
    if args.only_dirs:
        roots = [r for r in roots if r.label == "folder"]
    found = local_models.scan(roots)
    if args.json:
        print_json([f.to_dict() for f in found])
        return 0
    if not found:
        print("No .gguf files in: " + ", ".join(str(r.path) for r in roots if r.path.is_dir()))
    for item in found:
        facts = item.facts
        summary = (f"{facts.architecture}, {facts.quantization}, {facts.size_bytes / 1e9:.1f} GB, "
                   f"MTP head {'yes' if facts.mtp_head else 'no'}, sidecar: {facts.sidecar}") if facts else "unreadable"
        mark = "usable" if item.usable else "not usable"
        added = "  (added)" if item.added else ""
        print(f"{item.path}  [{item.where}]{added}\n    {summary}\n    {mark}: {item.reason}")
    return 0


def cmd_models_remove(args: argparse.Namespace) -> int:
    from app import local_models

    model = local_models.remove(args.file, delete_copy=args.delete_copy)
    if args.json:
        print_json({"removed": str(model.path), "deleted": bool(args.delete_copy and model.copied_from)})
    else:
        print(f"Removed {model.path} from your models (the file itself is untouched"
              + (", except the copy, deleted)." if args.delete_copy and model.copied_from else ")."))
    return 0


def _print_local(model: Any) -> None:
    facts = model.facts
    sidecars = ", ".join(f"{kind} {path.name}" for kind, path in (("d2t", model.sidecar_d2t),
                                                                  ("full", model.sidecar_full)) if path) or "none"
    print(f"    {facts.architecture}, {facts.quantization}, {facts.size_bytes / 1e9:.1f} GB, MTP head "
          f"{'yes' if facts.mtp_head else 'no'}; FastMTP sidecars: {sidecars}\n"
          f"    {model.verification.label if model.state == model.verification.state else 'unverified local file'}"
          f"{'' if model.offered else '  NOT OFFERED: ' + model.problem}")


def local_rows() -> list[dict[str, Any]]:
    """The registered local models as ``models --json`` lists them (``source: local``)."""
    from app import local_models

    return [dict(m.to_dict(), source="local") for m in local_models.load_registry()]


def print_local_models() -> None:
    from app import local_models

    models = local_models.load_registry()
    if models:
        print("\nYour own model files (`models add`):")
    for model in models:
        print(f"  {model.path}")
        _print_local(model)


# ----------------------------------------------------------------------------- verify FILE


def cmd_verify_file(args: argparse.Namespace) -> int:
    """``verify FILE``: a file in a signed release folder is checked through the trust chain; any other file
    against the hub's content hash for its repository (from its path, the registry or ``--repo``)."""
    from app import local_models, secrets
    from app.release.catalog import load_catalog
    from app.release.hub_hash import EXPLANATIONS, LABELS, HubOrigin, origin_from_path, verify_against_hub

    path = args.dir.absolute()
    if (path.parent / load_catalog().integrity.manifest).is_file():
        from app.release.verify import verify_release

        result = verify_release(path.parent, repo=args.repo, trust_fingerprint=args.trust_fingerprint)
        if path.name not in result.files:
            raise VerificationError(f"{path.name} is not listed in the release's signed manifest.",
                                    "Only files the publisher signed can be publisher-signed.")
        local_models.mark_signed(path, result.metadata.fingerprint)
        data = {"path": str(path), "state": "publisher-signed", "label": LABELS["publisher-signed"],
                "explanation": EXPLANATIONS["publisher-signed"], "fingerprint": result.metadata.fingerprint}
        _event(args, data, "")
        if not args.json:
            print(f"{path}: publisher-signed (every byte matches the manifest signed by {result.metadata.fingerprint})")
        return 0
    known = local_models.find(path)
    origin = origin_from_path(path) or (known.origin if known else None)
    if args.repo:
        in_repo = args.path_in_repo or (origin.path_in_repo if origin else path.name)
        origin = HubOrigin(args.repo, args.revision, in_repo)
    if origin is None:
        message = (f"{path.name} has no publisher signature and no known place on the hub, so nothing can vouch "
                   "for it: it stays an unverified local file.")
        advice = ("If it came from the hub, say from where: `verify FILE --repo ORG/NAME [--revision main] "
                  "[--path-in-repo NAME]`.")
        if args.json:
            print_json({"path": str(path), "state": "unverified", "label": LABELS["unverified"],
                        "explanation": EXPLANATIONS["unverified"], "message": message, "advice": advice})
        else:
            print(f"{path}: unverified local file\n{message}\nwhat to do: {advice}")
        return VerificationError.exit_code
    check = verify_against_hub(path, origin, args.endpoint, secrets.get_token())
    local_models.record_check(path, check)
    if args.json:
        print_json(check.to_dict())
    else:
        print(f"{path}: {check.label}\n  hub: {check.endpoint}/{origin.repo} @ {origin.revision} "
              f"{origin.path_in_repo}\n  hub sha256  {check.expected_sha256}\n  file sha256 "
              f"{check.actual_sha256 or '(not hashed: the sizes differ)'}\n  {EXPLANATIONS[check.state]}")
    return 0 if check.state == "hub-hash-matches" else VerificationError.exit_code


# ----------------------------------------------------------------------------- sidecar make


def cmd_sidecar_make(args: argparse.Namespace) -> int:
    from app import local_models
    from app.sidecar_job import Corpus, default_out, make_sidecar

    control = Control()
    _stop_on_signals(control)
    out = args.out or default_out(args.target.absolute(), args.vocab)
    corpus = Corpus(prompt_sets=tuple(args.prompts or ()), history=args.history, files=tuple(args.corpus or ()))
    made = make_sidecar(args.target, out, args.vocab, corpus, check=not args.no_check, control=control,
                        history_path=args.history_file,
                        on_progress=lambda p: _event(args, p.to_dict(), f"[{p.fraction:5.1%}] {p.message}"))
    attached = False
    if local_models.find(args.target.absolute()) is not None:
        local_models.attach_sidecar(args.target.absolute(), Path(made.path))
        attached = True
    result = dict(made.to_dict(), kind="result", attached=attached)
    if args.json:
        print(json.dumps(result), flush=True)
        return 0
    print(f"wrote {made.path}: {made.vocab_size} draft tokens from {made.corpus}")
    if made.check is not None:
        print(f"one-token acceptance along {made.check.positions} tokens of the model's own text: this sidecar "
              f"{made.check.sidecar_acceptance:.1%}, the embedded head {made.check.embedded_acceptance:.1%}")
    for warning in made.warnings:
        print("note: " + warning)
    return 0


# ----------------------------------------------------------------------------- bench matrix


def cmd_bench_matrix(args: argparse.Namespace) -> int:
    from app import paths
    from app.bench.matrix import MatrixRequest, run_matrix, write_outputs

    control = Control()
    _stop_on_signals(control)
    sidecars = {kind: path for kind, path in (("d2t", args.d2t), ("full", args.full)) if path is not None}
    request = MatrixRequest(target=args.target, sidecars=sidecars, modes=tuple(args.modes.split(",")),
                            depths=tuple(int(d) for d in args.depths.split(",") if d), n_tokens=args.tokens,
                            runs=args.runs, prompt_sets=tuple(args.prompt_sets.split(",")), n_threads=args.threads,
                            n_gpu_layers=args.gpu_layers, name=args.name or args.target.name)
    result = run_matrix(request, lambda p: _event(args, p.to_dict(), f"[{p.done}/{p.total}] {p.message}"), control)
    files = write_outputs(result, request, args.out or paths.cache_dir() / "bench-matrix")
    if args.json:
        print(json.dumps(dict(result.to_dict(), kind="result", files=files)), flush=True)
    else:
        print(result.markdown())
        print(f"wrote {files['json']}, {files['markdown']} and {files['png']}", file=sys.stderr)
    return 0


# ----------------------------------------------------------------------------- registration


def add_models_commands(models_parser: argparse.ArgumentParser, command: Any) -> None:
    """``models add|scan|remove`` under the ``models`` listing command (which stays the default)."""
    msub = models_parser.add_subparsers(dest="models_command")
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


def add_verify_arguments(verify_parser: argparse.ArgumentParser) -> None:
    verify_parser.add_argument("--revision", default="main", help="FILE: the revision on the hub (default main)")
    verify_parser.add_argument("--path-in-repo", help="FILE: its path in the repository (default: its file name)")
    verify_parser.add_argument("--endpoint", help="FILE: the hub to ask (default HF_ENDPOINT or huggingface.co)")


def add_sidecar_commands(ssub: Any, command: Any) -> None:
    mk = command(ssub, "make", cmd_sidecar_make, "make a FastMTP d2t sidecar with progress, then measure its "
                 "acceptance against the embedded head (the window's job)")
    mk.add_argument("--target", type=Path, required=True)
    mk.add_argument("--out", type=Path, help="default: <target>-FastMTP-<N>K.gguf beside the target")
    mk.add_argument("--vocab", type=int, choices=[16384, 32768, 65536], default=32768, help="draft vocabulary size")
    mk.add_argument("--prompts", nargs="+", metavar="SET", help="built-in prompt sets (document, reasoning)")
    mk.add_argument("--history", action="store_true", help="your own chats (user and assistant messages)")
    mk.add_argument("--history-file", type=Path, help="the chat history to read (default: the app's)")
    mk.add_argument("--corpus", type=Path, nargs="+", help="text files")
    mk.add_argument("--no-check", action="store_true", help="skip the acceptance check")


def add_bench_commands(bsub: Any, command: Any) -> None:
    mx = command(bsub, "matrix", cmd_bench_matrix, "the bench spec matrix for your model on this machine, variant "
                 "by variant with progress (the Benchmark page's job): JSON, markdown, PNG")
    mx.add_argument("--target", type=Path, required=True)
    mx.add_argument("--d2t", type=Path, help="its FastMTP d2t sidecar")
    mx.add_argument("--full", type=Path, help="its full sidecar")
    mx.add_argument("--modes", default="off,embedded,d2t", help="comma-separated: off, embedded, full, d2t")
    mx.add_argument("--depths", default="1,2,3,4", help="draft depths")
    mx.add_argument("--tokens", type=int, default=64, help="tokens generated per prompt")
    mx.add_argument("--runs", type=int, default=1, help="runs; figures are medians")
    mx.add_argument("--prompt-sets", default="document", help="comma-separated: document, reasoning")
    mx.add_argument("--threads", type=int)
    mx.add_argument("--gpu-layers", type=int, default=0, help="-1 offloads everything (CUDA backends)")
    mx.add_argument("--name", help="the model's name in the report")
    mx.add_argument("--out", type=Path, help="folder for matrix.json, matrix.md, matrix.png")

