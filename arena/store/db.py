"""Engine and sessions for the store: any SQLAlchemy URL, ``sqlite:///$ARENA_HOME/arena.db`` by default."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, create_engine, event, inspect, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from arena.store.schema import Base
from environments.paths import arena_home

DB_FILE = "arena.db"


class StoreError(RuntimeError):
    """The store cannot be opened (bad URL, missing driver, unreachable database)."""


def default_url() -> str:
    """``sqlite:///<ARENA_HOME>/arena.db``."""
    return f"sqlite:///{arena_home() / DB_FILE}"


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.close()


def _add_missing_columns(engine: Engine) -> None:
    """Add the nullable columns a newer schema has to tables an older version created (the store's only
    migration: new columns are always nullable)."""
    inspector = inspect(engine)
    with engine.begin() as connection:
        for table in Base.metadata.sorted_tables:
            present = {column["name"] for column in inspector.get_columns(table.name)}
            for column in table.columns:
                if column.name not in present and column.nullable:
                    kind = column.type.compile(engine.dialect)
                    connection.execute(text(f'ALTER TABLE {table.name} ADD COLUMN "{column.name}" {kind}'))


def _add_missing_indexes(engine: Engine) -> None:
    """Create the indexes a newer schema has on tables an older version created."""
    for table in Base.metadata.sorted_tables:
        for index in table.indexes:
            index.create(engine, checkfirst=True)


class Database:
    """One store database: its engine, a session factory, and every table created on open."""

    def __init__(self, url: str | None = None) -> None:
        self.url = url or default_url()
        parsed = self._parse(self.url)
        self.display_url = parsed.render_as_string(hide_password=True)
        if url is None:
            arena_home().mkdir(parents=True, exist_ok=True)
        try:
            self.engine: Engine = create_engine(parsed)
        except (NoSuchModuleError, ModuleNotFoundError) as exc:
            raise StoreError(f"store URL {self.display_url!r}: no driver for it ({exc})") from exc
        if self.engine.dialect.name == "sqlite":
            event.listen(self.engine, "connect", _sqlite_pragmas)
        try:
            Base.metadata.create_all(self.engine)
            _add_missing_columns(self.engine)
            _add_missing_indexes(self.engine)
        except SQLAlchemyError as exc:
            self.engine.dispose()
            reason = str(exc.orig if getattr(exc, "orig", None) else exc).splitlines()[0]
            raise StoreError(f"cannot open store {self.display_url!r}: {reason}") from exc
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    @staticmethod
    def _parse(url: str) -> URL:
        try:
            return make_url(url)
        except ArgumentError as exc:
            raise StoreError(
                f"bad store URL {url!r}: expected a SQLAlchemy URL such as "
                "sqlite:///path/arena.db or postgresql+psycopg://user@host/db"
            ) from exc

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session in one transaction: committed on success, rolled back on error."""
        with self._sessions.begin() as session:
            yield session

    def close(self) -> None:
        self.engine.dispose()
