"""llama.cpp's slot routes: GET /slots, POST /slots/{id}?action=save|restore|erase.

Shape and field names follow llama.cpp (facts.md section 1) because clients
already speak it; where llama.cpp answers badly we answer better: a missing
body is a 400 naming `filename` (not a 500), an out-of-range id is a 404
(not wrapped modulo the slot count), a failed write is an error (never a 200
with `n_written: 0`), and a refused restore says which check failed.

An action on a busy slot waits for it (server/slot_wait.py) up to 30 s, then
answers 409. Admin actions need `--slot-save-path` (501 without, naming the flag) and
the admin key (`--admin-api-key`, else `--api-key`).
"""

from __future__ import annotations

import asyncio
import json
import re
import time

from fastapi import APIRouter, Request

from scheduler.engine import EngineStopped
from server.auth import check_admin_key
from server.errors import (APIError, ConflictError, InvalidRequestError, NotFoundError, NotSupportedError,
                           UnavailableError, json_body_problem)
from server.protocol.common import lone_surrogate_path
from server.slot_wait import wait_for_slot
from slots.filenames import InvalidSlotFilename, resolve_slot_path
from slots.fslot import SlotFormatError
from slots.identity import IdentityMismatch
from slots.slot_io import RestoreError, restore_file, save_file

router = APIRouter()


@router.get("/slots")
async def list_slots(request: Request, fail_on_no_slot: int = 0):
    state = request.app.state.server
    state.require_ready()
    slots = state.slots.describe()
    if fail_on_no_slot and all(s["is_processing"] for s in slots):
        raise UnavailableError("no slot available")
    return slots


def _slot_id(raw: str, n: int) -> int:
    # ASCII digits only: int() would also take "+1", " 1", "1_0" and other scripts' digits.
    if not re.fullmatch(r"-?[0-9]+", raw):
        raise InvalidRequestError(f"Invalid slot ID {raw!r}: not an integer", param="id_slot")
    if raw.startswith("-"):
        raise InvalidRequestError(f"Invalid slot ID {raw[:24]}: negative", param="id_slot")
    # Leading zeros dropped before int(): "000...05" of over 4300 characters is slot 5, and int() refuses
    # that many digits; a number still too long for it names no slot either.
    digits = raw.lstrip("0") or "0"
    if len(digits) > len(str(n)) or int(digits) >= n:
        shown = raw if len(raw) <= 24 else raw[:20] + "..."
        raise NotFoundError(f"slot {shown} does not exist; this server has {n} slots (--parallel)", param="id_slot")
    return int(digits)


async def _filename(request: Request) -> str:
    raw = await request.body()
    try:
        body = json.loads(raw) if raw else None
    except (ValueError, RecursionError):  # syntax, not UTF-8, too deep, an integer of over 4300 digits
        raise InvalidRequestError(f"could not parse JSON body: {json_body_problem(raw)}",
                                  code="json_invalid") from None
    if not isinstance(body, dict) or "filename" not in body:
        raise InvalidRequestError("this action needs a JSON body with a `filename`", param="filename")
    unknown = sorted(k for k in body if k != "filename")
    if unknown:  # as every other route's body: a misspelt field is an error, not silently ignored
        name = unknown[0] if len(unknown[0]) <= 40 else unknown[0][:37] + "..."
        raise InvalidRequestError(f"unknown field {name!r}: a slot action's body has only `filename`", param=name)
    if not isinstance(body["filename"], str) or lone_surrogate_path(body["filename"]) is not None:
        raise InvalidRequestError("`filename` must be a string of Unicode text", param="filename")
    return body["filename"]


@router.post("/slots/{slot_id}")
async def slot_action(slot_id: str, request: Request, action: str | None = None):
    state = request.app.state.server
    s = state.settings
    check_admin_key(request, s.admin_api_key, s.api_key)
    state.require_ready()
    sid = _slot_id(slot_id, s.parallel)
    if action is None:
        raise InvalidRequestError("missing `action`: use ?action=save, restore or erase", param="action")
    if action not in ("save", "restore", "erase"):
        raise InvalidRequestError(f"unknown action {action[:40]!r}: use ?action=save, restore or erase",
                                  param="action")
    if s.slot_save_path is None:
        raise NotSupportedError("slot actions are disabled: start the server with --slot-save-path DIR",
                                param="action")
    path = None
    if action != "erase":
        try:
            path = resolve_slot_path(s.slot_save_path, await _filename(request))
        except InvalidSlotFilename as exc:
            raise InvalidRequestError(str(exc), param="filename") from None  # "invalid slot filename: <rule>"
    slot = await wait_for_slot(lambda: state.slots.try_claim(sid), sid, state.slots)
    try:
        if action == "save":
            return await _save(state, slot, path)
        if action == "restore":
            return await _restore(state, slot, path)
        n = await asyncio.wrap_future(state.engine.call(lambda _: state.slots.unpin(slot)))
        return {"id_slot": sid, "n_erased": n}
    finally:
        state.slots.release(slot)


async def _to_the_end(fn, *args, **kwargs):
    """`fn(*args, **kwargs)` on a worker thread, waited for even when the request is cancelled (its client
    gone): the thread works on the claimed slot -- it writes out its pages, or pins it when a restore
    ends -- so the slot stays claimed until the thread is done, and no other action or request takes it
    in between."""
    work = asyncio.ensure_future(asyncio.to_thread(fn, *args, **kwargs))
    try:
        return await asyncio.shield(work)
    except asyncio.CancelledError:
        await asyncio.wait([work])
        raise
    except EngineStopped:
        raise UnavailableError("the server is shutting down: the slot action did not complete") from None


async def _save(state, slot, path):
    t0 = time.perf_counter()
    if path.is_dir():  # the client's name: what is there is no file to replace
        raise ConflictError(f"{path.name!r} is a directory in --slot-save-path, not a slot file; save under "
                            "another name", param="filename")
    engine = state.engine
    try:
        saved = await _to_the_end(save_file, path, state.slot_identity, state.runner,
                                  lambda fn: engine.call(fn).result(), slot)
    except OSError as exc:
        raise APIError(500, f"could not write {path.name}: {exc.strerror or exc}", "server_error") from None
    page = state.info.page_size
    if saved is None and slot.gave_way:
        raise InvalidRequestError(f"slot {slot.id} gave up its cached KV ({slot.gave_way} tokens) to make room for "
                                  "other requests; run its request again and save it then, or raise "
                                  "--kv-cache-tokens so slots keep their KV", param="id_slot")
    if saved is None:
        raise InvalidRequestError(f"slot {slot.id} holds no cached tokens: a slot keeps whole pages ({page} tokens) "
                                  "of its last request, so run a request of at least that length in it first",
                                  param="id_slot")
    n_saved, written = saved
    return {"id_slot": slot.id, "filename": path.name, "n_saved": n_saved, "n_written": written,
            "timings": {"save_ms": (time.perf_counter() - t0) * 1000.0}}


async def _restore(state, slot, path):
    t0 = time.perf_counter()
    if not path.is_file():
        raise NotFoundError(f"no slot file named {path.name!r} in --slot-save-path", param="filename")
    engine = state.engine

    def pin(tokens: list[int]) -> int:  # on the engine thread, once the restored pages are cached
        state.slots.pin(slot, tokens)
        return len(slot.tokens)

    try:
        n, n_read = await _to_the_end(
            restore_file, path, state.slot_identity, state.runner, lambda fn: engine.call(fn).result(), pin,
            window=state.info.spec.sliding_window, max_bytes=state.settings.max_slot_file_bytes,
            vocab_size=state.info.spec.vocab_size, n_ctx=state.info.max_model_len)
    except SlotFormatError as exc:
        raise InvalidRequestError(f"slot file refused ({exc.check}): {exc}", param="filename", code=str(exc.check)) from None
    except IdentityMismatch as exc:
        raise InvalidRequestError(str(exc), param="filename", code=f"identity_{exc.field}") from None
    except RestoreError as exc:
        raise InvalidRequestError(str(exc), param="filename") from None
    return {"id_slot": slot.id, "filename": path.name, "n_restored": n, "n_read": n_read,
            "timings": {"restore_ms": (time.perf_counter() - t0) * 1000.0}}
