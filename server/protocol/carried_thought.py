"""A thought carried in a Responses reasoning item's `encrypted_content`, for clients that send back only that.

What it is for: with `include: ["reasoning.encrypted_content"]` a reasoning output item carries its
thought as an opaque string, and a client that keeps no server-side state (`store: false`) sends the
item back with it so the next turn can replay the thought. Some clients send back *only* that: Codex
drops a reasoning item's `reasoning_text` content when it serialises its history. Without the thought
the next prompt would differ from the tokens the server ran right where the thought was, and the
prefix cache and the tool-call anchor could reuse nothing past the user's message.

Why it is shaped so: it is not encrypted. This server shows its thoughts in `reasoning_text` anyway,
so there is nothing to hide, only something to carry. The string is a marked, versioned, compressed
and checksummed encoding of the text, so a string from this server reads back exactly, a damaged one
is refused by name, and one from another provider (OpenAI's are encrypted for OpenAI) is recognised
as foreign and read as no thought, as a client switching providers mid-conversation needs.
"""

from __future__ import annotations

import base64
import binascii
import zlib

MARK = "anchorage.thought.v1."
# The most text a carried thought may inflate to: more than a context of a million tokens holds, so no
# thought this server sealed is near it, while a crafted string (a few hundred KB of zlib can inflate to
# gigabytes) is refused after this much work and memory, not after all of it.
MAX_THOUGHT_BYTES = 8 << 20


def seal(thought: str) -> str:
    """The thought as an `encrypted_content` string."""
    raw = thought.encode("utf-8")
    body = zlib.crc32(raw).to_bytes(4, "big") + zlib.compress(raw)
    return MARK + base64.urlsafe_b64encode(body).decode("ascii")


def unseal(value: str) -> str | None:
    """The thought a `seal` string carries; None for another provider's string. ValueError, saying what is
    wrong, for a string of this server's that does not read back (cut, or edited)."""
    if not value.startswith(MARK):
        return None
    try:
        body = base64.urlsafe_b64decode(value[len(MARK):].encode("ascii"))
        inflate = zlib.decompressobj()
        raw = inflate.decompress(body[4:], MAX_THOUGHT_BYTES)
    except (binascii.Error, ValueError, UnicodeEncodeError, zlib.error) as exc:
        raise ValueError(f"this server's encrypted_content does not decode ({exc}); send it back as received") from None
    if inflate.unconsumed_tail:
        raise ValueError(f"this server's encrypted_content inflates past {MAX_THOUGHT_BYTES} bytes, more than any "
                         "thought it carries; send it back as received")
    if not inflate.eof:
        raise ValueError("this server's encrypted_content does not decode (its compressed stream is cut); send it "
                         "back as received")
    if len(body) < 4 or zlib.crc32(raw).to_bytes(4, "big") != body[:4]:
        raise ValueError("this server's encrypted_content fails its checksum; send it back as received")
    return raw.decode("utf-8")
