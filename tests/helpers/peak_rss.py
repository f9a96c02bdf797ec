"""Run one CLI command in a child process and measure its peak memory: the only honest way to assert a cap.

    python -m tests.helpers.peak_rss AS_LIMIT_MIB -- remote test box --json

runs ``app.cli.main`` under ``RLIMIT_AS`` (a runaway allocation ends in MemoryError or an abort instead of
eating the machine) and prints on stderr, as a line of its own, ``peak_rss_kib=N``: the process's peak resident set
(``VmHWM`` of /proc/self/status) when the command ended, whatever way it ended. :func:`run` does it from a test.
(Not ``ru_maxrss``: Linux carries the forking parent's peak into it across exec, so a child of pytest would report
pytest's size.)
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

_MARK = "peak_rss_kib="


@dataclass(frozen=True)
class Measured:
    returncode: int
    stdout: str
    stderr: str  # without the measurement line
    peak_mib: float  # -1 when the child died before it could say (a signal)


def run(args: list[str], *, as_limit_mib: int = 2048, timeout: float = 600.0, env: dict[str, str] | None = None,
        cwd: Path | None = None) -> Measured:
    """``python -m app ARGS`` measured in a child; ``timeout`` only guards the test run itself."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-m", "tests.helpers.peak_rss", str(as_limit_mib), "--", *args],
                          capture_output=True, text=True, timeout=timeout, env=env or dict(os.environ),
                          cwd=cwd or root)
    found = re.search(rf"^{_MARK}(\d+)\n", done.stderr, re.M)
    stderr = done.stderr[: found.start()] + done.stderr[found.end():] if found else done.stderr
    return Measured(done.returncode, done.stdout, stderr, int(found.group(1)) / 1024 if found else -1.0)


def _vm_hwm_kib() -> int:
    status = Path("/proc/self/status").read_text()
    found = re.search(r"^VmHWM:\s+(\d+) kB", status, re.M)
    return int(found.group(1)) if found else -1


def main() -> int:
    limit_mib, _, *argv = sys.argv[1:]
    limit = int(limit_mib) << 20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    code = 1
    try:
        from app.cli import main as cli_main

        code = cli_main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    finally:
        sys.stdout.flush()
        print(f"\n{_MARK}{_vm_hwm_kib()}", file=sys.stderr, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
