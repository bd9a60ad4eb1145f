"""Quality filter: deliberately wrong answers and states that a kept task's verifier must reject, and
duplicate detection."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import Any

from task_synth.arguments import candidates, fill_arguments
from task_synth.model import CallStep, Solution, Task
from task_synth.profile import EnvProfile
from task_synth.values import canonical
from task_synth.verify import accepts, normalize_diff, rule_for

MIN_PROBES = 3
PROBE_MARGIN = 1e-3

Probe = tuple[str, Any, dict[str, Any] | None]
"""(what is wrong, answer, diff or None when the task checks no state)."""


def _changed(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + max(1, abs(value) * 0.1)
    if isinstance(value, str):
        return value + " (revised)"
    if isinstance(value, list):
        return value[:-1] if len(value) > 1 else [*value, "not-an-id"]
    return "wrong"


def _equivalent(candidate: Any, value: Any) -> bool:
    """A candidate the verifier could take for ``value`` (a near number, the same text in other case) is
    no wrong answer; the margin is ten times the rubric's numeric tolerance."""
    return accepts(rule_for(value, tolerance=PROBE_MARGIN), candidate)


def answer_probes(answer: dict[str, Any], profile: EnvProfile, rng: random.Random) -> list[tuple[str, Any]]:
    """A changed value, a missing field, and another entity's values for the same fields."""
    if not answer:
        return []
    key = rng.choice(sorted(answer))
    probes: list[tuple[str, Any]] = [
        ("changed value", answer | {key: _changed(answer[key])}),
        ("missing field", {k: v for k, v in answer.items() if k != key}),
    ]
    other = {}
    for name, value in answer.items():
        field = name.split("_", 1)[-1]
        pool = [v for v in profile.values.get(field, []) if not _equivalent(v, value)]
        other[name] = rng.choice(pool) if pool and not isinstance(value, list) else _changed(value)
    probes.append(("wrong entity", other))
    probes.append(("not an object", list(answer.values())))
    return probes


Execute = Callable[[Solution, list[tuple[str, dict[str, Any]]]], Awaitable[dict[str, Any] | None]]
"""Run a solution then extra calls in a fresh session; the diff from the seed, or None if a step failed."""


def _is_wrong(task: Task, diff: dict[str, Any] | None) -> bool:
    """A probe state counts only if it really differs from the reference (some writes are idempotent)."""
    state = task.verifier.state
    assert state is not None
    return diff is not None and normalize_diff(diff, state.ignore_columns) != state.expected


async def state_probes(
    task: Task, answer: Any, profile: EnvProfile, execute: Execute, rng: random.Random
) -> list[Probe]:
    """No change at all; the write applied to another entity; the right write plus an unintended one.
    Candidate probes whose final state equals the reference state are not wrong, and are skipped."""
    assert task.solution is not None
    probes: list[Probe] = [("no change", answer, {})]
    last = task.solution.steps[-1]
    if isinstance(last, CallStep):
        tool = profile.tools[last.tool]
        for param in [*last.bindings, *last.arguments]:
            spec = tool.param(param)
            if spec is None or spec.enum:
                continue
            current = last.arguments.get(param)
            pool = [v for v in candidates(spec, profile) if canonical(v) != canonical(current)]
            for value in rng.sample(pool, min(2, len(pool))):
                wrong = last.model_copy(
                    update={
                        "arguments": last.arguments | {param: value},
                        "bindings": {k: r for k, r in last.bindings.items() if k != param},
                    }
                )
                steps = [*task.solution.steps[:-1], wrong]
                diff = await execute(task.solution.model_copy(update={"steps": steps}), [])
                if _is_wrong(task, diff):
                    probes.append((f"write to another {param}", answer, diff))
                    break
            if len(probes) > 1:
                break
    writers = [t for t in profile.tools.values() if t.mutates]
    for _ in range(3):
        extra_tool = rng.choice(writers)
        arguments = fill_arguments(extra_tool, profile, rng, optional_share=0.0)
        if arguments is None:
            continue
        diff = await execute(task.solution, [(extra_tool.name, arguments)])
        if _is_wrong(task, diff):
            probes.append(("an extra unintended write", answer, diff))
            break
    return probes


def signature(task: Task) -> tuple[str, ...]:
    """Near-duplicate key: the same tools in the same order leading to the same answer (or same state)."""
    tools = task.solution.tool_calls if task.solution else []
    outcome = canonical(task.reference_answer) + (
        canonical(task.verifier.state.expected) if task.verifier.state else ""
    )
    return (task.env, task.kind.value, ",".join(tools), outcome)
