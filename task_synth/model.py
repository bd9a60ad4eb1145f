"""The task data model: what synthesis produces, the store persists, and verifiers and trainers read.

A task is a *request* (natural language, names no tool, quotes no answer), a *reference solution*
(a small program of tool calls that really ran), a *verifier* (an answer rubric and/or a check of the
final database state) and its *difficulty* (a level 1-5 plus the knob values that produced it).
Everything here is plain JSON-able pydantic, so tasks round-trip through SQL rows and JSONL.
"""

from __future__ import annotations

import hashlib
import json
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class TaskKind(StrEnum):
    GRAPH = "graph"  # a sampled tool chain; the answer comes from its outputs
    STATE = "state"  # the chain writes; the final database state is checked
    PROGRAM = "program"  # loops, filters and aggregation over tool outputs
    IMPORTED = "imported"  # a question from another source (Agent-World), with its own rubric


class Knobs(BaseModel):
    """The explicit difficulty controls a task was synthesized with (recorded per task)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    chain_length: tuple[int, int] = Field(description="min and max tool calls in the reference chain")
    weak_edge_share: float = Field(ge=0, le=1, description="chance a step follows a weak/independent edge")
    min_distinct_tools: int = Field(ge=1)
    aggregation: bool = Field(description="programmatic tasks: loops, filters and aggregates")
    branching: bool = Field(description="programmatic tasks: a condition decides what counts")
    distractors: int = Field(ge=0, description="irrelevant facts added to the request")
    hidden_references: bool = Field(description="entities named by attributes, steps not spelled out")
    writes: bool = Field(description="state tasks with a final-database check may be produced")


class Ref(BaseModel):
    """A value taken from an earlier step's output: ``steps[step]`` then ``path`` (dotted, [i] for lists)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    step: int
    path: str = ""


class CallStep(BaseModel):
    """Call ``tool``; arguments are literals or ``Ref`` bindings to earlier outputs."""

    model_config = ConfigDict(extra="forbid")

    op: Literal["call"] = "call"
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    bindings: dict[str, Ref] = Field(default_factory=dict)


class ForEachStep(BaseModel):
    """Call ``tool`` once per item of the list at ``source``; ``item_bindings`` map argument -> item field."""

    model_config = ConfigDict(extra="forbid")

    op: Literal["for_each"] = "for_each"
    source: Ref
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    item_bindings: dict[str, str] = Field(default_factory=dict)


class Condition(BaseModel):
    """``field`` compared with ``value``: eq, ne, gt, ge, lt, le, contains."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    field: str
    op: Literal["eq", "ne", "gt", "ge", "lt", "le", "contains"]
    value: Any


class AggregateStep(BaseModel):
    """Reduce the list at ``source`` (kept items satisfy ``where``): count, sum, min, max, mean, or the
    item with the largest/smallest ``field`` (argmax/argmin return ``key_field`` of that item)."""

    model_config = ConfigDict(extra="forbid")

    op: Literal["aggregate"] = "aggregate"
    source: Ref
    function: Literal["count", "sum", "min", "max", "mean", "argmax", "argmin"]
    field: str | None = None
    key_field: str | None = None
    where: list[Condition] = Field(default_factory=list)


class CodeStep(BaseModel):
    """Generated Python defining ``solve(tools)``, run inside the environment server (never in the arena's
    process); the step's output is the JSON object it returns. ``tools.call(name, **arguments)`` calls a
    tool on the episode's state."""

    model_config = ConfigDict(extra="forbid")

    op: Literal["code"] = "code"
    source: str


Step = Annotated[CallStep | ForEachStep | AggregateStep | CodeStep, Field(discriminator="op")]


class Solution(BaseModel):
    """The reference solution: steps run in order, then ``answer`` maps answer keys to step outputs."""

    model_config = ConfigDict(extra="forbid")

    steps: list[Step]
    answer: dict[str, Ref] = Field(default_factory=dict)

    @property
    def tool_calls(self) -> list[str]:
        """The tools the steps name (a code step counts as ``code``: its calls depend on the data)."""
        return [step.tool if isinstance(step, CallStep | ForEachStep) else step.op for step in self.steps]


class FieldRule(BaseModel):
    """One answer field: its JSON type and expected value (numbers within ``tolerance``, relative)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["string", "number", "integer", "boolean", "null", "array", "object"]
    value: Any
    tolerance: float = 0.0


class Rubric(BaseModel):
    """Answer check: a strict-JSON object with every required field, of the right type and value."""

    model_config = ConfigDict(extra="forbid")

    fields: dict[str, FieldRule]
    extra_fields_allowed: bool = True


class StateCheck(BaseModel):
    """Final-state check: the rows the episode changed (from the seed) must be exactly ``expected``:
    table -> {"inserted": [row...], "deleted": [row...], "changed": [{"key", "after"}...]}, so any
    missing or extra write fails. ``ignore_columns`` ("table.column") are not reproducible (a clock
    reading) and are left out of the comparison."""

    model_config = ConfigDict(extra="forbid")

    expected: dict[str, dict[str, list[Any]]]
    ignore_columns: list[str] = Field(default_factory=list)


class Verifier(BaseModel):
    """What decides success: an answer rubric, a state check, or both (both must pass)."""

    model_config = ConfigDict(extra="forbid")

    rubric: Rubric | None = None
    state: StateCheck | None = None
    matcher: Literal["rubric", "agentworld", "environment"] = "rubric"
    reference_answer: Any = None  # for the agentworld matcher: their reference answer, verbatim
    check_tool: str | None = Field(
        None,
        description="environment matcher: a tool the arena calls through the control plane after the "
        "episode, with check_arguments plus the episode's calls by user turn; it returns the verdict",
    )
    check_arguments: dict[str, Any] = Field(default_factory=dict)


class Task(BaseModel):
    """One verifiable task of one environment."""

    model_config = ConfigDict(extra="forbid")

    id: str = ""
    env: str
    env_version: str
    kind: TaskKind
    request: str
    difficulty: int = Field(ge=1, le=5)
    knobs: Knobs | None = None
    solution: Solution | None = None
    reference_answer: dict[str, Any] | None = None
    verifier: Verifier
    provenance: dict[str, Any] = Field(default_factory=dict)
    measured: dict[str, float] = Field(default_factory=dict)
    follow_ups: list[str] = Field(
        default_factory=list, description="user messages sent one by one after each final reply"
    )
    setup: list[CallStep] = Field(
        default_factory=list,
        description="calls the arena makes through the control plane before the agent acts "
        "(e.g. loading a benchmark scenario); never shown to the agent",
    )
    tools: list[str] | None = Field(
        None, description="the tools offered at the first user turn (None: all of the environment's)"
    )
    added_tools: dict[int, list[str]] = Field(
        default_factory=dict,
        description="tools first offered at user turn k (0 is the request, k the k-th follow-up)",
    )
    turn_solutions: list[Solution] = Field(
        default_factory=list,
        description="reference calls per user turn (request, then each follow-up), for multi-turn tasks",
    )

    def _verifier_content(self) -> dict[str, Any]:
        """The verifier as ids hash it: fields added later count only when set, so ids stay stable."""
        content = self.verifier.model_dump(mode="json")
        for key, empty in (("check_tool", None), ("check_arguments", {})):
            if content[key] == empty:
                del content[key]
        return content

    def with_id(self) -> Task:
        """Content-addressed id: the same task synthesized twice gets the same id."""
        content = {
            "env": self.env,
            "version": self.env_version,
            "request": self.request,
            "difficulty": self.difficulty,
            "answer": self.reference_answer,
            "verifier": self._verifier_content(),
        }
        if self.follow_ups:
            content["follow_ups"] = self.follow_ups
        if self.setup:
            content["setup"] = [step.model_dump(mode="json") for step in self.setup]
        digest = hashlib.sha256(json.dumps(content, sort_keys=True, default=str).encode()).hexdigest()
        return self.model_copy(update={"id": f"{self.env.replace('/', '.')}-{digest[:12]}"})


class Verdict(BaseModel):
    """The result of verifying one submission; ``reasons`` names every failed check and ``criteria``
    gives each check's result (``field:<key>``, ``state``, ``answer``, or a benchmark's own names)."""

    passed: bool
    reasons: list[str] = Field(default_factory=list)
    criteria: dict[str, bool] = Field(default_factory=dict)
