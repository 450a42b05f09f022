"""Is a client's JSON schema a JSON schema at all? Checked against its meta-schema.

What it is for: a tool's `parameters` is a JSON schema the call grammar
compiles and the model reads. One that breaks the meta-schema (`"type": 5`,
`"required": "city"`, `"properties": []`) is the client's mistake, and OpenAI
answers it with a 400 (`invalid_function_parameters`, "Invalid schema for
function 'f': ..."), so this server does too rather than serving the tool
unconstrained. A schema that is valid but uses what the grammar engine cannot
compile is another matter (server/engine_params.py leaves those calls
unconstrained, logged).

Why jsonschema: it carries every draft's meta-schema and picks the one a
`$schema` names (when none does: draft 2020-12, or draft 7 if the schema is
one of that), which is the check itself; writing it again would only be
wrong in new ways.
"""

from __future__ import annotations

from typing import Any

from jsonschema import Draft7Validator, Draft202012Validator
from jsonschema.exceptions import SchemaError
from jsonschema.validators import validator_for


def schema_problem(schema: dict[str, Any]) -> str | None:
    """What makes `schema` no JSON schema (the deepest failing part first), or None when it is one."""
    dialect = schema.get("$schema")
    if dialect is not None and not isinstance(dialect, str):
        return f"$schema must be a string naming a JSON Schema dialect, got {dialect!r}"  # validator_for hashes it
    problem = _problem_under(validator_for(schema, default=Draft202012Validator), schema)
    if problem is not None and dialect is None and _problem_under(Draft7Validator, schema) is None:
        # No dialect named: draft 7 is what older generators write (pydantic v1's tuple `"items": [...]`,
        # which 2020-12 spells `prefixItems`), and OpenAI takes it. The grammar engine reads both.
        return None
    return problem


def _problem_under(validator, schema: dict[str, Any]) -> str | None:
    try:
        # No format checks: a `pattern` is an ECMA-262 regex (`\p{Lu}`), which the grammar engine reads and
        # Python's `re` (jsonschema's "regex" format check) would refuse.
        validator.check_schema(schema, format_checker=None)
    except SchemaError as exc:
        where = ".".join(str(p) for p in exc.path)
        return f"{exc.message} (at {where})" if where else exc.message
    except RecursionError:  # the JSON parser admits deeper nesting than the check can walk
        return "the schema nests too deeply to check"
    return None
