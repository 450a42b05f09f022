"""What the routes of other APIs over the chat pipeline share (Responses, Messages).

Each of those routes turns its body into the chat request it spells and
runs that as /v1/chat/completions does. Two things then must hold for every
such route alike, so they live here once:

- an error the chat pipeline finds names the field as the client wrote it
  (`max_output_tokens`, not `max_completion_tokens`), in `param` and in the
  message: `chat_request` for the request's own checks, `in_client_words`
  for what rendering and the engine's checks refuse later;
- the whole answer is read the way its stream is, piece by piece by the same
  parser (`read_whole`), so the two agree block for block.

Not for: the spelling itself (server/protocol/responses.py, messages.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from server.errors import APIError, api_error_from_validation
from server.output import StreamingOutputParser
from server.protocol import ChatCompletionRequest

Rename = Callable[[str | None], str | None]  # a chat field path -> the client's field path
Reword = Callable[[str], str]  # a chat message -> the same words as the client's API says them


def chat_request(body: dict[str, Any], rename: Rename, reword: Reword) -> ChatCompletionRequest:
    """The chat request `body` is; what chat refuses is reported on the client's field, in its words."""
    try:
        return ChatCompletionRequest.model_validate(body)
    except ValidationError as exc:  # worded as the chat route words it (the field first), then renamed
        raise in_client_words(api_error_from_validation(exc.errors()), rename, reword) from None


def in_client_words(exc: APIError, rename: Rename, reword: Reword) -> APIError:
    """`exc`, found by the chat pipeline, with its field named as the client wrote it, in `param` and in the
    message alike: every mention of the chat field is renamed, so chat's messages name a field only as a field
    (`stop: at most 16 strings`, not "16 stop sequences")."""
    theirs = rename(exc.param)
    if exc.param and theirs != exc.param:
        exc.message = exc.message.replace(exc.param, theirs)
    exc.message = reword(exc.message)
    exc.param = theirs
    return exc


def read_whole(parser: StreamingOutputParser, choice) -> list:
    """The deltas of a whole answer, fed piece by piece as its stream is: a call the stream would have
    announced and the model then broke stays one."""
    return [delta for piece in choice.pieces or [choice.text] for delta in parser.feed(piece)] + parser.finish()
