"""A client's schema is closed and bounded as llama.cpp's grammars are before it is compiled (models.json_schema_tightening)."""

from __future__ import annotations

import copy

from models.json_schema_tightening import NUMBER_BOUND, tightened

PERSON = {"type": "object", "properties": {
    "name": {"type": "string"},
    "address": {"type": "object", "properties": {"city": {"type": "string"}}},
    "tags": {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string"}}}},
}, "$defs": {"Pet": {"type": "object", "properties": {"kind": {"type": "string"}}}}}


def test_every_object_that_declares_properties_takes_no_other_keys_nested_or_defined():
    out = tightened(PERSON)
    assert out["additionalProperties"] is False
    assert out["properties"]["address"]["additionalProperties"] is False
    assert out["properties"]["tags"]["items"]["additionalProperties"] is False
    assert out["$defs"]["Pet"]["additionalProperties"] is False


def test_the_clients_schema_is_not_modified():
    before = copy.deepcopy(PERSON)
    tightened(PERSON)
    assert PERSON == before


def test_an_object_that_says_what_else_it_takes_keeps_it():
    open_map = {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "boolean"}}
    assert tightened(open_map)["additionalProperties"] == {"type": "boolean"}
    patterned = {"type": "object", "properties": {"a": {}}, "patternProperties": {"^x_": {}}}
    assert "additionalProperties" not in tightened(patterned)
    free = {"type": "object"}
    assert tightened(free) == free  # json_object and dict fields stay any object


def test_an_allof_of_several_parts_leaves_every_object_open_so_the_parts_can_still_combine():
    schema = {"allOf": [{"$ref": "#/$defs/Base"}, {"properties": {"extra": {"type": "string"}}}],
              "$defs": {"Base": {"type": "object", "properties": {"id": {"type": "string"}}}}}
    out = tightened(schema)
    assert "additionalProperties" not in out["allOf"][1]
    assert "additionalProperties" not in out["$defs"]["Base"]


def test_an_object_whose_keys_also_come_from_a_composition_beside_it_stays_open():
    schema = {"type": "object", "properties": {"kind": {"type": "string"}},
              "anyOf": [{"properties": {"a": {"type": "string"}}}, {"properties": {"b": {"type": "string"}}}]}
    out = tightened(schema)
    assert "additionalProperties" not in out
    assert out["anyOf"][0]["additionalProperties"] is False  # each branch alone is still closed


def test_numbers_are_bounded_only_on_the_sides_the_schema_leaves_open():
    assert tightened({"type": "integer"}) == {"type": "integer", "minimum": -NUMBER_BOUND, "maximum": NUMBER_BOUND}
    assert tightened({"type": "number", "minimum": 0}) == {"type": "number", "minimum": 0, "maximum": NUMBER_BOUND}
    assert tightened({"type": "integer", "exclusiveMaximum": 5})["minimum"] == -NUMBER_BOUND
    assert "maximum" not in tightened({"type": "integer", "exclusiveMaximum": 5})
    assert tightened({"type": ["integer", "null"]})["maximum"] == NUMBER_BOUND
    assert tightened({"type": "string"}) == {"type": "string"}


def test_a_schema_too_deep_to_walk_is_compiled_as_sent():
    deep: dict = {"type": "integer"}
    for _ in range(5000):
        deep = {"type": "array", "items": deep}
    assert tightened(deep) is deep
