"""The break-even model of drafting, in one Qt-free place: how many tokens a target pass yields at an
acceptance and depth, the acceptance at which drafting stops paying, and the sentences that say so.

The HUD and the drafting banner (GUI), ``bench spec``'s bound and the terminal ``chat`` all use these, so a
reply is judged the same way wherever it is shown. ``reply_warning`` is the terminal's way in: the banner's
warning for a finished reply, or else the quieter note. Whether drafting pays *as measured* (one mode's replies
against another's) is not judged here but by ``app.engine.verdict`` (the HUD's "vs off", ``quickstart``, ``bench
matrix``), which needs several alternating replies under the same conditions.

``drafting_warning`` decides when the loud drafting banner shows: a sidecar is configured but nothing is
drafted, its drafts are almost never accepted (a sidecar from another model), or acceptance is below
break-even for this machine. ``no_gain_note`` is the quieter line for the everyday case where drafting
works but does not pay here (a small model on a CPU: its passes are so quick that drafts save next to nothing,
so ``off`` is as fast), in one sentence, for the terminal; it reuses the break-even model, and compares the reply's
speed with plain decoding's as the reply's own timing predicts it (an estimate, said as one).
"""

from __future__ import annotations

from typing import Any

from app.engine.config import EngineConfig
from app.engine.modes import MODES, sidecar_kind
from app.engine.stats import wrong_pair_warning


def expected_tokens_per_pass(acceptance: float, depth: int) -> float:
    """Tokens a target pass yields on average when ``depth`` drafts are verified and each is accepted with
    probability ``acceptance`` (independently): ``(1 - a^(depth+1)) / (1 - a)``, ``depth + 1`` at ``a = 1``."""
    a = acceptance
    return float(depth + 1) if a >= 1.0 else (1.0 - a ** (depth + 1)) / (1.0 - a)


def describe_mode(config: EngineConfig | None, depth_now: int | None = None) -> str:
    """The drafting mode in words, e.g. ``FastMTP d2t · depth 3``; with adaptive depth, the depth of the
    latest round when known (``depth 5 of ≤8 adaptive``)."""
    if config is None:
        return "no model"
    if config.mode == "off":
        return MODES["off"].brief
    if config.mode == "embedded":
        kind = MODES["embedded"].brief
    else:
        kind = MODES[sidecar_kind(config.draft) if config.draft is not None else "full"].brief
    depth = f"depth {config.draft_depth}"
    if config.adaptive:
        depth = f"depth ≤{config.draft_depth} adaptive"
        if depth_now is not None:
            depth = f"depth {depth_now} of ≤{config.draft_depth} adaptive"
    return f"{kind} · {depth}"


NO_DRAFT_AFTER = 16  # tokens into a reply with no draft at all: drafting is not running
BREAK_EVEN_AFTER = 32  # tokens before acceptance is judged against break-even


def break_even_acceptance(draft_time_share: float, depth: int) -> float | None:
    """The acceptance at which drafting stops paying, from this reply's measured costs.

    A target pass verifies up to ``depth`` drafts at about the cost of a plain decoding step (the
    assumption), and drafting takes ``draft_time_share`` of the time, so a pass must yield
    ``1 / (1 - share)`` tokens to break even; with acceptance ``a`` a pass yields
    ``expected_tokens_per_pass(a, depth)``. Solved by bisection; None when no acceptance can pay."""
    needed = 1.0 / max(1.0 - draft_time_share, 1e-6)
    if needed >= depth + 1:
        return None

    low, high = 0.0, 1.0
    for _ in range(40):
        mid = (low + high) / 2
        low, high = (mid, high) if expected_tokens_per_pass(mid, depth) < needed else (low, mid)
    return high


def drafting_warning(config: EngineConfig | None, stats: dict[str, Any]) -> str | None:
    """A plain-words warning when drafting is configured but not helping, else None."""
    if config is None or config.mode == "off":
        return None
    generated = int(stats.get("generated") or 0)
    drafted = int(stats.get("drafted") or 0)
    mode = describe_mode(config).split(" · ")[0]
    if drafted == 0 and generated >= NO_DRAFT_AFTER:
        why = (" Adaptive depth found that drafting does not pay here and switched it off."
               if config.adaptive else " Check that the sidecar belongs to this model.")
        return (f"Drafting is configured ({mode}) but no tokens were drafted in {generated} tokens: this reply "
                f"runs at plain decoding speed.{why}")
    if config.mode == "sidecar":
        wrong = wrong_pair_warning(stats, config.draft.name if config.draft is not None else None)
        if wrong is not None:
            return wrong
    acceptance = stats.get("acceptance")
    share = stats.get("draft_time_share")
    if generated < BREAK_EVEN_AFTER or not isinstance(acceptance, int | float) or not isinstance(share, int | float):
        return None
    depth = max(config.draft_depth, 1)
    even = break_even_acceptance(float(share), depth)
    if even is not None and acceptance >= even:
        return None
    target = f"break-even ({even * 100:.0f}% at depth {depth})" if even is not None else "what could ever pay off"
    return (f"Drafting is slowing this machine down: acceptance {acceptance * 100:.0f}% is below {target}. "
            f"Drafting takes {share * 100:.0f}% of the time, so each target pass must yield "
            f"{1 / max(1 - share, 1e-6):.2f} tokens to gain anything, and it yields "
            f"{stats.get('tokens_per_pass') or 0:.2f}. Turn drafting off or lower the depth.")


NO_GAIN_AFTER = 32  # tokens into a reply before the HUD judges whether drafting pays
PAYS_ABOVE = 1.10  # drafting pays when it is at least this much faster than plain decoding (above the noise)


def expected_plain_tps(stats: dict[str, Any]) -> float | None:
    """Plain decoding's speed as a drafting reply's own timing predicts it: a token per target pass (taken as
    long as the round's verify pass, which also checks the drafts: never shorter than a plain one) plus the
    loop's host time per token (the round's, shared by the tokens it made). None without timing."""
    verify_ms, python_ms = stats.get("verify_ms_per_round"), stats.get("python_ms_per_round")
    per_pass = stats.get("tokens_per_pass")
    if not isinstance(verify_ms, int | float) or verify_ms <= 0:
        return None
    host = float(python_ms) if isinstance(python_ms, int | float) and python_ms > 0 else 0.0
    tokens = float(per_pass) if isinstance(per_pass, int | float) and per_pass >= 1 else 1.0
    return 1000.0 / (float(verify_ms) + host / tokens)


def no_gain_note(config: EngineConfig | None, stats: dict[str, Any], plain_tps: float | None = None) -> str | None:
    """One plain sentence when drafting does not pay on this machine, else None (also too early to tell).

    It does not pay when the reply's speed with drafting is not ``PAYS_ABOVE`` times plain decoding's:
    ``plain_tps`` when a reply with drafting off measured it on this model, else ``expected_plain_tps``; or when
    the break-even model (``break_even_acceptance``) says no acceptance, or not this one, can pay."""
    if config is None or config.mode == "off" or int(stats.get("generated") or 0) < NO_GAIN_AFTER:
        return None
    tps = stats.get("decode_tps")
    if not isinstance(tps, int | float) or tps <= 0 or not stats.get("drafted"):
        return None  # nothing drafted: the banner says so, loudly
    plain = plain_tps or expected_plain_tps(stats)
    if plain is not None and tps < PAYS_ABOVE * plain:
        how = "measured" if plain_tps else "expected"
        verify_ms, draft_ms = stats.get("verify_ms_per_round"), stats.get("draft_ms_per_step")
        python_ms, per_pass = stats.get("python_ms_per_round"), stats.get("tokens_per_pass")
        why = ""
        if isinstance(verify_ms, int | float) and verify_ms > 0:
            host = python_ms / per_pass if isinstance(python_ms, int | float) and isinstance(per_pass, int | float) \
                and per_pass > 0 else 0.0
            if host >= verify_ms or not isinstance(draft_ms, int | float):
                why = f"; a target pass takes only {verify_ms:.1f} ms here, too little for drafts to save"
            else:
                why = f"; a draft step costs {draft_ms / verify_ms:.0%} of a target pass here"
        verdict = "does not pay" if tps <= plain else f"gains under {PAYS_ABOVE - 1:.0%}"
        return (f"Drafting {verdict} on this machine: {tps:.0f} tok/s, and about {plain:.0f} {how} with "
                f"drafting Off{why}.")
    acceptance, share = stats.get("acceptance"), stats.get("draft_time_share")
    if isinstance(acceptance, int | float) and isinstance(share, int | float):
        even = break_even_acceptance(float(share), max(config.draft_depth, 1))
        if even is None or acceptance < even:
            return (f"Drafting does not pay on this machine: it takes {share:.0%} of the time, more than "
                    f"{acceptance:.0%} acceptance wins back.")
    return None


def reply_warning(config: EngineConfig | None, stats: dict[str, Any], plain_tps: float | None = None) -> str | None:
    """What the window would say about a reply's drafting: the banner's ``drafting_warning`` or, when there
    is none, the HUD's ``no_gain_note``; None when drafting pays (or is off). ``stats`` is the reply's
    ``ReplyStats.to_dict()``, the dict the engine sends the window (and the terminal ``chat`` receives)."""
    return drafting_warning(config, stats) or no_gain_note(config, stats, plain_tps)
