"""Stop strings matched across text pieces, held back until decided."""

from engine.text.stop_strings import StopStringMatcher


def feed_all(matcher, pieces):
    return [matcher.feed(p) for p in pieces]


def test_stop_string_split_over_pieces_is_cut():
    matcher = StopStringMatcher(["STOP"])
    out = feed_all(matcher, ["Hello S", "T", "OP and more"])
    assert "".join(out) == "Hello "
    assert matcher.matched == "STOP"


def test_possible_prefix_is_held_until_decided():
    matcher = StopStringMatcher(["</end>"])
    assert matcher.feed("a </e") == "a "
    assert matcher.held_text == "</e"
    # Not the stop string after all: the held text comes out with the next piece.
    assert matcher.feed("xit") == "</exit"
    assert matcher.matched is None


def test_include_stop_str_in_output_keeps_it():
    matcher = StopStringMatcher(["\n\n"], include_stop_str_in_output=True)
    out = feed_all(matcher, ["para one\n", "\nnext"])
    assert "".join(out) == "para one\n\n"
    assert matcher.matched == "\n\n"


def test_earliest_of_several_stop_strings_wins():
    matcher = StopStringMatcher(["world", "lo w"])
    assert matcher.feed("hello world") == "hel"
    assert matcher.matched == "lo w"


def test_flush_releases_held_text_at_the_end():
    matcher = StopStringMatcher(["abc"])
    assert matcher.feed("xxab") == "xx"
    assert matcher.flush() == "ab"


def test_nothing_after_a_match():
    matcher = StopStringMatcher(["."])
    assert matcher.feed("one. two") == "one"
    assert matcher.feed("three") == ""


def test_no_stop_strings_passes_text_through():
    matcher = StopStringMatcher(None)
    assert matcher.feed("anything") == "anything"
