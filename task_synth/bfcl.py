"""BFCL v4 multi-turn entries as arena tasks on ``bfcl/multi_turn``, verified by BFCL's own checker.

A task's setup loads its entry into the session; its follow-ups are BFCL's later user turns (a turn that
only adds held-out functions gets BFCL's own prompt for that); ``tools`` and ``added_tools`` follow
BFCL's rules for excluded and held-out (``miss_func``) functions; ``turn_solutions`` hold the ground
truth per turn; the verifier is the environment's ``bfcl_check`` tool (the official checker, run in the
session's sandboxed child on the environment server). Ground-truth calls are parsed with ``ast`` here
(literals only, nothing executed).
"""

from __future__ import annotations

from environments.bfcl import data
from environments.bfcl.data import BadCall, parse_call
from environments.bfcl.environment import CHECK_TOOL, NAME, SETUP_TOOL
from environments.bfcl.package import VERSION
from task_synth.model import CallStep, Solution, Task, TaskKind, Verifier


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


__all__ = ["PERTURBATIONS", "BadCall", "bfcl_tasks", "entry_task", "parse_call", "perturb"]


def bfcl_tasks(categories: list[str] | None = None) -> list[Task]:
    """Tasks of the given categories (all four by default), in BFCL's order."""
    names = [data.check_category(c) for c in categories] if categories else list(data.CATEGORIES)
    return [entry_task(e) for name in names for e in data.entries(name)]


PERTURBATIONS = ("drop", "argument", "late")


def perturb(task: Task, how: str) -> Task:
    """A deliberately wrong reference: ``drop`` the last call of the first turn with calls, change the
    first string ``argument`` to a name that exists nowhere, or play the first turn's calls one user
    turn ``late``."""
    turns = [list(s.steps) for s in task.turn_solutions]
    first = next(i for i, steps in enumerate(turns) if steps)
    if how == "drop":
        turns[first].pop()
    elif how == "argument":
        turn, index, key = next(
            (t, i, k)
            for t, steps in enumerate(turns)
            for i, step in enumerate(steps)
            if isinstance(step, CallStep)
            for k, v in step.arguments.items()
            if isinstance(v, str)
        )
        step = turns[turn][index]
        assert isinstance(step, CallStep)
        turns[turn][index] = step.model_copy(update={"arguments": {**step.arguments, key: "zz_wrong"}})
    elif how == "late" and first + 1 < len(turns):
        turns[first + 1] = turns[first] + turns[first + 1]
        turns[first] = []
    else:
        raise ValueError(f"unknown perturbation {how!r} (or no later turn); use one of {PERTURBATIONS}")
    return task.model_copy(update={"turn_solutions": [Solution(steps=s) for s in turns]})
