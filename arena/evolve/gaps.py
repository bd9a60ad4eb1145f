"""Capability-gap analysis of a round's recorded episodes.

Success and failure-mode rates by environment, category, level, environment x level, tool and task
kind (with 95% Wilson intervals over scored episodes); a ranked list of weak spots (environment x level,
with its dominant failure mode, scored by how far below the mean it is and how many tasks back it); and
rule-based per-environment guidelines. Infrastructure failures are never counted.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from arena.eval.stats import wilson_interval
from arena.store import EpisodeSummary
from task_synth.model import Task

ADVICE = {
    "invalid_arguments": "arguments do not match the tool schemas: practise exact types and required keys",
    "unknown_tool": "calls name tools that do not exist: practise reading the tool list",
    "tool_error_unrecovered": "tool errors are not recovered from: practise retrying corrected calls",
    "format_error": "tool calls are malformed: practise the tool-call format",
    "no_final_answer": "episodes run out of turns or tokens: practise short chains that end in an answer",
    "premature_answer": "answers come before any tool call: practise looking data up first",
    "state_mismatch": "writes are missing or extra: practise state-changing tasks",
    "wrong_answer": "answers are wrong after the right calls: practise reading fields out of results",
}
"""Rule-based advice per dominant failure mode (the offline guideline)."""

GROUPINGS = ("env", "category", "level", "env_level", "kind", "tool")


@dataclass(frozen=True)
class Rate:
    """Success of one group: passes of scored episodes, its 95% interval, and its failure modes."""

    group: str
    key: str
    scored: int
    passed: int
    low: float
    high: float
    failure_modes: dict[str, int]

    @property
    def success(self) -> float:
        return self.passed / self.scored if self.scored else 0.0


@dataclass(frozen=True)
class WeakSpot:
    """An environment x level the policy is weak at: ``score`` = deficit below the mean x sqrt(tasks)."""

    env: str
    level: int
    failure_mode: str
    success: float
    deficit: float
    tasks: int
    score: float
    tools: list[str]


@dataclass
class GapReport:
    """Everything the next round's targeted synthesis needs, JSON-able for the store."""

    mean_success: float
    scored: int
    rates: list[Rate] = field(default_factory=list)
    weak_spots: list[WeakSpot] = field(default_factory=list)
    guidelines: dict[str, str] = field(default_factory=dict)

    def rate(self, group: str, key: str) -> Rate | None:
        return next((r for r in self.rates if r.group == group and r.key == key), None)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _rates(group: str, buckets: dict[str, list[EpisodeSummary]]) -> list[Rate]:
    out = []
    for key in sorted(buckets):
        scored = buckets[key]
        passed = sum(bool(e.passed) for e in scored)
        low, high = wilson_interval(passed, len(scored))
        modes = Counter(e.failure_mode for e in scored if not e.passed)
        out.append(Rate(group, key, len(scored), passed, low, high, dict(sorted(modes.items()))))
    return out


def _task_tools(task: Task | None) -> list[str]:
    if task is None or task.solution is None:
        return []
    return sorted({name for name in task.solution.tool_calls if name not in ("aggregate", "code")})


def _guideline(env: str, episodes: list[EpisodeSummary], tools_failed: Counter[str]) -> str:
    failed = [e for e in episodes if not e.passed]
    if not failed:
        return f"{env}: every scored episode passed; raise the level."
    modes = Counter(e.failure_mode for e in failed)
    mode, count = modes.most_common(1)[0]
    advice = ADVICE.get(mode, "")
    tools = ", ".join(tool for tool, _ in tools_failed.most_common(3))
    where = f"; tools most involved: {tools}" if tools else ""
    return f"{env}: {count}/{len(failed)} failures are {mode} ({advice}){where}."


def analyse(episodes: Iterable[EpisodeSummary], tasks: dict[str, Task], top: int = 10) -> GapReport:
    """The gap report of a round's episodes (``tasks`` by id supplies tools and kinds)."""
    scored = [e for e in episodes if e.passed is not None]
    mean = sum(bool(e.passed) for e in scored) / len(scored) if scored else 0.0
    report = GapReport(mean_success=mean, scored=len(scored))
    keys: dict[str, Callable[[EpisodeSummary], list[str]]] = {
        "env": lambda e: [e.env],
        "category": lambda e: [e.category],
        "level": lambda e: [str(e.level)],
        "env_level": lambda e: [f"{e.env}:{e.level}"],
        "kind": lambda e: [e.kind],
        "tool": lambda e: _task_tools(tasks.get(e.task_id)),
    }
    for group in GROUPINGS:
        buckets: dict[str, list[EpisodeSummary]] = defaultdict(list)
        for episode in scored:
            for key in keys[group](episode):
                buckets[key].append(episode)
        report.rates += _rates(group, buckets)
    cells: dict[tuple[str, int], list[EpisodeSummary]] = defaultdict(list)
    for episode in scored:
        cells[(episode.env, episode.level)].append(episode)
    spots = []
    for (env, level), cell in cells.items():
        success = sum(bool(e.passed) for e in cell) / len(cell)
        n_tasks = len({e.task_id for e in cell})
        failed = [e for e in cell if not e.passed]
        if not failed:
            continue
        deficit = max(mean - success, 0.0)
        tools = Counter(t for e in failed for t in _task_tools(tasks.get(e.task_id)))
        mode = Counter(e.failure_mode for e in failed).most_common(1)[0][0]
        score = (deficit + 1.0 / (len(scored) + 1)) * math.sqrt(n_tasks) * (1 - success)
        spots.append(
            WeakSpot(env, level, mode, success, deficit, n_tasks, score, [t for t, _ in tools.most_common(3)])
        )
    report.weak_spots = sorted(spots, key=lambda s: (-s.score, s.env, s.level))[:top]
    by_env: dict[str, list[EpisodeSummary]] = defaultdict(list)
    for episode in scored:
        by_env[episode.env].append(episode)
    for env in sorted(by_env):
        tools_failed = Counter(
            t for e in by_env[env] if not e.passed for t in _task_tools(tasks.get(e.task_id))
        )
        report.guidelines[env] = _guideline(env, by_env[env], tools_failed)
    return report
