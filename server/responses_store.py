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
- The store is bounded by a count of responses and evicts the least recently
  used (a lookup or a chained turn counts as a use), so a server that runs for
  weeks does not grow without end. What was evicted answers as never stored.
- It lives on the event loop (every call is from a route), so it takes no lock.

Not for: building prompts from the items (server/protocol/responses.py) or the
routes (server/routes/responses.py). Nothing here outlives the process.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StoredResponse:
    response: dict[str, Any]  # the response object as answered (status, output items, usage)
    context: list[dict[str, Any]]  # the input items the turn's prompt was built from, oldest first, with ids

    def next_context(self) -> list[dict[str, Any]]:
        """The items a turn chained onto this one starts from: this turn's context, then its output."""
        return [*self.context, *self.response["output"]]


class ResponsesStore:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity  # 0: nothing is stored
        self._entries: OrderedDict[str, StoredResponse] = OrderedDict()

    @property
    def enabled(self) -> bool:
        return self.capacity > 0

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, entry: StoredResponse) -> None:
        if not self.enabled:
            return
        rid = entry.response["id"]
        self._entries[rid] = entry
        self._entries.move_to_end(rid)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    def get(self, rid: str) -> StoredResponse | None:
        entry = self._entries.get(rid)
        if entry is not None:
            self._entries.move_to_end(rid)
        return entry

    def delete(self, rid: str) -> bool:
        return self._entries.pop(rid, None) is not None
