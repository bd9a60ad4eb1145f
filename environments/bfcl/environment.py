"""``bfcl/multi_turn``: BFCL's multi-turn backends as one arena environment served over MCP.

Every function of the eight backends is a tool, with BFCL's own description and parameter schema (as JSON
Schema). A session holds the backend instances of one test entry: the arena loads the entry with the
setup tool ``bfcl_load_scenario`` through the control plane before the agent acts. The setup, checker and
probe tools are ``arena_only``: a server offers them on its control plane alone, never on an agent's MCP
endpoint or to a generated program. The instances live in the session's
database, pickled, beside their canonical public state as JSON, so reset, snapshot, restore, state hash
and diff work as for any environment. BFCL's code (the backends, ``bfcl_check``'s official checker) runs
in a sandboxed child per session, never in the server's process (``environments.bfcl.sandboxed``).
"""

from __future__ import annotations

import pickle
import random
from dataclasses import dataclass, field
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.protocols import Validator
from pydantic import BaseModel, ConfigDict
from sqlalchemy import LargeBinary, String, Text, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from environments.bfcl import data
from environments.bfcl.package import VERSION
from environments.sdk.environment import Environment
from environments.sdk.errors import ErrorCode, ToolError, ValidationFailed
from environments.sdk.tools import ToolSpec, to_jsonable

NAME = "bfcl/multi_turn"
SETUP_TOOL = "bfcl_load_scenario"
CHECK_TOOL = "bfcl_check"
HASH_TOOL = "bfcl_state_hash"
ARENA_TOOLS = (SETUP_TOOL, CHECK_TOOL, HASH_TOOL)


class Base(DeclarativeBase):
    pass


class Scenario(Base):
    """The test entry this session plays (one row once loaded)."""

    __tablename__ = "bfcl_scenario"
    entry_id: Mapped[str] = mapped_column(String, primary_key=True)


class BackendState(Base):
    """One backend instance of the session: its public state as canonical JSON (what BFCL's state checker
    compares) and the pickled instance itself."""

    __tablename__ = "bfcl_backend"
    backend: Mapped[str] = mapped_column(String, primary_key=True)
    state: Mapped[str] = mapped_column(Text)
    instance: Mapped[bytes] = mapped_column(LargeBinary)


class _Arguments(BaseModel):
    model_config = ConfigDict(extra="allow")


@dataclass(frozen=True)
class SchemaToolSpec(ToolSpec):
    """A tool whose arguments are checked against its JSON Schema as given (BFCL's, not pydantic's)."""

    validator: Validator = field(default_factory=lambda: Draft202012Validator({"type": "object"}))

    def validate_arguments(self, arguments: Any) -> dict[str, Any]:
        arguments = dict(arguments or {})
        problems = [
            {"field": ".".join(str(p) for p in e.absolute_path) or "(arguments)", "problem": e.message}
            for e in self.validator.iter_errors(arguments)
        ]
        if problems:
            summary = "; ".join(f"{p['field']}: {p['problem']}" for p in problems)
            raise ValidationFailed(f"invalid arguments for {self.name}: {summary}", errors=problems)
        return arguments


def _spec(
    name: str,
    description: str,
    schema: dict[str, Any],
    fn: Any,
    *,
    mutates: bool,
    blocking: bool = False,
    arena_only: bool = False,
) -> SchemaToolSpec:
    return SchemaToolSpec(
        name=name,
        description=description,
        fn=fn,
        mutates=mutates,
        args_model=_Arguments,
        input_schema=schema,
        blocking=blocking,
        arena_only=arena_only,
        validator=Draft202012Validator(schema),
    )


def _scenario(db: Session) -> str:
    entry_id = db.scalar(select(Scenario.entry_id))
    if entry_id is None:
        raise ToolError("no BFCL scenario is loaded in this session", code=ErrorCode.PRECONDITION_FAILED)
    return entry_id


class _InProcess:
    """BFCL's code in this process (``build(sandboxed=False)``: the native baseline's comparison only)."""

    def load(self, db: Session, found: data.Entry) -> dict[str, tuple[str, bytes]]:
        from environments.bfcl import backends

        instances = backends.instantiate(found)
        return {name: (backends.state_json(i), pickle.dumps(i)) for name, i in instances.items()}

    def call(
        self, db: Session, blob: bytes, function: str, arguments: dict[str, Any]
    ) -> tuple[Any, bytes | None, str | None]:
        from environments.bfcl import backends

        instance = pickle.loads(blob)
        result = backends.execute(instance, function, arguments)
        after = pickle.dumps(instance)
        try:
            value = to_jsonable(result)
        except TypeError:
            value = str(result)
        return (value, None, None) if after == blob else (value, after, backends.state_json(instance))

    def check(self, db: Session, found: data.Entry, decoded: list[list[list[str]]]) -> dict[str, Any]:
        from environments.bfcl import backends

        return backends.check(found, decoded)


class _Sandboxed:
    """BFCL's code in the session's sandboxed child (``environments.bfcl.sandboxed``): the default."""

    def load(self, db: Session, found: data.Entry) -> dict[str, tuple[str, bytes]]:
        from environments.bfcl import sandboxed

        return sandboxed.load(db, found.involved_classes, found.initial_config, found.long_context)

    def call(
        self, db: Session, blob: bytes, function: str, arguments: dict[str, Any]
    ) -> tuple[Any, bytes | None, str | None]:
        from environments.bfcl import sandboxed

        result, after, state = sandboxed.call(db, blob, function, arguments)
        return to_jsonable(result), after, state

    def check(self, db: Session, found: data.Entry, decoded: list[list[list[str]]]) -> dict[str, Any]:
        from environments.bfcl import backends, sandboxed

        failed = backends.turn_count(found, decoded)
        if failed is not None:
            return failed
        return backends.verdict(sandboxed.check(db, **backends.checker_arguments(found, decoded)))


_Backends = _InProcess | _Sandboxed


def _load_scenario(engine: _Backends) -> Any:
    def load_scenario(db: Session, entry_id: str) -> dict[str, Any]:
        from environments.bfcl.backends import state_digest

        if db.scalar(select(Scenario.entry_id)) is not None:
            raise ToolError("this session already plays a BFCL scenario", code=ErrorCode.CONFLICT)
        try:
            found = data.entry(entry_id)
        except KeyError as exc:
            raise ToolError(str(exc.args[0]), code=ErrorCode.NOT_FOUND) from None
        db.add(Scenario(entry_id=entry_id))
        states = {}
        for backend, (state, blob) in engine.load(db, found).items():
            states[backend] = state
            db.add(BackendState(backend=backend, state=state, instance=blob))
        return {"entry_id": entry_id, "backends": sorted(states), "state_hash": state_digest(states)}

    return load_scenario


def _runner(doc: data.FunctionDoc, engine: _Backends) -> Any:
    def run(db: Session, **arguments: Any) -> Any:
        _scenario(db)
        row = db.get(BackendState, doc.backend)
        if row is None:
            raise ToolError(
                f"{doc.name} belongs to {doc.backend}, which this scenario does not involve",
                code=ErrorCode.UNKNOWN_TOOL,
            )
        result, blob, state = engine.call(db, row.instance, doc.name, arguments)
        if blob is not None and state is not None:
            row.instance, row.state = blob, state
        return result

    return run


def _check(engine: _Backends) -> Any:
    def check(db: Session, entry_id: str, turns: list[list[list[dict[str, Any]]]]) -> dict[str, Any]:
        from environments.bfcl.backends import call_string

        known = data.function_docs()
        named = {c.get("name") for turn in turns for step in turn for c in step}
        if unknown := sorted(str(n) for n in named if n not in known):
            # The checker evaluates call strings: only the backends' own functions may be named.
            raise ToolError(
                f"bad check request: not BFCL functions: {unknown}", code=ErrorCode.VALIDATION_ERROR
            )
        try:
            found = data.entry(entry_id)
            decoded = [
                [[call_string(c["name"], dict(c.get("arguments") or {})) for c in step] for step in turn]
                for turn in turns
            ]
        except (KeyError, ValueError, TypeError) as exc:
            raise ToolError(f"bad check request: {exc}", code=ErrorCode.VALIDATION_ERROR) from None
        return engine.check(db, found, decoded)

    return check


def _state_hash(db: Session) -> dict[str, Any]:
    from environments.bfcl.backends import state_digest

    rows = db.scalars(select(BackendState)).all()
    return {"hash": state_digest({r.backend: r.state for r in rows})}


_CALL = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "arguments": {"type": "object"}},
    "required": ["name"],
}


def _nested(items: dict[str, Any], depth: int) -> dict[str, Any]:
    for _ in range(depth):
        items = {"type": "array", "items": items}
    return items


def build(*, sandboxed: bool = True) -> Environment:
    """The environment (reads the package's function docs; imports no backend code). Its backend calls,
    scenario loads and checks run BFCL's code in a sandboxed child per session; ``sandboxed=False`` runs
    it in this process instead (the native baseline's comparison, never a server)."""
    engine: _Backends = _Sandboxed() if sandboxed else _InProcess()
    env = Environment(
        NAME,
        theme="BFCL v4 multi-turn",
        category="benchmark",
        description=(
            "The Berkeley Function Calling Leaderboard's multi-turn backends (file system, messaging, "
            "posting, tickets, trading, travel, vehicle control, math), from bfcl-eval " + VERSION + "."
        ),
        base=Base,
        version=VERSION,
    )

    @env.seeder
    def seed(db: Session, rng: random.Random) -> None:
        """An empty session: the arena loads a scenario."""

    for doc in data.function_docs().values():
        env.add_tool(
            _spec(
                doc.name,
                doc.description,
                doc.parameters,
                _runner(doc, engine),
                mutates=True,
                blocking=sandboxed,
            )
        )
    env.add_tool(
        _spec(
            SETUP_TOOL,
            "Arena setup: load one BFCL test entry's backends from its initial configuration.",
            {"type": "object", "properties": {"entry_id": {"type": "string"}}, "required": ["entry_id"]},
            _load_scenario(engine),
            mutates=True,
            blocking=sandboxed,
            arena_only=True,
        )
    )
    env.add_tool(
        _spec(
            CHECK_TOOL,
            "Arena verifier: BFCL's multi-turn checker on an episode's calls (turn -> step -> calls).",
            {
                "type": "object",
                "properties": {
                    "entry_id": {"type": "string"},
                    "turns": {
                        "type": "array",
                        "items": {"type": "array", "items": {"type": "array", "items": _CALL}},
                    },
                },
                "required": ["entry_id", "turns"],
            },
            _check(engine),
            mutates=False,
            blocking=sandboxed,
            arena_only=True,
        )
    )
    env.add_tool(
        _spec(
            HASH_TOOL,
            "Arena probe: one hash over the canonical public state of the session's backends.",
            {"type": "object", "properties": {}},
            _state_hash,
            mutates=False,
            arena_only=True,
        )
    )
    return env
