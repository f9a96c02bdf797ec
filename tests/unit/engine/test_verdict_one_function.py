"""One verdict everywhere (issue 36 item 1): ``verdict.compare`` judges the mode *and depth* asked for, names what
it compares, and says in words what it still needs; replies at another depth never decide for the depth loaded."""

from __future__ import annotations

from app.engine.verdict import Condition, Sample, compare, still_needed

OFF = Condition("off", "", "temperature 0.7", "/m/target.gguf", 2)
ADAPTIVE = Condition("d2t", "adaptive depth ≤8", "temperature 0.7", "/m/target.gguf", 2)
DEPTH3 = Condition("d2t", "depth 3", "temperature 0.7", "/m/target.gguf", 2)


def _samples(*pairs: tuple[Condition, float], after: int = 0) -> list[Sample]:
    """Samples taken in this order, the first numbered ``after``."""
    return [Sample(condition, tps, after + order) for order, (condition, tps) in enumerate(pairs)]


AUTO_MEASURED = _samples((OFF, 350.0), (ADAPTIVE, 200.0), (OFF, 352.0), (ADAPTIVE, 204.0), (OFF, 349.0),
                         (ADAPTIVE, 199.0))


def test_a_verdict_names_the_mode_and_depth_it_compares() -> None:
    verdict = compare(AUTO_MEASURED, "off", "d2t")
    assert verdict.headline() == "d2t at adaptive depth ≤8 vs drafting off: 0.57x, does not pay"
    assert verdict.to_dict()["headline"] == verdict.headline()


def test_another_depths_replies_never_decide_for_the_depth_loaded() -> None:
    pinned = compare(AUTO_MEASURED, "off", "d2t", depth="depth 3")
    assert not pinned.decided and pinned.b_tps == () and pinned.ratio is None
    assert "3 samples of d2t at another depth than depth 3" in pinned.left_out
    # the replies with drafting off count, but were not taken in turn with depth 3's: 2 more of them are needed
    assert pinned.headline() == ("d2t at depth 3 vs drafting off: needs 3 more replies with d2t at depth 3 and 2 "
                                 "with drafting off, in turn")
    after = compare([*AUTO_MEASURED, *_samples((DEPTH3, 380.0), after=6)], "off", "d2t", depth="depth 3")
    assert after.b_tps == (380.0,) and after.missing_words() == ("2 more replies with d2t at depth 3 and 2 with "
                                                                 "drafting off, in turn")
    decided = compare([*AUTO_MEASURED, *_samples(*[(DEPTH3, 390.0), (OFF, 350.0)] * 3, after=6)], "off", "d2t",
                      depth="depth 3")
    assert decided.headline() == "d2t at depth 3 vs drafting off: 1.11x, pays"


def test_counts_without_turns_say_how_many_more_of_each() -> None:
    # "5/3 · 3/3": enough of each, but all of one side first: one round, not three
    burst = _samples(*[(OFF, 30.0)] * 3, *[(DEPTH3, 40.0)] * 5)
    verdict = compare(burst, "off", "d2t")
    assert not verdict.decided and verdict.rounds == 1
    # the last d2t reply is half a round already: an off reply completes it, then one more of each
    assert verdict.missing_words() == "1 more reply with d2t at depth 3 and 2 with drafting off, in turn"
    assert verdict.missing_words("run") == "1 more run with d2t at depth 3 and 2 with drafting off, in turn"
    assert compare([], "off", "d2t", depth="depth 3").missing_words() == (
        "3 more replies with d2t at depth 3 and 3 with drafting off, in turn")
    one_short = compare(_samples(*[(OFF, 30.0), (DEPTH3, 40.0)] * 2, (OFF, 30.0)), "off", "d2t")
    assert one_short.missing_words() == "1 more reply with d2t at depth 3"


def test_still_needed_plans_the_fewest_replies_in_turn() -> None:
    assert still_needed([], "off", "d2t") == (3, 3)
    assert still_needed(["off", "d2t"] * 3, "off", "d2t") == (0, 0)
    assert still_needed(["off"] * 3 + ["d2t"] * 3, "off", "d2t") == (2, 1)  # the last d2t is half a round
    assert still_needed(["d2t"], "off", "d2t") == (3, 2)
    assert still_needed(["off", "d2t", "off"], "off", "d2t", min_samples=2) == (0, 1)
