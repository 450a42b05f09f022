"""The stop-string matcher (scheduler/stop_strings.py) on its own: across pieces, and under min_tokens."""

from __future__ import annotations

from scheduler.stop_strings import StopMatcher


def test_a_stop_string_split_across_pieces_ends_the_text_before_it():
    m = StopMatcher(("ab",))
    assert m.feed("xa") == ("x", False)
    assert m.feed("bz") == ("", True) and m.matched == "ab"


def test_under_min_tokens_a_whole_stop_string_passes_but_one_that_ends_after_them_is_found():
    m = StopMatcher(("ab",))
    assert m.feed("ab", match=False) == ("ab", False), "no stop string ends in the min_tokens"
    assert m.feed("a", match=False) == ("", False), "what may begin one is still held"
    # The first piece past min_tokens completes it: vLLM looks back into the earlier text the same way.
    assert m.feed("bc") == ("", True) and m.matched == "ab"


def test_a_shorter_stop_string_that_ended_under_min_tokens_does_not_stop_the_text_later():
    m = StopMatcher(("b", "abc"))
    assert m.feed("ab", match=False) == ("", False), "held: it may begin abc"
    assert m.feed("x") == ("abx", False), "b ended under min_tokens; abc never came"
