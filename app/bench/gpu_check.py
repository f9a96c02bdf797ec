"""``gpu-check``: everything a briefly lent, offline GPU machine should measure, in one command and one budget.

A GPU machine is lent for minutes, with no network and little room for luggage. This runs, in
order of value, each step as its own ``python -m app ...`` child (a native crash or a hang costs that
step, not the run) with a share of the time budget: install the carried backend archive (or use the
active backend, or build one when there is time), the self-test (on a GPU it must offload), the
table-driven demo model, losslessness with real rejections, the per-op profile, the draft head,
and the speculative matrix with llama-server side by side. It writes at most :data:`MAX_FILES`
result files into ``out``, a summary first, whatever was cut short.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.core.words import noun

MAX_FILES = 9
SUMMARY = "summary.md"
# the article's figures (27B, GPU): FastMTP vs no MTP, and vs the embedded MTP head
ARTICLE = {"document": {"vs_off": 3.02, "vs_embedded": 1.352}, "reasoning": {"vs_off": 1.93, "vs_embedded": 1.211}}
Log = Callable[[str], None]


@dataclass
class CheckOptions:
    out: Path
    work: Path
    size: str = "27b"
    acceptance: float = 0.92
    gpu_layers: int = -1
    runs: int = 2
    tokens: int = 128
    budget_s: float = 540.0
    archive: Path | None = None
    threads: int | None = None


@dataclass
class Step:
    name: str
    ok: bool = False
    seconds: float = 0.0
    note: str = ""
    result: Any = None


@dataclass
class CheckRun:
    options: CheckOptions
    started: float = field(default_factory=time.monotonic)
    steps: list[Step] = field(default_factory=list)
    log_lines: list[str] = field(default_factory=list)
    # asked once: nvidia-smi and the library search serve every step and the report
    gpu: dict[str, Any] = field(default_factory=lambda: gpu_description())
    env: dict[str, str] = field(default_factory=lambda: child_env())

    def left(self) -> float:
        return self.options.budget_s - (time.monotonic() - self.started)

    def step(self, name: str, args: list[str], share: float, floor: float = 20.0) -> Step:
        """Run ``python -m app <args>`` with ``share`` of the time left (at least ``floor`` s, within the budget)."""
        step = Step(name)
        self.steps.append(step)
        left = self.left() - 10.0  # keep time to write the summary
        if left < floor:
            step.note = f"skipped: {max(left, 0):.0f} s of the budget left"
            return step
        timeout = max(floor, left * share)
        cmd = [sys.executable, "-m", "app", *args]
        self.log_lines.append(f"$ {' '.join(cmd)}   (timeout {timeout:.0f} s)")
        began = time.monotonic()
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, errors="replace",
                                  env=self.env)
            stdout, stderr, code = done.stdout, done.stderr, done.returncode
        except subprocess.TimeoutExpired as exc:
            stdout, stderr, code = _text(exc.stdout), _text(exc.stderr), None
        step.seconds = round(time.monotonic() - began, 1)
        self.log_lines += [line for line in stderr.splitlines() if line.strip()][-60:]
        step.result = _last_json(stdout)
        if code is None:
            step.note = f"stopped after {timeout:.0f} s (its share of the budget)"
        elif code != 0:
            step.note = f"exit code {code}: " + _error_text(step.result, stderr)
        else:
            step.ok = step.result is not None
            if not step.ok:
                step.note = "no JSON result"
        return step


def cuda_runtime_dirs() -> list[str]:
    """Folders holding the CUDA runtime and cuBLAS on this machine (a toolkit, or pip's ``nvidia`` wheels).

    A backend built elsewhere finds them only through ``LD_LIBRARY_PATH``: its manifest names the
    build machine's folders.
    """
    candidates = [Path(entry) / "nvidia" / sub / "lib" for entry in sys.path if entry
                  for sub in ("cu13", "cu12", "cublas", "cuda_runtime")]
    for root in [Path("/usr/local/cuda"), *sorted(Path("/usr/local").glob("cuda-*"), reverse=True)]:
        candidates += [root / "lib64", root / "targets" / "x86_64-linux" / "lib"]
    found: list[str] = []
    for folder in candidates:
        has = [name for name in ("cudart", "cublas") if any(folder.glob(f"lib{name}.so*"))]
        if has and str(folder) not in found:
            found.append(str(folder))
    return found


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    extra = cuda_runtime_dirs()
    if extra:
        env["LD_LIBRARY_PATH"] = os.pathsep.join([*extra, *filter(None, [env.get("LD_LIBRARY_PATH")])])
    return env


def _text(value: str | bytes | None) -> str:
    if value is None:
        return ""
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _last_json(stdout: str) -> Any:
    """The command's JSON result: the whole output, or its last line (event streams)."""
    text = stdout.strip()
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        pass
    for line in reversed(text.splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            continue
    return None


def _error_text(result: Any, stderr: str) -> str:
    if isinstance(result, dict) and (result.get("message") or result.get("error")):
        return str(result.get("message") or result.get("error"))  # an app error, or a self-test's own
    lines = [line for line in stderr.splitlines() if line.strip()]
    return lines[-1] if lines else "no message"


def gpu_description() -> dict[str, Any]:
    """What ``nvidia-smi`` says (name, memory, driver, CUDA version), or why there is nothing."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {"present": False, "note": "nvidia-smi not found: no NVIDIA driver on this machine"}
    try:
        query = subprocess.run([smi, "--query-gpu=name,compute_cap,memory.total,driver_version",
                                "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
        header = subprocess.run([smi], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"present": False, "note": f"nvidia-smi failed: {exc}"}
    cuda = next((part.split(":")[1].strip().split()[0] for part in header.stdout.split("|")
                 if "CUDA Version" in part), None)
    return {"present": query.returncode == 0, "gpus": query.stdout.strip().splitlines(), "cuda_version": cuda,
            "cuda_runtime_dirs": cuda_runtime_dirs()}


# peak memory bandwidth (GB/s) of GPUs a check may meet, by a word of their nvidia-smi name: the decode floor
_BANDWIDTH_GBS = {"H200": 4800.0, "H100 PCIe": 2000.0, "H100": 3350.0, "A100": 2039.0, "L40S": 864.0,
                  "RTX 4090": 1008.0, "RTX 5090": 1792.0, "RTX 3090": 936.0}


def memory_bandwidth_gbs(gpu: dict[str, Any]) -> float | None:
    """The first GPU's peak bandwidth when its name is one we know (first match in table order)."""
    names = gpu.get("gpus") or []
    if not names:
        return None
    return next((gbs for word, gbs in _BANDWIDTH_GBS.items() if word in names[0]), None)


def run(options: CheckOptions, log: Log = lambda _line: None) -> CheckRun:
    """Run the whole check and write its files; returns what happened, step by step."""
    options.out.mkdir(parents=True, exist_ok=True)
    options.work.mkdir(parents=True, exist_ok=True)
    check = CheckRun(options)
    gl = ["--gpu-layers", str(options.gpu_layers)]
    threads = ["--threads", str(options.threads)] if options.threads else []

    def announce(step: Step) -> Step:
        log(f"[{time.monotonic() - check.started:5.0f} s] {step.name}: "
            f"{'ok' if step.ok else 'FAILED'} in {step.seconds:.0f} s {step.note}")
        return step

    if options.archive is not None:
        announce(check.step("backend", ["backend", "unpack", str(options.archive), "--json"], 0.1))
    else:
        status = announce(check.step("backend", ["backend", "status", "--json"], 0.05))
        active = status.result.get("active") if isinstance(status.result, dict) else None
        if not active:
            announce(check.step("backend build", ["backend", "build", "--auto", "--json"], 0.8))
    announce(require_offload(check.step("selftest", ["backend", "selftest", "--json"], 0.2), options.gpu_layers))
    demo_dir = options.work / f"demo-{options.size}-a{options.acceptance}"
    demo = announce(check.step("demo model", ["demo-model", "--out", str(demo_dir), "--size", options.size,
                                              "--acceptance", str(options.acceptance), "--json"], 0.2))
    if demo.ok:
        files = ["--target", demo.result["target"], "--full", demo.result["sidecar_full"],
                 "--d2t", demo.result["sidecar_d2t"]]
        announce(check.step("lossless", ["bench", "lossless", *files, *gl, *threads, "--prompts", "1",
                                         "--tokens", "48", "--json"], 0.2))
        bandwidth = memory_bandwidth_gbs(check.gpu) if options.gpu_layers != 0 else None
        announce(check.step("ops", ["bench", "ops", "--model", demo.result["target"], "--draft",
                                    demo.result["sidecar_d2t"], *gl, *threads, "--json",
                                    *(["--bandwidth-gbs", str(bandwidth)] if bandwidth else [])], 0.15))
        announce(check.step("draft head", ["bench", "draft-head", *files, *gl, *threads, "--runs", "20", "--json"],
                            0.15))
        announce(check.step("sampler", ["bench", "sampler", "--target", demo.result["target"], *gl, *threads,
                                        "--runs", "9", "--decode-tokens", "64", "--json"], 0.1))
        carried = check_server(check)
        server = ["--server", str(carried)] if carried else []
        # the matrix gets what is left; it stops starting variants in time to report what it measured
        limit = max(30.0, (check.left() - 10.0) * 0.95 - 20.0)
        announce(check.step("spec", ["bench", "spec", *files, *gl, *threads, "--modes", "off,embedded,d2t",
                                     "--depths", "1,2,3,4", "--runs", str(options.runs), "--tokens",
                                     str(options.tokens), "--out", str(options.work / "spec"), *server,
                                     "--time-limit", f"{limit:.0f}", "--json"], 0.95, floor=60.0))
        spec = check.steps[-1]
        if spec.ok and isinstance(spec.result, dict) and spec.result.get("cut_short"):
            runs = int(spec.result.get("runs") or 0)
            spec.note = f"cut short by the budget after {runs} complete {noun(runs, 'run')}"
    write_files(check)
    return check


def require_offload(selftest: Step, gpu_layers: int) -> Step:
    """A run meant for the GPU fails its self-test step when the backend cannot offload: a CPU result
    must never pass for a GPU one."""
    if selftest.ok and gpu_layers != 0 and not selftest.result.get("gpu_offload"):
        selftest.ok = False
        selftest.note = "the backend cannot offload to a GPU (a CPU build, or no CUDA device visible)"
    return selftest


def check_server(check: CheckRun) -> Path | None:
    """The carried llama-server of an unpacked archive, if the backend step installed one."""
    first = check.steps[0] if check.steps else None
    if first and first.name == "backend" and isinstance(first.result, dict) and first.result.get("server"):
        return Path(first.result["server"])
    return None


def write_files(check: CheckRun) -> list[Path]:
    """The result files: summary, environment, one JSON per measuring step, the log. Never more than MAX_FILES."""
    out = check.options.out
    by_name = {s.name: s for s in check.steps}
    written: list[Path] = []

    def put(name: str, data: Any) -> None:
        path = out / name
        path.write_text(data if isinstance(data, str) else json.dumps(data, indent=2, default=str) + "\n")
        written.append(path)

    put(SUMMARY, summary_markdown(check))
    put("env.json", {"gpu": check.gpu, "python": sys.version, "platform": platform.platform(),
                     "options": {k: str(v) for k, v in check.options.__dict__.items()},
                     "steps": [{"name": s.name, "ok": s.ok, "seconds": s.seconds, "note": s.note}
                               for s in check.steps],
                     "backend": by_name["backend"].result if "backend" in by_name else None})
    for name, file in (("selftest", "selftest.json"), ("lossless", "lossless.json"), ("ops", "ops.json"),
                       ("draft head", "draft-head.json"), ("sampler", "sampler.json"), ("spec", "spec.json")):
        if name in by_name and by_name[name].result is not None:
            put(file, by_name[name].result)
    put("log.txt", "\n".join(check.log_lines) + "\n")
    assert len(written) <= MAX_FILES
    return written


def summary_markdown(check: CheckRun) -> str:
    o = check.options
    gpu = check.gpu
    lines = [f"# GPU check ({', '.join(gpu.get('gpus', [])) or 'no NVIDIA GPU'})", "",
             f"{o.size} demo model at acceptance {o.acceptance}, --gpu-layers {o.gpu_layers}, {o.runs} runs x "
             f"{o.tokens} tokens; budget {o.budget_s:.0f} s, used {time.monotonic() - check.started:.0f} s.", "",
             "| step | result | seconds | note |", "|---|---|---|---|"]
    lines += [f"| {s.name} | {'ok' if s.ok else '**failed**'} | {s.seconds:.0f} | {s.note} |" for s in check.steps]
    by_name = {s.name: s for s in check.steps}
    lossless = by_name.get("lossless")
    if lossless and isinstance(lossless.result, dict):
        lines += ["", f"Lossless: {'every variant identical to off' if lossless.result.get('ok') else '**MISMATCH**'}"
                  f", {lossless.result.get('rejections', 0)} drafts rejected along the way."]
    spec = by_name.get("spec")
    if spec and isinstance(spec.result, dict):
        lines += ["", "## Against the article", "", *article_comparison(spec.result)]
    return "\n".join(lines) + "\n"


def article_comparison(spec: dict[str, Any]) -> list[str]:
    """Our d2t speedups over off and over the embedded head (best fixed depth and adaptive), beside the article's."""
    rows = [r for r in spec.get("rows", []) if r.get("engine") == "ours" and r.get("decode_tps_median")]

    def best(prefix: str, prompt_set: str) -> float | None:
        found = [float(r["decode_tps_median"]) for r in rows
                 if str(r.get("variant", "")).startswith(prefix) and r.get("prompt_set") == prompt_set]
        return max(found) if found else None

    out = ["| prompt set | d2t vs off | article | d2t vs embedded (best of each) | article |", "|---|---|---|---|---|"]
    for prompt_set, article in ARTICLE.items():
        off = best("off", prompt_set)
        d2t = best("d2t sidecar", prompt_set)
        embedded = best("embedded", prompt_set)
        vs_off = f"{d2t / off:.2f}x" if d2t and off else "–"
        vs_emb = f"{d2t / embedded - 1:+.1%}" if d2t and embedded else "–"
        out.append(f"| {prompt_set} | {vs_off} | {article['vs_off']:.2f}x | {vs_emb} | "
                   f"{article['vs_embedded'] - 1:+.1%} |")
    return out


# ------------------------------------------------------------------ what to carry to the GPU machine

CARRY_LIMIT_BYTES = 64 * 1024 * 1024
# what `python -m app gpu-check` needs beyond what a GPU machine's Python usually has (numpy, httpx, jinja2, pyyaml)
CARRY_WHEELS = ["gguf", "platformdirs", "diskcache", "typing_extensions"]


def prepare_carry(out: Path, *, flavor: str = "cuda", cuda_archs: list[str] | None = None,
                  python_version: str = "3.12", log: Log = lambda _line: None) -> dict[str, Any]:
    """Build (or reuse) a portable backend and its llama-server, pack them, and fetch the wheels ``gpu-check`` needs.

    Everything lands in ``out`` (``backend.tar.xz``, ``wheels/``), checked against the 64 MiB a lent
    GPU machine accepts.
    """
    from app.backend import archive, registry
    from app.backend.builder import BuildOptions, build_backend, plan_build
    from app.core.errors import BackendError
    from app.machines.upstream_server import build_server

    options = BuildOptions(flavor="cuda" if flavor == "cuda" else "cpu", cuda_archs=cuda_archs or [],
                           portable=True, activate=False)
    backend_id = plan_build(options).backend_id
    try:
        ready = registry.get(backend_id).selftest_ok
    except BackendError:
        ready = False
    if not ready:
        log(f"building the portable {options.flavor} backend {backend_id} (about an hour for CUDA on 2 cores)")
        build_backend(options, on_event=lambda e: log(e.message) if e.kind == "step" else None)
    log("building llama-server in the same tree")
    server = build_server(options, on_event=lambda e: log(e.message) if e.kind == "step" else None)
    out.mkdir(parents=True, exist_ok=True)
    packed = archive.pack(backend_id, out / "backend.tar.xz", server)
    wheels = out / "wheels"
    shutil.rmtree(wheels, ignore_errors=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--python-version",
           python_version, "--platform", "manylinux2014_x86_64", "--platform", "any", "-d", str(wheels),
           "--progress-bar", "off", *CARRY_WHEELS]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise BackendError("Could not download the wheels gpu-check needs on the GPU machine:\n"
                           + "\n".join(done.stderr.strip().splitlines()[-5:]),
                           "Check the network and run gpu-prepare again (the backend is already packed).")
    total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    if total > CARRY_LIMIT_BYTES:
        raise BackendError(f"{out} holds {total / 2**20:.1f} MiB, more than the 64 MiB a GPU machine accepts.",
                           "Build for one CUDA architecture only (--cuda-arch 90).")
    return {"out": str(out), "backend": backend_id, "archive": str(packed), "archive_bytes": packed.stat().st_size,
            "wheels": sorted(p.name for p in wheels.iterdir()), "total_bytes": total}
