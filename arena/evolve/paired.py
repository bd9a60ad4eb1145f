"""Paired comparison of two evaluations of the same tasks: which tasks flipped, and the exact McNemar test
(a two-sided binomial test on the discordant pairs)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from math import comb
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


def paired(before: list[EpisodeSummary], after: list[EpisodeSummary]) -> Paired:
    """Compare the first scored episode of each task in ``before`` and ``after`` (infrastructure errors
    are left out of both)."""

    def outcomes(episodes: list[EpisodeSummary]) -> dict[str, bool]:
        found: dict[str, bool] = {}
        for episode in episodes:
            if episode.passed is not None:
                found.setdefault(episode.task_id, bool(episode.passed))
        return found

    a, b = outcomes(before), outcomes(after)
    both = a.keys() & b.keys()
    gained = sum(1 for t in both if b[t] and not a[t])
    lost = sum(1 for t in both if a[t] and not b[t])
    return Paired(gained, lost, len(both), mcnemar_exact(gained, lost))
