"""Released tool schemas made valid, safe JSON Schema; every change is recorded for the manifest.

* **Type names.** The release writes Python-ish names (``float``, ``int``, ``str``, ``dict``,
  ``list``, ``bool``, ``any``, ``None``...) and capitalised ones (``String``). Each is mapped to
  its JSON Schema type (``any`` removes the ``type`` keyword: any value); an unknown name is left
  for ``check_schema`` to reject, naming it.
* **Patterns.** A ``pattern`` (or ``patternProperties`` key) that does not compile, or that nests
  unbounded quantifiers (``(a+)+``, ``(\\w*)*``: catastrophic backtracking), is dropped. Those
  kept are evaluated with a time limit (``safe_validator``), so a crafted argument cannot block the
  server. A pattern that rejects an argument of the release's own verified tool chain is dropped
  too: the source's runtime did not enforce it (``drop_contradicted_patterns``).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator, Mapping
from typing import Any

import regex
from jsonschema import Draft202012Validator, ValidationError
from jsonschema.protocols import Validator
from jsonschema.validators import extend, validator_for

PATTERN_TIMEOUT_S = 0.05
MAX_PATTERN_LENGTH = 1000
TYPE_NAMES: dict[str, str | None] = {
    "float": "number",
    "double": "number",
    "decimal": "number",
    "number": "number",
    "int": "integer",
    "integer": "integer",
    "long": "integer",
    "str": "string",
    "string": "string",
    "text": "string",
    "dict": "object",
    "object": "object",
    "map": "object",
    "list": "array",
    "array": "array",
    "tuple": "array",
    "set": "array",
    "bool": "boolean",
    "boolean": "boolean",
    "none": "null",
    "nonetype": "null",
    "null": "null",
    "any": None,
}
_SUBSCHEMA = ("items", "additionalProperties", "not", "contains", "if", "then", "else", "propertyNames")
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems", "items")
_SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
# A group that holds a quantifier and is itself quantified without bound: (x+)+, (x*)*, (x+){2,}.
_NESTED_QUANTIFIER = re.compile(r"\((?:[^()\\]|\\.)*[+*}](?:[^()\\]|\\.)*\)(?:[+*]|\{\d*,\})")


def _subschemas(schema: dict[str, Any], path: str) -> Iterator[tuple[dict[str, Any], str]]:
    for key in _SUBSCHEMA:
        if isinstance(schema.get(key), dict):
            yield schema[key], f"{path}.{key}"
    for key in _SUBSCHEMA_LISTS:
        if isinstance(schema.get(key), list):
            for i, sub in enumerate(schema[key]):
                if isinstance(sub, dict):
                    yield sub, f"{path}.{key}[{i}]"
    for key in _SUBSCHEMA_MAPS:
        if isinstance(schema.get(key), dict):
            for name, sub in schema[key].items():
                if isinstance(sub, dict):
                    yield sub, f"{path}.{key}.{name}"


def _type_name(name: Any) -> Any:
    return TYPE_NAMES.get(name.strip().lower(), name) if isinstance(name, str) else name


def _normalise_type(schema: dict[str, Any], path: str, changes: list[str]) -> None:
    raw = schema.get("type")
    if isinstance(raw, list):
        mapped = [_type_name(t) for t in raw]
        new: Any = None if None in mapped else list(dict.fromkeys(mapped))
    else:
        new = _type_name(raw)
    if new == raw:
        return
    if new is None:
        del schema["type"]
        changes.append(f"{path}.type: {raw!r} -> (any type)")
    else:
        schema["type"] = new
        changes.append(f"{path}.type: {raw!r} -> {new!r}")


def pattern_problem(pattern: Any) -> str | None:
    """Why a regular expression from an imported schema is not used, or ``None`` when it is safe."""
    if not isinstance(pattern, str):
        return "not a string"
    if len(pattern) > MAX_PATTERN_LENGTH:
        return f"longer than {MAX_PATTERN_LENGTH} characters"
    try:
        regex.compile(pattern)
    except regex.error as exc:
        return f"does not compile ({exc})"
    if _NESTED_QUANTIFIER.search(pattern):
        return "nested unbounded quantifiers (catastrophic backtracking)"
    return None


def _check_patterns(schema: dict[str, Any], path: str, changes: list[str]) -> None:
    if "pattern" in schema and (problem := pattern_problem(schema["pattern"])) is not None:
        changes.append(f"{path}.pattern dropped: {problem}")
        del schema["pattern"]
    keyed = schema.get("patternProperties")
    if isinstance(keyed, dict):
        for key in [k for k in keyed if pattern_problem(k) is not None]:
            changes.append(f"{path}.patternProperties[{key!r}] dropped: {pattern_problem(key)}")
            del keyed[key]


def normalise_schema(schema: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """A normalised copy of a tool's ``parameters`` schema and the list of changes made."""
    result = copy.deepcopy(dict(schema))
    changes: list[str] = []
    stack = [(result, "$")]
    while stack:
        node, path = stack.pop()
        _normalise_type(node, path, changes)
        _check_patterns(node, path, changes)
        stack.extend(_subschemas(node, path))
    return result, sorted(changes)


def _safe_pattern(
    validator: Validator, pattern: str, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "string"):
        return
    try:
        found = regex.search(pattern, instance, timeout=PATTERN_TIMEOUT_S)
    except TimeoutError:
        yield ValidationError(f"{instance[:40]!r}... took too long to check against {pattern!r}")
        return
    if found is None:
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def safe_validator(schema: Mapping[str, Any]) -> Validator:
    """A validator for ``schema`` whose ``pattern`` checks are time-limited (raises ``SchemaError``)."""
    cls = validator_for(schema, default=Draft202012Validator)
    cls.check_schema(schema)
    return extend(cls, {"pattern": _safe_pattern})(schema)


def _remove(schema: dict[str, Any], schema_path: list[Any]) -> bool:
    node: Any = schema
    for part in schema_path[:-1]:
        node = node[part] if isinstance(node, dict | list) else None
        if node is None:
            return False
    if isinstance(node, dict) and schema_path[-1] in node:
        del node[schema_path[-1]]
        return True
    return False


def drop_contradicted_patterns(
    schema: dict[str, Any], calls: list[tuple[str, Mapping[str, Any]]]
) -> list[str]:
    """Drop (in place) each ``pattern`` that rejects an argument of a verified chain step; ``calls``
    are ``(where, arguments)``. Returns the changes, for the manifest."""
    changes: list[str] = []
    for where, arguments in calls:
        for _ in range(32):  # one pattern per round; a schema has few
            errors = [
                e for e in safe_validator(schema).iter_errors(dict(arguments)) if e.validator == "pattern"
            ]
            if not errors or not _remove(schema, list(errors[0].schema_path)):
                break
            location = "$." + ".".join(str(p) for p in list(errors[0].schema_path)[:-1])
            changes.append(f"{location}.pattern dropped: rejects {errors[0].instance!r} of {where}")
    return changes
