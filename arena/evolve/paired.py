"""Paired comparison of two evaluations of the same tasks: which tasks flipped, and the exact McNemar test
(a two-sided binomial test on the discordant pairs); and of two arms run with several seeds each."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from math import comb, sqrt
from typing import Any

from arena.store import EpisodeSummary


@dataclass(frozen=True)
class Paired:
    """``gained``: tasks failed before and passed after; ``lost``: the reverse; ``tasks``: scored in both."""

    gained: int
    lost: int
    tasks: int
    p_value: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"p_value": round(self.p_value, 6)}


def mcnemar_exact(gained: int, lost: int) -> float:
    """Two-sided exact McNemar p-value for ``gained`` vs ``lost`` discordant pairs."""
    n = gained + lost
    if n == 0:
        return 1.0
    tail = sum(comb(n, k) for k in range(min(gained, lost) + 1)) / 2**n
    return min(1.0, 2 * tail)


def outcomes(episodes: list[EpisodeSummary]) -> dict[str, bool]:
    """Task id -> whether its first scored episode passed (infrastructure errors left out)."""
    found: dict[str, bool] = {}
    for episode in episodes:
        if episode.passed is not None:
            found.setdefault(episode.task_id, bool(episode.passed))
    return found


def paired(before: list[EpisodeSummary], after: list[EpisodeSummary]) -> Paired:
    """Compare the first scored episode of each task in ``before`` and ``after`` (infrastructure errors
    are left out of both)."""
    a, b = outcomes(before), outcomes(after)
    both = a.keys() & b.keys()
    gained = sum(1 for t in both if b[t] and not a[t])
    lost = sum(1 for t in both if a[t] and not b[t])
    return Paired(gained, lost, len(both), mcnemar_exact(gained, lost))


@dataclass(frozen=True)
class ArmDifference:
    """Arm A minus arm B on the same tasks: the mean over tasks of (A's success over seeds - B's), its
    95% interval (normal, over tasks), and the exact McNemar test on the discordant (task, seed) pairs."""

    difference: float
    ci95: tuple[float, float]
    a_only: int
    b_only: int
    tasks: int
    p_value: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {
            "difference": round(self.difference, 4),
            "ci95": [round(x, 4) for x in self.ci95],
            "p_value": round(self.p_value, 6),
        }


def arm_difference(a: list[dict[str, bool]], b: list[dict[str, bool]]) -> ArmDifference:
    """Compare two arms, each one outcome map (``outcomes``) per seed, seed ``i`` of A paired with seed
    ``i`` of B, over the tasks scored in every run of both."""
    runs = [*a, *b]
    tasks = sorted(set.intersection(*(set(r) for r in runs))) if runs else []
    seeds = min(len(a), len(b))
    per_task = [sum(a[i][t] - b[i][t] for i in range(seeds)) / seeds for t in tasks] if seeds else []
    n = len(per_task)
    mean = sum(per_task) / n if n else 0.0
    spread = sqrt(sum((d - mean) ** 2 for d in per_task) / (n - 1)) if n > 1 else 0.0
    half = 1.96 * spread / sqrt(n) if n else 0.0
    a_only = sum(a[i][t] and not b[i][t] for i in range(seeds) for t in tasks)
    b_only = sum(b[i][t] and not a[i][t] for i in range(seeds) for t in tasks)
    return ArmDifference(mean, (mean - half, mean + half), a_only, b_only, n, mcnemar_exact(a_only, b_only))
