"""Responses kept in memory, for `previous_response_id` and `GET /v1/responses/{id}`.

What it is for: OpenAI's Responses API stores a turn by default (`store`
defaults to true), and agent clients lean on it: the next turn names the last
one (`previous_response_id`) and sends only what is new -- the tool results,
the next question. The server rebuilds the whole conversation from the stored
turn, so the prompt it renders is the one the last turn ran plus the new
items, and the prefix cache and the tool-call anchor reuse the last turn's
tokens as they do for a client that resends everything.

Why it is shaped so:
- Each entry holds the turn's whole context (the items its prompt was built
  from, previous turns' inputs and outputs included) as a list of references
  to item dicts shared with the entries before it: a turn costs a list of
  pointers, not a copy of the conversation, and no entry depends on another
  still being stored -- evicting or deleting an early turn never breaks a
  later one.
- The store is bounded by a count of responses and by an estimate of the
  bytes they hold, and evicts the least recently used (a lookup or a chained
  turn counts as a use), so a server that runs for weeks does not grow
  without end: a turn echoes its request's `tools` and `text.format` schema,
  which may be megabytes each, so a count alone bounds nothing. What was
  evicted answers as never stored. The newest turn is always kept, even
  alone over the budget, since the client's next turn names it.
- A turn is charged with its own bytes (its request body, an upper bound of
  what its envelope echoes, and its output) and a pointer per context item;
  the context items themselves are counted once however many stored turns
  share them, and uncounted when the last of those turns leaves. So the
  estimate tracks what is really alive, not the square of a long chain.
- A streamed background turn keeps its events, so a client can resume its
  stream by id; they are charged to the turn's own bytes.
- A turn is put when it starts (`queued`), again when its first token
  makes it `in_progress`, again every so many events of a background stream
  (so a resuming reader sees them and the bytes are charged), and last as it
  ended; each put replaces the one before. A client's DELETE of a turn
  still running is remembered until its end arrives, so the end does not
  bring it back.
- It lives on the event loop (every call is from a route), so it takes no lock.

Not for: building prompts from the items (server/protocol/responses.py) or the
routes (server/routes/responses.py). Nothing here outlives the process.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any


RUNNING = ("queued", "in_progress")  # a turn's statuses before it ends: more words about it will come


def approximate_size(value: Any) -> int:
    """Bytes `value` (JSON-shaped: dicts, lists, strings, numbers) takes, roughly: its strings' lengths
    plus a word for every other node. Cheap for a few long strings (one prompt of megabytes is one
    string), which is what turns' items are; walked without recursion, so no depth breaks it."""
    total, pending = 0, [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            total += len(item) + 8
        elif isinstance(item, dict):
            total += 8 * len(item) + sum(len(key) for key in item if isinstance(key, str))
            pending.extend(item.values())
        elif isinstance(item, list | tuple):
            total += 8 * len(item)
            pending.extend(item)
        else:
            total += 8
    return total


@dataclass(frozen=True)
class StoredResponse:
    response: dict[str, Any]  # the response object as answered (status, output items, usage)
    context: list[dict[str, Any]]  # the input items the turn's prompt was built from, oldest first, with ids
    size: int = 0  # bytes of this turn's own: its request body and output (its context is counted by the store)
    events: Any = None  # a streamed background turn's EventLog (server/responses_replay.py), read to resume it

    def next_context(self) -> list[dict[str, Any]]:
        """The items a turn chained onto this one starts from: this turn's context, then its output."""
        return [*self.context, *self.response["output"]]


class ResponsesStore:
    def __init__(self, capacity: int, max_bytes: int | None = None) -> None:
        self.capacity = capacity  # 0: nothing is stored
        self.max_bytes = max_bytes  # None: bounded by the count alone
        self._entries: OrderedDict[str, StoredResponse] = OrderedDict()
        self._bytes = 0
        # Context items shared by stored turns, by identity: how many turns hold each, and its size.
        # Invariant: an item is here exactly while some stored turn's context holds it (so its id() is
        # not reused), and _bytes counts it once.
        self._shared: dict[int, list[int]] = {}
        # Turns deleted while they ran: their end (stored as they finish) must not bring them back.
        self._deleted_running: set[str] = set()

    @property
    def enabled(self) -> bool:
        return self.capacity > 0

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, entry: StoredResponse) -> None:
        if not self.enabled:
            return
        rid = entry.response["id"]
        if rid in self._deleted_running:
            if entry.response.get("status") not in RUNNING:
                self._deleted_running.discard(rid)  # the turn's last word: nothing more will come
            return
        self._remove(rid)  # a turn's later word replaces its earlier (queued, in_progress, as it ended)
        self._entries[rid] = entry
        self._charge(entry, +1)
        # The newest entry is last and always stays.
        while len(self._entries) > 1 and (len(self._entries) > self.capacity or self._over_budget()):
            _, evicted = self._entries.popitem(last=False)
            self._charge(evicted, -1)

    def _charge(self, entry: StoredResponse, sign: int) -> None:
        """Count `entry` in (+1) or out (-1) of the bytes held: its own, a pointer per context item,
        and each context item no other stored turn holds."""
        self._bytes += sign * (entry.size + 8 * len(entry.context))
        for item in entry.context:
            held = self._shared.get(id(item))
            if held is None:  # only when counting in: a counted-out item was held by this entry
                held = self._shared[id(item)] = [0, approximate_size(item)]
                self._bytes += held[1]
            held[0] += sign
            if held[0] == 0:
                del self._shared[id(item)]
                self._bytes -= held[1]

    @property
    def bytes(self) -> int:
        """The estimated bytes the stored turns hold (server/responses_store.approximate_size)."""
        return self._bytes

    def _over_budget(self) -> bool:
        return self.max_bytes is not None and self._bytes > self.max_bytes

    def get(self, rid: str) -> StoredResponse | None:
        entry = self._entries.get(rid)
        if entry is not None:
            self._entries.move_to_end(rid)
        return entry

    def delete(self, rid: str) -> bool:
        """A client's DELETE: gone, and a turn still running stays gone when it ends."""
        entry = self._remove(rid)
        if entry is not None and entry.response.get("status") in RUNNING:
            self._deleted_running.add(rid)
        return entry is not None

    def forget_when_done(self, rid: str) -> None:
        """A turn still running that a client deleted, stored or not (the bound may have evicted it): what it
        stores while running, and its last word, are not kept."""
        self._deleted_running.add(rid)

    def _remove(self, rid: str) -> StoredResponse | None:
        entry = self._entries.pop(rid, None)
        if entry is not None:
            self._charge(entry, -1)
        return entry
