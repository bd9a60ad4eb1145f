"""Targeted synthesis: the next round's training tasks, allocated by the capability gaps.

More tasks go where the policy is weak (environments below the mean get a larger share), at its frontier
and the level just above it (the frontier: the highest level it passes at least half the time), each
unless mastered (80%), preferring tasks that exercise the tools it fails on. Levels further up are left
to later rounds: a round practises what the last evaluation shows is within reach. Where the evaluation
failed by naming unknown tools or passing invalid arguments, as many of the environment's new reference
solutions first make such a wrong call and recover from its error (``recovery``; ``slips_for``). Every
batch records why it was asked for.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Any

from arena.evolve.gaps import GapReport
from arena.policies.slips import SLIP_KINDS, Slip
from task_synth.model import CallStep, Task

FRONTIER_SUCCESS = 0.5
MASTERED_SUCCESS = 0.8
REACH = 1
"""Levels above the frontier that a round practises by default (``targeted.reach``)."""
RECOVERY_MAX_SHARE = 0.5
"""At most this share of a batch's reference solutions slip first: the others show the clean solution."""


@dataclass(frozen=True)
class Batch:
    """Synthesize ``n`` tasks of ``env`` at ``levels``, preferring ``focus_tools``; ``reason`` says why.
    ``slips``: how many of their reference solutions first make a wrong call, by kind."""

    env: str
    n: int
    levels: list[int]
    focus_tools: list[str]
    reason: str
    slips: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _shares(weights: dict[str, float], budget: int) -> dict[str, int]:
    """``budget`` split by weight (largest remainders), at least one each while the budget allows."""
    total = sum(weights.values()) or 1.0
    exact = {env: budget * w / total for env, w in weights.items()}
    counts = {env: int(x) for env, x in exact.items()}
    for env in sorted(weights, key=lambda e: (counts[e] > 0, -(exact[e] - counts[e]), e)):
        if sum(counts.values()) >= budget:
            break
        counts[env] += 1
    return counts


def frontier(report: GapReport, env: str, max_level: int) -> int:
    """The highest level at which ``env``'s success reaches 50% (1 when none does)."""
    passed = [
        level
        for level in range(1, max_level + 1)
        if (rate := report.rate("env_level", f"{env}:{level}")) is not None
        and rate.success >= FRONTIER_SUCCESS
    ]
    return max(passed, default=1)


def gap_levels(report: GapReport, env: str, max_level: int, reach: int = REACH) -> list[int]:
    """The levels to practise: the frontier and the ``reach`` levels above it (at most ``max_level``),
    each level the last evaluation did not master (success below 80%, or not evaluated); the level above
    the frontier if all are mastered."""
    edge = frontier(report, env, max_level)
    levels = [
        level
        for level in range(edge, min(edge + reach, max_level) + 1)
        if (rate := report.rate("env_level", f"{env}:{level}")) is None or rate.success < MASTERED_SUCCESS
    ]
    return levels or [min(edge + 1, max_level)]


def slip_counts(report: GapReport, env: str, n: int) -> dict[str, int]:
    """How many of ``env``'s ``n`` new reference solutions slip first, by kind: the share of its evaluated
    episodes that failed on an unknown tool or invalid arguments (at most ``RECOVERY_MAX_SHARE``), split
    between the two as those failures are."""
    rate = report.rate("env", env)
    if rate is None or not rate.scored:
        return {}
    failed = {kind: rate.failure_modes[kind] for kind in SLIP_KINDS if rate.failure_modes.get(kind)}
    total = round(min(sum(failed.values()) / rate.scored, RECOVERY_MAX_SHARE) * n)
    return {kind: count for kind, count in _shares(failed, total).items() if count} if failed else {}


def slips_for(tasks: list[Task], counts: dict[str, int], seed: int) -> dict[str, Slip]:
    """``counts`` slips (by kind) over ``tasks`` whose solutions make calls, each before a call of its
    solution drawn at random (seeded): which tasks, and where, are the draw's."""
    rng = random.Random(seed)
    calling = [
        (task, calls)
        for task in tasks
        if task.solution and (calls := sum(isinstance(s, CallStep) for s in task.solution.steps))
    ]
    chosen = rng.sample(calling, min(sum(counts.values()), len(calling)))
    kinds = [kind for kind, count in counts.items() for _ in range(count)]
    drawn = zip(chosen, kinds, strict=False)  # fewer tasks that make calls than slips asked: fewer slips
    return {task.id: Slip(kind, rng.randrange(calls)) for (task, calls), kind in drawn}


def _levels_text(levels: list[int]) -> str:
    return f"level {levels[0]}" if len(levels) == 1 else f"levels {levels[0]}-{levels[-1]}"


def allocate(
    report: GapReport,
    envs: list[str],
    budget: int,
    *,
    max_level: int = 5,
    floor: float = 0.15,
    reach: int = REACH,
    recovery: bool = False,
) -> list[Batch]:
    """Split ``budget`` tasks over ``envs`` by weakness; one batch per environment that gets any; with
    ``recovery``, each batch's ``slips`` (``slip_counts``)."""
    weights = {}
    for env in envs:
        rate = report.rate("env", env)
        weights[env] = floor + (1.0 - rate.success if rate is not None else 1.0)
    batches = []
    for env, n in _shares(weights, budget).items():
        if n == 0:
            continue
        edge = frontier(report, env, max_level)
        levels = gap_levels(report, env, max_level, reach)
        spots = [s for s in report.weak_spots if s.env == env]
        tools = list(dict.fromkeys(t for s in spots for t in s.tools))[:3]
        rate = report.rate("env", env)
        seen = (
            f"success {rate.success:.0%} vs mean {report.mean_success:.0%}" if rate else "not evaluated yet"
        )
        weakest = f", weakest at level {spots[0].level} ({spots[0].failure_mode})" if spots else ""
        reason = (
            f"{env}: {seen}{weakest}; {n} of {budget} tasks at {_levels_text(levels)} "
            f"(not mastered, from its frontier: level {edge}, up to {reach} above)"
            + (f", favouring {', '.join(tools)}" if tools else "")
        )
        slips = slip_counts(report, env, n) if recovery else {}
        if slips:
            kinds = ", ".join(f"{kind} {count}" for kind, count in slips.items())
            reason += f"; {sum(slips.values())} of them recover from a wrong call first ({kinds})"
        batches.append(Batch(env, n, levels, tools, reason, slips))
    return batches


def allocate_uniform(envs: list[str], budget: int, *, max_level: int = 5) -> list[Batch]:
    """The gap-blind control: ``budget`` tasks split evenly over ``envs`` (the remainder to the first by
    name), each environment's tasks over every level 1..``max_level``; no gap report is read."""
    levels = list(range(1, max_level + 1))
    batches = []
    for env, n in _shares(dict.fromkeys(envs, 1.0), budget).items():
        if n:
            reason = f"{env}: uniform control, {n} of {budget} tasks at levels 1-{max_level}"
            batches.append(Batch(env, n, levels, [], reason))
    return batches


def spread_over_levels(tasks: list[Task], n: int) -> list[Task]:
    """``n`` of ``tasks`` taken level by level in turn (each level's tasks in their given order), so a
    batch asked for several levels holds them in equal shares where the synthesis allows."""
    by_level: dict[int, list[Task]] = {}
    for task in tasks:
        by_level.setdefault(task.difficulty, []).append(task)
    ranked = sorted(
        ((rank, level, task) for level, group in by_level.items() for rank, task in enumerate(group)),
        key=lambda item: (item[0], item[1]),
    )
    return [task for _, _, task in ranked[:n]]
