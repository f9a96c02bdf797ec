"""A load generator: child processes that keep CPU cores busy while something else runs.

The app's speed and its test suite must hold on a machine that is doing other work (a second app, a build, a
browser), not only on a quiet one. ``BusyCores`` starts one spinning child per core asked for and stops them
however the work under load ends; ``python -m app.bench.busy_cores --cores 2 -- make test`` runs a command under
that load (``make test-loaded``), and the benchmarks use it for their loaded phases.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Sequence
from types import TracebackType

from app.core.processes import child_python, creationflags, stop_process

MAX_CORES = 256  # more spinning children than this is a typo, not a load


class BusyCores:
    """``cores`` child processes, each spinning on one core at normal priority, from ``start`` to ``stop``."""

    def __init__(self, cores: int) -> None:
        if not 0 <= cores <= MAX_CORES:
            raise ValueError(f"The number of busy cores must be between 0 and {MAX_CORES}, not {cores}.")
        self.cores = cores
        self._children: list[subprocess.Popen[bytes]] = []

    @property
    def running(self) -> bool:
        return any(child.poll() is None for child in self._children)

    def start(self) -> None:
        """Start the spinning children (a second start while running changes nothing)."""
        if self.running:
            return
        self._children = [subprocess.Popen([child_python(), "-m", "app.bench.busy_cores", "--spin"],
                                           stdin=subprocess.DEVNULL, creationflags=creationflags())
                          for _ in range(self.cores)]

    def stop(self) -> None:
        """Stop every child and reap it (also after one died on its own)."""
        children, self._children = self._children, []
        for child in children:
            stop_process(child, grace_s=5.0)

    def __enter__(self) -> BusyCores:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def _spin() -> None:
    """Keep one core busy until killed."""
    count = 0
    while True:
        count = (count + 1) & 0xFFFF


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.bench.busy_cores",
                                     description="Run a command while N other processes keep N cores busy.")
    parser.add_argument("--cores", type=int, default=2, help="how many cores to keep busy (default 2)")
    parser.add_argument("--spin", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command to run, after --")
    args = parser.parse_args(argv)
    if args.spin:
        _spin()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --, e.g. -- make test")
    try:
        load = BusyCores(args.cores)
    except ValueError as exc:
        parser.error(str(exc))
    print(f"busy_cores: {args.cores} spinning process(es) while running: {' '.join(command)}", file=sys.stderr,
          flush=True)
    with load:
        return subprocess.call(command)


if __name__ == "__main__":
    sys.exit(main())
