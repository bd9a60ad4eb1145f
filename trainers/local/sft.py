"""SFT examples: reference conversations (OpenAI-format messages and the tools they were played with).

A recorded episode becomes one with ``arena.rollout.conversation.messages_of`` (the same builders the
episode loop uses while it runs)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SFTExample:
    """One conversation to imitate: its assistant turns are the targets, everything else is context."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]


def first_turn(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` up to and including the first assistant turn (all of them if there is none)."""
    index = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), len(messages) - 1)
    return messages[: index + 1]
