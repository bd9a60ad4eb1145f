"""Small helpers over JSON tool outputs: field paths, flattening, entity names, value kinds."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

_INDEX = re.compile(r"\[(\d+|\*)\]")
_TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")


class MissingPath(LookupError):
    """A reference path does not exist in an output."""


def get_path(value: Any, path: str) -> Any:
    """``get_path({"a": [{"b": 1}]}, "a[0].b") == 1``; ``[*]`` maps over a list (``"a[*].b" -> [1]``);
    the empty path is the value itself."""
    parts = list(_split(path))
    return _walk(value, parts, path)


def _walk(value: Any, parts: list[str | int], path: str) -> Any:
    for position, part in enumerate(parts):
        if part == "*":
            if not isinstance(value, list):
                raise MissingPath(f"{path!r}: [*] over a non-list")
            return [_walk(item, parts[position + 1 :], path) for item in value]
        try:
            value = value[part]
        except (KeyError, IndexError, TypeError) as exc:
            raise MissingPath(f"no {path!r} in the output") from exc
    return value


def _split(path: str) -> Iterator[str | int]:
    for dotted in filter(None, path.split(".")):
        head, *indices = _INDEX.split(dotted)
        if head:
            yield head
        for index in indices:
            if index:
                yield index if index == "*" else int(index)


def records(value: Any) -> list[dict[str, Any]]:
    """The records in an output: the object itself, or the objects of a list (or of a single list field
    of a wrapper object such as ``{"items": [...], "total": 3}``)."""
    if isinstance(value, list):
        return [item for item in value if isinstance(item, dict)]
    if isinstance(value, dict):
        lists = [v for v in value.values() if isinstance(v, list) and v and isinstance(v[0], dict)]
        if len(lists) == 1 and not any(isinstance(v, dict) for v in value.values()):
            return [value, *lists[0]]
        return [value]
    return []


def list_path(value: Any) -> str | None:
    """Path of the list of records in an output (``""`` for a bare list), or None if there is none."""
    if isinstance(value, list):
        return ""
    if isinstance(value, dict):
        keys = [k for k, v in value.items() if isinstance(v, list) and v and isinstance(v[0], dict)]
        if len(keys) == 1:
            return keys[0]
    return None


def is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def scalar_fields(record: dict[str, Any]) -> dict[str, Any]:
    """Scalar fields of a record, plus scalars one level down as ``parent.child``."""
    fields: dict[str, Any] = {}
    for key, value in record.items():
        if is_scalar(value):
            fields[key] = value
        elif isinstance(value, dict):
            fields.update({f"{key}.{k}": v for k, v in value.items() if is_scalar(v)})
    return fields


def looks_like_clock(value: Any) -> bool:
    return isinstance(value, str) and bool(_TIMESTAMP.match(value))


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def singular(word: str) -> str:
    if word.endswith("ies"):
        return word[:-3] + "y"
    if word.endswith(("sses", "xes", "ches", "shes")):
        return word[:-2]
    if word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


VERBS = {
    "get", "list", "search", "find", "lookup", "fetch", "show", "read", "query", "view", "describe",
    "create", "add", "book", "cancel", "update", "delete", "remove", "set", "make", "record", "check",
    "adjust", "assign", "close", "open", "transfer", "pay", "return", "request", "move", "reschedule",
    "rebook", "renew", "place", "submit", "approve", "reject", "issue", "register", "report", "lend",
    "borrow", "checkout", "schedule", "post", "refund", "withdraw", "deposit", "freeze", "unfreeze",
    "link", "log", "mark", "change", "compute", "calculate", "count", "summarize", "retrieve", "browse",
    "look", "send", "reserve", "release", "confirm", "resolve", "reopen", "comment", "invite",
    "accept", "decline", "ship", "restock", "apply", "redeem", "pick", "tally", "rank", "top", "audit",
}  # fmt: skip


def tool_entity(tool_name: str) -> str:
    """The entity a tool is about: ``get_booking`` -> ``booking``, ``list_bookings`` -> ``booking``."""
    words = [w for w in re.split(r"[_\W]+", tool_name.lower()) if w]
    nouns = [w for w in words if w not in VERBS and w not in {"by", "for", "of", "all", "info", "details"}]
    return singular(nouns[0]) if nouns else singular(words[-1]) if words else tool_name


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str, separators=(",", ":"))
