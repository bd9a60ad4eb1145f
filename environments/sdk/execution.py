"""Running one tool call against one episode state, as one transaction."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from environments.sandbox.runner import SandboxUnavailable
from environments.sdk.environment import Environment
from environments.sdk.errors import ErrorCode, ToolError
from environments.sdk.state import EpisodeState

logger = logging.getLogger(__name__)
MAX_DETAIL_CHARS = 200


@dataclass(frozen=True)
class ToolOutcome:
    """The result of a tool call: a JSON result, or an error payload ``{code, message, details?}``."""

    ok: bool
    value: Any

    @property
    def error_code(self) -> str | None:
        return None if self.ok else self.value["code"]


class _ReadOnlyViolation(Exception):
    pass


def execute_tool(
    env: Environment, state: EpisodeState, name: str, arguments: Mapping[str, Any] | None
) -> ToolOutcome:
    """Validate and run ``name`` on ``state``.

    Writes commit only if the tool returns normally; a raised error (typed or not) rolls the whole
    call back. A tool declared read-only never commits, and writing from one is reported as INTERNAL.
    ``SandboxUnavailable`` (a tool whose code must run sandboxed, and no sandbox here) propagates.
    """
    spec = env.tools.get(name)
    if spec is None:
        known = ", ".join(sorted(env.tools))
        return ToolOutcome(
            False, {"code": str(ErrorCode.UNKNOWN_TOOL), "message": f"unknown tool {name!r}; tools: {known}"}
        )
    conn = state.conn
    try:
        with state.transaction() as db:
            changes_before = conn.total_changes
            result = spec.call(db, arguments)
            if not spec.mutates:
                db.flush()
                if conn.total_changes != changes_before:
                    raise _ReadOnlyViolation
        return ToolOutcome(True, result)
    except ToolError as exc:
        return ToolOutcome(False, exc.to_payload())
    except SandboxUnavailable:
        raise  # infrastructure (no sandbox for the tool's code): never an outcome of the call
    except _ReadOnlyViolation:
        message = f"tool {name!r} is declared read-only but tried to write; its writes were rolled back"
        return ToolOutcome(False, {"code": str(ErrorCode.INTERNAL), "message": message})
    except Exception as exc:
        if _database_full(exc):
            message = (
                f"tool {name!r} would grow the session's database past its size cap; nothing was applied"
            )
            return ToolOutcome(False, {"code": str(ErrorCode.LIMIT_EXCEEDED), "message": message})
        logger.exception("tool %s of %s raised", name, env.name)
        message = f"tool {name!r} failed internally ({_describe(exc)}); no changes were applied"
        return ToolOutcome(False, {"code": str(ErrorCode.INTERNAL), "message": message})


def _describe(exc: Exception) -> str:
    """The exception for the agent: its type, and its first line unless it comes from the database layer
    (SQLAlchemy and sqlite3 errors carry SQL text and parameters: those stay in the server log)."""
    if isinstance(exc, (SQLAlchemyError, sqlite3.Error)) or type(exc).__module__.startswith("sqlalchemy"):
        return type(exc).__name__
    first = str(exc).strip().splitlines()[0][:MAX_DETAIL_CHARS] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def _database_full(exc: BaseException) -> bool:
    """SQLITE_FULL (the session's ``max_page_count``), raw or wrapped by SQLAlchemy."""
    cause = getattr(exc, "orig", None) or exc
    return (
        isinstance(cause, sqlite3.OperationalError)
        and getattr(cause, "sqlite_errorcode", 0) == sqlite3.SQLITE_FULL
    )
