"""Tool schemas normalised for verl: nested types reach the chat template; verl's model accepts them."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from verl.tools.schemas import OpenAIFunctionToolSchema

from trainers.verl.schemas import json_type, normalise_tool, verl_tool

NESTED = {
    "type": "function",
    "function": {
        "name": "book_trip",
        "description": "Book legs.",
        "parameters": {
            "type": "object",
            "properties": {
                "legs": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "from": {"type": "string"},
                            "seat": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                        },
                        "required": ["from"],
                    },
                },
                "when": {
                    "anyOf": [{"type": "string"}, {"type": "integer"}],
                    "description": "a date or a day",
                },
                "cabin": {"enum": ["economy", "business"]},
                "note": {"$ref": "#/$defs/Note"},
            },
            "required": ["legs"],
        },
    },
}


def test_verls_model_rejects_the_raw_schema_and_accepts_the_normalised_one() -> None:
    with pytest.raises(ValidationError):
        OpenAIFunctionToolSchema.model_validate(NESTED)
    tool = verl_tool(NESTED)
    properties = tool.function.parameters.properties
    assert (
        properties["when"].type == ["string", "integer"]
        and properties["when"].description == "a date or a day"
    )
    assert (properties["legs"].type, properties["cabin"].type, properties["note"].type) == (
        "array",
        "string",
        "object",
    )


def test_nested_types_survive_for_the_chat_template() -> None:
    parameters = normalise_tool(NESTED)["function"]["parameters"]
    item = parameters["properties"]["legs"]["items"]
    assert item["properties"]["from"] == {"type": "string"} and item["required"] == ["from"]
    assert item["properties"]["seat"]["type"] == ["string", "null"]
    assert item["properties"]["seat"]["anyOf"] == [{"type": "string"}, {"type": "null"}]
    assert NESTED["function"]["parameters"]["properties"]["when"].get("type") is None  # input untouched


def test_json_type_fallbacks() -> None:
    assert json_type({"items": {"type": "integer"}}) == "array"
    assert json_type({"enum": [1, 2.5]}) == ["integer", "number"]
    assert json_type({}) == "string"
    assert normalise_tool({"type": "function", "function": {"name": "ping"}})["function"]["parameters"] == {
        "type": "object",
        "properties": {},
    }
