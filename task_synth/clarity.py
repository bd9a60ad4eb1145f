"""Ambiguity check: can a reader tie every answer key of a task to the one call it comes from?

A key describes an entity ("the customer's city"). When the solution makes another call of the same tool,
or of a tool about that entity (a profile looked up twice, an order read and then cancelled), the
description must say which call it means, in words the request uses: "... when you X" with X asked for
exactly once in the request, or "... the second time you X" with X asked for at least twice. A key that
does neither is *untied*: the natural reading may well fail the verifier.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from task_synth.model import CallStep, Task
from task_synth.profile import EnvProfile
from task_synth.wording import ORDINALS, is_noun, key_entity, rival_calls

_TIE = re.compile(r"(?:when you|the (\w+) time you) (.+)$")


def _description(request: str, key: str) -> str | None:
    match = re.search(rf'"{re.escape(key)}" \(([^()]*)\)', request)
    return match.group(1) if match else None


def untied_keys(task: Task, profile: EnvProfile) -> list[str]:
    """The answer keys of ``task`` that a reader cannot tie to one call of its solution."""
    calls = [s for s in task.solution.steps if isinstance(s, CallStep)]
    if len(calls) != len(task.solution.steps):
        return []  # programs answer one aggregate, computed once
    entities = [profile.tools[s.tool].entity if s.tool in profile.tools else s.tool for s in calls]
    body = task.request.split("Reply with", 1)[0].lower()
    untied = []
    for key, ref in task.solution.answer.items():
        entity = key_entity(ref.path, entities[ref.step])
        rivals = rival_calls(ref.step, entity, [c.tool for c in calls], entities)
        if not rivals and is_noun(entity):
            continue
        described = _description(task.request, key)
        tie = _TIE.search(described or "")
        if tie is None:
            untied.append(key)
            continue
        ordinal, action = tie.group(1), tie.group(2).lower()
        found = body.count(action)
        if (ordinal is None and found != 1) or (
            ordinal is not None and (ordinal not in ORDINALS or found <= ORDINALS.index(ordinal))
        ):
            untied.append(key)
    return untied


def ambiguous_share(tasks: Iterable[Task], profiles: dict[str, EnvProfile]) -> float:
    """Share of ``tasks`` with at least one untied answer key (``profiles`` by environment name)."""
    tasks = list(tasks)
    if not tasks:
        return 0.0
    ambiguous = sum(1 for t in tasks if t.env in profiles and untied_keys(t, profiles[t.env]))
    return ambiguous / len(tasks)
