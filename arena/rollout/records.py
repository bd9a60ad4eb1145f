"""What an episode records: every turn, every tool call, the verdict, the failure mode and the metrics.

Plain dataclasses that round-trip through JSON (``to_json`` / ``from_json``), so the store, reports and
the gap analysis read exactly what the episode wrote.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from arena.policies.base import TokenTrajectory
from task_synth.model import Verdict


class FailureMode(StrEnum):
    """Why an episode ended as it did (``infra_error`` episodes are never scored)."""

    SOLVED = "solved"
    WRONG_ANSWER = "wrong_answer"
    STATE_MISMATCH = "state_mismatch"
    INVALID_ARGUMENTS = "invalid_arguments"
    UNKNOWN_TOOL = "unknown_tool"
    TOOL_ERROR_UNRECOVERED = "tool_error_unrecovered"
    FORMAT_ERROR = "format_error"
    NO_FINAL_ANSWER = "no_final_answer"
    PREMATURE_ANSWER = "premature_answer"
    INFRA_ERROR = "infra_error"


@dataclass
class ToolCallRecord:
    """One tool call: what was asked, what came back, how long it took, and any injected fault."""

    id: str
    name: str
    arguments: Any
    result: Any = None
    error_code: str | None = None
    latency_s: float = 0.0
    injected: str | None = None  # "error" / "timeout" when the arena's fault injection answered instead


@dataclass
class TurnRecord:
    """One policy turn: the user message that preceded it (first and follow-up turns), what the policy
    said, the calls it made, and the time and tokens it cost."""

    index: int
    content: str | None
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    format_error: str | None = None
    user_message: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    policy_latency_s: float = 0.0
    tool_wait_s: float = 0.0


@dataclass
class EpisodeRecord:
    """One episode of one policy on one task (``repeat`` numbers the tries of the same task)."""

    task_id: str
    env: str
    level: int
    kind: str
    repeat: int = 0
    failure_mode: FailureMode = FailureMode.INFRA_ERROR
    verdict: Verdict | None = None
    answer: Any = None
    turns: list[TurnRecord] = field(default_factory=list)
    infra_error: str | None = None
    finished: bool = False  # the policy gave its final reply to the last user message
    wall_s: float = 0.0
    state_diff: dict[str, Any] | None = None  # rows the episode inserted/deleted/changed, by table
    trajectory: TokenTrajectory | None = None  # token policies only; kept in memory, never stored

    @property
    def passed(self) -> bool | None:
        """True/False when scored; None when an infrastructure failure left the episode unscored."""
        return None if self.verdict is None else self.verdict.passed

    @property
    def tool_calls(self) -> list[ToolCallRecord]:
        return [call for turn in self.turns for call in turn.tool_calls]

    def metrics(self) -> dict[str, float]:
        """Counts, tokens and times of the episode (what reports aggregate)."""
        calls = self.tool_calls
        tool_wait = sum(t.tool_wait_s for t in self.turns)
        return {
            "turns": len(self.turns),
            "tool_calls": len(calls),
            "tool_errors": sum(c.error_code is not None for c in calls),
            "injected_faults": sum(c.injected is not None for c in calls),
            "format_errors": sum(t.format_error is not None for t in self.turns),
            "prompt_tokens": sum(t.prompt_tokens or 0 for t in self.turns),
            "completion_tokens": sum(t.completion_tokens or 0 for t in self.turns),
            "policy_s": sum(t.policy_latency_s for t in self.turns),
            "tool_wait_s": tool_wait,
            "wall_s": self.wall_s,
            "tool_wait_share": tool_wait / self.wall_s if self.wall_s > 0 else 0.0,
        }

    def to_json(self) -> dict[str, Any]:
        """Everything but the token trajectory, as JSON-able data."""
        data = asdict(self)
        data.pop("trajectory")
        data["failure_mode"] = str(self.failure_mode)
        data["verdict"] = None if self.verdict is None else self.verdict.model_dump(mode="json")
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EpisodeRecord:
        turns = [
            TurnRecord(**{**t, "tool_calls": [ToolCallRecord(**c) for c in t["tool_calls"]]})
            for t in data["turns"]
        ]
        verdict = None if data.get("verdict") is None else Verdict.model_validate(data["verdict"])
        fields = {k: v for k, v in data.items() if k not in ("turns", "verdict", "failure_mode")}
        return cls(**fields, turns=turns, verdict=verdict, failure_mode=FailureMode(data["failure_mode"]))
