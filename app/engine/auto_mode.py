"""Auto drafting: measure which drafting mode is fastest for a model on this machine, remember it, use it.

Whether drafting pays depends on the model, the backend and the machine (a small model on a CPU: its passes are
so quick that drafts save next to nothing; a 27B model on a GPU: a large gain), and so does which draft head pays
more (the embedded MTP head or the FastMTP d2t sidecar). Auto finds out instead of guessing: on the first loads
of a model its replies go in turn to drafting off, the embedded head and the d2t sidecar (each with adaptive
depth; those the model has files for), after a warm-up reply; once every mode has ``MIN_SAMPLES`` replies
under the same conditions, each drafting mode is set against off with ``app.engine.verdict.compare``:
the winner is the drafting mode clearly faster than off (the faster of two), or off when none is. From then on
every load of that model uses the winner, and says by how much it won.

What was measured and decided is kept per model files (the target and the d2t sidecar, by path, size and
modification time), backend, threads, GPU layers and machine, beside adaptive depth's memory
(``app.engine.depth_memory``: the same keying idea, the same data folder, ``.auto.json`` records; ``python -m
app depth-memory list`` shows them, ``forget`` forgets them). The replies measured so far are kept too, so a
measurement goes on across restarts (each start's first reply is a warm-up again). A record that cannot be read,
or that another version wrote, is a cold start, never an error; one that is stale (older than two weeks, made under
a load twice as light or heavy per core, or by another backend build: ``depth_memory.stale_reason``) is measured
again.

A decision is not final (issue 36: decisions learned under load stick): every ``RECHECK_EVERY`` replies with the
winner, one reply goes to a mode it beat, in turn (~6% of the replies), beside the winner's reply just before it;
once ``MIN_SAMPLES`` of those pairs, the latest only, say with the same ``verdict.compare`` that the beaten mode
now wins, it becomes the winner. Qt-free and nothing native: the window (and the
terminal ``chat --mtp auto``) only loads what ``next_mode`` names and feeds back each reply (``observe``).
"""

from __future__ import annotations

import hashlib
import json
import platform
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from app.core.settings_file import load_json_object, load_state, write_json
from app.engine.depth_memory import (
    conditions_now,
    forget_records,
    set_aside_records,
    stale_for_listing,
    take_up,
)
from app.engine.modes import MODES
from app.engine.verdict import MIN_SAMPLES, MIN_TOKENS, Condition, Sample, Verdict, compare

CANDIDATES = ("off", "embedded", "d2t")  # what Auto measures, in this order (those the model has files for)
SUFFIX = ".auto.json"
VERSION = 1
RECHECK_EVERY = 16  # replies with the winner between two re-checks of a mode it beat (one reply each: ~6%)
RECHECK_KEEP = 2 * MIN_SAMPLES  # per beaten mode: its latest re-check replies, each beside the winner's reply before


@dataclass(frozen=True)
class AutoKey:
    """What decides which mode wins: the model files, the backend build, the threads (0: the backend's default),
    the GPU layers and RPC workers, and the machine."""

    target: str
    target_size: int
    target_mtime_ns: int
    d2t: str | None
    d2t_size: int | None
    d2t_mtime_ns: int | None
    backend: str
    threads: int
    gpu_layers: int
    rpc: tuple[str, ...]
    machine: str

    def digest(self) -> str:
        canonical = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:24]


def auto_key(target: Path, d2t: Path | None, backend: str, threads: int | None = None, gpu_layers: int = 0,
             rpc: Sequence[str] = ()) -> AutoKey:
    """The key of these files as they are on disk now (``OSError`` when one is missing)."""
    target = target.resolve()
    target_stat = target.stat()
    d2t = d2t.resolve() if d2t is not None else None
    d2t_stat = d2t.stat() if d2t is not None else None
    return AutoKey(str(target), target_stat.st_size, target_stat.st_mtime_ns,
                   str(d2t) if d2t is not None else None, d2t_stat.st_size if d2t_stat is not None else None,
                   d2t_stat.st_mtime_ns if d2t_stat is not None else None, backend, threads or 0, gpu_layers,
                   tuple(rpc), platform.node())


@dataclass
class AutoDrafting:
    """The measurement and decision for one key: which mode the next reply uses (``next_mode``), what the replies
    measured (``observe``), the winner once decided, and the words for it (``status``)."""

    candidates: tuple[str, ...]
    samples: list[Sample] = field(default_factory=list)
    winner: str | None = None
    verdicts: dict[str, Verdict] = field(default_factory=dict)  # each drafting mode against off, when decided
    decided_at: str | None = None
    # after the decision: replies with the winner since the last re-check, whose turn the next re-check is, and per
    # beaten mode its re-check samples, each beside the winner's reply just before it (so taken in turn)
    since_check: int = 0
    check_turn: int = 0
    rechecks: dict[str, list[Sample]] = field(default_factory=dict)
    changed: int = 0  # times a re-check changed the winner
    conditions: dict[str, Any] | None = None  # the load and backend build when this process took the record up
    stale: str | None = None  # why the record found was not used (measured again), in words
    _last_winner: Sample | None = None
    _seen_this_start: int = 0  # replies observed since this process took the record up (the first is a warm-up)

    def __post_init__(self) -> None:
        self.candidates = tuple(m for m in CANDIDATES if m in self.candidates) or ("off",)
        if self.candidates == ("off",) and self.winner is None:
            self.winner = "off"  # nothing to draft with: nothing to measure

    @property
    def measuring(self) -> bool:
        return self.winner is None

    def beaten(self) -> list[str]:
        """The modes the winner beat (re-checked in turn after it is decided)."""
        return [m for m in self.candidates if m != self.winner] if self.winner is not None and self.verdicts else []

    def next_mode(self) -> str:
        """The mode the next reply should use: the winner, but every ``RECHECK_EVERY`` replies once a mode it beat
        (in turn), so a decision taken under one load or backend is looked at again; the next in turn while
        measuring."""
        if self.winner is not None:
            beaten = self.beaten()
            if beaten and self.since_check >= RECHECK_EVERY and self._last_winner is not None:
                return beaten[self.check_turn % len(beaten)]
            return self.winner
        return self.candidates[len(self.samples) % len(self.candidates)]

    def observe(self, mode: str, condition: Condition, tps: float, tokens: int, load: float | None = None) -> bool:
        """A finished reply of ``mode``: counted when Auto asked for that mode and it is long enough to tell (else
        the same mode is asked for again); True when it was taken. The first reply since this process took the
        record up is the warm-up (kept, marked, not counted). Decides once every mode has enough samples; after
        that, a re-check reply may change the winner (``_recheck``)."""
        if mode != self.next_mode() or tokens < MIN_TOKENS or tps <= 0:
            return False
        warm = self._seen_this_start > 0
        self._seen_this_start += 1
        if self.winner is not None:
            if not self.beaten():
                return False  # nothing to draft with: nothing to re-check
            order = self._next_order()
            sample = Sample(condition, tps, order, warm, load, tokens)
            if mode == self.winner:
                self.since_check += 1
                self._last_winner = sample if warm else None
            else:
                self._recheck(mode, sample)
            return True
        order = self._next_order()
        self.samples.append(Sample(condition, tps, order, warm, load, tokens))
        self._decide()
        return True

    def _next_order(self) -> int:
        """When the next reply is taken, after every one kept (the first decision's and the re-checks')."""
        taken = [s.order for s in self.samples] + [s.order for v in self.rechecks.values() for s in v]
        if self._last_winner is not None:
            taken.append(self._last_winner.order)
        return max(taken, default=-1) + 1

    def _recheck(self, mode: str, sample: Sample) -> None:
        """A re-check reply of a beaten ``mode``, beside the winner's reply just before it: once ``MIN_SAMPLES`` such
        pairs say so (``verdict.compare``, the same rules as the first decision, on those pairs alone: older
        replies were measured under what may no longer hold), the winner changes: a drafting mode wins over off
        when clearly faster, off wins when the drafting winner no longer is, and one drafting mode over another
        when clearly faster."""
        assert self.winner is not None and self._last_winner is not None
        pairs = self.rechecks.setdefault(mode, [])
        pairs += [self._last_winner, sample]
        del pairs[:-2 * RECHECK_KEEP]
        self.since_check, self.check_turn, self._last_winner = 0, self.check_turn + 1, None
        winner = self.winner
        if winner == "off" or mode == "off":
            drafting = mode if winner == "off" else winner
            verdict = compare(pairs[-2 * MIN_SAMPLES:], "off", drafting)
            if not verdict.decided:
                return
            better = drafting if verdict.outcome == "faster" else "off"
            key = drafting
        else:
            verdict = compare(pairs[-2 * MIN_SAMPLES:], winner, mode)
            if not verdict.decided or verdict.outcome != "faster":
                return
            better, key = mode, mode
        if better != winner:
            self.winner = better
            self.verdicts[key] = verdict
            self.decided_at = datetime.now(UTC).isoformat(timespec="seconds")
            self.changed += 1
            self.rechecks.clear()

    def comparisons(self) -> dict[str, Verdict]:
        """Each drafting mode against off, from the samples so far."""
        return {m: compare(self.samples, "off", m) for m in self.candidates if m != "off"}

    def _decide(self) -> None:
        verdicts = self.comparisons()
        if not verdicts or not all(v.decided for v in verdicts.values()):
            return
        clear = [m for m, v in verdicts.items() if v.outcome == "faster"]
        self.winner = max(clear, key=lambda m: verdicts[m].b_median or 0.0) if clear else "off"
        self.verdicts = verdicts
        self.decided_at = datetime.now(UTC).isoformat(timespec="seconds")

    def status(self) -> str:
        """Auto's account for the HUD: which mode it uses and by how much it won (and when the next reply re-checks a
        mode it beat), or how far the measuring is."""
        if self.winner is not None and not self.verdicts:
            return f"Auto uses {MODES['off'].phrase}: this model has no draft head or sidecar to try."
        upcoming = self.next_mode()
        recheck = f" Next reply re-checks {upcoming}." if self.winner is not None and upcoming != self.winner else ""
        if self.winner == "off":
            tried = ", ".join(f"{m} {v.ratio:.2f}x ({v.outcome})" for m, v in self.verdicts.items())
            return f"Auto uses {MODES['off'].phrase}: no draft head was clearly faster here ({tried}).{recheck}"
        if self.winner is not None and self.verdicts[self.winner].a != "off":  # a re-check: one head beat another
            return f"Auto uses {self.winner}: {self.verdicts[self.winner].headline()}.{recheck}"
        if self.winner is not None:
            won = self.verdicts[self.winner]
            return (f"Auto uses {self.winner}: {won.ratio:.2f}x {MODES['off'].phrase}'s speed "
                    f"(median {won.b_median:.0f} against {won.a_median:.0f} tok/s, {len(won.b_tps)} replies each, "
                    f"{won.sampling}).{recheck}")
        counts = self.counts()
        progress = ", ".join(f"{m} {counts[m]}/{MIN_SAMPLES}" for m in self.candidates)
        again = f" again ({self.stale})" if self.stale else ""
        return f"Auto is measuring{again} ({progress}); next reply: {self.next_mode()}."

    def counts(self) -> dict[str, int]:
        """Per mode: the samples that count so far (same conditions as the latest, after a warm-up)."""
        verdicts = self.comparisons()
        counts = {m: len(v.b_tps) for m, v in verdicts.items()}
        counts["off"] = max((len(v.a_tps) for v in verdicts.values()), default=0)
        return counts

    def to_dict(self) -> dict[str, Any]:
        return {"version": VERSION, "candidates": list(self.candidates), "winner": self.winner,
                "decided_at": self.decided_at, "samples": [s.to_dict() for s in self.samples],
                "verdicts": {m: v.to_dict() for m, v in self.verdicts.items()},
                "since_check": self.since_check, "check_turn": self.check_turn, "changed": self.changed,
                "rechecks": {m: [s.to_dict() for s in v] for m, v in self.rechecks.items()}}

    @staticmethod
    def from_dict(data: dict[str, Any], candidates: Sequence[str]) -> AutoDrafting | None:
        """A saved state for these ``candidates``; None when it is damaged, another version's, or was measured
        with other candidates (then it is a cold start)."""
        try:
            if data.get("version") != VERSION or tuple(data["candidates"]) != tuple(candidates):
                return None
            samples = [Sample.from_dict(s) for s in data["samples"]]
            winner = data.get("winner")
            if winner is not None and winner not in candidates:
                return None
            auto = AutoDrafting(tuple(candidates), samples)
            if winner is not None:
                auto._decide()
                changed = int(data.get("changed") or 0)
                if auto.winner != winner and not (changed > 0 and auto.winner is not None):
                    return None  # the samples do not say what the record says (and no re-check changed it)
                auto.winner, auto.changed = winner, changed
                auto.decided_at = str(data.get("decided_at") or auto.decided_at)
                auto.since_check = int(data.get("since_check") or 0)
                auto.check_turn = int(data.get("check_turn") or 0)
                rechecks = data.get("rechecks") or {}
                auto.rechecks = {str(m): [Sample.from_dict(s) for s in v] for m, v in dict(rechecks).items()
                                 if m in candidates}
            return auto
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError):  # Overflow: float() of 400 digits
            return None


class AutoMemory:
    """The folder of Auto's records (the depth-memory folder): ``{"key": AutoKey fields, "saved_at", "state"}``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def path(self, key: AutoKey) -> Path:
        return self.folder / f"{key.digest()}{SUFFIX}"

    def recall(self, key: AutoKey, candidates: Sequence[str], hold_new: bool = True) -> AutoDrafting:
        """What was measured and decided for ``key``, or a cold start: none saved, a damaged record, or a stale one
        (``depth_memory.stale_reason``: too old, made under another load, or by another backend build; said in
        the result's ``stale``), which is measured again. The load is read as ``depth_memory.take_up`` reads it
        (``hold_new``: a new record's over the longer window)."""
        record = load_state(self.path(key))  # damaged: set aside as .bad, a cold start
        state = record.get("state") if record is not None and record.get("key") == json.loads(
            json.dumps(asdict(key))) else None
        found = AutoDrafting.from_dict(state, candidates) if isinstance(state, dict) else None
        conditions, stale = take_up(record if found is not None else None, key.backend, hold_new=hold_new)
        auto = found if found is not None and stale is None else AutoDrafting(tuple(candidates))
        auto.conditions, auto.stale = conditions, stale
        return auto

    def remember(self, key: AutoKey, auto: AutoDrafting) -> None:
        """Save, atomically (``OSError`` to the caller: a full disk, a read-only folder), with the conditions
        noted when the record was taken up (before this process's own replies loaded the machine)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        conditions = auto.conditions if auto.conditions is not None else conditions_now(key.backend)
        write_json(self.path(key), {"key": asdict(key), "saved_at": datetime.now(UTC).isoformat(timespec="seconds"),
                                    "conditions": conditions, "state": auto.to_dict()})

    def entries(self) -> list[dict[str, Any]]:
        """Every record, for people: the files, the winner (or how far the measuring is), when it was saved."""
        found, stale = [], stale_for_listing()
        for path in sorted(self.folder.glob(f"*{SUFFIX}")) if self.folder.is_dir() else []:
            record = load_json_object(path) or {}
            key, state = record.get("key"), record.get("state")
            auto = AutoDrafting.from_dict(state, state.get("candidates") or ()) if isinstance(state, dict) else None
            if not isinstance(key, dict) or auto is None:
                found.append({"file": str(path), "damaged": True})
                continue
            found.append({"file": str(path), "damaged": False, "target": key.get("target"), "d2t": key.get("d2t"),
                          "backend": key.get("backend"), "threads": key.get("threads"),
                          "gpu_layers": key.get("gpu_layers"), "saved_at": record.get("saved_at"),
                          "winner": auto.winner, "status": auto.status(),
                          "samples": sum(1 for s in auto.samples if s.warm),
                          "stale": stale(record, str(key.get("backend")))})
        found += [{"file": str(path), "damaged": True} for path in set_aside_records(self.folder, SUFFIX)]
        return found

    def forget(self) -> int:
        """Delete every record (damaged ones too); how many there were."""
        return forget_records(self.folder, SUFFIX)
