"""Which generated tokens an answer's text takes for its logprobs (server/output/text_logprobs.py)."""

from server.output.text_logprobs import TextLogprobs
from server.output.tool_calls import ContentDelta, ReasoningDelta, ToolCallDelta


def test_the_markup_between_a_thought_and_the_answer_is_no_part_of_the_answers_tokens():
    texts = TextLogprobs()
    assert texts.feed("Let me see.", ["thought"], [ReasoningDelta("Let me see.")]) == [[]]
    assert texts.feed("</think>", ["closer"], []) == []
    assert texts.feed("\n\n", ["newlines"], []) == []
    assert texts.feed("Hi", ["hi"], [ContentDelta("Hi")]) == [["hi"]]


def test_text_the_parser_held_back_goes_with_the_piece_that_releases_it_and_each_token_is_taken_once():
    texts = TextLogprobs()
    assert texts.feed("Hi <", ["hi <"], [ContentDelta("Hi ")]) == [["hi <"]]
    assert texts.feed("b>", ["b>"], [ContentDelta("<b>")]) == [["b>"]]


def test_a_held_piece_that_opens_a_call_is_no_text():
    texts = TextLogprobs()
    assert texts.feed("<tool", ["<tool"], []) == []
    assert texts.feed("_call>", ["_call>"], [ToolCallDelta(0, id="c", name="f")]) == [[]]
    assert texts.feed("Done.", ["done"], [ContentDelta("Done.")]) == [["done"]]


def test_a_token_that_ends_mid_character_goes_with_the_piece_that_completes_it():
    texts = TextLogprobs()
    assert texts.feed("", ["first bytes"], []) == []
    assert texts.feed("\N{GRINNING FACE}", ["last bytes"], [ContentDelta("\N{GRINNING FACE}")]) == [
        ["first bytes", "last bytes"]]


def test_a_text_held_to_the_end_takes_its_tokens_when_the_parser_finishes():
    texts = TextLogprobs()
    assert texts.feed("a <", ["a"], [ContentDelta("a ")]) == [["a"]]
    assert texts.feed("t", ["t"], []) == []
    assert texts.feed("", [], [ContentDelta("<t")]) == [["t"]]


def test_only_the_first_of_a_pieces_deltas_that_are_text_takes_its_tokens():
    texts = TextLogprobs()
    deltas = [ReasoningDelta("so"), ContentDelta("Hi"), ToolCallDelta(0, id="c", name="f")]
    assert texts.feed("so</think>Hi<tool_call>", ["one"], deltas) == [[], ["one"], []]
