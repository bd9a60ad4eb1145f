"""The released questions of an environment: task text, reference answer, rubric and verified chain."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import MalformedEnvironment


@dataclass(frozen=True)
class ToolCall:
    """One step of a verified tool chain."""

    tool: str
    args: dict[str, Any]


@dataclass(frozen=True)
class ImportedQuestion:
    """A released task, ready for the task store.

    ``reference_answer`` is the parsed JSON answer; when the released text is not valid JSON (some
    are truncated) it is ``None``, ``reference_valid`` is false and ``reference_text`` keeps the raw text.
    """

    env: str
    index: int
    task: str
    reference_answer: Any
    reference_text: str
    reference_valid: bool
    success_criteria: tuple[str, ...]
    verified_tool_chain: tuple[ToolCall, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "env": self.env,
            "index": self.index,
            "task": self.task,
            "reference_answer": self.reference_answer,
            "reference_text": self.reference_text,
            "reference_valid": self.reference_valid,
            "success_criteria": list(self.success_criteria),
            "verified_tool_chain": [{"tool": c.tool, "args": c.args} for c in self.verified_tool_chain],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ImportedQuestion:
        return cls(
            env=data["env"],
            index=data["index"],
            task=data["task"],
            reference_answer=data["reference_answer"],
            reference_text=data["reference_text"],
            reference_valid=data["reference_valid"],
            success_criteria=tuple(data["success_criteria"]),
            verified_tool_chain=tuple(
                ToolCall(c["tool"], dict(c["args"])) for c in data["verified_tool_chain"]
            ),
        )


def _parse_reference(text: Any) -> tuple[Any, str, bool]:
    if not isinstance(text, str):
        return text, json.dumps(text, ensure_ascii=False), True
    try:
        return json.loads(text), text, True
    except ValueError:
        return None, text, False


def _parse_chain(raw: Any, where: str) -> tuple[ToolCall, ...]:
    if not isinstance(raw, list):
        raise MalformedEnvironment(f"{where}: verified_tool_chain is not a list")
    calls = []
    for step in raw:
        if not isinstance(step, dict) or not isinstance(step.get("tool"), str):
            raise MalformedEnvironment(f"{where}: a verified_tool_chain step has no tool name")
        args = step.get("args") or {}
        if not isinstance(args, dict):
            raise MalformedEnvironment(f"{where}: args of step {step['tool']!r} are not an object")
        calls.append(ToolCall(step["tool"], args))
    return tuple(calls)


def parse_question(env: str, index: int, raw: Any) -> ImportedQuestion:
    """One released task; raises ``MalformedEnvironment`` naming what is missing."""
    where = f"question {index}"
    if not isinstance(raw, dict) or not isinstance(raw.get("task"), str):
        raise MalformedEnvironment(f"{where}: no task text")
    rubric = raw.get("grading_rubric") or {}
    if not isinstance(rubric, dict):
        raise MalformedEnvironment(f"{where}: grading_rubric is not an object")
    answer, text, valid = _parse_reference(raw.get("reference_answer"))
    criteria = rubric.get("success_criteria") or []
    return ImportedQuestion(
        env=env,
        index=index,
        task=raw["task"],
        reference_answer=answer,
        reference_text=text,
        reference_valid=valid,
        success_criteria=tuple(str(c) for c in criteria) if isinstance(criteria, list) else (str(criteria),),
        verified_tool_chain=_parse_chain(rubric.get("verified_tool_chain") or [], where),
    )


def parse_questions(env: str, raw: Any) -> list[ImportedQuestion]:
    """The tasks of a released ``questions/<id>.json`` document."""
    tasks = raw.get("tasks") if isinstance(raw, dict) else raw
    if not isinstance(tasks, list):
        raise MalformedEnvironment("questions file has no list of tasks")
    return [parse_question(env, i, task) for i, task in enumerate(tasks)]
