"""A schema part no finite JSON value can satisfy is found before a grammar meets it mid-answer."""

from __future__ import annotations

import pytest

from server.protocol.json_schema_ending import never_ending_part

SELF_REF = {"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}, "required": ["a"],
            "$defs": {"A": {"$ref": "#/$defs/A"}}}


def test_a_required_property_whose_ref_only_refers_to_itself_is_named():
    why = never_ending_part(SELF_REF)
    assert why is not None and "#/$defs/A" in why and "the schema" in why


def test_an_optional_property_that_cannot_end_is_named_too_since_the_grammar_would_still_offer_it():
    schema = {"type": "object", "properties": {"ok": {"type": "string"}, "loop": {"$ref": "#/properties/loop"}}}
    assert "#/properties/loop" in never_ending_part(schema)


def test_an_object_requiring_a_property_of_its_own_type_cannot_end():
    node = {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}}, "required": ["next"]}
    assert "#/$defs/node" in never_ending_part({"$ref": "#/$defs/node", "$defs": {"node": node}})


@pytest.mark.parametrize("schema", [
    # A linked list: the recursion has an end (next is optional, or may be null).
    {"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"}, "next": {"$ref": "#/$defs/node"}},
                        "required": ["v"]}}, "$ref": "#/$defs/node"},
    {"$defs": {"node": {"type": "object", "properties": {"next": {"anyOf": [{"$ref": "#/$defs/node"},
                                                                            {"type": "null"}]}},
                        "required": ["next"]}}, "$ref": "#/$defs/node"},
    # A tree: children may be an empty array.
    {"type": "object", "properties": {"children": {"type": "array", "items": {"$ref": "#"}}}, "required": ["children"]},
    # Forbidden properties are spelt false, and the empty schema allows anything.
    {"type": "object", "properties": {"x": False, "y": {}}, "additionalProperties": False},
    {"type": "object", "properties": {"a": {"$ref": "https://example.com/elsewhere"}}, "required": ["a"]},
    {},
], ids=["an optional next", "a nullable next", "a tree", "false and empty parts", "a remote ref", "empty"])
def test_schemas_whose_recursion_can_end_pass(schema):
    assert never_ending_part(schema) is None


def test_an_array_that_must_hold_an_item_of_its_own_type_cannot_end_but_one_that_may_be_empty_can():
    must = {"type": "array", "minItems": 1, "items": {"$ref": "#"}}
    assert never_ending_part(must) is not None
    assert never_ending_part({**must, "minItems": 0}) is None


def test_a_required_property_that_allows_no_value_says_so():
    why = never_ending_part({"type": "object", "properties": {"a": False}, "required": ["a"]})
    assert why is not None and "allows no value" in why


def test_a_self_reference_nested_deeper_than_pythons_stack_is_walked():
    schema: dict = {"$ref": "#/$defs/A"}
    for _ in range(5000):
        schema = {"type": "object", "properties": {"x": schema}}
    schema["$defs"] = {"A": {"$ref": "#/$defs/A"}}
    assert "#/$defs/A" in never_ending_part(schema)


@pytest.mark.parametrize("schema", [
    {"type": "array", "additionalItems": {"type": "object", "required": [{}]}},
    {"type": "object", "properties": {"a": {"$ref": "#/anyOf/²"}}, "anyOf": [{"type": "object"}]},
], ids=["a required entry that is no name", "a pointer step that is a non-ASCII digit"])
def test_parts_that_are_no_schema_are_left_to_the_meta_schema_not_a_crash(schema):
    assert never_ending_part(schema) is None


@pytest.mark.parametrize("schema", [
    {"$ref": ""},
    {"$id": "urn:x", "$ref": "urn:x"},
    {"$id": "https://example.com/s.json", "$ref": "s.json"},
    {"$defs": {"A": {"$anchor": "me", "$ref": "#me"}}, "$ref": "#/$defs/A"},
    {"$defs": {"A": {"$id": "#me", "$ref": "#me"}}, "$ref": "#/$defs/A"},
    {"type": "object", "properties": {"a": {"$ref": ""}}, "required": ["a"]},
    {"$id": "urn:root", "$defs": {"B": {"$id": "urn:b", "$ref": "urn:b#"}}, "$ref": "urn:b"},
], ids=["the empty ref", "an $id by name", "an $id by a relative URL", "an $anchor", "a draft 7 anchor $id",
        "the empty ref under a required property", "an $id with an empty fragment"])
def test_a_ref_back_to_itself_by_empty_ref_id_or_anchor_is_named_as_one_by_pointer_is(schema):
    assert never_ending_part(schema) is not None


def test_refs_by_id_and_anchor_that_reach_an_ending_part_pass():
    leaf = {"type": "string"}
    assert never_ending_part({"$id": "urn:x", "$defs": {"S": {"$anchor": "s", **leaf}}, "$ref": "urn:x#s"}) is None
    assert never_ending_part({"$defs": {"S": {"$id": "urn:s", **leaf}}, "$ref": "urn:s"}) is None


def test_an_id_inside_example_data_names_no_resource():
    schema = {"examples": [{"$id": "urn:e", "$ref": "urn:e"}], "type": "object",
              "properties": {"a": {"$ref": "urn:e"}}, "required": ["a"]}
    assert never_ending_part(schema) is None  # urn:e is no schema of this document: the engine's to report


def test_a_property_named_like_a_data_keyword_is_still_a_schema_with_its_own_id_and_anchors():
    # `default` here is a property: its $id gives its refs their base, so "#/$defs/A" is its own string.
    inner = {"$id": "urn:inner", "$defs": {"A": {"type": "string"}}, "$ref": "#/$defs/A"}
    schema = {"type": "object", "properties": {"default": inner}, "$defs": {"A": {"$ref": "#/$defs/A"}}}
    assert never_ending_part(schema) is None
    looping = {"type": "object", "properties": {"enum": {"$anchor": "me", "$ref": "#me"}}}
    assert never_ending_part(looping) is not None
