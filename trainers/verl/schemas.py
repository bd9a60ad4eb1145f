"""MCP tool schemas for verl: every property, at every depth, gets a JSON ``type``.

The chat template gets the normalised schemas as plain dicts, so nested ``items`` and ``properties`` reach
it unchanged. verl's own tool-schema model (``OpenAIFunctionToolSchema``, which parsers such as
``qwen3_coder`` read for argument types) keeps only ``type``/``description``/``enum`` per property and
rejects a property without ``type`` (an ``anyOf`` of types, a ``$ref``): after normalisation every
property validates, its type being the union of its alternatives' types.
"""

from __future__ import annotations

from typing import Any

from verl.tools.schemas import OpenAIFunctionToolSchema

_ENUM_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string", type(None): "null"}


def json_type(schema: dict[str, Any]) -> str | list[str]:
    """The JSON type of a schema: its ``type``, else the union over ``anyOf``/``oneOf``, else what its
    ``enum``, ``properties`` or ``items`` imply, else ``string``."""
    if "type" in schema:
        return schema["type"]
    alternatives = schema.get("anyOf") or schema.get("oneOf") or schema.get("allOf")
    if alternatives:
        types: list[str] = []
        for alternative in alternatives:
            found = json_type(alternative) if isinstance(alternative, dict) else "string"
            types += [t for t in ([found] if isinstance(found, str) else found) if t not in types]
        return types[0] if len(types) == 1 else types
    if schema.get("enum"):
        types = list(dict.fromkeys(_ENUM_TYPES.get(type(v), "string") for v in schema["enum"]))
        return types[0] if len(types) == 1 else types
    if "properties" in schema or "$ref" in schema:
        return "object"
    if "items" in schema:
        return "array"
    return "string"


def normalise_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with a ``type`` on itself and on every nested property, item and alternative."""
    out = dict(schema)
    out["type"] = json_type(schema)
    if isinstance(schema.get("properties"), dict):
        out["properties"] = {k: normalise_schema(v) for k, v in schema["properties"].items()}
    if isinstance(schema.get("items"), dict):
        out["items"] = normalise_schema(schema["items"])
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(schema.get(key), list):
            out[key] = [normalise_schema(v) if isinstance(v, dict) else v for v in schema[key]]
    return out


def normalise_tool(spec: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI function tool with its parameters normalised (an object schema, properties typed)."""
    function = dict(spec["function"])
    parameters = normalise_schema(function.get("parameters") or {"type": "object"})
    parameters.setdefault("properties", {})
    function["parameters"], function["description"] = parameters, function.get("description") or ""
    return {**spec, "type": "function", "function": function}


def verl_tool(spec: dict[str, Any]) -> OpenAIFunctionToolSchema:
    """verl's model of a normalised tool (what its tool parsers take)."""
    return OpenAIFunctionToolSchema.model_validate(normalise_tool(spec))
