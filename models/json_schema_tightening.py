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
An object is closed only where its schema is the *sole* description of that
value's keys: closing one of two schemas that apply to the same value (an
`anyOf` branch beside the parent's own `properties`, a `$ref` target beside
them, `allOf` parts, `then` beside `if`) would forbid the other's keys and
could make the whole unsatisfiable. Soleness flows down: a property's schema
is sole when its object's is and nothing else (patterns, compositions) can
describe that property too; a branch is sole when its parent says nothing
else about the value; a `$defs` entry is closed only when every `$ref` to it
is a sole use, found by walking until no more definitions open up. Under
`not` and `if` nothing is rewritten: there, narrowing a schema widens what
the whole accepts. Numbers are bounded by `minimum`/`maximum` at
+-(10**16 - 1), only on a side the schema leaves open and only when the
other side, an `enum` or a `const` does not already reach past that bound;
llguidance writes a bounded number without an exponent; the digits after the
point no schema keyword bounds (models/json_fraction_guard.py does, over the
grammar's mask).
A value the schema leaves free -- `{}`, an object with no `properties` (a
`json_object` answer, a dict field), an array with no `items` -- becomes a
`$ref` to one added definition of any JSON value with bounded numbers: what
it accepts is unchanged but for numbers past the bound, as llama.cpp's
grammar for such values writes them.

Not for: checking that a schema is one (server/protocol/json_schema_check.py).
No torch.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

# llama.cpp's integral part: [1-9][0-9]{0,15}.
NUMBER_BOUND = 10**16 - 1

# Keywords that say nothing about which values are valid: a parent holding only these and one
# composition leaves each of its branches the sole description of the value.
_ANNOTATIONS = frozenset({"type", "title", "description", "default", "examples", "$schema", "$id", "$anchor",
                          "$comment", "$defs", "definitions", "deprecated", "readOnly", "writeOnly",
                          "discriminator", "nullable"})
# Keywords whose schemas describe the same value as their parent (not one of its parts).
_SAME_VALUE = ("anyOf", "oneOf", "allOf", "$ref", "$dynamicRef", "$recursiveRef", "if", "then", "else", "not",
               "dependentSchemas", "unevaluatedProperties", "unevaluatedItems")
# Beside `properties`, these may let keys in that the object's own `properties` do not name.
_OPENERS = ("additionalProperties", "patternProperties", *_SAME_VALUE)
_DEF_MAPS = ("$defs", "definitions")
# Any JSON value, its numbers bounded: what a free value becomes (added to the root's $defs when used).
ANY_VALUE_DEF = "anchorage_any_json_value"
_ANY_REF = {"$ref": f"#/$defs/{ANY_VALUE_DEF}"}
_ANY_VALUE = {"anyOf": [{"type": "object", "additionalProperties": _ANY_REF}, {"type": "array", "items": _ANY_REF},
                        {"type": "string"}, {"type": "number", "minimum": -NUMBER_BOUND, "maximum": NUMBER_BOUND},
                        {"type": "boolean"}, {"type": "null"}]}


def tightened(schema: Any) -> Any:
    """`schema` with its objects closed and its numbers bounded as llama.cpp's grammars are; the
    input is not modified. A schema too deep to walk is returned as it is."""
    if not isinstance(schema, dict):
        return schema
    # "#/$defs/..." names the root's definitions only where no nested $id moves the base: with one, a
    # reference may mean another schema's, so nothing is closed, and no definition is added. Nor is one
    # added to a root $defs that is no map.
    nested_id = _nested_id(schema)
    free = isinstance(schema.get("$defs", {}), dict) and not nested_id
    try:
        opened: set[str] = set()  # "#" (the root) and "$defs/Name" entries some $ref uses beside other keys
        while True:
            walk = _Walk(opened, free_values=free)
            out = walk.schema(schema, sole="#" not in opened, root=True)
            if walk.unknown_refs or nested_id:  # a $ref this walk cannot follow: it may point anywhere
                walk = _Walk(opened, closing=False, free_values=free)
                out = walk.schema(schema, sole=False, root=True)
                break
            if walk.opened <= opened:
                break
            opened |= walk.opened
        return _with_any_value(out) if walk.free_values else out
    except RecursionError:
        return schema


class _Walk:
    """One rewriting pass; it notes the definitions a `$ref` used beside other keys must leave open."""

    def __init__(self, opened: set[str], closing: bool = True, free_values: bool = True) -> None:
        self.known_open = opened
        self.opened: set[str] = set()
        self.unknown_refs = False
        self.closing = closing
        self.bound_free_values = free_values  # may free values become the bounded any-value definition?
        self.free_values = False  # one did

    def schema(self, schema: Any, sole: bool, root: bool = False) -> Any:
        if not isinstance(schema, dict):
            return schema  # true / false, or something the engine will refuse by itself
        out = dict(schema)
        keys = set(out)
        same_value = [key for key in _SAME_VALUE if key in out]
        # A part of the value (a property, an item) is described by this schema alone only when nothing
        # beside it can describe that part too.
        parts_sole = sole and not same_value
        keys_alone = parts_sole and "patternProperties" not in out  # a pattern may describe any key too
        if isinstance(out.get("properties"), dict):
            out["properties"] = {k: self.schema(v, keys_alone) for k, v in out["properties"].items()}
        if isinstance(out.get("additionalProperties"), dict):
            out["additionalProperties"] = self.schema(out["additionalProperties"], keys_alone)
        if isinstance(out.get("patternProperties"), dict):
            out["patternProperties"] = {k: self.schema(v, False) for k, v in out["patternProperties"].items()}
        items_alone = parts_sole and "contains" not in out
        if isinstance(out.get("items"), dict):
            out["items"] = self.schema(out["items"], items_alone and "prefixItems" not in out)
        for key in ("items", "prefixItems"):
            if isinstance(out.get(key), list):
                out[key] = [self.schema(part, items_alone) for part in out[key]]
        for key in ("additionalItems", "contains", "propertyNames", "unevaluatedProperties", "unevaluatedItems",
                    "then", "else"):
            if isinstance(out.get(key), dict):
                out[key] = self.schema(out[key], False)
        if isinstance(out.get("dependentSchemas"), dict):
            out["dependentSchemas"] = {k: self.schema(v, False) for k, v in out["dependentSchemas"].items()}
        # The branches of a composition: each is the value's sole description when the parent says
        # nothing else about it (an anyOf of pydantic's Optional[Model], a oneOf of a tagged union).
        for key in ("anyOf", "oneOf", "allOf"):
            if isinstance(out.get(key), list):
                alone = sole and keys - _ANNOTATIONS == {key} and (key != "allOf" or len(out[key]) == 1)
                out[key] = [self.schema(part, alone) for part in out[key]]
        if "$ref" in out:
            self._use(out["$ref"], sole and keys - _ANNOTATIONS == {"$ref"})
        for key in ("$dynamicRef", "$recursiveRef"):
            if key in out:
                self.unknown_refs = True
        for key in _DEF_MAPS:
            if isinstance(out.get(key), dict):
                # Only the root's definitions are what "#/$defs/Name" names.
                out[key] = {name: self.schema(part, root and f"{key}/{name}" not in self.known_open)
                            for name, part in out[key].items()}
        # "not" and "if" are copied as sent: narrowing their schema widens what the whole accepts. So
        # are the definitions they use.
        for key in ("not", "if"):
            if key in out:
                self._uses_within(out[key])
        if (self.closing and sole and isinstance(out.get("properties"), dict)
                and not any(key in out for key in _OPENERS)):
            out["additionalProperties"] = False
        if _is_numeric(out.get("type")) and "enum" not in out and "const" not in out:
            _bound(out)
        return self._bounded_if_free(out)

    def _bounded_if_free(self, out: dict) -> dict:
        """A schema that says nothing of its value but (maybe) its type, with its numbers bounded."""
        if not self.bound_free_values or not set(out) <= _ANNOTATIONS:
            return out
        kind = out.get("type")
        if kind is None and not set(out) & {"$defs", "definitions"}:
            self.free_values = True
            return {**out, **_ANY_REF}
        if kind == "object":
            self.free_values = True
            return {**out, "additionalProperties": _ANY_REF}
        if kind == "array":
            self.free_values = True
            return {**out, "items": _ANY_REF}
        return out

    def _uses_within(self, schema: Any) -> None:
        for item in _dicts_in(schema):
            for key in ("$ref", "$dynamicRef", "$recursiveRef"):
                if key in item:
                    self._use(item[key] if key == "$ref" else None, False)

    def _use(self, ref: Any, sole: bool) -> None:
        target = _local_target(ref)
        if target is None:
            self.unknown_refs = True
        elif not sole:
            self.opened.add(target)


def _nested_id(schema: dict) -> bool:
    """Does a subschema below the root set `$id` (a new base for the references inside it)?"""
    return any("$id" in item for item in _dicts_in([v for k, v in schema.items() if k != "$id"]))


def _dicts_in(value: Any):
    """Every dict in a JSON value, walked without recursion (no depth breaks it)."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            yield item
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)


def _with_any_value(schema: dict) -> dict:
    return {**schema, "$defs": {**schema.get("$defs", {}), ANY_VALUE_DEF: _ANY_VALUE}}


def _local_target(ref: Any) -> str | None:
    """"#" or "$defs/Name" (or "definitions/Name") for a $ref into this schema's root or its
    definitions; None for any other reference."""
    if not isinstance(ref, str):
        return None
    if ref == "#":
        return "#"
    for key in _DEF_MAPS:
        prefix = f"#/{key}/"
        if ref.startswith(prefix) and "/" not in ref[len(prefix):]:
            name = unquote(ref[len(prefix):]).replace("~1", "/").replace("~0", "~")
            return f"{key}/{name}"
    return None


def _bound(out: dict) -> None:
    """Bounds an open side at NUMBER_BOUND unless the other side already lies past it (the bound
    would then exclude every value the schema allows)."""
    low = out.get("minimum", out.get("exclusiveMinimum"))
    high = out.get("maximum", out.get("exclusiveMaximum"))
    if low is None and (not _number(high) or high >= -NUMBER_BOUND):
        out["minimum"] = -NUMBER_BOUND
    if high is None and (not _number(low) or low <= NUMBER_BOUND):
        out["maximum"] = NUMBER_BOUND


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_numeric(kind: Any) -> bool:
    """A `type` that takes numbers (alone or in a list: the bounds constrain only the numbers)."""
    if isinstance(kind, list):
        return any(part in ("integer", "number") for part in kind)
    return kind in ("integer", "number")
