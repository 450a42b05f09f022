"""What a JSON schema leaves open that a grammar should close: undeclared keys and endless digits.

What it is for: the grammars (response_format answers, tool-call arguments)
compile a client's schema with llguidance, which follows JSON Schema to the
letter: an object with `properties` and no `additionalProperties` takes any
other key too, and an `integer` or `number` without bounds takes any number
of digits. A small or confused model then writes keys nobody asked for, or
`4000000000...` until `max_tokens` runs out, and the answer fails the client's
own parse (instructor, pydantic). llama.cpp's schema-to-grammar closes both:
extra keys only where `additionalProperties` says so, and at most 16 digits
before the point. This module rewrites a schema the same way before it is
compiled; the schema the client sent (echoed, stored, validated) is untouched.

Why it is shaped so: a rewrite of the schema rather than of the grammar,
because llguidance has no option for either and the schema is what it reads.
Objects are closed only where closing cannot change which values are valid
in a way the client meant: not where `allOf` combines several schemas (each
part's properties would forbid the others'), nor where the object also says
`patternProperties`, `unevaluatedProperties`, or has composition siblings
(`anyOf`, `oneOf`, `allOf`, `$ref`, `if`) that may declare keys of their own.
Numbers are bounded by `minimum`/`maximum` at +-(10**16 - 1), only on a side
the schema leaves open; llguidance writes a bounded number without an
exponent, and its decimals stay unbounded (no schema keyword bounds them).

Not for: checking that a schema is one (server/protocol/json_schema_check.py).
No torch.
"""

from __future__ import annotations

from typing import Any

# llama.cpp's integral part: [1-9][0-9]{0,15}.
NUMBER_BOUND = 10**16 - 1

# Keywords whose value is one schema, a list of schemas, or a map of names to schemas.
_ONE = ("additionalProperties", "additionalItems", "items", "contains", "not", "if", "then", "else",
        "propertyNames", "unevaluatedProperties", "unevaluatedItems")
_MANY = ("anyOf", "oneOf", "allOf", "prefixItems", "items")
_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
# Beside `properties`, these may let keys in that the object's own `properties` do not name.
_OPENERS = ("additionalProperties", "patternProperties", "unevaluatedProperties", "anyOf", "oneOf", "allOf",
            "$ref", "$dynamicRef", "$recursiveRef", "if", "dependentSchemas")


def tightened(schema: Any) -> Any:
    """`schema` with its objects closed and its numbers bounded as llama.cpp's grammars are; the
    input is not modified. A schema too deep to walk is returned as it is."""
    try:
        close = not _combines_objects(schema)
        return _tighten(schema, close)
    except RecursionError:
        return schema


def _combines_objects(schema: Any) -> bool:
    """Does an `allOf` anywhere combine several schemas? Then closing any object (including ones it
    reaches through `$ref`) could make the combination unsatisfiable, so none is closed."""
    if isinstance(schema, dict):
        parts = schema.get("allOf")
        if isinstance(parts, list) and len(parts) > 1:
            return True
        return any(_combines_objects(value) for value in schema.values())
    if isinstance(schema, list):
        return any(_combines_objects(value) for value in schema)
    return False


def _tighten(schema: Any, close: bool) -> Any:
    if not isinstance(schema, dict):
        return schema  # true / false, or something the engine will refuse by itself
    out = dict(schema)
    for key in _ONE:
        if isinstance(out.get(key), dict):
            out[key] = _tighten(out[key], close)
    for key in _MANY:
        if isinstance(out.get(key), list):
            out[key] = [_tighten(part, close) for part in out[key]]
    for key in _MAP:
        if isinstance(out.get(key), dict):
            out[key] = {name: _tighten(part, close) for name, part in out[key].items()}
    if close and isinstance(out.get("properties"), dict) and not any(key in out for key in _OPENERS):
        out["additionalProperties"] = False
    if _is_numeric(out.get("type")):
        if "minimum" not in out and "exclusiveMinimum" not in out:
            out["minimum"] = -NUMBER_BOUND
        if "maximum" not in out and "exclusiveMaximum" not in out:
            out["maximum"] = NUMBER_BOUND
    return out


def _is_numeric(kind: Any) -> bool:
    """A `type` that takes numbers (alone or in a list: the bounds constrain only the numbers)."""
    if isinstance(kind, list):
        return any(part in ("integer", "number") for part in kind)
    return kind in ("integer", "number")
