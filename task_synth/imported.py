"""Agent-World's released questions as arena tasks, verified with their own answer matcher."""

from __future__ import annotations

import math
from typing import Any

from environments.importers.agentworld.questions import ImportedQuestion
from environments.importers.agentworld.store import load_questions, load_replay
from task_synth.model import CallStep, Solution, Task, TaskKind, Verifier


def question_task(question: ImportedQuestion, env_version: str, replay: dict[str, Any] | None = None) -> Task:
    """One released question: its text, its verified tool chain as the reference solution, and a
    verifier that compares answers the way the import replay does (clock readings forgiven). With the
    question's ``replay`` entry, its verdict and the answer paths it found seed-dependent
    (``not_reproducible``: a fresh draw of the reference's shape is accepted there) go in ``provenance``."""
    chain = question.verified_tool_chain
    answer = question.reference_answer
    return Task(
        env=f"agentworld/{question.env}" if "/" not in question.env else question.env,
        env_version=env_version,
        kind=TaskKind.IMPORTED,
        request=question.task,
        difficulty=max(1, min(5, math.ceil(len(chain) / 2))),
        solution=Solution(steps=[CallStep(tool=c.tool, arguments=dict(c.args)) for c in chain]),
        reference_answer=answer if isinstance(answer, dict) else None,
        verifier=Verifier(matcher="agentworld", reference_answer=answer),
        provenance={
            "source": "agentworld",
            "question_index": question.index,
            "success_criteria": list(question.success_criteria),
            **(
                {"replay_verdict": replay["verdict"], "not_reproducible": list(replay.get("random", []))}
                if replay and "verdict" in replay
                else {}
            ),
        },
        measured={
            "chain_length": float(len(chain)),
            "distinct_tools": float(len({c.tool for c in chain})),
        },
    ).with_id()


def imported_question_tasks(env: str, env_version: str = "") -> list[Task]:
    """Tasks for every released question of ``agentworld/<id>`` whose reference answer is valid JSON
    and, when the import replayed them, whose replay reproduced it (an answer nobody can reproduce
    makes no task)."""
    env_id = env.split("/", 1)[-1]
    replays = load_replay(env_id)
    return [
        question_task(q, env_version, replays.get(q.index))
        for q in load_questions(env_id)
        if q.reference_valid and (not replays or replays.get(q.index, {}).get("verdict") == "reproduced")
    ]
