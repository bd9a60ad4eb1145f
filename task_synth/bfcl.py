"""BFCL v4 multi-turn entries as arena tasks on ``bfcl/multi_turn``, verified by BFCL's own checker.

A task's setup loads its entry into the session; its follow-ups are BFCL's later user turns (a turn that
only adds held-out functions gets BFCL's own prompt for that); ``tools`` and ``added_tools`` follow
BFCL's rules for excluded and held-out (``miss_func``) functions; ``turn_solutions`` hold the ground
truth per turn; the verifier is the environment's ``bfcl_check`` tool (the official checker, run in the
environment server). Ground-truth calls are parsed with ``ast`` here (literals only, nothing executed).
"""

from __future__ import annotations

import ast
from typing import Any

from environments.bfcl import data
from environments.bfcl.environment import CHECK_TOOL, NAME, SETUP_TOOL
from environments.bfcl.package import VERSION
from task_synth.model import CallStep, Solution, Task, TaskKind, Verifier


class BadCall(ValueError):
    """A ground-truth call string that is not ``name(literal, key=literal, ...)``."""


def parse_call(text: str) -> tuple[str, dict[str, Any]]:
    """``mv(source='a', destination='b')`` -> ``("mv", {...})``; positional arguments are named in the
    order of the function's documented parameters."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
            raise BadCall(f"not a function call: {text!r}")
        name = node.func.id
        arguments = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg}
        if node.args:
            order = list(data.function_docs()[name].parameters.get("properties", {}))
            for key, value in zip(order, node.args, strict=False):
                arguments[key] = ast.literal_eval(value)
    except (SyntaxError, ValueError, KeyError) as exc:
        raise BadCall(f"cannot parse ground-truth call {text!r}: {exc}") from None
    return name, arguments


def entry_task(found: data.Entry) -> Task:
    """One BFCL entry as a task (difficulty from the number of ground-truth calls)."""
    first, added = data.offered_functions(found)
    turns = [[parse_call(call) for call in turn] for turn in found.ground_truth]
    calls = sum(len(t) for t in turns)
    return Task(
        env=NAME,
        env_version=VERSION,
        kind=TaskKind.IMPORTED,
        request=data.user_message(found.turns[0]),
        follow_ups=[data.user_message(turn) for turn in found.turns[1:]],
        difficulty=max(1, min(5, (calls + 3) // 4)),
        setup=[CallStep(tool=SETUP_TOOL, arguments={"entry_id": found.id})],
        tools=first,
        added_tools=added,
        turn_solutions=[
            Solution(steps=[CallStep(tool=name, arguments=args) for name, args in turn]) for turn in turns
        ],
        verifier=Verifier(
            matcher="environment", check_tool=CHECK_TOOL, check_arguments={"entry_id": found.id}
        ),
        provenance={
            "source": "bfcl",
            "bfcl_id": found.id,
            "category": found.category,
            "bfcl_version": VERSION,
        },
        measured={"ground_truth_calls": float(calls), "user_turns": float(len(turns))},
    ).with_id()


def bfcl_tasks(categories: list[str] | None = None) -> list[Task]:
    """Tasks of the given categories (all four by default), in BFCL's order."""
    names = [data.check_category(c) for c in categories] if categories else list(data.CATEGORIES)
    return [entry_task(e) for name in names for e in data.entries(name)]
