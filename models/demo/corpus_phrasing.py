"""How synthetic users phrase requests, split into training and held-out templates.

What it is for: request templates for each kind of conversation (one tool,
two tools, plain chat). A request is a *core* (the sentence that carries the
meaning, with `{slots}`) inside a *frame* (an optional greeting before and a
courtesy after, plus a casing style). Its template id names all three.

What it is not for: reasoning or answers (corpus_reasoning.py) or slot
values (corpus_values.py).

Why it is shaped so: the held-out split uses cores and frames that never
occur in training, so a held-out template id is never a training template id
and the held-out sentence is new text, while every word of a held-out core or
frame ("times", "weather", "separate", "excuse") occurs in some training
request, in a sentence of its own: a model trained from scratch cannot learn
a word it was never shown, and what the split measures is new phrasings of
known words, as a pretrained model meets them, not unknown words. Values
(cities, numbers, units) are held out whole (corpus_values).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from models.demo.corpus_values import HELD_OUT, TRAIN, made_up_city


@dataclass(frozen=True)
class Core:
    id: str
    text: str  # with {slots}
    split: str
    op: str | None = None  # arithmetic operator(s) a calc core means, e.g. "*" or "+*"


def _cores(kind: str, train: list[str], held_out: list[str], ops: str | None = None) -> list[Core]:
    out = [Core(f"{kind}.t{i}", text, TRAIN, ops) for i, text in enumerate(train)]
    out += [Core(f"{kind}.h{i}", text, HELD_OUT, ops) for i, text in enumerate(held_out)]
    return out


WEATHER = _cores("weather", [
    "What's the weather in {city}?", "How's the weather in {city} right now?",
    "What is the weather like in {city} today?", "Tell me the weather for {city}.",
    "weather in {city}", "{city} weather please", "How hot is it in {city}?",
    "How cold is it in {city} at the moment?", "Is it raining in {city}?",
    "What's the temperature in {city}?", "Give me the current conditions in {city}.",
    "I'm flying to {city} tomorrow. What's the weather like there?",
    "Do I need an umbrella in {city} today?", "Check the weather in {city}.",
    "Current weather for {city}?", "What's it like outside in {city}?",
    "Is it warm in {city} right now?", "Is it sunny in {city}?", "How chilly is it in {city} today?",
    "What's the forecast looking like in {city} right now?", "Weather check: {city}.",
    "Could you look up the weather in {city}?", "I'm heading out in {city}. What's the weather?",
    "Is the weather nice in {city}?", "Is it snowing in {city}?", "Tell me how the weather is in {city}.",
    "What conditions are they having in {city}?", "Temperature in {city}?", "{city}: what's the weather?",
    "Find out the weather in {city}, please.", "Is it cold out in {city} today?",
    "How's it looking outside in {city} now?",
    "Should I bring a jacket in {city}? What's the weather?", "What's the temperature doing in {city}?",
    "weather {city} today", "Get me the weather for {city}.", "Is the weather good in {city} at the moment?",
    "I'd like the current weather in {city}.", "Fetch the temperature for {city}.",
], [
    "Any idea what the weather is doing in {city}?", "Look up {city}'s weather for me.",
    "My friend lives in {city}; how warm is it there?", "What are conditions like in {city}?",
    "temperature {city} now", "Is it nice out in {city} today?",
])

TIME = _cores("time", [
    "What time is it in {city}?", "What's the local time in {city}?",
    "Current time in {city}?", "Tell me the time in {city}.", "time in {city}",
    "What's the time over in {city} right now?", "Is it late in {city}? What time is it there?",
    "I need to call someone in {city}. What time is it there?",
    "Can you check the clock in {city}?", "What time is it now in {city}?",
    "Give me the current time for {city}.", "{city} local time please",
    "What's the clock showing in {city}?", "Time in {city}?",
    "Could you tell me the time in {city}?", "Is it night in {city}? What time is it?",
    "How late is it in {city} now?", "Is it morning in {city}? What's the time?", "local time {city}",
    "Look up the current time in {city}.", "What time do they have in {city} now?",
    "Check the time in {city} for me.", "What's the hour in {city}?", "Find the local time for {city}.",
    "{city}: what time is it?", "Is it early in {city}? Tell me the time there.",
    "I want to know the time in {city}.", "time now {city}",
], [
    "Do you know what time it is in {city}?", "What hour is it in {city} at the moment?",
    "Time check for {city}?", "My sister is in {city}; is it late there? What's the time?",
    "clock in {city} now",
])

CALC = (
    _cores("add", ["What is {a} plus {b}?", "Add {a} and {b}.", "{a} + {b}", "What's the sum of {a} and {b}?",
                   "Calculate {a} + {b}.", "How much is {a} plus {b}?", "{a} plus {b}",
                   "Compute {a} + {b}.", "Give me {a} plus {b}.", "Sum of {a} and {b}?",
                   "Can you add {a} to {b}?", "{a} + {b} = ?", "Figure out {a} plus {b}.", "Total of {a} and {b}?",
                   "Please add {a} and {b} for me."],
           ["Work out {a} + {b} for me.", "If I add {a} to {b}, what do I get?"], "+")
    + _cores("sub", ["What is {a} minus {b}?", "Subtract {b} from {a}.", "{a} - {b}", "Calculate {a} - {b}.",
                     "How much is {a} minus {b}?", "What's {a} take away {b}?", "{a} minus {b}",
                     "Compute {a} - {b}.", "Reduce {a} by {b}.", "{a} - {b} = ?",
                     "Figure out {a} minus {b}.", "What is the difference of {a} and {b}?",
                     "Can you subtract {b} from {a}?", "Please do {a} minus {b} for me."],
             ["Work out {a} - {b} for me.", "Take {b} away from {a}; what's left?"], "-")
    + _cores("mul", ["What is {a} times {b}?", "Multiply {a} by {b}.", "{a} * {b}", "Calculate {a} * {b}.",
                     "What's the product of {a} and {b}?", "How much is {a} multiplied by {b}?", "{a} times {b}",
                     "Compute {a} * {b}.", "Give me {a} times {b}.", "{a} * {b} = ?",
                     "Figure out {a} times {b}.", "Can you multiply {a} by {b}?", "{a} multiplied by {b}?",
                     "Please multiply {a} and {b} for me."],
             ["Work out {a} * {b} for me.", "If I multiply {a} by {b}, what do I get?"], "*")
    + _cores("div", ["What is {a} divided by {b}?", "Divide {a} by {b}.", "{a} / {b}", "Calculate {a} / {b}.",
                     "How much is {a} divided by {b}?", "What's {a} over {b}?", "{a} divided by {b}",
                     "Compute {a} / {b}.", "Give me {a} divided by {b}.", "{a} / {b} = ?",
                     "Figure out {a} divided by {b}.", "Can you divide {a} by {b}?", "Split {a} by {b}: how much?",
                     "Please divide {a} by {b} for me."],
             ["Work out {a} / {b} for me.", "If I divide {a} by {b}, what do I get?"], "/")
)

CONVERT = _cores("convert", [
    "Convert {v} {from} to {to}.", "How many {to} is {v} {from}?", "What is {v} {from} in {to}?",
    "{v} {from} to {to}", "How many {to} are in {v} {from}?", "{v} {from} in {to} please",
    "Can you convert {v} {from} into {to}?", "What's {v} {from} in {to}?",
    "I have {v} {from}. How much is that in {to}?", "Please convert {v} {from} to {to}.",
    "Turn {v} {from} into {to}.", "{v} {from} is how many {to}?", "What does {v} {from} come to in {to}?",
    "How much is {v} {from} in {to}?", "Convert {v} {from} into {to} for me.", "{v} {from} -> {to}",
    "I ran {v} {from}. What is that in {to}?", "Give me {v} {from} in {to}.",
    "What would {v} {from} be in {to}?", "My recipe says {v} {from}; how many {to} is that?",
   
    "In {to}, how much is {v} {from}?", "The sign says {v} {from}. What's that in {to}?",
], [
    "Express {v} {from} in {to}.", "Change {v} {from} into {to} for me.",
    "{v} {from} equals how many {to}?", "I measured {v} {from}; what would that be in {to}?",
])

# Two-call requests. Each core says which plan it needs.
WEATHER_DIFF = _cores("wdiff", [
    "How much warmer is {c1} than {c2}?", "What's the temperature difference between {c1} and {c2}?",
    "Compare the temperature in {c1} with {c2}: how many degrees apart are they?",
    "By how many degrees does {c1} differ from {c2} right now?",
], ["How many degrees separate {c1} and {c2} at the moment?",
    "Find the temperature gap between {c1} and {c2}."])

WEATHER_TWO = _cores("wtwo", [
    "What's the weather in {c1} and {c2}?", "How's the weather in {c1} and in {c2}?",
    "Weather for {c1} and {c2} please.", "Tell me the weather in both {c1} and {c2}.",
], ["Check {c1} and {c2} for me: what's the weather in each?",
    "I'm choosing between {c1} and {c2}. What's the weather in both?"])

TIME_WEATHER = _cores("tw", [
    "What time is it in {city}, and what's the weather there?", "Time and weather in {city}?",
    "Tell me the local time and the weather in {city}.", "What's the time and the temperature in {city}?",
], ["Before I call {city}, what's the time there and how's the weather?",
    "Give me both the clock and the weather for {city}."])

WEATHER_CONVERT = _cores("wconv", [
    "What's the temperature in {city} in {to}?", "How warm is it in {city}, in {to}?",
    "Give me the temperature in {city} converted to {to}.",
], [])  # training only: every temperature unit is a training unit

CALC_CHAIN = (
    _cores("chain", ["Add {a} and {b}, then multiply the result by {c}.", "What is ({a} + {b}) * {c}?",
                     "Take {a} plus {b} and multiply that by {c}."],
           ["Sum {a} and {b}, and then multiply by {c}."], "+*")
    + _cores("chain", ["Multiply {a} by {b}, then subtract {c}.", "What is {a} * {b} - {c}?",
                       "Take {a} times {b} and subtract {c} from it."],
             ["Compute {a} times {b}, then take away {c}."], "*-")
    + _cores("chain", ["Subtract {b} from {a}, then divide the result by {c}.", "What is ({a} - {b}) / {c}?"],
             ["Take {a} minus {b} and divide that by {c}."], "-/")
)
# Re-number chain cores so ids stay unique across the three groups.
CALC_CHAIN = [Core(f"chain{c.op}.{c.id.split('.')[1]}", c.text, c.split, c.op) for c in CALC_CHAIN]

PREFIXES = {TRAIN: ["", "", "", "", "", "Hi! ", "Hey, ", "Quick question: ", "Hello. ", "I was wondering: ",
                    "Can you help? ", "Good morning. ", "Question for you: ", "Please help me. ", "Hi there. ",
                    "Hey! ", "Good afternoon. ", "Good evening! ", "So, ", "Alright, ", "Right, ", "Ok so ",
                    "Another question: ", "Next question: ", "Also, ", "Quick one: ", "If you don't mind, ",
                    "Pardon me, ", "Hey friend, ", "Hello again. ", "Yo, ", "Morning! ", "Thanks for the last one. ",
                    "I have a question. ", "Help me out here: ", "Just curious: ", "By the way, ", "Hmm, ",
                    "Well, ", "One question: ", "Hi, it's me again. ", "Dear assistant, ",
                    # Words of held-out frames in greetings of their own (frame() says why).
                    "Sorry, ", "Sorry for asking, but ", "Excuse the question: ", "I hate to bother you, but ",
                    "Okay, ", "Okay so ", "Just one more: ", "One last thing: "],
            HELD_OUT: ["", "Hiya! ", "Excuse me, ", "One more thing: ", "Sorry to bother you. ", "Okay, next: "]}
SUFFIXES = {TRAIN: ["", "", "", "", "", " Thanks!", " Thank you.", " Thanks in advance.", " Cheers.", " Please.",
                    " Thanks a lot.", " Thank you so much!", " Appreciate it.", " Ta.", " Much obliged.",
                    " That'd be great.", " I'd appreciate it.", " Thanks, friend.", " No rush.", " If you can.",
                    " Cheers, mate!", " Thanks again.", " You're the best.", " Thx.", " Kind regards.",
                    " It would really help.", " Thank you kindly.", " Many thanks in advance.", " Grateful!",
                    " Sorry for the trouble.", " Okay?", " Excuse the rush.", " No bother if not."],
            HELD_OUT: ["", " Much appreciated.", " Many thanks!", " That would help a lot."]}


P_COMPOSED_FRAME = 0.3  # training requests framed by two prefixes and two suffixes (frame() says why)
P_BARE = 0.25  # training requests with no greeting and no sign-off at all (frame() says why)
P_NOISE_FRAME = 0.25  # framed training requests whose greeting or sign-off is random words (noise_frame())
P_MADE_UP_NOISE = 0.3  # words of a noise frame that are made up rather than NOISE_WORDS

# Everyday words for random greetings and sign-offs, the held-out frames' words among them (a random
# frame is never a held-out frame: noise_frame() draws again), none naming a tool, an operation or a unit.
NOISE_WORDS = ("so", "well", "right", "listen", "quick", "question", "please", "friend", "buddy", "again", "just",
               "wondering", "curious", "hello", "hi", "hey", "good", "great", "morning", "evening", "cheers",
               "need", "want", "know", "another", "last", "first", "really", "very", "nice", "cool", "awesome",
               "lovely", "dear", "team", "assistant", "honestly", "basically", "actually", "anyway", "also",
               "then", "and", "the", "for", "this", "it", "is", "all", "oh", "um", "hmm", "yes", "sure", "fine",
               "alright", "ta", "kind", "regards", "best", "wishes", "ah", "yeah", "brilliant", "super",
               "grateful", "appreciate", "ask", "mind", "if", "can", "could", "I", "have", "got", "bit", "here",
               "there", "mate", "pal", "folks", "gentle", "reminder", "urgent", "asap", "ps", "btw", "fyi", "thx", "sorry", "excuse", "bother", "okay",
               "ok", "more", "thing", "next", "one", "me", "you", "to", "much", "many", "thanks", "help", "lot")


def normal_frame(text: str) -> str:
    """A greeting or sign-off with case and punctuation ignored: what "the same frame" means here."""
    return " ".join(re.sub(r"[^\w']+", " ", text.lower()).split())


def _held_out_frames() -> frozenset[str]:
    return frozenset(normal_frame(f) for f in PREFIXES[HELD_OUT] + SUFFIXES[HELD_OUT] if f)


def noise_frame(rng: random.Random) -> tuple[str, str]:
    """A greeting and a sign-off of one to four random words each, one of them possibly empty; a
    word is one of NOISE_WORDS or, P_MADE_UP_NOISE of the time, a made-up word. Neither is ever a
    held-out frame.

    Why: measured, the checkpoint copied held-out frame words as the city ("me", "excuse", "Many").
    Training frames are a list the model can learn by heart; frames it cannot have seen teach it
    that whatever surrounds the request is not what the call copies. The made-up words: where
    every unknown word in training was the city, the checkpoint copied unknown frame words ("bother
    you", "excuse me") as the city.
    """
    def word() -> str:
        return rng.choice(NOISE_WORDS) if rng.random() >= P_MADE_UP_NOISE else made_up_city(rng).lower()

    def words() -> str:
        while True:
            drawn = " ".join(word() for _ in range(rng.randint(1, 4)))
            if normal_frame(drawn) not in _held_out_frames():
                return drawn
    prefix = words().capitalize() + rng.choice((", ", ". ", "! ", ": ", " - ")) if rng.random() < 0.7 else ""
    suffix = " " + words().capitalize() + rng.choice((".", "!", "", "?")) if not prefix or rng.random() < 0.6 else ""
    return prefix, suffix


@dataclass(frozen=True)
class Request:
    text: str
    template_id: str


# Asking for care buys the long, numbered reasoning: a user (or the anchor test) can get a few hundred
# tokens of thinking on purpose, while unprompted turns think briefly, as small agents should.
STEPWISE = {
    TRAIN: (" Think it through step by step.", " Please reason step by step.", " Walk me through it step by step.",
            " Take it step by step, carefully.", " Work it out step by step."),
    HELD_OUT: (" Go through it step by step, please.", " Reason it out step by step."),
}


def frame(rng: random.Random, core: Core, slots: dict[str, str]) -> Request:
    """Put a core into a frame of the core's split; the template id names core, frame and style."""
    split = core.split
    # Bare requests, as users mostly type them. Chat requests are always bare, and with a frame on
    # nearly every tool request (98.6%) "no frame" had become a sign of chat: measured, the bare
    # "What's the weather in Oslo?" got the what-can-you-do answer from two checkpoints.
    bare = split == TRAIN and rng.random() < P_BARE
    while True:
        p = 0 if bare else rng.randrange(len(PREFIXES[split]))
        s = 0 if bare else rng.randrange(len(SUFFIXES[split]))
        # Held-out frames must differ from every training frame: not both empty.
        if split == TRAIN or PREFIXES[split][p] or SUFFIXES[split][s]:
            break
    style = "lower" if rng.random() < 0.15 else "plain"
    body = core.text.format(**slots)
    prefix, suffix = PREFIXES[split][p], SUFFIXES[split][s]
    if split == TRAIN and not bare and rng.random() < P_NOISE_FRAME:
        prefix, suffix = noise_frame(rng)
        p, s = "n" if prefix else 0, "n" if suffix else 0
    elif split == TRAIN and not bare and rng.random() < P_COMPOSED_FRAME:
        # Two greetings or two sign-offs in a row: many more frames from the same words, so the model
        # learns that whatever surrounds the request does not change the call. (Held-out requests draw
        # nothing here, so they do not change.)
        prefix += rng.choice(PREFIXES[TRAIN][5:])
        suffix += rng.choice(SUFFIXES[TRAIN][5:])
        p, s = f"{p}+", f"{s}+"
    if prefix and body[0].isupper() and not body.startswith(tuple(slots.values())):
        body = body[0].lower() + body[1:]
    text = prefix + body + suffix
    if style == "lower":
        text = text.lower()
    frame_id = f"{split}.p{p}.s{s}.{style}"
    return Request(text, f"{core.id}|{frame_id}")
