"""The ``Environment``: metadata, relational schema, deterministic seed data, and tools."""

from __future__ import annotations

import hashlib
import inspect
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import MetaData
from sqlalchemy.orm import DeclarativeBase, Session
from sqlalchemy.schema import CreateTable

from environments.sdk.tools import ToolDefinitionError, ToolSpec

ENV_NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_\-]*(/[a-z0-9][a-z0-9_\-]*)?$")

F = TypeVar("F", bound=Callable[..., Any])
SeedFunction = Callable[[Session, random.Random], None]


class EnvironmentSpecError(ValueError):
    """An environment definition is broken (bad name, no schema, no seed, duplicate tool...)."""


@dataclass(frozen=True)
class EnvironmentInfo:
    """Descriptive metadata of an environment."""

    name: str
    theme: str
    category: str
    description: str
    version: str


class Environment:
    """A themed tool environment: a database schema, its seed data and the tools that act on it.

    Example::

        env = Environment("todo", theme="personal tasks", category="productivity",
                          description="A to-do list.", base=Base)

        @env.seeder
        def seed(db: Session, rng: random.Random) -> None:
            db.add_all(Task(title=f"task {i}") for i in range(10))

        @env.tool
        def list_tasks(db: Session, done: bool = False) -> list[dict]:
            \"\"\"List tasks, optionally only finished ones.\"\"\"
            ...
    """

    def __init__(
        self,
        name: str,
        *,
        theme: str,
        category: str,
        description: str,
        base: type[DeclarativeBase] | MetaData,
        version: str = "1",
        seed: int = 0,
    ) -> None:
        if not ENV_NAME_PATTERN.match(name):
            raise EnvironmentSpecError(
                f"environment name {name!r} must be lower-case letters, digits, '_' or '-' "
                "(optionally one '/' namespace)"
            )
        self.info = EnvironmentInfo(name, theme, category, description, version)
        self.metadata: MetaData = base if isinstance(base, MetaData) else base.metadata
        self.seed_value = seed
        self.tools: dict[str, ToolSpec] = {}
        self._seeder: SeedFunction | None = None
        self.source_dir: Path | None = _caller_dir()

    @property
    def name(self) -> str:
        return self.info.name

    def seeder(self, fn: SeedFunction) -> SeedFunction:
        """Register the function that fills a fresh database: ``fn(db, rng)``; it must be deterministic
        given ``rng`` (seeded from the environment's ``seed``)."""
        if self._seeder is not None:
            raise EnvironmentSpecError(f"environment {self.name!r} already has a seeder")
        self._seeder = fn
        return fn

    def tool(
        self,
        fn: F | None = None,
        *,
        name: str | None = None,
        mutates: bool = False,
        tags: tuple[str, ...] = (),
    ) -> Any:
        """Register a tool; usable as ``@env.tool`` or ``@env.tool(mutates=True)``."""

        def register(func: F) -> F:
            try:
                spec = ToolSpec.from_function(func, name=name, mutates=mutates, tags=tags)
            except ToolDefinitionError as exc:
                raise EnvironmentSpecError(f"environment {self.name!r}: {exc}") from None
            if spec.name in self.tools:
                raise EnvironmentSpecError(f"environment {self.name!r}: duplicate tool {spec.name!r}")
            self.tools[spec.name] = spec
            return func

        return register(fn) if fn is not None else register

    def add_tool(self, spec: ToolSpec) -> None:
        """Register a prebuilt ``ToolSpec`` (used by importers)."""
        if spec.name in self.tools:
            raise EnvironmentSpecError(f"environment {self.name!r}: duplicate tool {spec.name!r}")
        self.tools[spec.name] = spec

    def seed_database(self, db: Session) -> None:
        """Run the seeder with the environment's fixed random seed."""
        if self._seeder is None:
            raise EnvironmentSpecError(
                f"environment {self.name!r} has no seeder (decorate one with @env.seeder)"
            )
        self._seeder(db, random.Random(self.seed_value))

    def ddl(self) -> str:
        """The schema as SQLite DDL, tables in dependency order."""
        from sqlalchemy.dialects import sqlite

        dialect = sqlite.dialect()
        return ";\n".join(
            str(CreateTable(t).compile(dialect=dialect)).strip() for t in self.metadata.sorted_tables
        )

    def fingerprint(self) -> str:
        """Identifies one build of the seed database: version, schema, seed value, and the source of the
        seeder's module and of the environment's package (helpers and data lists the seeder uses)."""
        digest = hashlib.sha256()
        for part in (self.name, self.info.version, str(self.seed_value), self.ddl(), *self._seed_sources()):
            digest.update(part.encode())
            digest.update(b"\0")
        return digest.hexdigest()[:16]

    def _seed_sources(self) -> list[str]:
        files: set[Path] = set()
        if self._seeder is not None:
            module_file = inspect.getsourcefile(self._seeder)
            if module_file:
                files.add(Path(module_file).resolve())
        if self.source_dir is not None:
            files.update(p.resolve() for p in self.source_dir.rglob("*.py") if not p.name.startswith("test_"))
        return [path.read_text(errors="replace") for path in sorted(files) if path.is_file()]

    def validate(self) -> None:
        """Raise ``EnvironmentSpecError`` naming the first structural problem found."""
        if not self.metadata.tables:
            raise EnvironmentSpecError(f"environment {self.name!r} declares no tables")
        if self._seeder is None:
            raise EnvironmentSpecError(f"environment {self.name!r} has no seeder")
        if not self.tools:
            raise EnvironmentSpecError(f"environment {self.name!r} declares no tools")

    def describe(self) -> dict[str, Any]:
        """Metadata and tool specs as JSON."""
        return {
            "name": self.name,
            "theme": self.info.theme,
            "category": self.info.category,
            "description": self.info.description,
            "version": self.info.version,
            "tools": [spec.describe() for spec in self.tools.values()],
        }


def _caller_dir() -> Path | None:
    """Directory of the module that constructed the environment (where its tests live)."""
    frame = inspect.currentframe()
    try:
        caller = frame.f_back.f_back if frame and frame.f_back else None
        filename = caller.f_code.co_filename if caller else None
    finally:
        del frame
    return Path(filename).resolve().parent if filename and not filename.startswith("<") else None
