"""In-process harness for an environment's own unit tests (the MCP server uses the same code path)."""

from __future__ import annotations

from typing import Any

from environments.sdk.environment import Environment
from environments.sdk.errors import ErrorCode, ToolError
from environments.sdk.execution import ToolOutcome, execute_tool
from environments.sdk.state import EpisodeState, StateStore


class ToolCallFailed(ToolError):
    """Raised by ``EnvHarness.call`` when a tool returns an error result."""


class EnvHarness:
    """One fresh episode state of ``env``, with helpers to call tools and inspect the database.

    ``harness.call("book", flight_id="F1")`` returns the result or raises ``ToolCallFailed``
    whose ``code`` is the tool's error code; ``harness.outcome(...)`` returns the raw outcome.
    """

    def __init__(self, env: Environment) -> None:
        self.env = env
        self.store = StateStore(env)
        self.state: EpisodeState = self.store.create()

    def outcome(self, tool: str, **arguments: Any) -> ToolOutcome:
        return execute_tool(self.env, self.state, tool, arguments)

    def call(self, tool: str, **arguments: Any) -> Any:
        outcome = self.outcome(tool, **arguments)
        if not outcome.ok:
            error = outcome.value
            raise ToolCallFailed(error["message"], code=ErrorCode(error["code"]), **error.get("details", {}))
        return outcome.value

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        """Run raw SQL against the episode database (for assertions)."""
        return self.state.conn.execute(sql, params).fetchall()

    def close(self) -> None:
        self.store.close_all()

    def __enter__(self) -> EnvHarness:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
