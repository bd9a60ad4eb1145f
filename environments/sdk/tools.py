"""Tool specifications built from typed Python functions.

A tool is a plain function whose first parameter receives the episode's SQLAlchemy
``Session``; every other parameter becomes a field of the tool's JSON input schema
(pydantic builds it from the type hints), and the docstring becomes the description.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pydantic
import pydantic_core
from pydantic import BaseModel, ConfigDict
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.orm import DeclarativeBase, Session

from environments.sdk.errors import ValidationFailed

TOOL_NAME_PATTERN = re.compile(r"^[a-zA-Z][a-zA-Z0-9_\-]{0,63}$")
_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters):\s*$")
_ARG_LINE = re.compile(r"^\s+(\*{0,2}\w+)\s*(\([^)]*\))?\s*:\s*(.+)$")
_SECTION_HEADER = re.compile(r"^\s*(Returns|Raises|Yields|Examples?|Notes?):\s*$")
SUPPORTED_TYPES = (
    "str, int, float, bool, date, datetime, Decimal, Literal[...], Annotated[T, Field(...)], list[T], "
    "dict[str, T] or T | None"
)


class ToolDefinitionError(ValueError):
    """A function cannot be turned into a tool (missing docstring, untyped parameter...)."""


def orm_to_dict(obj: DeclarativeBase) -> dict[str, Any]:
    """The column values of an ORM instance as a plain dict (relationships are not followed)."""
    mapper = sa_inspect(obj).mapper
    return {attr.key: getattr(obj, attr.key) for attr in mapper.column_attrs}


def to_jsonable(value: Any) -> Any:
    """Convert a tool's return value to JSON-compatible data (ORM rows, models, dates, decimals...)."""

    def fallback(obj: Any) -> Any:
        if isinstance(obj, DeclarativeBase):
            return orm_to_dict(obj)
        raise TypeError(f"tool returned a value of type {type(obj).__name__} that is not JSON-serialisable")

    return pydantic_core.to_jsonable_python(value, fallback=fallback)


def _split_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Return (description, {argument: description}) from a Google-style docstring: the description is
    every paragraph before the first section header (``Args:``, ``Returns:``, ``Raises:``...)."""
    lines = inspect.cleandoc(doc).splitlines()
    summary: list[str] = []
    arg_docs: dict[str, str] = {}
    in_args, in_summary = False, True
    current: str | None = None
    for line in lines:
        if _ARGS_HEADER.match(line):
            in_args, in_summary, current = True, False, None
            continue
        if _SECTION_HEADER.match(line):
            in_args, in_summary, current = False, False, None
            continue
        if in_args:
            match = _ARG_LINE.match(line)
            if match:
                current = match.group(1).lstrip("*")
                arg_docs[current] = match.group(3).strip()
            elif current and line.strip():
                arg_docs[current] += " " + line.strip()
            elif not line.strip():
                in_args = False
            continue
        if in_summary:
            summary.append(line)
    return "\n".join(summary).strip(), arg_docs


def _strip_titles(schema: dict[str, Any]) -> dict[str, Any]:
    """Drop pydantic's auto-generated ``title`` keys, which only add tokens to the agent's prompt."""
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        if isinstance(prop, dict):
            prop.pop("title", None)
    return schema


def _check_parameter_type(tool: str, param: str, hint: Any) -> None:
    """One clear line naming the tool and parameter when pydantic cannot turn ``hint`` into a schema."""
    try:
        pydantic.TypeAdapter(hint).json_schema()
    except (pydantic.PydanticSchemaGenerationError, pydantic.PydanticUserError, TypeError) as exc:
        shown = getattr(hint, "__name__", None) or str(hint)
        raise ToolDefinitionError(
            f"tool {tool!r}: parameter {param!r} has unsupported type {shown} "
            f"({type(exc).__name__}); use {SUPPORTED_TYPES}"
        ) from None


def _is_session_param(param: inspect.Parameter, hints: Mapping[str, Any]) -> bool:
    return hints.get(param.name) is Session or param.name == "db"


@dataclass(frozen=True)
class ToolSpec:
    """One executable tool: its public schema and the function behind it."""

    name: str
    description: str
    fn: Callable[..., Any]
    mutates: bool
    args_model: type[BaseModel]
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None = None
    tags: tuple[str, ...] = field(default_factory=tuple)
    blocking: bool = False
    """Its function waits on something outside the process (a sandboxed child running third-party code):
    a server runs it on a worker thread, never in its event loop."""
    arena_only: bool = False
    """Setup, verifier or probe for the arena only: a server offers it on its control plane alone
    (``/control/sessions/{sid}/call``), never in an agent's ``tools/list`` or ``tools/call``, nor to a
    generated program."""

    @classmethod
    def from_function(
        cls,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        mutates: bool = False,
        tags: tuple[str, ...] = (),
    ) -> ToolSpec:
        """Build a spec from ``fn(db: Session, arg: type = default, ...)`` and its docstring."""
        tool_name = name or fn.__name__
        if not TOOL_NAME_PATTERN.match(tool_name):
            raise ToolDefinitionError(f"tool name {tool_name!r} must match {TOOL_NAME_PATTERN.pattern}")
        if not fn.__doc__ or not fn.__doc__.strip():
            raise ToolDefinitionError(f"tool {tool_name!r} has no docstring; it becomes the tool description")
        description, arg_docs = _split_docstring(fn.__doc__)
        hints = typing.get_type_hints(fn, include_extras=True)
        params = list(inspect.signature(fn).parameters.values())
        if not params or not _is_session_param(params[0], hints):
            raise ToolDefinitionError(
                f"tool {tool_name!r}: the first parameter must be the database session (`db: Session`)"
            )
        fields: dict[str, Any] = {}
        for param in params[1:]:
            if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
                raise ToolDefinitionError(f"tool {tool_name!r}: *args/**kwargs are not allowed")
            if param.name not in hints:
                raise ToolDefinitionError(f"tool {tool_name!r}: parameter {param.name!r} has no type hint")
            default = ... if param.default is inspect.Parameter.empty else param.default
            fields[param.name] = (
                hints[param.name],
                pydantic.Field(default=default, description=arg_docs.get(param.name)),
            )
        for param_name, (hint, _field) in fields.items():
            _check_parameter_type(tool_name, param_name, hint)
        model_name = "".join(part.capitalize() for part in re.split(r"[_\-]", tool_name)) + "Arguments"
        args_model = pydantic.create_model(  # type: ignore[call-overload]
            model_name, __config__=ConfigDict(extra="forbid"), **fields
        )
        output_schema = None
        returns = hints.get("return")
        if returns is not None and returns is not Any:
            try:
                output_schema = pydantic.TypeAdapter(returns).json_schema()
            except pydantic.PydanticSchemaGenerationError:
                output_schema = None
        return cls(
            name=tool_name,
            description=description,
            fn=fn,
            mutates=mutates,
            args_model=args_model,
            input_schema=_strip_titles(args_model.model_json_schema()),
            output_schema=output_schema,
            tags=tags,
        )

    def validate_arguments(self, arguments: Mapping[str, Any] | None) -> dict[str, Any]:
        """Validate raw JSON arguments; raise ``ValidationFailed`` naming each bad field."""
        try:
            model = self.args_model.model_validate(dict(arguments or {}))
        except pydantic.ValidationError as exc:
            problems = [
                {"field": ".".join(str(p) for p in err["loc"]) or "(arguments)", "problem": err["msg"]}
                for err in exc.errors(include_url=False, include_context=False, include_input=False)
            ]
            summary = "; ".join(f"{p['field']}: {p['problem']}" for p in problems)
            raise ValidationFailed(f"invalid arguments for {self.name}: {summary}", errors=problems) from None
        return {name: getattr(model, name) for name in type(model).model_fields}

    def call(self, db: Session, arguments: Mapping[str, Any] | None) -> Any:
        """Validate the arguments, run the tool and return its JSON-compatible result."""
        return to_jsonable(self.fn(db, **self.validate_arguments(arguments)))

    def describe(self) -> dict[str, Any]:
        """A JSON description of the tool for the arena's control side (discovery, CLI)."""
        return {
            "name": self.name,
            "description": self.description,
            "mutates": self.mutates,
            "input_schema": self.input_schema,
            "output_schema": self.output_schema,
            "tags": list(self.tags),
        }
