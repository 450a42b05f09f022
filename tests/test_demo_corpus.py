"""The demo model's synthetic corpus: determinism, an honest held-out split, template fidelity, real tools."""

from __future__ import annotations

import json
import random
import re
from datetime import datetime, timezone
from pathlib import Path

import pytest

from models.demo import corpus, corpus_chat, corpus_phrasing, corpus_values, tools, train, units
from models.demo.corpus_reasoning import SEQUENTIAL
from models.demo.parse import parse_turn
from models.demo.render import render, trained_spans

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def training():
    return corpus.training_conversations(seed=3, count=1500)


@pytest.fixture(scope="module")
def held_out():
    return corpus.held_out_cases()


def test_the_corpus_is_a_pure_function_of_its_seed():
    a = corpus.training_conversations(seed=11, count=60)
    b = corpus.training_conversations(seed=11, count=60)
    c = corpus.training_conversations(seed=12, count=60)
    assert [x.messages for x in a] == [x.messages for x in b]
    assert [x.messages for x in a] != [x.messages for x in c]
    assert corpus.held_out_cases() == corpus.held_out_cases()


def test_held_out_requests_share_no_template_id_and_no_value_with_training(training, held_out):
    train_templates = {t for conv in training for t in conv.template_ids}
    train_values = {v for conv in training for v in conv.values}
    train_requests = {m["content"].lower() for conv in training for m in conv.messages if m["role"] == "user"}
    assert len(train_values) > 500  # the check below is only meaningful over a varied sample
    for case in held_out:
        assert case.template_id not in train_templates, case.case_id
        assert not set(case.values) & train_values, case.case_id
        assert case.messages[0]["content"].lower() not in train_requests, case.case_id


def test_every_word_of_a_held_out_template_occurs_in_some_training_request():
    # The split holds out phrasings and values, not the language: a model trained from scratch
    # cannot know a word it never saw, and a pretrained one would know them all.
    def words(text: str) -> set[str]:
        return set(re.findall(r"[a-z][a-z']*", re.sub(r"\{\w+\}", " ", text.lower())))
    ph = corpus_phrasing
    held_out = [*ph.PREFIXES[ph.HELD_OUT], *ph.SUFFIXES[ph.HELD_OUT], *ph.STEPWISE[ph.HELD_OUT]]
    held_out += [c.text for group in (ph.WEATHER, ph.TIME, ph.CALC, ph.CONVERT, ph.WEATHER_DIFF, ph.WEATHER_TWO,
                                      ph.TIME_WEATHER, ph.CALC_CHAIN) for c in group if c.split == ph.HELD_OUT]
    held_out += [text for intent in (*corpus_chat.INTENTS, corpus_chat.ECHO) for text in intent.held_out]
    shipped = corpus.training_conversations(seed=0, count=train.DEFAULTS["conversations"])  # what training sees
    seen = set().union(*(words(m["content"]) for conv in shipped for m in conv.messages if m["role"] == "user"))
    assert not set().union(*map(words, held_out)) - seen


def test_every_value_is_drawn_from_its_own_split(training, held_out):
    def split_of(value: str) -> str:
        kind, text = value.split(":", 1)
        if kind == "num":
            return corpus_values.number_split(text)
        if kind == "madeup":
            return corpus_values.TRAIN  # a made-up unit word, training only
        if kind == "unit":
            return next(u.split for u in tools.units.UNITS if u.name == text)
        row = tools.city_table().get(text)
        return corpus_values.city_split(row["city"]) if row else corpus_values.TRAIN  # made-up names: training
    assert all(split_of(v) == corpus_values.TRAIN for conv in training for v in conv.values)
    assert all(split_of(v) == corpus_values.HELD_OUT for case in held_out for v in case.values)


def test_there_are_at_least_a_hundred_held_out_tool_requests_and_some_plain_chat(held_out):
    tool_cases = [c for c in held_out if c.steps]
    assert len(tool_cases) >= 100
    assert {"weather", "time", "calculate", "convert"} <= {c.kind for c in tool_cases}
    assert any(len(c.steps) == 2 for c in tool_cases)  # sequential: the second call uses the first result
    assert any(len(c.steps[0].calls) == 2 for c in tool_cases)  # two calls in one turn
    assert sum(1 for c in held_out if not c.steps) >= 15
    assert all(c.answer_must_contain for c in tool_cases)


def test_every_rendered_training_sample_round_trips_through_the_template(training):
    """Parse each trained assistant turn out of the rendered text, send it back, and get the same text."""
    for conv in training[:200]:
        text, spans = trained_spans(conv.messages, conv.tools, conv.enable_thinking, conv.untrained_reasoning)
        assistant = [i for i, m in enumerate(conv.messages) if m["role"] == "assistant"][-len(spans):]
        rebuilt = [dict(m) for m in conv.messages]
        for i, (start, end) in zip(assistant, spans):
            if i in conv.untrained_reasoning:
                continue
            turn = parse_turn(text[start:end], thinking=conv.enable_thinking)
            original = conv.messages[i]
            assert turn.reasoning == original["reasoning_content"].strip("\n")
            assert turn.content == original["content"]
            assert [(c.name, c.arguments) for c in turn.tool_calls] == [
                (t["function"]["name"], t["function"]["arguments"]) for t in original.get("tool_calls", [])]
            rebuilt[i] = turn.message()
        assert render(rebuilt, conv.tools, enable_thinking=conv.enable_thinking) == text


def test_training_targets_are_assistant_turns_after_the_last_query_only(training):
    conv = next(c for c in training if c.untrained_reasoning and len(c.messages) > 4)
    text, spans = trained_spans(conv.messages, conv.tools, conv.enable_thinking, conv.untrained_reasoning)
    for start, end in spans:
        assert text[end - len("<|im_end|>"):end] == "<|im_end|>"
        assert "<|im_start|>" not in text[start:end] and "<tool_response>" not in text[start:end]
    # The thought cut short (as by a reasoning budget) is context: its target starts after </think>.
    first_start = spans[0][0]
    assert text[first_start - len("</think>"):first_start] == "</think>"


def test_generation_prompts_follow_qwen3_thinking_conventions():
    messages = [{"role": "user", "content": "hi"}]
    assert render(messages, tools.TOOLS, add_generation_prompt=True).endswith("<|im_start|>assistant\n<think>\n")
    assert render(messages, tools.TOOLS, add_generation_prompt=True, enable_thinking=False).endswith(
        "<|im_start|>assistant\n<think>\n\n</think>\n\n")
    text = render(messages, tools.TOOLS)
    assert "<tools>\n" + json.dumps(tools.TOOLS[0]) in text


def test_older_turns_lose_their_reasoning_and_tool_results_are_user_turns():
    call = {"role": "assistant", "content": "", "reasoning_content": "old thought", "tool_calls": [
        {"type": "function", "function": {"name": "get_time", "arguments": '{"city": "Oslo"}'}}]}
    messages = [{"role": "user", "content": "time in Oslo"}, call, {"role": "tool", "content": "{}"},
                {"role": "assistant", "content": "It's noon.", "reasoning_content": "r"},
                {"role": "user", "content": "thanks"}]
    text = render(messages, tools.TOOLS)
    assert "old thought" not in text
    assert '<tool_call>\n{"name": "get_time", "arguments": {"city": "Oslo"}}\n</tool_call>' in text
    assert "<|im_start|>user\n<tool_response>\n{}\n</tool_response><|im_end|>" in text


def test_the_shipped_tools_config_is_the_schema_the_model_is_trained_on():
    shipped = json.loads((ROOT / "configs" / "demo_tools.json").read_text())
    assert shipped == tools.TOOLS


def test_numbers_render_in_json_exactly_as_the_user_typed_them():
    rng = random.Random(5)
    for split in (corpus_values.TRAIN, corpus_values.HELD_OUT):
        for _ in range(500):
            text = corpus_values.draw_number(rng, split)
            assert json.dumps(corpus_values.as_json_number(text)) == text


def test_held_out_cases_expect_what_the_real_tools_return(held_out):
    for case in held_out:
        for step in case.steps:
            for call, result in zip(step.calls, step.results):
                if call.name != "get_time":  # time depends on the moment; checked below
                    assert tools.execute(call.name, call.arguments) == result


def test_the_tools_compute_real_results():
    assert json.loads(tools.execute("calculate", {"a": 37, "op": "*", "b": 12.5})) == {"result": 462.5}
    assert "error" in json.loads(tools.execute("calculate", {"a": 1, "op": "/", "b": 0}))
    assert json.loads(tools.execute("convert_units", {"value": 100, "from_unit": "C", "to_unit": "fahrenheit"}))[
        "result"] == 212
    assert json.loads(tools.execute("convert_units", '{"value": 5, "from_unit": "miles", "to_unit": "km"}'))[
        "result"] == 8.0467
    assert "error" in json.loads(tools.execute("convert_units", {"value": 1, "from_unit": "kg", "to_unit": "km"}))
    oslo = json.loads(tools.execute("get_weather", {"city": "oslo"}))
    assert oslo["city"] == "Oslo" and isinstance(oslo["temperature_c"], int)
    assert "error" in json.loads(tools.execute("get_weather", {"city": "Atlantis"}))
    noon_utc = datetime(2025, 1, 15, 12, 0, tzinfo=timezone.utc)
    assert tools.get_time("Tokyo", now=noon_utc) == {"city": "Tokyo", "time": "21:00", "day": "Wednesday"}


def test_most_training_cities_are_made_up_and_their_results_come_from_the_conversation_not_the_table(training):
    asked = [json.loads(call["function"]["arguments"])["city"] if isinstance(call["function"]["arguments"], str)
             else call["function"]["arguments"]["city"]
             for conv in training for m in conv.messages if m["role"] == "assistant"
             for call in m.get("tool_calls", []) if call["function"]["name"] == "get_weather"]
    made_up = [city for city in asked if city.lower() not in tools.city_table()]
    assert len(made_up) > len(asked) / 2
    # The served tools know only the table: a made-up city is an error there, whatever training said.
    assert all("error" in json.loads(tools.execute("get_weather", {"city": city})) for city in made_up[:50])
    town = corpus_values.made_up_town(random.Random(0), "Quorvale")
    assert json.loads(tools.execute("get_weather", {"city": "quorvale"}, towns={"quorvale": town}))[
        "temperature_c"] == town["temperature_c"]


def test_the_tokenizer_learns_its_merges_from_text_without_any_names():
    from models.demo.tokenizer_build import without_names
    texts = ["It's 14°C in Cape Town and 9°C in Oslo; 5 km is 3.1 miles. Zorbulax says hi."] + [
        "the weather in the city is nice"] * 10
    out = without_names(texts, ["Cape Town", "Oslo", "km", "miles"])
    assert "Cape" not in out[0] and "Oslo" not in out[0] and "km" not in out[0] and "miles" not in out[0]
    assert "Zorbulax" not in out[0]  # a word found in fewer than RARE_WORD_TEXTS texts is a name too
    # ... however often one text repeats it: a conversation names its city in every turn.
    assert "Quorvale" not in without_names(["Quorvale " * 12] + texts[1:], [])[0]
    assert "14°" in out[0] and "3.1" in out[0] and out[1] == texts[1]  # numbers and common words stay


def test_the_copy_drill_glues_words_from_the_tokenizers_own_pieces_when_given_them():
    pieces = ["Qa", "zu", "Mek", "orl"]
    spelled = [c.messages[1]["content"] for c in corpus.copy_drills(0, 200, vocab_pieces=pieces)]
    words = [w for text in spelled for w in text.split()]
    glued = [w for w in words if _spelled_from(w, pieces)]
    assert len(glued) > len(words) / 5  # 40% of the drill's chunks, one to three such words each
    # Without pieces the drill is what it always was: echo words and random letters.
    assert [c.messages for c in corpus.copy_drills(0, 50)] == [c.messages for c in corpus.copy_drills(0, 50, vocab_pieces=())]


def _spelled_from(word: str, pieces: list[str]) -> bool:
    return not word or any(word.startswith(p) and _spelled_from(word[len(p):], pieces) for p in pieces)


def test_letter_pieces_are_the_vocabulary_entries_a_name_can_be_cut_into():
    from models.demo.tokenizer_build import build_tokenizer, letter_pieces
    tok = build_tokenizer(["the weather in the city is nice, said the user"] * 20, vocab_size=400)
    pieces = letter_pieces(tok)
    assert "weather" in pieces and "w" in pieces and "W" in pieces
    assert all(p.isalpha() and p.isascii() for p in pieces)  # no space marker, no punctuation, no markers


def test_some_call_turns_come_back_without_reasoning_and_only_what_follows_them_is_trained(training):
    # As a client that drops reasoning (or the evaluation, sending the expected call) renders them.
    dropped = [c for c in training if c.context_only]
    assert 0.05 < len(dropped) / len(training) < 0.3
    for conv in dropped[:20]:
        assert all(conv.messages[i]["tool_calls"] and conv.messages[i]["reasoning_content"] == ""
                   for i in conv.context_only)
        text, spans = trained_spans(conv.messages, conv.tools, conv.enable_thinking, conv.untrained_reasoning,
                                    conv.context_only)
        assert spans and all("<tool_call>" not in text[start:end] for start, end in spans)


def test_an_operator_is_the_same_id_in_the_thought_and_in_the_calls_json():
    from models.demo.tokenizer_build import build_tokenizer
    tok = build_tokenizer(['The user wants 12 * 5. I\'ll call calculate with {"a": 12, "op": "*", "b": 5}.'] * 20,
                          vocab_size=400)
    for op in "+-*/":
        thought = tok.tokenize(f"The user wants 12 {op} 5.")
        call = tok.tokenize(f'{{"a": 12, "op": "{op}", "b": 5}}')
        # One piece, with no space, quote or comma glued to it: the call copies the thought's id.
        assert op in thought and op in call, (thought, call)


def test_a_two_call_turns_thought_ends_by_spelling_its_calls_as_their_json_then_at_most_the_pending_step(training):
    seen = set()
    for conv in training:
        if conv.kind not in ("wdiff", "wtwo", "tw", "chain", "wconv"):
            continue
        calls = [m for i, m in enumerate(conv.messages)
                 if m.get("tool_calls") and m.get("reasoning_content") and i not in conv.untrained_reasoning]
        for message in calls:  # (a thought cut short, as by a budget, ends wherever it was cut)
            thought = message["reasoning_content"]
            spans = [f'{c["function"]["name"]} with {json.dumps(c["function"]["arguments"], ensure_ascii=False)}'
                     for c in message["tool_calls"]]
            joined = " and ".join(spans)
            tail = thought[thought.rindex(joined) + len(joined):]
            # A sequential plan's second step follows (corpus_reasoning.pending); a parallel one ends there.
            assert tail == "." or (conv.kind in SEQUENTIAL and tail.startswith(". Then ")
                                   and tail.endswith(".") and len(tail) < 70), thought
            seen.add(conv.kind)
    assert seen == {"wdiff", "wtwo", "tw", "chain", "wconv"}


def test_rendering_over_worker_processes_gives_what_rendering_one_by_one_gives(training):
    from models.demo.dataset import rendered, rendered_all
    convs = training[:200]
    assert rendered_all(convs, workers=2) == [rendered(c) for c in convs]


def test_a_quarter_of_training_tool_requests_come_bare_as_users_type_them(training, held_out):
    # Chat requests are always bare; were tool requests nearly always framed, "no frame" would mean chat.
    tool = [c for c in training if c.kind not in ("chat", "echo")]
    bare = [c for c in tool if ".p0.s0." in c.template_ids[-1]]
    assert 0.2 < len(bare) / len(tool) < 0.35
    # Held-out frames stay what they were: never bare (a bare request would be a training frame).
    assert not any(".p0.s0." in case.template_id for case in held_out if case.steps)


def test_some_training_chat_requests_carry_a_made_up_word_and_still_get_no_call(training):
    phrasings = {p for intent in corpus_chat.INTENTS for p in intent.train}
    chat = [conv for conv in training if conv.kind == "chat"]
    requests = [[m for m in conv.messages if m["role"] == "user"][-1]["content"] for conv in chat]
    altered = [r for r in requests if r not in phrasings and not any(c.isdigit() for c in r)
               and not any(city in r.lower() for city in tools.city_table())]
    assert len(chat) / 10 < len(altered) < len(chat) / 2
    # The name goes in at a word boundary: taking its one or two words out gives a training phrasing back.
    request = altered[0].split(" ")
    assert any(" ".join(request[:i] + request[i + n:]) in phrasings for n in (1, 2) for i in range(len(request)))
    assert all(not conv.messages[-1].get("tool_calls") and conv.messages[-2]["role"] == "user" for conv in chat)


def test_made_up_units_are_never_real_units_and_some_are_glued_from_everyday_pieces_or_say_per():
    rng = random.Random(2)
    words = [corpus_values.made_up_unit(rng) for _ in range(2000)]
    assert all(units.lookup(w) is None for w in words)
    pieces = set(corpus_values._EVERYDAY_PIECES)
    glued = [w for w in words if any(w.startswith(p) for p in pieces) and " " not in w]
    assert len(glued) > 400 and sum(" per " in w for w in words) > 200


def test_a_sequential_plans_second_turn_opens_with_the_step_its_first_turn_ended_on(training):
    checked = 0
    for conv in training:
        if conv.kind not in SEQUENTIAL or not conv.enable_thinking:
            continue
        (at, first), (_, second) = [(i, m["reasoning_content"]) for i, m in enumerate(conv.messages)
                                    if m.get("tool_calls")][-2:]
        if not first or not second or at in conv.untrained_reasoning:  # reasoning dropped, or cut by a budget
            continue
        step = first[first.rindex(". Then ") + 2:]
        assert second.startswith(step + " "), (first, second)
        assert ("numbered points" in step) == ("Let me go on step by step." in second)
        checked += 1
    assert checked > 50


def test_encoding_after_the_system_turn_gives_the_whole_texts_tokens_and_labels(training):
    from transformers import AutoTokenizer

    from models.demo.dataset import IGNORE, encode_all, rendered
    tok = AutoTokenizer.from_pretrained(ROOT / "models/demo/checkpoint")
    done = [rendered(c) for c in training[:300]] + [rendered(c) for c in corpus.copy_drills(0, 20)]
    assert any(not text.startswith("<|im_start|>system") for text, _ in done)  # rows without a system turn too
    whole = tok([text for text, _ in done], add_special_tokens=False, return_offsets_mapping=True)
    for (text, spans), example, ids, offsets in zip(done, encode_all(done, tok), whole["input_ids"],
                                                     whole["offset_mapping"]):
        prefix = tok(example.prefix, add_special_tokens=False)["input_ids"] if example.prefix else []
        assert prefix + example.ids == ids
        labels = [i if any(a < e and b > s for s, e in spans) else IGNORE for i, (a, b) in zip(ids, offsets)]
        assert [IGNORE] * len(prefix) + example.labels == labels
