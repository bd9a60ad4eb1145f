"""Infrastructure failures: typed, carrying their cause, and never to be scored as task failures."""

from __future__ import annotations

from enum import StrEnum


class InfraCause(StrEnum):
    """Why an episode could not be completed for reasons outside the agent's control."""

    WORKER_DIED = "worker_died"
    CALL_TIMEOUT = "call_timeout"
    SESSION_EXPIRED = "session_expired"
    SERVER_UNREACHABLE = "server_unreachable"
    START_FAILED = "start_failed"
    POOL_CLOSED = "pool_closed"
    NO_CAPACITY = "no_capacity"


class InfrastructureError(RuntimeError):
    """An episode failed because of the runtime (dead worker, timeout...), not because of the agent.

    Rollout code must report it as an infrastructure error and may retry the episode on a fresh session.
    """

    def __init__(self, cause: InfraCause, message: str, *, env: str = "", worker: str = "") -> None:
        super().__init__(f"[{cause}] {message}")
        self.cause = cause
        self.env = env
        self.worker = worker
        self.retryable = cause is not InfraCause.POOL_CLOSED
