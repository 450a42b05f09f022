"""Plain chat for the demo corpus: requests that need no tool.

What it is for: a handful of intents (greetings, thanks, what-can-you-do,
requests outside the four tools) with training and held-out phrasings, the
short thought the model has about them, and its answer.

What it is not for: teaching knowledge. The model is a toy; out-of-scope
requests get an honest refusal that lists what it can do.

Why it is shaped so: a model trained only on tool calls calls a tool for
everything. Chat turns -- some naming a city or a number without asking for
weather or arithmetic -- teach it that a tool call is a decision. A share of
training chat turns also carry a made-up word ("Thanks a Vorlin!"): the
checkpoint took the one word it did not know in a held-out chat request
("Thanks a bunch.", "Catch you later!") for a city and looked up its weather,
because in training every unknown word was a city or a unit. Named this way
without a weather or clock word, it is still chat.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from models.demo import tools, units
from models.demo.corpus_values import SYLLABLES, TRAIN, draw_number, made_up_city

# Share of training chat requests (the intents below, not echo) that get a made-up word.
P_UNKNOWN_WORD = 0.3

CAPABILITIES = "I can do arithmetic, look up the weather in a city, convert units and tell the local time"


@dataclass(frozen=True)
class Intent:
    name: str
    train: tuple[str, ...]
    held_out: tuple[str, ...]
    thoughts: tuple[str, ...]
    answers: tuple[str, ...]


INTENTS = (
    Intent("greeting", ("Hello!", "Hi", "hey there", "Good morning!", "Hi, how's it going?", "Hello there.",
                        "Good evening.", "yo", "Hiya", "Good day!", "Hello hello", "Hey, you there?", "Morning!",
                        "Hi again", "Evening!", "Hey", "Warm greetings to you.", "Howdy, friend.",
                        "Is anyone around?"),
           ("Greetings!", "Hey hey", "Howdy!", "Hello, anyone there?"),
           ("The user is greeting me. No tool is needed; I'll greet them back.", "A greeting. I'll say hello."),
           (f"Hello! {CAPABILITIES}. What would you like to know?", "Hi! How can I help you today?")),
    Intent("how_are_you", ("How are you?", "How are you doing today?", "how's your day going?", "How's it going?",
                            "You doing alright?", "How are things?", "How do you feel today?", "Have you been well?",
                            "Everything okay with you?"),
           ("Are you doing okay?", "How have you been?"),
           ("A friendly question about me. No tool needed.",),
           ("I'm doing well, thanks for asking! How can I help?",)),
    Intent("capabilities", ("What can you do?", "What tools do you have?", "How can you help me?",
                            "What are you able to help with?", "list your abilities", "What do you do?",
                            "What can I ask you?", "What are you good at?", "Tell me what you can do.",
                            "What kinds of questions can you answer?", "What features do you have?",
                            "What sort of help do you offer?", "Which tools do you know?",
                            "What functions do you offer?", "How do I use you?", "Tell me about your skills."),
           ("What sort of things can you do for me?", "Which functions can you use?", "What are your skills?"),
           ("The user asks what I can do. I'll describe my four tools; no call is needed.",),
           (f"{CAPABILITIES}. Just ask, for example: what's the weather in Paris?",
            "I have four tools: a calculator, a weather lookup, a unit converter and a clock.")),
    Intent("identity", ("Who are you?", "What are you?", "Are you a real person?", "What model are you?",
                        "Introduce yourself.", "What's your name?", "Are you a bot?", "Who made you?",
                        "Am I talking to a human?"),
           ("Tell me about yourself.", "Are you human?"),
           ("The user asks who I am. No tool needed.",),
           ("I'm the tiny demo model that ships with anchorage, trained on synthetic conversations. "
            f"{CAPABILITIES}; I'm not a general assistant.",)),
    Intent("thanks", ("Thanks!", "Thank you so much.", "thanks, that helps", "Great, thank you!", "Perfect, thanks.",
                      "Thanks a lot!", "Much appreciated.", "That was helpful, thanks.", "Nice, thanks!", "Thank you!",
                      "That was very useful, thanks.", "I owe you a bunch."),
           ("Cheers, that was useful.", "Appreciate it!", "Thanks a bunch."),
           ("The user is thanking me. Nothing to look up.",),
           ("You're welcome!", "Glad I could help!")),
    Intent("goodbye", ("Bye!", "See you later.", "Goodbye.", "That's all for now, bye.", "Talk to you later.",
                       "See ya!", "Bye for now.", "Good night!", "I have to go now, bye.",
                       "Catch up with you soon.", "All done, bye.", "Farewell, friend."),
           ("Catch you later!", "I'm done, farewell."),
           ("The user is saying goodbye. No tool needed.",),
           ("Goodbye! Have a great day.", "Bye! Come back any time.")),
    Intent("out_of_scope", ("Can you book me a flight to {city}?", "Write a poem about the sea.",
                            "What's the capital of France?", "Tell me a joke.", "Translate hello into Spanish.",
                            "Recommend a restaurant in {city}.", "What's the population of {city}?",
                            "Who won the football match yesterday?", "Send an email to my boss.",
                            "Is {number} a prime number?", "How far is {city} from here?", "Order a pizza for me.",
                            "Book a table in {city}.", "What's a good museum in {city}?", "Tell me about {city}.",
                            "What language do they speak in {city}?", "Remind me to call mom.",
                            "Write a story about a dragon.", "What's the meaning of life?", "Turn on the lights.",
                            "Buy me a train ticket to {city}.", "What's {city} famous for?",
                            "Schedule a meeting for Monday.", "Draw a cat.", "Book a hotel room for me.",
                            "Summarise this email.", "Write an article about {city}.", "Teach me some history.",
                            "Wake me up with an alarm.", "Play a song for me.", "Put on some music.",
                            "Copy this file to my laptop.", "What's another word for happy?", "I am bored.",
                            "Set up a call with my team."),
           ("Find me a hotel in {city}.", "Can you summarise this article for me?",
            "What's the history of {city}?", "Set an alarm for 7 am.", "Play some music please."),
           ("This isn't something my tools can do. I shouldn't call a tool; I'll explain what I can do.",
            "None of my tools fits this request, so no tool call. I'll say so honestly."),
           (f"Sorry, I can't help with that. {CAPABILITIES}.",
            f"That's outside what I can do. {CAPABILITIES}.")),
)


# Repeat-after-me: the densest copying signal there is. Copying unseen strings is what the tool
# calls need (held-out cities and units arrive as pieces the model never saw together).
ECHO = Intent("echo", ("Repeat after me: {text}", "Say exactly this: {text}", "Please echo back: {text}",
                       "Can you repeat the following? {text}", "repeat: {text}"),
              ("Copy this back to me: {text}", "Echo this, word for word: {text}"),
              ('The user wants me to repeat "{text}" exactly. No tool needed.', "Just repeat it: {text}"),
              ("{text}", "Sure: {text}"))


def phrasings(intent: Intent, split: str) -> tuple[str, ...]:
    return intent.train if split == TRAIN else intent.held_out


def echo_text(rng: random.Random, split: str) -> tuple[str, list[str]]:
    """One to four made-up words and numbers of the split, none a city or a unit word."""
    words, values, count = [], [], rng.randint(1, 4)
    while len(words) < count:
        if rng.random() < 0.35:
            number = draw_number(rng, split)
            words.append(number)
            values.append(f"num:{number}")
            continue
        word = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 3)))
        if word in tools.city_table() or units.lookup(word):
            continue
        words.append(word.title() if rng.random() < 0.5 else word)
    return " ".join(words), values


def with_unknown_word(rng: random.Random, text: str) -> str:
    """`text` with a made-up name put in at a random word boundary, lower-case half the time; never a
    held-out phrasing ("Hey" and a made-up "hey" would make one)."""
    held_out = {p for intent in INTENTS for p in intent.held_out}
    while True:
        word = made_up_city(rng)
        word = word.lower() if rng.random() < 0.5 else word
        words = text.split(" ")
        at = rng.randint(0, len(words))
        altered = " ".join(words[:at] + [word] + words[at:])
        if altered not in held_out:
            return altered


def draw(rng: random.Random, split: str, city: str, number: str, intent: Intent | None = None
         ) -> tuple[str, str, str, str, list[str]]:
    """(request, template id, thought, answer, values) for one chat turn of the split."""
    intent = intent or rng.choice(INTENTS)
    options = phrasings(intent, split)
    k = rng.randrange(len(options))
    values = []
    text = options[k]
    # Training only, so held-out draws take nothing extra from the rng.
    if split == TRAIN and intent is not ECHO and "{" not in text and rng.random() < P_UNKNOWN_WORD:
        text = with_unknown_word(rng, text)
    if "{city}" in text:
        values.append(f"city:{city.lower()}")
    if "{number}" in text:
        values.append(f"num:{number}")
    echo, echo_values = echo_text(rng, split) if "{text}" in text else ("", [])
    slots = dict(city=city, number=number, text=echo)
    return (text.format(**slots), f"chat.{intent.name}.{split}{k}", rng.choice(intent.thoughts).format(**slots),
            rng.choice(intent.answers).format(**slots), values + echo_values)


# Invariant: no phrasing is in both splits.
assert not {p for i in (*INTENTS, ECHO) for p in i.train} & {p for i in (*INTENTS, ECHO) for p in i.held_out}
