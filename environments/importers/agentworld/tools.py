"""Released tool implementations as SDK tools, run against a session's files.

The implementation source is untrusted. Nothing here executes it until a tool is *called*, and then
only in the OS sandbox (``environments.sandbox.run_function``: a fresh bubblewrap child per call, no
network, no host files but the call's data directory, rlimits), never in the server's own process. The
tools are ``blocking``: a server runs each call on a worker thread, so its event loop keeps serving.
Without a sandbox the call fails as an infrastructure error (``SandboxUnavailable``), never unsandboxed.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.protocols import Validator
from pydantic import BaseModel, ConfigDict
from sqlalchemy.orm import Session

from environments.sandbox import Running, run_function
from environments.sandbox.functions import Prelude
from environments.sdk.errors import ErrorCode, ToolError, ValidationFailed
from environments.sdk.tools import ToolSpec

from . import determinism
from .determinism import call_seed, salt, state_digest
from .schemas import safe_validator
from .state import FileStateStore

DB_DIR_ENV = "MCP_DB_DIR"
CALL_TIMEOUT_S = 10.0
"""How long one released tool call may run in its sandbox."""
PRELOAD = (
    *("__future__", "builtins", "hashlib", "json", "os", "random", "secrets", "uuid", "typing", "types"),
    *("collections.abc", "base64", "csv", "datetime", "re", "pathlib", "sqlite3", "copy", "math"),
)
"""Imported in the sandbox child before it drops privileges: ``determinism``'s modules and those the
released tools commonly use (a plain ``auto`` child can import only these where Python lives in a
directory uid nobody cannot read)."""

_WRITE_CALLS = frozenset(
    {
        "dump",
        "write",
        "writelines",
        "write_text",
        "write_bytes",
        "writerow",
        "writerows",
        "to_csv",
        "to_json",
        "unlink",
        "rmtree",
        "mkdir",
        "makedirs",
        "rmdir",
        "truncate",
        "touch",
        "copyfile",
        "copy2",
        "move",
    }
)
_FS_MODULE_CALLS = frozenset({"remove", "rename", "replace", "copy", "copytree"})
_FS_MODULES = frozenset({"os", "shutil", "pathlib"})

# Their error codes -> ours, by keyword, first match wins (also applied to free-text error messages).
_CODE_KEYWORDS: tuple[tuple[ErrorCode, tuple[str, ...]], ...] = (
    (ErrorCode.NOT_FOUND, ("NOT_FOUND", "NOTFOUND", "NO_SUCH", "DOES_NOT_EXIST", "MISSING")),
    (ErrorCode.CONFLICT, ("CONFLICT", "DUPLICATE", "ALREADY")),
    (ErrorCode.FORBIDDEN, ("FORBIDDEN", "UNAUTHORI", "PERMISSION", "DENIED", "AUTH")),
    (ErrorCode.LIMIT_EXCEEDED, ("RATE_LIMIT", "QUOTA", "LIMIT", "TOO_MANY")),
    (ErrorCode.VALIDATION_ERROR, ("VALIDATION", "INVALID", "BAD_REQUEST", "MALFORMED", "REQUIRED", "MUST")),
    (ErrorCode.PRECONDITION_FAILED, ("PRECONDITION", "STATE")),
)


def static_write_reason(tree: ast.AST) -> str | None:
    """Why the source looks like it writes files (a conservative static scan), or ``None``."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = (
            func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        )
        if name in _WRITE_CALLS:
            return f"calls {name}()"
        receiver = func.value if isinstance(func, ast.Attribute) else None
        if name in _FS_MODULE_CALLS and isinstance(receiver, ast.Name) and receiver.id in _FS_MODULES:
            return f"calls {receiver.id}.{name}()"
        if name == "open" and _opens_for_writing(node):
            return "opens a file for writing"
    return None


def _opens_for_writing(call: ast.Call) -> bool:
    mode: ast.expr | None = call.args[1] if len(call.args) > 1 else None
    mode = next((kw.value for kw in call.keywords if kw.arg == "mode"), mode)
    if mode is None:
        return False
    if isinstance(mode, ast.Constant) and isinstance(mode.value, str):
        return any(flag in mode.value for flag in "wax+")
    return True  # a computed mode: assume it may write


def map_error_code(raw: str) -> ErrorCode | None:
    """Our code for one of theirs (or for an error message); ``None`` when nothing matches."""
    normalised = re.sub(r"[^A-Z0-9]+", "_", raw.upper())
    if normalised in ErrorCode.__members__:
        return ErrorCode(normalised)
    for code, keywords in _CODE_KEYWORDS:
        if any(k in normalised for k in keywords):
            return code
    return None


def released_error(result: Any) -> ToolError | None:
    """The typed error for a returned ``{"error": {...}}`` / ``{"error": "text"}``, else ``None``."""
    error = result.get("error") if isinstance(result, dict) else None
    if isinstance(error, str) and error:
        error = {"message": error}
    if not isinstance(error, dict) or not error:
        return None
    source_code = error.get("code")
    message = str(error.get("message") or source_code or "the tool reported an error")
    extra = {k: v for k, v in error.items() if k not in ("code", "message", "source_code")}
    code = map_error_code(str(source_code or message))
    return ToolError(message, code=code or ErrorCode.PRECONDITION_FAILED, source_code=source_code, **extra)


class ReleasedArguments(BaseModel):
    """Placeholder arguments model: released tools are validated against their JSON Schema instead."""

    model_config = ConfigDict(extra="allow")


class ReleasedCodeFailed(RuntimeError):
    """The released code raised, exited or ran past its time in its sandbox (its own defect)."""


@functools.cache
def _determinism_source() -> str:
    """``determinism.py`` as text: the sandbox child runs it to build the seeded builtins (the arena
    package is not mounted there; that module uses the standard library only)."""
    return Path(determinism.__file__).read_text(encoding="utf-8")


def _running(db: Session) -> Running | None:
    """The session's holder of its running child: closing the session kills a call in flight."""
    episode = db.info.get("episode")
    if episode is None:
        return None
    found = episode.resources.get("agentworld")
    if not isinstance(found, Running):
        found = episode.resources["agentworld"] = Running()
    return found


class ImplementationRunner:
    """Calls one released implementation with a session's files in a scratch ``MCP_DB_DIR``.

    Per call: the files are written out from the session's rows, the module source is executed in
    a fresh namespace (so module-level ``_DB = os.environ[...]`` sees this call's directory), the
    function runs, and the files it changed are stored back as rows in the same transaction.
    The source is compiled on the first call only.
    """

    def __init__(self, env_name: str, tool_name: str, source: str, store: FileStateStore) -> None:
        self.env_name = env_name
        self.tool_name = tool_name
        self.source = source
        self.store = store

    def __call__(self, db: Session, **arguments: Any) -> Any:
        snapshot = self.store.read(db)
        digest = state_digest(snapshot.files, snapshot.rows)
        seed = call_seed(salt(), digest, self.tool_name, arguments)
        result, changed = self._invoke(self.store.files(snapshot), arguments, seed, _running(db))
        self.store.write_back(db, snapshot, changed)
        error = released_error(result)
        if error is not None:
            raise error
        return result

    def _invoke(
        self, files: dict[str, bytes], arguments: Mapping[str, Any], seed: int, running: Running | None = None
    ) -> tuple[Any, dict[str, bytes | None]]:
        """One call in a fresh sandbox child: its imports of random/uuid/secrets/os draw from the call's
        seed (``determinism``), ``MCP_DB_DIR`` is its data folder (``files``, in a size-limited tmpfs),
        its prints go to the child's stderr (never an MCP stdio stream). Its result and the files it
        changed; ``SandboxUnavailable`` propagates (infrastructure)."""
        outcome = run_function(
            self.source,
            self.tool_name,
            arguments,
            files=files,
            data_dir_env=DB_DIR_ENV,
            timeout_s=CALL_TIMEOUT_S,
            module=f"agentworld_tool_{self.tool_name}",
            prelude=Prelude(_determinism_source(), "seeded_builtins", {"seed": seed}, PRELOAD),
            running=running,
        )
        if not outcome.ok:
            raise ReleasedCodeFailed(outcome.error or "the released code failed")
        return outcome.value, outcome.files or {}


@dataclass(frozen=True)
class ReleasedToolSpec(ToolSpec):
    """A ``ToolSpec`` whose arguments are checked against the released JSON Schema."""

    validator: Validator = field(default_factory=lambda: Draft202012Validator({"type": "object"}))

    def validate_arguments(self, arguments: Mapping[str, Any] | None) -> dict[str, Any]:
        """Validate raw JSON arguments against the released schema; raise ``ValidationFailed``."""
        args = dict(arguments or {})
        errors = sorted(self.validator.iter_errors(args), key=lambda e: [str(p) for p in e.absolute_path])
        if errors:
            problems = [
                {"field": ".".join(str(p) for p in e.absolute_path) or "(arguments)", "problem": e.message}
                for e in errors
            ]
            summary = "; ".join(f"{p['field']}: {p['problem']}" for p in problems)
            raise ValidationFailed(f"invalid arguments for {self.name}: {summary}", errors=problems)
        return args


def build_tool(
    env_name: str, entry: Mapping[str, Any], source: str, store: FileStateStore, *, mutates: bool
) -> ReleasedToolSpec:
    """The SDK tool for one released tool (its source is kept as text, not compiled)."""
    name = entry["name"]
    return ReleasedToolSpec(
        name=name,
        description=entry["description"],
        fn=ImplementationRunner(env_name, name, source, store),
        mutates=mutates,
        args_model=ReleasedArguments,
        input_schema=dict(entry["parameters"]),
        tags=("agentworld",),
        blocking=True,  # a sandboxed child per call: the server runs it on a worker thread
        validator=safe_validator(entry["parameters"]),
    )
