"""Wire models of llama.cpp's `/tokenize` and `/detokenize`.

`{"content", "add_special", "parse_special", "with_pieces"}` -> `{"tokens"}`,
where a token is an id, or with `with_pieces` an `{"id", "piece"}` object
whose piece is the token's text -- or its bytes as a list of ints when the
token alone is not valid UTF-8 (a fragment of a multi-byte character),
which is llama.cpp's answer to the same problem.
`{"tokens"}` -> `{"content"}`.

Not for: the tokenizer itself (models/).
"""

from __future__ import annotations

from pydantic import BaseModel

from server.protocol.common import RequestBody, ResponseModel, TokenId, WireModel


class TokenizeRequest(RequestBody):
    content: str
    # Add the checkpoint's BOS/EOS the way a prompt would get them.
    add_special: bool = False
    # Read `<think>`-style markers in `content` as their special tokens.
    parse_special: bool = True
    with_pieces: bool = False


class TokenPiece(ResponseModel):
    id: int
    piece: str | list[int]


class TokenizeResponse(ResponseModel):
    tokens: list[int] | list[TokenPiece]


class DetokenizeRequest(RequestBody):
    tokens: list[TokenId]


class DetokenizeResponse(BaseModel):
    content: str
