"""Benchmark: our fetcher against curl on the same local file, alternating runs, with peak memory.

The issue's bar is throughput >= 90% of curl with flat memory (RSS < 100 MB for a 2 GB file). Both
downloads run as child processes so their peak RSS (``ru_maxrss`` from ``wait4``) is measured the same
way; the server is a small sendfile-based one in this process, so it is not what limits either client.
Our fetcher does more than curl on the way: sha256 while streaming, the size check, and an fsync
before the rename into place; the numbers include all of it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TextIO

from app.core.errors import FastMTPError

_SOURCE = "bench-source.bin"
_CHILD = """
import json, sys, time
from pathlib import Path
from app.release.fetcher import FileRequest, fetch_files
name, url, size, digest, dest = sys.argv[1:6]
started = time.perf_counter()
fetch_files([FileRequest(name, [url], int(size), digest)], Path(dest), max_workers=1)
seconds = time.perf_counter() - started
hwm = next((int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM")), 0)
print(json.dumps({"seconds": seconds, "vmhwm_kib": hwm}))
"""


@dataclass
class ToolRuns:
    """One client's runs: seconds and peak RSS per run."""

    name: str
    seconds: list[float] = field(default_factory=list)
    peak_rss_mb: list[float] = field(default_factory=list)

    def mb_per_s(self, size: int) -> list[float]:
        return [round(size / s / 1e6, 1) for s in self.seconds]

    def median_mb_per_s(self, size: int) -> float:
        return round(statistics.median(self.mb_per_s(size)), 1)


@dataclass
class FetchBenchResult:
    size_bytes: int
    runs: int
    ours: ToolRuns
    curl: ToolRuns

    @property
    def ratio(self) -> float:
        return round(self.ours.median_mb_per_s(self.size_bytes) / self.curl.median_mb_per_s(self.size_bytes), 3)

    def to_dict(self) -> dict[str, object]:
        return {"size_bytes": self.size_bytes, "runs": self.runs, "ratio_vs_curl": self.ratio,
                "ours": {**asdict(self.ours), "mb_per_s": self.ours.mb_per_s(self.size_bytes),
                         "median_mb_per_s": self.ours.median_mb_per_s(self.size_bytes)},
                "curl": {**asdict(self.curl), "mb_per_s": self.curl.mb_per_s(self.size_bytes),
                         "median_mb_per_s": self.curl.median_mb_per_s(self.size_bytes)},
                "targets": {"ratio_vs_curl": 0.9, "peak_rss_mb": 100}}

    def markdown(self) -> str:
        rows = ["| client | median MB/s | runs (MB/s) | peak RSS (MB) |", "|---|---:|---|---:|"]
        for tool in (self.ours, self.curl):
            rows.append(f"| {tool.name} | {tool.median_mb_per_s(self.size_bytes)} | "
                        f"{', '.join(str(v) for v in tool.mb_per_s(self.size_bytes))} | "
                        f"{max(tool.peak_rss_mb):.1f} |")
        verdict = "meets" if self.ratio >= 0.9 else "misses"
        rss = max(self.ours.peak_rss_mb)
        rows.append("")
        rows.append(f"File: {self.size_bytes / 1e9:.2f} GB from 127.0.0.1, {self.runs} alternating runs each. "
                    f"Ours / curl = **{self.ratio:.2f}x** ({verdict} the 0.9x target); our peak RSS "
                    f"{rss:.1f} MB ({'under' if rss < 100 else 'over'} the 100 MB target).")
        return "\n".join(rows)


def run(size_bytes: int, runs: int, folder: Path, log: TextIO = sys.stderr) -> FetchBenchResult:
    """Serve a generated file and download it with both clients, alternating which goes first."""
    curl = shutil.which("curl")
    if curl is None:
        raise FastMTPError("curl is not installed, so there is nothing to compare with.",
                           "Install curl (e.g. `apt-get install curl`) and run the benchmark again.")
    folder.mkdir(parents=True, exist_ok=True)
    digest = _source(folder, size_bytes)
    dest = folder / "downloads"
    server, url = _serve(folder)
    ours, theirs = ToolRuns("fastmtp fetcher (sha256 + fsync)"), ToolRuns("curl")
    try:
        for index in range(runs):
            order = [("ours", ours), ("curl", theirs)] if index % 2 == 0 else [("curl", theirs), ("ours", ours)]
            for kind, tool in order:
                shutil.rmtree(dest, ignore_errors=True)
                dest.mkdir(parents=True)
                if kind == "ours":
                    seconds, rss = _run_ours(url, size_bytes, digest, dest)
                else:
                    seconds, rss = _run_curl(curl, url, dest / _SOURCE, size_bytes)
                tool.seconds.append(round(seconds, 3))
                tool.peak_rss_mb.append(round(rss, 1))
                print(f"run {index + 1}/{runs} {tool.name}: {size_bytes / seconds / 1e6:.0f} MB/s, "
                      f"peak RSS {rss:.1f} MB", file=log, flush=True)
    finally:
        server.shutdown()
        server.server_close()
        shutil.rmtree(dest, ignore_errors=True)
    return FetchBenchResult(size_bytes, runs, ours, theirs)


def _source(folder: Path, size: int) -> str:
    """A sparse file of ``size`` bytes (not committed, made in a moment) and its sha256, cached beside it."""
    path, hash_file = folder / _SOURCE, folder / (_SOURCE + ".sha256")
    if not path.is_file() or path.stat().st_size != size or not hash_file.is_file():
        with path.open("wb") as handle:
            handle.truncate(size)
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
        hash_file.write_text(digest.hexdigest())
    return hash_file.read_text().strip()


def _run_ours(url: str, size: int, digest: str, dest: Path) -> tuple[float, float]:
    """Seconds inside ``fetch_files`` (not the interpreter's start) and the child's peak RSS."""
    repo = Path(__file__).resolve().parents[2]
    code, out, err, _, rss_mb = _spawn([sys.executable, "-c", _CHILD, _SOURCE, url, str(size), digest, str(dest)],
                                       cwd=repo)
    if code != 0:
        raise FastMTPError(f"The benchmark download failed:\n{err.strip()[-2000:]}")
    report = json.loads(out.strip().splitlines()[-1])
    return float(report["seconds"]), max(rss_mb, report["vmhwm_kib"] / 1024)


def _run_curl(curl: str, url: str, out: Path, size: int) -> tuple[float, float]:
    """Wall seconds and peak RSS; GNU time measures the RSS where present, as a fork of this Python process
    would count our own memory as curl's until its exec."""
    timer = Path("/usr/bin/time")
    prefix = [str(timer), "-f", "maxrss_kib=%M"] if timer.is_file() else []
    code, _, err, seconds, rss_mb = _spawn([*prefix, curl, "-sS", "--fail", "-o", str(out), url])
    if code != 0 or out.stat().st_size != size:
        raise FastMTPError(f"curl failed: {err.strip()}")
    reported = [line.split("=", 1)[1] for line in err.splitlines() if line.startswith("maxrss_kib=")]
    return seconds, (int(reported[-1]) / 1024 if reported else rss_mb)


def _spawn(args: list[str], cwd: Path | None = None) -> tuple[int, str, str, float, float]:
    """Run a child to its end: exit code, stdout, stderr, wall seconds and its own peak RSS in MB.

    ``os.wait4`` gives the one child's ``ru_maxrss``; ``RUSAGE_CHILDREN`` would mix the two clients.
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        child = subprocess.Popen(args, cwd=cwd, stdout=out, stderr=err)
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - started
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return (child.returncode, out.read().decode(errors="replace"), err.read().decode(errors="replace"),
                seconds, usage.ru_maxrss / 1024)


def _serve(folder: Path) -> tuple[ThreadingHTTPServer, str]:
    """Serve ``folder`` with sendfile: the kernel copies, so the server is never the bottleneck."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            """Quiet."""

        def do_GET(self) -> None:
            path = folder / self.path.lstrip("/")
            if path.parent != folder or not path.is_file():
                self.send_error(404)
                return
            size = path.stat().st_size
            self.send_response(200)
            self.send_header("Content-Length", str(size))
            self.send_header("ETag", f'"{size:x}"')
            self.end_headers()
            with path.open("rb") as handle:
                self.connection.sendfile(handle)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/{_SOURCE}"
