"""Programmatic tasks from template families over the profile: list, (join per item), filter, reduce.

The family (offline, deterministic given the seed): list the records of one entity (with data-drawn
filters), follow each listed record to a related record (a per-item loop along a strong edge), and
reduce over the related records (aggregation across tables): count / sum / mean / max, or the record
with the largest value. ``branching`` adds a condition on a field that splits the items (only some of
them count).
"""

from __future__ import annotations

import random
from typing import Any

from task_synth.arguments import fill_arguments, page_size
from task_synth.graph import Edge, EdgeKind, ToolGraph
from task_synth.model import AggregateStep, CallStep, Condition, ForEachStep, Knobs, Ref, Solution
from task_synth.profile import EnvProfile, ToolProfile
from task_synth.runner import ToolRunner
from task_synth.values import get_path, list_path, scalar_fields

MIN_ITEMS = 3
MAX_JOIN_ITEMS = 12
LIST_FILTER_SHARES = (0.5, 0.25, 0.0)


def _numeric_fields(items: list[dict[str, Any]]) -> list[str]:
    fields = scalar_fields(items[0])
    return [
        name
        for name, value in fields.items()
        if isinstance(value, int | float)
        and not isinstance(value, bool)
        and not name.endswith(("id", "_key"))
        and len({scalar_fields(i).get(name) for i in items}) > 1
    ]


def _split_condition(items: list[dict[str, Any]], rng: random.Random) -> Condition | None:
    """An equality on a field whose value holds for some items but not all."""
    options = []
    for name in scalar_fields(items[0]):
        if name == "id" or name.endswith("_id"):
            continue
        values = [scalar_fields(i).get(name) for i in items]
        distinct = {v for v in values if isinstance(v, str | bool) or v is None}
        if 2 <= len(distinct) <= max(2, len(items) // 2) and None not in distinct:
            options.append((name, rng.choice(sorted(distinct, key=str))))
    if not options:
        return None
    name, value = rng.choice(options)
    return Condition(field=name, op="eq", value=value)


async def sample_program(
    runner: ToolRunner, profile: EnvProfile, graph: ToolGraph, knobs: Knobs, rng: random.Random
) -> Solution | None:
    """Build, and run once to check, one programmatic solution; None if this attempt found nothing."""
    listers = [
        t
        for t in profile.tools.values()
        if t.returns_list and not t.mutates and _join_edges(profile, graph, t.name)
    ]
    if not listers:
        return None
    lister = rng.choice(listers)
    listed = await _list(runner, profile, lister, rng)
    if listed is None:
        return None
    arguments, path, items = listed
    joined = await _join(runner, profile, graph, lister.name, Ref(step=0, path=path), items, rng)
    if joined is None:
        return None
    steps: list[Any] = [CallStep(tool=lister.name, arguments=arguments), joined[0]]
    items = joined[1]
    source = Ref(step=1, path="")
    condition = _split_condition(items, rng) if knobs.branching else None
    kept = [i for i in items if condition is None or scalar_fields(i).get(condition.field) == condition.value]
    numeric = _numeric_fields(kept) if len(kept) >= 2 else []
    functions = ["count"] if condition else []
    if numeric:
        functions += ["sum", "max", "mean"] + (["argmax"] if all("id" in i for i in kept) else [])
    if not functions:
        return None
    function = rng.choice(functions)
    step = AggregateStep(
        source=source,
        function=function,
        field=None if function == "count" else rng.choice(numeric),
        key_field="id" if function == "argmax" else None,
        where=[condition] if condition else [],
    )
    steps.append(step)
    return Solution(steps=steps, answer={_answer_key(step): Ref(step=len(steps) - 1)})


async def _list(
    runner: ToolRunner, profile: EnvProfile, lister: ToolProfile, rng: random.Random
) -> tuple[dict[str, Any], str, list[Any]] | None:
    """Call the lister with data-drawn filters until it returns a complete list of a joinable size
    (fewer filters on each try, since most misses are lists too short or empty)."""
    for share in LIST_FILTER_SHARES:
        arguments = fill_arguments(lister, profile, rng, optional_share=share, fixed=page_size(lister))
        if arguments is None:
            return None
        outcome = await runner.call(lister.name, arguments)
        path = list_path(outcome.value) if outcome.ok and not outcome.empty else None
        if path is None:
            continue
        items = get_path(outcome.value, path)
        limit = arguments.get("limit")
        if limit is not None and len(items) >= limit:
            continue  # possibly cut short by paging: the aggregate would be wrong
        if MIN_ITEMS <= len(items) <= MAX_JOIN_ITEMS:
            return arguments, path, items
    return None


def _answer_key(step: AggregateStep) -> str:
    if step.function == "count":
        return "count"
    if step.function == "argmax":
        return f"id_with_highest_{step.field}".replace(".", "_")
    return f"{step.function}_{step.field}".replace(".", "_")


def _join_edges(profile: EnvProfile, graph: ToolGraph, lister: str) -> list[Edge]:
    """Strong edges to a query tool whose required inputs all come from one listed item."""
    return [
        e
        for e in graph.out_edges(lister)
        if e.kind is EdgeKind.STRONG
        and not profile.tools[e.dst].mutates
        and {p.name for p in profile.tools[e.dst].params if p.required} <= set(e.bindings)
    ]


async def _join(
    runner: ToolRunner,
    profile: EnvProfile,
    graph: ToolGraph,
    lister: str,
    source: Ref,
    items: list[dict[str, Any]],
    rng: random.Random,
) -> tuple[ForEachStep, list[Any]] | None:
    """A per-item loop along a strong edge whose only required input comes from each item."""
    edges = _join_edges(profile, graph, lister)
    if not edges:
        return None
    edge = rng.choice(edges)
    required = {p.name for p in profile.tools[edge.dst].params if p.required}
    bindings = {param: source for param, source in edge.bindings.items() if param in required}
    results = []
    for item in items:
        try:
            arguments = {param: get_path(item, source) for param, source in bindings.items()}
        except LookupError:
            return None
        outcome = await runner.call(edge.dst, arguments)
        if not outcome.ok or not isinstance(outcome.value, dict):
            return None
        results.append(outcome.value)
    return ForEachStep(source=source, tool=edge.dst, item_bindings=bindings), results
