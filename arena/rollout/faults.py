"""Environment-side latency and fault injection: tool response delays, injected tool errors and timeouts.

Injected faults are behaviour of the environment that the agent has to handle: they are scored like any
tool error and reported apart from real infrastructure failures (which are never scored). Each episode
draws from its own generator, seeded by the run's seed, the task and the repeat, so a rerun injects the
same faults.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from typing import Any, Literal

INJECTED_ERROR = "UNAVAILABLE"
INJECTED_TIMEOUT = "TIMEOUT"


@dataclass(frozen=True)
class FaultConfig:
    """``delay``: none, fixed (``delay_s``), uniform (0..``delay_s``) or lognormal (median ``delay_s``,
    ``delay_sigma``); ``error_rate`` / ``timeout_rate``: the share of calls answered by an injected error
    or by a timeout after ``timeout_s``; ``tools``: the tools affected (empty: all)."""

    delay: Literal["none", "fixed", "uniform", "lognormal"] = "none"
    delay_s: float = 0.0
    delay_sigma: float = 0.5
    error_rate: float = 0.0
    timeout_rate: float = 0.0
    timeout_s: float = 2.0
    tools: tuple[str, ...] = ()
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.error_rate + self.timeout_rate <= 1:
            raise ValueError("faults: error_rate + timeout_rate must be within [0, 1]")
        if self.delay_s < 0 or self.timeout_s < 0:
            raise ValueError("faults: delay_s and timeout_s must be >= 0")

    @property
    def active(self) -> bool:
        return self.delay != "none" or self.error_rate > 0 or self.timeout_rate > 0


class FaultInjector:
    """One episode's faults: ``before_call`` sleeps the drawn delay and says which fault (if any) answers
    the call instead of the tool."""

    def __init__(self, config: FaultConfig, episode_key: str) -> None:
        self.config = config
        self._rng = random.Random(f"{config.seed}:{episode_key}")

    def _delay(self) -> float:
        c = self.config
        if c.delay == "fixed":
            return c.delay_s
        if c.delay == "uniform":
            return self._rng.uniform(0, c.delay_s)
        if c.delay == "lognormal":
            return self._rng.lognormvariate(0, c.delay_sigma) * c.delay_s
        return 0.0

    async def before_call(self, tool: str) -> dict[str, Any] | None:
        """Wait the injected delay; the error payload of an injected fault, or None to run the tool."""
        c = self.config
        if not c.active or (c.tools and tool not in c.tools):
            return None
        if delay := self._delay():
            await asyncio.sleep(delay)
        draw = self._rng.random()
        if draw < c.error_rate:
            return {"code": INJECTED_ERROR, "message": f"{tool} is temporarily unavailable; try again"}
        if draw < c.error_rate + c.timeout_rate:
            await asyncio.sleep(c.timeout_s)
            return {"code": INJECTED_TIMEOUT, "message": f"{tool} timed out after {c.timeout_s}s; try again"}
        return None
