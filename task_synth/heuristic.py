"""A simple heuristic agent, used to measure difficulty: it only follows strong dependency edges.

It reads the entities named in the request (``<param label> <value>``), calls every query tool whose
required inputs are all named, then repeatedly follows strong edges from what it got (first item of a
list), calling a write tool only if the request spells out that tool's purpose. It answers each
requested key from the freshest output with a matching field. Harder levels hide the intermediate
values, mix in weak/independent steps and ask for aggregates, so its solve rate should fall.
"""

from __future__ import annotations

import re
from typing import Any

from task_synth.graph import EdgeKind, ToolGraph
from task_synth.model import Task, Verdict
from task_synth.profile import EnvProfile, ToolProfile
from task_synth.runner import ToolRunner
from task_synth.values import get_path, list_path, records, scalar_fields, singular
from task_synth.verify import verify
from task_synth.wording import purpose

MAX_CALLS = 10
_KEY = re.compile(r'"([A-Za-z0-9_]+)"')


def named_values(request: str, profile: EnvProfile) -> dict[str, Any]:
    """``param -> value`` for every ``<param label> <value>`` the request mentions."""
    found: dict[str, Any] = {}
    for tool in profile.tools.values():
        for param in tool.params:
            label = re.escape(param.name.replace("_", " "))
            match = re.search(rf"\b{label} (?:'([^']*)'|(-?\d+(?:\.\d+)?)\b)", request)
            if match is None:
                continue
            text, number = match.groups()
            found[param.name] = (
                text if text is not None else (float(number) if "." in number else int(number))
            )
    return found


def _callable(tool: ToolProfile, known: dict[str, Any]) -> dict[str, Any] | None:
    if any(p.required and p.name not in known for p in tool.params):
        return None
    return {p.name: known[p.name] for p in tool.params if p.name in known}


def _answer(keys: list[str], history: list[tuple[ToolProfile, Any]]) -> dict[str, Any]:
    answer: dict[str, Any] = {}
    for key in keys:
        for tool, output in reversed(history):
            path = list_path(output)
            if key.endswith("_ids") and path is not None:
                entity = singular(path.rsplit(".", 1)[-1]) if path else tool.entity
                if key == f"{entity}_ids":
                    answer[key] = [r.get("id") for r in (output if path == "" else get_path(output, path))]
                    break
            fields = scalar_fields(records(output)[0]) if records(output) else {}
            field = key[len(tool.entity) + 1 :] if key.startswith(f"{tool.entity}_") else key
            if field in fields:
                answer[key] = fields[field]
                break
    return answer


async def attempt(task: Task, profile: EnvProfile, graph: ToolGraph, runner: ToolRunner) -> Verdict:
    """One try at ``task`` in a fresh session of ``runner``; the verdict of its answer and final state."""
    known = named_values(task.request, profile)
    request = task.request.lower()
    history: list[tuple[ToolProfile, Any]] = []
    called: set[tuple[str, str]] = set()

    async def call(tool: ToolProfile, arguments: dict[str, Any]) -> None:
        signature = (tool.name, repr(sorted(arguments.items())))
        if signature in called or len(called) >= MAX_CALLS:
            return
        called.add(signature)
        outcome = await runner.call(tool.name, arguments)
        if outcome.ok and not outcome.empty:
            history.append((tool, outcome.value))

    for tool in profile.tools.values():
        if not tool.mutates and (arguments := _callable(tool, known)) and arguments:
            await call(tool, arguments)
    position = 0
    while position < len(history) and len(called) < MAX_CALLS:
        source, output = history[position]
        position += 1
        first = records(output)
        item = first[1] if list_path(output) not in (None, "") and len(first) > 1 else (first or [{}])[0]
        for edge in graph.out_edges(source.name):
            target = profile.tools[edge.dst]
            if edge.kind is not EdgeKind.STRONG or (target.mutates and purpose(target) not in request):
                continue
            bound = {
                param: item.get(field)
                for param, field in edge.bindings.items()
                if item.get(field) is not None
            }
            arguments = _callable(target, known | bound)
            if arguments is not None:
                await call(target, arguments)
    answer = _answer(_KEY.findall(task.request), history)
    diff = await runner.diff() if task.verifier.state is not None else None
    return verify(task, answer, diff)
