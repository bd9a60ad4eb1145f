"""Environment authoring SDK: declare a schema, seed data and typed tools; serve them over MCP."""

from environments.sdk.environment import Environment, EnvironmentSpecError
from environments.sdk.errors import (
    Conflict,
    ErrorCode,
    Forbidden,
    LimitExceeded,
    NotFound,
    PreconditionFailed,
    ToolError,
    ValidationFailed,
)
from environments.sdk.execution import ToolOutcome, execute_tool
from environments.sdk.state import EpisodeState, StateStore
from environments.sdk.tools import ToolSpec, orm_to_dict

__all__ = [
    "Conflict",
    "Environment",
    "EnvironmentSpecError",
    "EpisodeState",
    "ErrorCode",
    "Forbidden",
    "LimitExceeded",
    "NotFound",
    "PreconditionFailed",
    "StateStore",
    "ToolError",
    "ToolOutcome",
    "ToolSpec",
    "ValidationFailed",
    "execute_tool",
    "orm_to_dict",
]
