"""SFT examples: reference conversations (OpenAI-format messages and the tools they were played with)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from arena.policies.base import PolicyTurn, ToolCall
from arena.rollout.episode import SYSTEM_PROMPT, assistant_message, format_error_message, tool_result_message
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
            messages.append(format_error_message(turn.format_error))
        messages.extend(tool_result_message(call) for call in turn.tool_calls)
    return messages


def _raw(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments)
