"""Acceptance reads as one thing everywhere: ours is accepted of the drafts tested, named as such, with the share of
all drafts made beside it; a server's count (drafts made) is shown under its own name, never as ours. The bench's
llama-server rows had set the one against the other (0.78 against 0.64 for the same drafts)."""

from __future__ import annotations

from app.engine.stats import ReplyStats, acceptance_words


def _three_rounds_at_depth_3() -> ReplyStats:
    stats = ReplyStats()
    stats.record_round(tested=3, accepted=3, proposed=3)  # all three right
    stats.record_round(tested=1, accepted=0, proposed=3)  # the first wrong: the other two never tested
    stats.record_round(tested=2, accepted=1, proposed=3)  # the second wrong
    return stats


def test_our_engine_counts_both_and_shows_the_tested_share_naming_the_other() -> None:
    stats = _three_rounds_at_depth_3().to_dict()
    assert stats["acceptance"] == 4 / 6 and stats["accepted_of_drafted"] == 4 / 9
    words = acceptance_words(stats)
    assert words is not None
    assert (words.text, words.counts, words.share) == ("acceptance 67%", "4/6", 4 / 6)
    assert words.detail == ("4 of the 6 drafts tested were accepted (each round tests its drafts up to the first "
                            "mismatch); of all 9 drafts made, 44% (the figure llama-server prints).")


def test_a_servers_count_of_drafts_made_is_shown_as_that() -> None:
    server = {"acceptance": None, "accepted_of_drafted": 0.7, "accepted": 7, "drafted": 10, "proposed": 10}
    words = acceptance_words(server)
    assert words is not None
    assert (words.text, words.counts, words.share) == ("drafts kept 70%", "7/10", 0.7)
    assert words.detail.startswith("7 of the 10 drafts the server made were accepted")


def test_no_drafts_no_acceptance() -> None:
    assert acceptance_words(ReplyStats().to_dict()) is None
    assert acceptance_words({"acceptance": None, "accepted_of_drafted": None}) is None
