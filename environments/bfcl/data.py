"""BFCL v4 multi-turn data read from the unpacked package: test entries, ground truth, function docs."""

from __future__ import annotations

import ast
import copy
import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from environments.bfcl.package import data_dir

CATEGORIES = ("base", "long_context", "miss_func", "miss_param")
BACKEND_DOCS = {
    "GorillaFileSystem": "gorilla_file_system.json",
    "MathAPI": "math_api.json",
    "MessageAPI": "message_api.json",
    "TwitterAPI": "posting_api.json",
    "TicketAPI": "ticket_api.json",
    "TradingBot": "trading_bot.json",
    "TravelAPI": "travel_booking.json",
    "VehicleControlAPI": "vehicle_control.json",
}
"""The backend classes of the multi-turn categories and their function docs (BFCL's own mapping)."""
ADDED_FUNCTIONS_PROMPT = "I have updated some more functions you can choose from. What about now?"
"""BFCL's user message for a turn that only adds held-out functions (``miss_func``)."""
_TYPES = {"dict": "object", "float": "number", "tuple": "array", "any": None}


class UnknownCategory(ValueError):
    """Not one of the four multi-turn categories."""


def check_category(category: str) -> str:
    name = category.removeprefix("multi_turn_")
    if name not in CATEGORIES:
        raise UnknownCategory(f"unknown BFCL category {category!r}; expected one of {', '.join(CATEGORIES)}")
    return name


def category_of(entry_id: str) -> str:
    """``multi_turn_miss_func_12`` -> ``miss_func``."""
    return entry_id.rsplit("_", 1)[0].removeprefix("multi_turn_")


@dataclass(frozen=True)
class Entry:
    """One BFCL multi-turn test entry and its ground truth (calls per user turn, as BFCL call strings)."""

    id: str
    turns: list[list[dict[str, Any]]]
    initial_config: dict[str, Any]
    involved_classes: list[str]
    ground_truth: list[list[str]]
    missed_function: dict[str, list[str]] = field(default_factory=dict)
    excluded_function: list[str] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def category(self) -> str:
        return category_of(self.id)

    @property
    def long_context(self) -> bool:
        return self.category == "long_context"


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@functools.cache
def entries(category: str) -> tuple[Entry, ...]:
    """The 200 entries of one category, in BFCL's order."""
    name = f"BFCL_v4_multi_turn_{check_category(category)}.json"
    answers = {a["id"]: a["ground_truth"] for a in _jsonl(data_dir() / "possible_answer" / name)}
    return tuple(
        Entry(
            id=e["id"],
            turns=e["question"],
            initial_config=e.get("initial_config", {}),
            involved_classes=list(e["involved_classes"]),
            ground_truth=answers[e["id"]],
            missed_function=e.get("missed_function", {}),
            excluded_function=list(e.get("excluded_function", [])),
            raw=e,
        )
        for e in _jsonl(data_dir() / name)
    )


@functools.cache
def _index() -> dict[str, Entry]:
    return {e.id: e for category in CATEGORIES for e in entries(category)}


def entry(entry_id: str) -> Entry:
    try:
        return _index()[entry_id]
    except KeyError:
        raise KeyError(f"unknown BFCL multi-turn entry {entry_id!r}") from None


def checker_entry(found: Entry) -> dict[str, Any]:
    """The test entry as BFCL's checker reads it (a copy: the checker may not mutate ours)."""
    return copy.deepcopy(found.raw)


def to_json_schema(schema: Any) -> Any:
    """A BFCL parameter schema as JSON Schema: ``dict`` -> ``object``, ``float`` -> ``number``,
    ``tuple`` -> ``array``; everything else (descriptions, enums, defaults, required) kept as is."""
    if isinstance(schema, list):
        return [to_json_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: to_json_schema(v) for k, v in schema.items() if k not in ("type", "properties")}
    if isinstance(schema.get("type"), str):
        kind = _TYPES.get(schema["type"], schema["type"])
        if kind is not None:
            out["type"] = kind
    if isinstance(schema.get("properties"), dict):
        out["properties"] = {k: to_json_schema(v) for k, v in schema["properties"].items()}
    return out


@dataclass(frozen=True)
class FunctionDoc:
    """One backend method as BFCL documents it to models."""

    name: str
    backend: str
    description: str
    parameters: dict[str, Any]
    response: dict[str, Any] | None


@functools.cache
def function_docs() -> dict[str, FunctionDoc]:
    """Every function of the multi-turn backends by name (names are unique across the backends)."""
    docs: dict[str, FunctionDoc] = {}
    for backend, filename in BACKEND_DOCS.items():
        for doc in _jsonl(data_dir() / "multi_turn_func_doc" / filename):
            if doc["name"] in docs:
                raise ValueError(f"BFCL function {doc['name']!r} is defined by two backends")
            docs[doc["name"]] = FunctionDoc(
                name=doc["name"],
                backend=backend,
                description=doc.get("description", ""),
                parameters=to_json_schema(doc.get("parameters") or {"type": "dict", "properties": {}}),
                response=to_json_schema(doc["response"]) if doc.get("response") else None,
            )
    return docs


def offered_functions(found: Entry) -> tuple[list[str], dict[int, list[str]]]:
    """The functions offered at the first user turn, and those added at later turns (``miss_func``):
    every function of the involved backends, less excluded and held-out ones (BFCL's own rule)."""
    held = {int(turn): list(names) for turn, names in found.missed_function.items()}
    hidden = {name for names in held.values() for name in names} | set(found.excluded_function)
    first = [
        doc.name
        for backend in found.involved_classes
        for doc in function_docs().values()
        if doc.backend == backend and doc.name not in hidden
    ]
    return first, held


def user_message(turn: list[dict[str, Any]]) -> str:
    """The user's words of one turn (BFCL's prompt for added functions when the turn has none)."""
    text = "\n".join(str(m.get("content", "")) for m in turn if m.get("role") == "user").strip()
    return text or ADDED_FUNCTIONS_PROMPT


class BadCall(ValueError):
    """A ground-truth call string that is not ``name(literal, key=literal, ...)``."""


def parse_call(text: str) -> tuple[str, dict[str, Any]]:
    """``mv(source='a', destination='b')`` -> ``("mv", {...})``, with ``ast`` (literals only, nothing
    executed); positional arguments are named in the order of the function's documented parameters."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
            raise BadCall(f"not a function call: {text!r}")
        name = node.func.id
        arguments = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg}
        if node.args:
            order = list(function_docs()[name].parameters.get("properties", {}))
            for key, value in zip(order, node.args, strict=False):
                arguments[key] = ast.literal_eval(value)
    except (SyntaxError, ValueError, KeyError) as exc:
        raise BadCall(f"cannot parse ground-truth call {text!r}: {exc}") from None
    return name, arguments
