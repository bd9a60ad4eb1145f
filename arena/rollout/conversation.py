"""Chat messages of an episode (OpenAI format), built the same way while it runs and afterwards from its
record: what a trainer renders for SFT on recorded episodes is what the policy saw."""

from __future__ import annotations

import json
from typing import Any

from arena.policies.base import IMITATE, PolicyTurn, ToolCall
from arena.rollout.failure import INVALID_ARGUMENT_CODES
from arena.rollout.records import EpisodeRecord, ToolCallRecord

FORMAT_ERROR_CALL_ID = "format_error"


def assistant_message(turn: PolicyTurn) -> dict[str, Any]:
    """A policy turn as an assistant message (tool calls with their JSON arguments)."""
    message: dict[str, Any] = {"role": "assistant", "content": turn.content}
    if turn.tool_calls:
        message["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.raw or json.dumps(call.arguments or {})},
            }
            for call in turn.tool_calls
        ]
    return message


def tool_message(call: ToolCallRecord) -> dict[str, Any]:
    """A finished call's result (or error) as the tool message the policy reads."""
    return {"role": "tool", "tool_call_id": call.id, "content": json.dumps(call.result, default=str)}


def format_error_message(problem: str) -> dict[str, Any]:
    """What the policy reads after output that should have been a tool call but could not be parsed."""
    error = json.dumps({"error": {"code": "FORMAT_ERROR", "message": problem}})
    return {"role": "tool", "tool_call_id": FORMAT_ERROR_CALL_ID, "content": error}


REJECTED_CALL_CODES = frozenset({"UNKNOWN_TOOL"}) | INVALID_ARGUMENT_CODES
"""Error codes of calls the environment refused before running them (a wrong name, invalid arguments)."""


def messages_of(record: EpisodeRecord, system_prompt: str) -> list[dict[str, Any]]:
    """The whole conversation of a recorded episode, ending with its last policy turn; a turn whose calls
    were all refused is marked ``IMITATE: False``."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": system_prompt}]
    for turn in record.turns:
        if turn.user_message is not None:
            messages.append({"role": "user", "content": turn.user_message})
        calls = [
            ToolCall(
                c.id,
                c.name,
                c.arguments if isinstance(c.arguments, dict) else None,
                c.arguments if isinstance(c.arguments, str) else json.dumps(c.arguments),
            )
            for c in turn.tool_calls
        ]
        message = assistant_message(PolicyTurn(content=turn.content, tool_calls=calls))
        if turn.tool_calls and all(c.error_code in REJECTED_CALL_CODES for c in turn.tool_calls):
            message[IMITATE] = False
        messages.append(message)
        if turn.format_error is not None:
            messages.append(format_error_message(turn.format_error))
        messages += [tool_message(call) for call in turn.tool_calls]
    return messages


def _answer_leaves(value: Any) -> list[str | int | float]:
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in _answer_leaves(item)]
    if isinstance(value, list):
        return [leaf for item in value for leaf in _answer_leaves(item)]
    return [] if isinstance(value, bool) or not isinstance(value, str | int | float) else [value]


def answer_visible(messages: list[dict[str, Any]], tool_result_chars: int) -> bool:
    """Whether every string and number of the final JSON answer appears in what the model saw before it
    (tool results cut to ``tool_result_chars`` characters, as the chat template shows them): SFT on an
    answer it could not read teaches a model to make values up. A final turn that is not a JSON answer
    counts as visible (nothing to check)."""
    if not messages or messages[-1]["role"] != "assistant" or messages[-1].get("tool_calls"):
        return True
    try:
        answer = json.loads(messages[-1].get("content") or "")
    except ValueError:
        return True
    shown = []
    for message in messages[:-1]:
        content = message.get("content")
        text = content if isinstance(content, str) else json.dumps(content)
        shown.append(text[:tool_result_chars] if message["role"] == "tool" else text)
    seen = "\n".join(shown)
    return all(
        json.dumps(leaf)[1:-1] in seen or leaf in seen if isinstance(leaf, str) else json.dumps(leaf) in seen
        for leaf in _answer_leaves(answer)
    )
