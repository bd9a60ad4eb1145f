"""SFT examples: reference conversations (OpenAI-format messages and the tools they were played with).

A recorded episode becomes one with ``arena.rollout.conversation.messages_of`` (the same builders the
episode loop uses while it runs)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from arena.policies.base import TokenTrajectory


@dataclass(frozen=True)
class SFTExample:
    """One conversation to imitate: its assistant turns are the targets, everything else is context."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]


def first_turn(trajectory: TokenTrajectory) -> TokenTrajectory:
    """``trajectory`` cut after its first generated turn: the prompt and the first assistant turn."""
    mask = trajectory.response_mask
    start = mask.index(1) if 1 in mask else len(mask)
    end = next((i for i in range(start, len(mask)) if not mask[i]), len(mask))
    return TokenTrajectory(
        trajectory.prompt_ids, trajectory.response_ids[:end], mask[:end], trajectory.response_logprobs[:end]
    )
