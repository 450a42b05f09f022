"""A client's schema is closed and bounded as llama.cpp's grammars are before it is compiled (models.json_schema_tightening)."""

from __future__ import annotations

import copy

import jsonschema

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



def test_a_free_value_stays_any_value_but_for_numbers_past_the_bound():
    # json_object answers, dict fields, untyped values: a confused model rambled -11111... there until max_tokens.
    samples = [{"a": [1, 2.5, {"b": None}], "c": "x", "d": {"e": True}}, {}, {"n": -(10**15)}, {"x": [None, "s"]}]
    dict_fields = {"type": "object", "properties": {"d": {"type": "object"}, "x": {}}, "additionalProperties": True}
    for free in ({"type": "object"}, {}, dict_fields):
        out = jsonschema.Draft202012Validator(tightened(free))
        assert all(out.is_valid(value) for value in samples if jsonschema.Draft202012Validator(free).is_valid(value))
        assert not out.is_valid({"d": {"n": 10**17}, "x": 10**17}) and not out.is_valid(10**17)
    assert tightened({"type": "string"}) == {"type": "string"}


def test_an_allof_of_several_parts_leaves_every_object_open_so_the_parts_can_still_combine():
    schema = {"allOf": [{"$ref": "#/$defs/Base"}, {"properties": {"extra": {"type": "string"}}}],
              "$defs": {"Base": {"type": "object", "properties": {"id": {"type": "string"}}}}}
    out = tightened(schema)
    assert "additionalProperties" not in out["allOf"][1]
    assert "additionalProperties" not in out["$defs"]["Base"]


def test_an_object_whose_keys_also_come_from_a_composition_beside_it_stays_open_branches_too():
    schema = {"type": "object", "properties": {"kind": {"type": "string"}}, "required": ["kind"],
              "anyOf": [{"properties": {"a": {"type": "string"}}, "required": ["a"]},
                        {"properties": {"b": {"type": "string"}}, "required": ["b"]}]}
    out = tightened(schema)
    assert "additionalProperties" not in out
    assert all("additionalProperties" not in branch for branch in out["anyOf"])  # closed, "kind" would be barred
    assert jsonschema.Draft202012Validator(out).is_valid({"kind": "x", "a": "y"})


def test_a_definition_used_beside_other_keys_stays_open_wherever_else_it_is_used():
    schema = {"type": "object", "$defs": {"Base": {"type": "object", "properties": {"id": {"type": "string"}}}},
              "$ref": "#/$defs/Base", "properties": {"extra": {"type": "string"}}, "required": ["extra"],
              "additionalProperties": True}
    out = tightened({"type": "object", "properties": {"plain": {"$ref": "#/$defs/Base"}, "mixed": schema},
                     "$defs": schema["$defs"]})
    assert "additionalProperties" not in out["$defs"]["Base"]
    assert jsonschema.Draft202012Validator(out).is_valid({"mixed": {"extra": "y", "id": "1"}})


def test_a_model_a_union_or_an_optional_refers_to_alone_is_closed():
    pet = {"type": "object", "properties": {"kind": {"type": "string"}}, "required": ["kind"]}
    schema = {"type": "object", "$defs": {"Pet": pet, "Car": {"type": "object", "properties": {"make": {}}}},
              "properties": {"pet": {"anyOf": [{"$ref": "#/$defs/Pet"}, {"type": "null"}], "default": None},
                             "thing": {"oneOf": [{"$ref": "#/$defs/Pet"}, {"$ref": "#/$defs/Car"}]}}}
    out = tightened(schema)
    assert out["$defs"]["Pet"]["additionalProperties"] is False and out["$defs"]["Car"]["additionalProperties"] is False


def test_what_not_and_if_say_is_left_as_sent_since_narrowing_it_widens_the_whole():
    schema = {"type": "object", "properties": {"n": {"type": "integer"}, "o": {"type": "object"}},
              "not": {"properties": {"n": {"type": "integer"}, "o": {"$ref": "#/$defs/O"}}},
              "$defs": {"O": {"type": "object", "properties": {"x": {"type": "string"}}}}}
    out = tightened(schema)
    assert out["not"] == schema["not"] and "additionalProperties" not in out["$defs"]["O"]


def test_numbers_are_bounded_only_on_the_sides_the_schema_leaves_open():
    assert tightened({"type": "integer"}) == {"type": "integer", "minimum": -NUMBER_BOUND, "maximum": NUMBER_BOUND}
    assert tightened({"type": "number", "minimum": 0}) == {"type": "number", "minimum": 0, "maximum": NUMBER_BOUND}
    assert tightened({"type": "integer", "exclusiveMaximum": 5})["minimum"] == -NUMBER_BOUND
    assert "maximum" not in tightened({"type": "integer", "exclusiveMaximum": 5})
    assert tightened({"type": ["integer", "null"]})["maximum"] == NUMBER_BOUND
    assert tightened({"type": "string"}) == {"type": "string"}
    # A side already past the bound, an enum or a const: the bound would leave no number.
    assert "maximum" not in tightened({"type": "integer", "minimum": 10**18})
    assert "minimum" not in tightened({"type": "integer", "exclusiveMaximum": -10**18})
    assert tightened({"type": "integer", "enum": [12345678901234567890]}) == {"type": "integer",
                                                                             "enum": [12345678901234567890]}


def test_a_schema_too_deep_to_walk_is_compiled_as_sent():
    deep: dict = {"type": "integer"}
    for _ in range(5000):
        deep = {"type": "array", "items": deep}
    assert tightened(deep) is deep


def test_a_schema_with_a_nested_base_or_odd_definitions_still_compiles_as_it_would_untightened():
    # "#/$defs/..." below a nested $id points into that subschema, not the root: nothing is added or closed.
    based = {"type": "object", "properties": {"a": {"$id": "urn:x:a", "type": "object", "properties": {"k": {}}}}}
    out = tightened(based)
    assert "$defs" not in out and "additionalProperties" not in out["properties"]["a"]
    for odd in ({"type": "object", "$defs": 5}, {"type": "object", "$defs": []}):  # no crash, nothing added
        assert tightened(odd) == odd
