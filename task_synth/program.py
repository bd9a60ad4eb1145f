"""Running a reference solution: tool calls with bound arguments, per-item loops, and aggregates.

The interpreter is arena code with no ``eval``: a solution is data (``task_synth.model.Solution``), and
every tool call it makes executes inside the environment server, through a ``ToolRunner``.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from task_synth.model import AggregateStep, CallStep, CodeStep, Condition, ForEachStep, Ref, Solution
from task_synth.runner import StepOutcome, ToolRunner
from task_synth.values import get_path


class SolutionFailed(Exception):
    """A step errored, returned nothing usable, or referenced a missing field."""


@dataclass
class Execution:
    """Outputs of each step, the answer object, and the calls made (tool, arguments)."""

    outputs: list[Any] = field(default_factory=list)
    answer: dict[str, Any] = field(default_factory=dict)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


def resolve(ref: Ref, outputs: list[Any]) -> Any:
    if ref.step >= len(outputs):
        raise SolutionFailed(f"reference to step {ref.step} before it ran")
    return get_path(outputs[ref.step], ref.path)


def matches(item: Any, condition: Condition) -> bool:
    value = get_path(item, condition.field) if isinstance(item, dict) else None
    target = condition.value
    try:
        match condition.op:
            case "eq":
                return value == target
            case "ne":
                return value != target
            case "gt":
                return value is not None and value > target
            case "ge":
                return value is not None and value >= target
            case "lt":
                return value is not None and value < target
            case "le":
                return value is not None and value <= target
            case "contains":
                return isinstance(value, str) and str(target).lower() in value.lower()
    except (TypeError, LookupError):
        return False
    return False


def aggregate(step: AggregateStep, items: list[Any]) -> Any:
    kept = [item for item in items if all(matches(item, c) for c in step.where)]
    if step.function == "count":
        return len(kept)
    assert step.field is not None
    valued = [(get_path(item, step.field), item) for item in kept]
    numbers = [(v, item) for v, item in valued if isinstance(v, int | float) and not isinstance(v, bool)]
    if not numbers:
        raise SolutionFailed(f"no numeric {step.field!r} to aggregate")
    values = [v for v, _ in numbers]
    match step.function:
        case "sum":
            return round(sum(values), 6)
        case "mean":
            return round(statistics.fmean(values), 6)
        case "min":
            return min(values)
        case "max":
            return max(values)
    best = (max if step.function == "argmax" else min)(numbers, key=lambda pair: pair[0])
    extreme = [item for v, item in numbers if v == best[0]]
    if len(extreme) > 1:
        raise SolutionFailed(f"{step.function} of {step.field!r} is tied")
    return get_path(best[1], step.key_field or "id")


async def _call(runner: ToolRunner, tool: str, arguments: dict[str, Any], run: Execution) -> Any:
    outcome: StepOutcome = await runner.call(tool, arguments)
    run.calls.append((tool, arguments))
    if not outcome.ok:
        raise SolutionFailed(f"{tool} failed: {outcome.value.get('code')}: {outcome.value.get('message')}")
    return outcome.value


async def execute(solution: Solution, runner: ToolRunner) -> Execution:
    """Run every step in order and build the answer; raises ``SolutionFailed`` on any failed step."""
    run = Execution()
    try:
        for step in solution.steps:
            if isinstance(step, CallStep):
                arguments = step.arguments | {k: resolve(r, run.outputs) for k, r in step.bindings.items()}
                run.outputs.append(await _call(runner, step.tool, arguments, run))
            elif isinstance(step, ForEachStep):
                items = resolve(step.source, run.outputs)
                if not isinstance(items, list):
                    raise SolutionFailed(f"for_each over a non-list at step {step.source.step}")
                results = []
                for item in items:
                    bound = {k: get_path(item, path) for k, path in step.item_bindings.items()}
                    results.append(await _call(runner, step.tool, step.arguments | bound, run))
                run.outputs.append(results)
            elif isinstance(step, CodeStep):
                program = await runner.run_program(step.source)
                run.calls += program.calls
                if not program.ok:
                    raise SolutionFailed(f"the program failed: {program.error}")
                run.outputs.append(program.value)
            else:
                items = resolve(step.source, run.outputs)
                run.outputs.append(aggregate(step, items if isinstance(items, list) else [items]))
        run.answer = {key: resolve(ref, run.outputs) for key, ref in solution.answer.items()}
    except LookupError as exc:
        raise SolutionFailed(str(exc)) from exc
    return run


async def run_fresh(
    runner: ToolRunner, solution: Solution, extra: list[tuple[str, dict[str, Any]]]
) -> tuple[Execution, dict[str, Any]] | None:
    """Reset the session, run ``solution`` then the ``extra`` calls; the run and the diff from the seed,
    or None if any step failed."""
    await runner.reset(force=True)
    try:
        run = await execute(solution, runner)
    except SolutionFailed:
        return None
    for tool, arguments in extra:
        if not (await runner.call(tool, arguments)).ok:
            return None
    return run, await runner.diff()
