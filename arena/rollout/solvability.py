"""The Agent-World solvability filter: is a task solved in at least k of n tries by a policy?

Episodes that hit an infrastructure failure are retried (a fresh session each time); one still failing
after the retries leaves its try unscored, and the result is ``undetermined`` when the unscored tries
could change the outcome. It is never counted as the policy failing.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from arena.policies.base import Policy
from arena.rollout.episode import EpisodeConfig, SessionProvider, run_episode
from arena.rollout.records import EpisodeRecord
from task_synth.model import Task

INFRA_RETRIES = 2


@dataclass
class SolvabilityResult:
    """``passes`` of ``scored`` tries (of ``n``); ``episodes`` holds the last attempt of every try."""

    k: int
    n: int
    passes: int = 0
    scored: int = 0
    retried: int = 0
    episodes: list[EpisodeRecord] = field(default_factory=list)

    @property
    def solved(self) -> bool | None:
        """True when at least k tries passed, False when that can no longer happen, else None."""
        if self.passes >= self.k:
            return True
        return None if self.passes + (self.n - self.scored) >= self.k else False

    @property
    def undetermined(self) -> bool:
        return self.solved is None

    @property
    def solve_rate(self) -> float | None:
        """Passes per scored try (None if no try was scored)."""
        return self.passes / self.scored if self.scored else None


async def _scored_try(
    pool: SessionProvider,
    task: Task,
    policy: Policy,
    config: EpisodeConfig,
    limit: asyncio.Semaphore,
    result: SolvabilityResult,
) -> EpisodeRecord:
    attempt = 0
    while True:
        async with limit:
            episode = await run_episode(pool, task, policy, config, repeat=attempt)
        if episode.infra_error is None or attempt == INFRA_RETRIES:
            return episode
        attempt += 1
        result.retried += 1


async def solved_k_of_n(
    pool: SessionProvider,
    task: Task,
    policy: Policy,
    k: int,
    n: int,
    concurrency: int,
    config: EpisodeConfig | None = None,
) -> SolvabilityResult:
    """Run ``n`` episodes of ``policy`` on ``task`` (at most ``concurrency`` at a time) and count passes."""
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got k={k}, n={n}")
    result = SolvabilityResult(k=k, n=n)
    limit = asyncio.Semaphore(concurrency)
    result.episodes = list(
        await asyncio.gather(
            *(_scored_try(pool, task, policy, config or EpisodeConfig(), limit, result) for _ in range(n))
        )
    )
    result.scored = sum(e.passed is not None for e in result.episodes)
    result.passes = sum(e.passed is True for e in result.episodes)
    return result
