"""SFT examples: reference conversations (OpenAI-format messages and the tools they were played with)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from arena.policies.base import PolicyTurn, ToolCall
from arena.rollout.episode import SYSTEM_PROMPT, assistant_message
from arena.rollout.records import EpisodeRecord


@dataclass(frozen=True)
class SFTExample:
    """One conversation to imitate: its assistant turns are the targets, everything else is context."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]


def record_messages(record: EpisodeRecord, system_prompt: str = SYSTEM_PROMPT) -> list[dict[str, Any]]:
    """The conversation an episode fed its policy, rebuilt from the record exactly as the episode loop
    builds it (user turns, assistant turns with their calls, tool results, format errors)."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": system_prompt}]
    for turn in record.turns:
        if turn.user_message is not None:
            messages.append({"role": "user", "content": turn.user_message})
        calls = [
            ToolCall(c.id, c.name, c.arguments if isinstance(c.arguments, dict) else None, _raw(c.arguments))
            for c in turn.tool_calls
        ]
        messages.append(assistant_message(PolicyTurn(turn.content, calls, turn.format_error)))
        if turn.format_error is not None:
            error = json.dumps({"error": {"code": "FORMAT_ERROR", "message": turn.format_error}})
            messages.append({"role": "tool", "tool_call_id": "format_error", "content": error})
        for call in turn.tool_calls:
            content = json.dumps(call.result, default=str)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
    return messages


def _raw(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments)
