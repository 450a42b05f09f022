"""What every route reads: the settings, and the runtime once it has loaded.

The model loads in the background after the server starts listening, so
`/health` can answer 503 while it loads (llama.cpp does the same) and a
container's health check sees the difference between "starting" and "dead".
Until `status == "ready"` every route but /health (the status) and /v1/models (the id, known from
the settings, as llama.cpp answers it while loading) answers 503.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from server.errors import UnavailableError
from server.responses_store import ResponsesStore
from server.settings import ServeSettings
from server.tokenizer_thread import own_tokenizer


@dataclass
class ServerState:
    settings: ServeSettings
    status: str = "loading"  # loading | ready | failed
    error: str | None = None
    info: Any = None  # server.runtime.RuntimeInfo
    engine: Any = None  # scheduler.engine.Engine
    shared_tokenizer: Any = None  # read it as `tokenizer`
    runner: Any = None
    token_bytes: Any = None
    slots: Any = None  # slots.slot_table.SlotTable
    slot_identity: Any = None  # slots.identity.SlotIdentity of the serving checkpoint
    ready_event: threading.Event = field(default_factory=threading.Event)
    responses: ResponsesStore = field(init=False)  # stored Responses API turns
    # Responses turns running in the background (`background: true`), by response id: what cancels them.
    background: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.responses = ResponsesStore(self.settings.responses_store_size, self.settings.responses_store_mib * 2**20)

    @property
    def tokenizer(self) -> Any:
        """The tokenizer for the calling thread: a tokenizer thread's own copy, else the shared one."""
        return own_tokenizer(self.shared_tokenizer)

    @tokenizer.setter
    def tokenizer(self, value: Any) -> None:
        self.shared_tokenizer = value

    def require_ready(self) -> None:
        if self.status == "loading":
            raise UnavailableError("the model is still loading")
        if self.status != "ready":
            raise UnavailableError(f"the model failed to load: {self.error}")
