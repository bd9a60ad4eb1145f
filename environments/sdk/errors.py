"""Typed tool errors with stable codes, as seen by agents in MCP error results."""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class ErrorCode(StrEnum):
    """Stable error codes carried in the structured content of an error result."""

    NOT_FOUND = "NOT_FOUND"
    VALIDATION_ERROR = "VALIDATION_ERROR"
    CONFLICT = "CONFLICT"
    FORBIDDEN = "FORBIDDEN"
    PRECONDITION_FAILED = "PRECONDITION_FAILED"
    LIMIT_EXCEEDED = "LIMIT_EXCEEDED"
    UNKNOWN_TOOL = "UNKNOWN_TOOL"
    INTERNAL = "INTERNAL"


class ToolError(Exception):
    """An error a tool raises on purpose: a business rule or a lookup failed.

    The agent receives it as an MCP result with ``isError: true`` and
    ``structuredContent = {"error": {"code", "message", "details"}}``.
    """

    code: ErrorCode = ErrorCode.INTERNAL

    def __init__(self, message: str, *, code: ErrorCode | str | None = None, **details: Any) -> None:
        super().__init__(message)
        if code is not None:
            self.code = ErrorCode(code)
        self.message = message
        self.details = details

    def to_payload(self) -> dict[str, Any]:
        """The JSON object placed under ``error`` in the tool result."""
        payload: dict[str, Any] = {"code": str(self.code), "message": self.message}
        if self.details:
            payload["details"] = self.details
        return payload


class NotFound(ToolError):
    """A referenced entity does not exist."""

    code = ErrorCode.NOT_FOUND


class ValidationFailed(ToolError):
    """Arguments are well-typed but semantically invalid (bad date range, negative amount...)."""

    code = ErrorCode.VALIDATION_ERROR


class Conflict(ToolError):
    """The request conflicts with current state (double booking, duplicate key...)."""

    code = ErrorCode.CONFLICT


class Forbidden(ToolError):
    """The caller may not do this (wrong owner, policy forbids it)."""

    code = ErrorCode.FORBIDDEN


class PreconditionFailed(ToolError):
    """State does not allow the operation yet or any more (refund window closed, already cancelled...)."""

    code = ErrorCode.PRECONDITION_FAILED


class LimitExceeded(ToolError):
    """A quota or capacity limit would be exceeded (overbooking, credit limit...)."""

    code = ErrorCode.LIMIT_EXCEEDED
