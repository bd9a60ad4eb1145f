"""Tool calls parsed from a model's generated text.

Hermes-style ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks first; failing that, a
reply that is only a call object (or a list of them, optionally in a ```json fence) is read as calls.
Anything else is plain content (the final answer). Output that tried to be a call but cannot be read is a
format error, which the episode feeds back to the model as a tool message.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from arena.policies.base import ToolCall

_BLOCK = re.compile(r"<tool_call>(.*?)(</tool_call>|$)", re.S)
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.S)
_CALL_KEYS = frozenset({"name", "arguments", "id", "type"})


@dataclass
class ParsedReply:
    """Generated text split into content, tool calls and a format error (calls are empty on an error)."""

    content: str | None
    tool_calls: list[ToolCall] = field(default_factory=list)
    format_error: str | None = None


class _Malformed(ValueError):
    pass


def _call(value: Any, call_id: str) -> ToolCall:
    """One call object as a ``ToolCall``; arguments that are not a JSON object are kept raw (the episode
    answers them with INVALID_ARGUMENTS)."""
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or not value["name"]:
        raise _Malformed(f'a tool call must be an object with a "name" string, got {json.dumps(value)[:200]}')
    arguments = value.get("arguments", {})
    if isinstance(arguments, str):
        raw = arguments
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return ToolCall(call_id, value["name"], None, raw)
    raw = json.dumps(arguments)
    return ToolCall(call_id, value["name"], arguments if isinstance(arguments, dict) else None, raw)


def _looks_like_call(value: Any) -> bool:
    return isinstance(value, dict) and "name" in value and "arguments" in value and value.keys() <= _CALL_KEYS


def _hermes(text: str, prefix: str) -> ParsedReply:
    calls = []
    for index, match in enumerate(_BLOCK.finditer(text)):
        body, closed = match.group(1).strip(), match.group(2)
        if not closed:
            raise _Malformed(f"tool call {index + 1} has no closing </tool_call>")
        try:
            value = json.loads(body)
        except ValueError as exc:
            raise _Malformed(f"tool call {index + 1} is not valid JSON ({exc}): {body[:200]!r}") from None
        calls.append(_call(value, f"{prefix}{index}"))
    content = _BLOCK.sub("", text).strip() or None
    return ParsedReply(content, calls)


def parse_reply(text: str, call_id_prefix: str = "call_") -> ParsedReply:
    """Split generated ``text`` into content and tool calls; ids are ``call_id_prefix`` + index."""
    try:
        if "<tool_call>" in text:
            return _hermes(text, call_id_prefix)
        stripped = text.strip()
        if fenced := _FENCE.match(stripped):
            stripped = fenced.group(1)
        try:
            value = json.loads(stripped)
        except ValueError:
            return ParsedReply(text.strip() or None)
        if _looks_like_call(value):
            return ParsedReply(None, [_call(value, f"{call_id_prefix}0")])
        if isinstance(value, list) and value and any(_looks_like_call(v) for v in value):
            return ParsedReply(None, [_call(v, f"{call_id_prefix}{i}") for i, v in enumerate(value)])
        return ParsedReply(text.strip() or None)
    except _Malformed as exc:
        return ParsedReply(text.strip() or None, format_error=str(exc))
