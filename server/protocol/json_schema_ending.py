"""Can every part of a client's JSON schema hold a value that ends? Found before a grammar is built from it.

What it is for: a schema such as `{"$defs": {"A": {"$ref": "#/$defs/A"}}, ...}`, or an object that
requires a property whose schema is the object itself, is valid against its meta-schema and compiles
into a grammar, but no finite JSON value satisfies that part. The grammar engine finds out only when
a generation reaches it: the allowed set goes empty mid-answer, the constraint stands down, and the
answer -- `{"a": ` and then free text, with `finish_reason` "stop" -- is no JSON. So such a schema is
a 400 naming the part, as OpenAI and vLLM refuse schemas they cannot enforce.

What it is not for: whether a schema is a schema (json_schema_check.py), or values nobody can write
for other reasons (`not`, contradictory bounds): those are the grammar engine's to find or not.

How: the classic "productive symbols" fixpoint of a grammar. A subschema ends when each of its
requirements is met by a subschema that ends: every `allOf` member and `$ref` target, one `anyOf` /
`oneOf` branch, each required property of an object, each item an array must hold (`minItems`).
Starting from `true` (and from parts that require nothing), a worklist marks what ends; a reachable
object schema left unmarked cannot. Walked with explicit stacks: schemas nest deeper than Python's.
A `$ref` is followed wherever it points inside the document -- a JSON pointer, the empty reference
(the document itself), an `$id` or an `$anchor` -- since the grammar engine follows all of them; only a
reference out of the document is left alone (the engine fetches nothing and says so).
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any
from urllib.parse import unquote, urljoin

# Keywords whose subschemas describe parts of a valid value (so a part that cannot end there is a dead end
# the grammar meets). `not`, `if`/`then`/`else`, `contains` and the like are left alone.
_ONE = ("additionalProperties", "items", "additionalItems")
_MANY = ("anyOf", "oneOf", "allOf", "prefixItems")
_MAPS = ("properties", "patternProperties")
# Keywords whose values are JSON data, not subschemas: an "$id" inside an example names no resource.
_DATA = frozenset({"enum", "const", "examples", "default"})
# Keywords whose value maps names to subschemas: a property may be named "default" or "$id" and is a schema.
_SCHEMA_MAPS = frozenset(_MAPS) | {"$defs", "definitions", "dependentSchemas"}
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")


def never_ending_part(schema: Any) -> str | None:
    """Why some part of `schema` reachable from its root can hold no finite JSON value -- one sentence
    naming the part as a JSON pointer (`#/$defs/A`) -- or None when every such part can."""
    if not isinstance(schema, dict):
        return None
    refs = _References(schema)
    nodes: dict[int, tuple[dict, str]] = {}  # id -> (subschema, its pointer), in the order first reached
    order: list[int] = []
    stack: list[tuple[Any, str]] = [(schema, "#")]
    while stack:
        node, where = stack.pop()
        if not isinstance(node, dict) or id(node) in nodes:
            continue
        nodes[id(node)] = (node, where)
        order.append(id(node))
        subs = [(sub, f"{where}/{key}") for key, sub in _subschemas(node)]
        target = refs.target(node)
        if target is not None:
            subs.append((target, node["$ref"]))
        stack.extend(reversed(subs))

    # Each node's requirements: groups of alternatives, one of which must end.
    groups: dict[int, list[list[Any]]] = {i: _requirements(nodes[i][0], refs) for i in order}
    unmet = {i: len(g) for i, g in groups.items()}
    met: dict[int, list[bool]] = {i: [False] * len(g) for i, g in groups.items()}
    waiting: dict[int, list[tuple[int, int]]] = defaultdict(list)  # child id -> (parent id, group index)
    ends: set[int] = set()
    queue: list[int] = []
    for i, node_groups in groups.items():
        for g, alternatives in enumerate(node_groups):
            if any(alt is True for alt in alternatives):
                met[i][g] = True
                unmet[i] -= 1
            else:
                for alt in alternatives:
                    if isinstance(alt, dict):
                        waiting[id(alt)].append((i, g))
        if unmet[i] == 0:
            ends.add(i)
            queue.append(i)
    while queue:
        child = queue.pop()
        for parent, g in waiting.get(child, ()):
            if not met[parent][g]:
                met[parent][g] = True
                unmet[parent] -= 1
                if unmet[parent] == 0 and parent not in ends:
                    ends.add(parent)
                    queue.append(parent)

    stuck = next((i for i in order if i not in ends), None)
    if stuck is None:
        return None
    return _explain(stuck, nodes, groups, met, ends)


def _explain(start: int, nodes, groups, met, ends) -> str:
    """Follow unmet requirements from `start` until they loop back or reach `false`, and say so."""
    seen: list[int] = []
    current = start
    while True:
        seen.append(current)
        g = met[current].index(False)
        alternatives = [alt for alt in groups[current][g] if isinstance(alt, dict) and id(alt) not in ends]
        first = "the schema" if nodes[start][1] == "#" else nodes[start][1]
        if not alternatives:  # only `false` (or nothing) can meet it
            return (f"no JSON value of {first} can end: it needs a value of {nodes[current][1]}, which requires "
                    "a part that allows no value")
        nxt = id(alternatives[0])
        if nxt in seen:
            loop = nodes[nxt][1]
            return (f"no JSON value of {first} can end: a value of {loop} must contain another value of {loop} "
                    "(a $ref that only refers back to itself, or a required property of its own type)")
        current = nxt


def _subschemas(node: dict) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key in _ONE:
        sub = node.get(key)
        if isinstance(sub, dict):
            out.append((key, sub))
        elif isinstance(sub, list) and key == "items":  # draft 7's tuple items
            out += [(f"items/{i}", s) for i, s in enumerate(sub) if isinstance(s, dict)]
    for key in _MANY:
        subs = node.get(key)
        if isinstance(subs, list):
            out += [(f"{key}/{i}", s) for i, s in enumerate(subs) if isinstance(s, dict)]
    for key in _MAPS:
        subs = node.get(key)
        if isinstance(subs, dict):
            out += [(f"{key}/{_escape(name)}", s) for name, s in subs.items() if isinstance(s, dict)]
    return out


def _requirements(node: dict, refs: _References) -> list[list[Any]]:
    """Groups of alternatives (subschemas or booleans), one of each group having to end for `node` to."""
    groups: list[list[Any]] = []
    target = refs.target(node)
    if target is not None:
        groups.append([target])
    members = node.get("allOf")
    for member in members if isinstance(members, list) else ():
        groups.append([member])
    for key in ("anyOf", "oneOf"):
        branches = node.get(key)
        if isinstance(branches, list) and branches:
            groups.append(list(branches))
    kind = node.get("type")
    kind = kind[0] if isinstance(kind, list) and len(kind) == 1 else kind
    if kind == "object":
        properties = node.get("properties") if isinstance(node.get("properties"), dict) else {}
        required = node.get("required")
        for name in required if isinstance(required, list) else ():
            if not isinstance(name, str):  # no property name: the meta-schema's to refuse, not ours to judge
                continue
            if name in properties:
                groups.append([properties[name]])
            elif not node.get("patternProperties") and "additionalProperties" in node:
                groups.append([node["additionalProperties"]])
    elif kind == "array":
        prefix = node.get("prefixItems")
        rest = node.get("items")
        if isinstance(rest, list):  # draft 7: a list of items, then additionalItems
            prefix, rest = rest, node.get("additionalItems", True)
        prefix = prefix if isinstance(prefix, list) else []
        least = node.get("minItems")
        least = least if isinstance(least, int) and not isinstance(least, bool) else 0
        for i in range(min(least, len(prefix) + 1)):
            schema = prefix[i] if i < len(prefix) else rest
            if isinstance(schema, (dict, bool)):
                groups.append([schema])
    # A group of no subschema or boolean (a non-schema in a list, say) cannot be judged: counted as met.
    return [[alt for alt in g if isinstance(alt, (dict, bool))] or [True] for g in groups]


class _References:
    """Where the `$ref`s of one schema document point. Each subschema sits under a base URI (its nearest
    enclosing `$id`, else the document's empty one); a reference is resolved against its subschema's base,
    then its fragment is a JSON pointer ("#/$defs/A"), empty (the resource itself) or an anchor name."""

    def __init__(self, root: dict):
        self._base: dict[int, str] = {}  # id(subschema) -> the base URI its references resolve against
        self._resources: dict[str, Any] = {}  # base URI -> the subschema whose `$id` it is
        self._anchors: dict[tuple[str, str], Any] = {}  # (base URI, anchor name) -> subschema
        self._resources[""] = root
        stack: list[tuple[Any, str]] = [(root, "")]
        while stack:
            node, base = stack.pop()
            if isinstance(node, list):
                stack.extend((item, base) for item in node)
                continue
            if not isinstance(node, dict) or id(node) in self._base:
                continue
            own = node.get("$id")
            if isinstance(own, str):
                uri, _, fragment = _join(base, own).partition("#")
                if uri:  # (a bare "#name" names no resource: it stays under its parent's base)
                    base = uri
                    self._resources.setdefault(uri, node)
                if fragment and not fragment.startswith("/"):  # draft 7 spelt an anchor "$id": "#name"
                    self._anchors.setdefault((base, fragment), node)
            anchor = node.get("$anchor")
            if isinstance(anchor, str):
                self._anchors.setdefault((base, anchor), node)
            self._base[id(node)] = base
            for key, value in node.items():
                if key in _SCHEMA_MAPS and isinstance(value, dict):
                    stack.extend((sub, base) for sub in value.values())
                elif key not in _DATA:
                    stack.append((value, base))

    def target(self, node: dict) -> Any:
        """The subschema (or boolean) `node`'s `$ref` points at inside the document, or None when it has
        none, points out of the document or at nothing (left to the grammar engine, which reports what it
        cannot resolve)."""
        ref = node.get("$ref")
        if not isinstance(ref, str):
            return None
        uri, _, fragment = _join(self._base.get(id(node), ""), ref).partition("#")
        resource = self._resources.get(uri)
        if resource is None:
            return None
        fragment = unquote(fragment)
        if not fragment:
            return resource
        if not fragment.startswith("/"):
            return self._anchors.get((uri, fragment))
        return _pointed(resource, fragment)


def _join(base: str, ref: str) -> str:
    """`ref` resolved against `base` (RFC 3986), also for bases such as "urn:x" that urljoin will not join."""
    if not ref or ref.startswith("#"):
        return base + ref
    if _SCHEME.match(ref) or not base:
        return ref
    return urljoin(base, ref)


def _pointed(node: Any, pointer: str) -> Any:
    """What the JSON pointer ("/$defs/A", "/properties/a~1b") names inside `node`, or None."""
    for part in pointer[1:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isascii() and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node if isinstance(node, (dict, bool)) else None


def _escape(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")
