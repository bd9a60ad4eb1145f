"""Per-episode database state: seed build and cache, isolated copies, reset, snapshots, hash and diff.

The seed database of an environment version is built once and cached on disk. A server
process loads it once into a read-only master connection; each session then gets its own
copy through SQLite's online backup API (in memory, or a file copy for large databases),
so ``reset()`` is a page copy rather than a rebuild.
"""

from __future__ import annotations

import os
import secrets
import shutil
import sqlite3
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool, StaticPool

from environments.sdk import digest
from environments.sdk.environment import Environment

DEFAULT_FILE_COPY_THRESHOLD = 64 * 1024 * 1024
DEFAULT_MAX_SESSION_DB_MB = 256
MAX_SESSION_DB_ENV = "ARENA_MAX_SESSION_DB_MB"
"""Overrides the per-session database size cap (megabytes; the seed's own size plus this at least)."""
SEED_REF = "seed"
CURRENT_REF = "current"


class StateError(LookupError):
    """An unknown snapshot or closed state was referenced."""


def cache_dir() -> Path:
    """Where seed databases are cached (``$ARENA_CACHE_DIR`` or ``~/.cache/agent-arena``)."""
    root = os.environ.get("ARENA_CACHE_DIR") or Path.home() / ".cache" / "agent-arena"
    return Path(root) / "seeds"


def _enable_foreign_keys(conn: sqlite3.Connection) -> None:
    conn.execute("PRAGMA foreign_keys = ON")


def _sqlite_engine(conn: sqlite3.Connection) -> Engine:
    engine = create_engine("sqlite://", creator=lambda: conn, poolclass=StaticPool)
    event.listen(engine, "connect", lambda dbapi_conn, _rec: _enable_foreign_keys(dbapi_conn))
    return engine


def build_seed(env: Environment, path: Path) -> None:
    """Create ``path`` and fill it with the environment's schema and seed data."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, check_same_thread=False)
    try:
        engine = _sqlite_engine(conn)
        env.metadata.create_all(engine)
        with Session(engine) as db:
            env.seed_database(db)
            db.commit()
        conn.execute("VACUUM")
        conn.commit()
    finally:
        conn.close()


def seed_path(env: Environment, root: Path | None = None) -> Path:
    """The cached seed database of ``env``, built on first use (atomically, safe across processes)."""
    root = root or cache_dir()
    path = root / f"{env.name.replace('/', '__')}-{env.info.version}-{env.fingerprint()}.sqlite"
    if path.exists():
        return path
    try:
        root.mkdir(parents=True, exist_ok=True)
        if not os.access(root, os.W_OK):
            raise PermissionError(root)
    except OSError:
        # A read-only cache (e.g. baked into a container image) that lacks this seed: build privately.
        return seed_path(env, Path(tempfile.gettempdir()) / "agent-arena-seeds")
    fd, tmp = tempfile.mkstemp(dir=root, suffix=".building")
    os.close(fd)
    os.unlink(tmp)
    try:
        build_seed(env, Path(tmp))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def _copy_database(source: sqlite3.Connection, target: sqlite3.Connection) -> None:
    if target.in_transaction:
        target.rollback()
    source.backup(target)


_TABLE_WRITES = frozenset({sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE})
_SCHEMA_WRITES = frozenset({sqlite3.SQLITE_CREATE_TABLE, sqlite3.SQLITE_DROP_TABLE})


class SessionResource(Protocol):
    """Something a tool keeps for one episode (e.g. a sandboxed child holding third-party state): closed
    with the episode and on ``reset``."""

    def interrupt(self) -> None:
        """Stop work in flight at once; callable from any thread while a tool call uses the resource."""

    def close(self) -> None:
        """Release it (never while a tool call uses it)."""


class _EpisodeEngine:
    """One SQLAlchemy engine for every episode of a store, so SQL is compiled (and cached) once per
    environment rather than once per episode: a fresh episode's first tool calls run at warm speed.

    Each episode checks out one engine ``Connection`` over its own sqlite3 connection and keeps it for
    its whole life; with ``NullPool`` a checkout calls the creator, which hands over that connection.
    """

    def __init__(self) -> None:
        self._handover: sqlite3.Connection | None = None
        self._lock = threading.Lock()  # episodes may first connect on a server's worker threads
        self.engine = create_engine("sqlite://", creator=self._take, poolclass=NullPool)

    def _take(self) -> sqlite3.Connection:
        conn, self._handover = self._handover, None
        if conn is None:
            raise RuntimeError("episode connections are opened through _EpisodeEngine.connect()")
        return conn

    def connect(self, conn: sqlite3.Connection) -> Connection:
        with self._lock:
            self._handover = conn
            try:
                return self.engine.connect()
            finally:
                self._handover = None


class _WriteTracker:
    """SQLite authorizer recording every table a statement prepared on the connection may write.

    SQLite consults it when a statement is compiled (triggers included), so the set is a superset of the
    tables changed on this connection since it was opened; ``reset``/``restore`` copy pages with the
    backup API and write no rows. Hash and diff then only need to look at these tables.
    """

    def __init__(self) -> None:
        self.tables: set[str] = set()

    def __call__(self, action: int, arg1: str | None, arg2: str | None, *_where: str | None) -> int:
        if action in _TABLE_WRITES or action in _SCHEMA_WRITES:
            self.tables.add(arg1 or "")
        elif action == sqlite3.SQLITE_ALTER_TABLE:
            self.tables.add(arg2 or "")
        return sqlite3.SQLITE_OK


class EpisodeState:
    """One isolated database for one episode, with reset, snapshots, hash and diff."""

    def __init__(self, store: StateStore, state_id: str) -> None:
        self.store = store
        self.state_id = state_id
        self._path: Path | None = None
        if store.file_backed:
            self._path = store.scratch_dir / f"{state_id}.sqlite"
            shutil.copyfile(store.seed_file, self._path)
            self.conn = sqlite3.connect(self._path, check_same_thread=False)
        else:
            self.conn = sqlite3.connect(":memory:", check_same_thread=False)
            _copy_database(store.master, self.conn)
        self._writes = _WriteTracker()
        self.conn.set_authorizer(self._writes)
        _enable_foreign_keys(self.conn)
        # A write past the cap fails with SQLITE_FULL (a LIMIT_EXCEEDED tool error), never the process.
        self.conn.execute(f"PRAGMA max_page_count = {store.max_pages}")
        self._seed_mark: tuple[int, int] | None = self._change_mark()
        self._references: tuple[int, dict[str, set[str]]] | None = None
        self._connection: Connection | None = None
        self._snapshots: dict[str, sqlite3.Connection] = {}
        self.resources: dict[str, SessionResource] = {}
        """Per-episode resources of tools (``db.info["episode"].resources``), closed with it and on reset."""

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        """A session whose writes commit together on success and roll back on any exception; its
        ``info["episode"]`` is this state."""
        if self._connection is None:
            self._connection = self.store.episode_engine.connect(self.conn)
        with Session(bind=self._connection, expire_on_commit=False, info={"episode": self}) as db:
            try:
                yield db
                db.commit()
            except BaseException:
                db.rollback()
                raise

    def reset(self) -> None:
        """Restore the seed contents (snapshots are kept; tools' resources are closed)."""
        self.close_resources()
        _copy_database(self.store.master, self.conn)
        self._seed_mark = self._change_mark()
        self._references = None  # the schema cookie restarts from the seed's

    def _schema_version(self) -> int:
        return self.conn.execute("PRAGMA schema_version").fetchone()[0]

    def _change_mark(self) -> tuple[int, int]:
        # ``total_changes`` counts every row written through the connection (rolled back or not) and the
        # schema cookie moves with any DDL, so while both stay put the contents have not changed.
        return self.conn.total_changes, self._schema_version()

    @property
    def pristine(self) -> bool:
        """Whether the current contents are certainly the seed's (nothing written since create/reset)."""
        return self._seed_mark == self._change_mark()

    def written_tables(self) -> set[str]:
        """Tables that may differ between any two states of this episode (seed, snapshots, current)."""
        if not self._writes.tables:
            return set()
        version = self._schema_version()
        if self._references is None or self._references[0] != version:  # read once per schema
            self._references = (version, digest.action_references(self.conn))
        return digest.dependent_tables(self._references[1], self._writes.tables)

    def snapshot(self) -> str:
        """Copy the current contents aside; returns the snapshot id."""
        snapshot_id = f"snap-{len(self._snapshots) + 1}-{secrets.token_hex(3)}"
        copy = sqlite3.connect(":memory:", check_same_thread=False)
        _copy_database(self.conn, copy)
        self._snapshots[snapshot_id] = copy
        return snapshot_id

    def restore(self, snapshot_id: str) -> None:
        """Make the contents equal to a snapshot taken earlier (or ``"seed"``)."""
        _copy_database(self._resolve(snapshot_id), self.conn)
        self._seed_mark = self._change_mark() if snapshot_id == SEED_REF else None
        self._references = None

    def _resolve(self, ref: str) -> sqlite3.Connection:
        if ref == SEED_REF:
            return self.store.master
        if ref == CURRENT_REF:
            return self.conn
        try:
            return self._snapshots[ref]
        except KeyError:
            raise StateError(
                f"unknown snapshot {ref!r} (known: seed, current, {', '.join(self._snapshots)})"
            ) from None

    def _is_seed(self, ref: str) -> bool:
        return ref == SEED_REF or (ref == CURRENT_REF and self.pristine)

    def state_hash(self, ref: str = CURRENT_REF) -> str:
        """Canonical digest of all tables of the current state (or of a snapshot).

        Only tables this episode may have written are hashed again; the others keep the seed's hash.
        """
        conn = self._resolve(ref)
        if self._is_seed(ref):
            return self.store.seed_hash
        written = self.written_tables()
        known = {t: h for t, h in self.store.seed_table_hashes.items() if t not in written}
        return digest.state_hash(conn, known)

    def diff(self, before: str = SEED_REF, after: str = CURRENT_REF) -> dict[str, dict[str, Any]]:
        """Rows inserted/deleted/changed from ``before`` to ``after``, by table and primary key.

        Only tables this episode may have written are compared (empty at once while it is pristine).
        """
        old, new = self._resolve(before), self._resolve(after)
        if old is new or (self._is_seed(before) and self._is_seed(after)):
            return {}
        changes = digest.diff_states(old, new, only=self.written_tables())
        return {table: d.to_dict() for table, d in changes.items()}

    def interrupt(self) -> None:
        """Stop the work of tools' resources in flight (from any thread), e.g. before ``close``."""
        for resource in list(self.resources.values()):
            resource.interrupt()

    def close_resources(self) -> None:
        while self.resources:
            self.resources.popitem()[1].close()

    def close(self) -> None:
        """Release the tools' resources, the connection, snapshots and any scratch file."""
        self.close_resources()
        if self._connection is not None:
            self._connection.close()
        for snap in self._snapshots.values():
            snap.close()
        self._snapshots.clear()
        self.conn.close()
        if self._path is not None:
            self._path.unlink(missing_ok=True)


class StateStore:
    """The seed master of one environment and the episode states copied from it."""

    def __init__(
        self,
        env: Environment,
        *,
        seed_file: Path | None = None,
        file_copy_threshold: int = DEFAULT_FILE_COPY_THRESHOLD,
    ) -> None:
        self.env = env
        self.seed_file = seed_file or seed_path(env)
        self.file_backed = self.seed_file.stat().st_size > file_copy_threshold
        if self.file_backed:
            self.master = sqlite3.connect(f"file:{self.seed_file}?mode=ro", uri=True, check_same_thread=False)
            self.scratch_dir = Path(tempfile.mkdtemp(prefix=f"arena-{env.name.replace('/', '_')}-"))
        else:
            source = sqlite3.connect(f"file:{self.seed_file}?mode=ro", uri=True)
            self.master = sqlite3.connect(":memory:", check_same_thread=False)
            source.backup(self.master)
            source.close()
        self.seed_table_hashes = digest.table_hashes(self.master)
        self.seed_hash = digest.state_hash(self.master, self.seed_table_hashes)
        self.episode_engine = _EpisodeEngine()
        self.states: dict[str, EpisodeState] = {}
        cap_mb = float(os.environ.get(MAX_SESSION_DB_ENV) or DEFAULT_MAX_SESSION_DB_MB)
        page_size = self.master.execute("PRAGMA page_size").fetchone()[0]
        seed_pages = self.master.execute("PRAGMA page_count").fetchone()[0]
        self.max_pages = seed_pages + max(1, int(cap_mb * 1024 * 1024) // page_size)

    def create(self, state_id: str | None = None) -> EpisodeState:
        """A new isolated state holding a copy of the seed."""
        state_id = state_id or secrets.token_urlsafe(16)
        if state_id in self.states:
            raise StateError(f"state {state_id!r} already exists")
        state = EpisodeState(self, state_id)
        self.states[state_id] = state
        return state

    def get(self, state_id: str) -> EpisodeState:
        try:
            return self.states[state_id]
        except KeyError:
            raise StateError(f"unknown session {state_id!r}") from None

    def detach(self, state_id: str) -> EpisodeState:
        """Unregister a state (unknown from now on) without closing it yet."""
        state = self.states.pop(state_id, None)
        if state is None:
            raise StateError(f"unknown session {state_id!r}")
        return state

    def close(self, state_id: str) -> None:
        self.detach(state_id).close()

    def close_all(self) -> None:
        for state_id in list(self.states):
            self.close(state_id)
        self.master.close()
        self.episode_engine.engine.dispose()
        if self.file_backed:
            shutil.rmtree(self.scratch_dir, ignore_errors=True)

    def table_counts(self) -> dict[str, int]:
        """Row count of every table in the seed."""
        return {
            t: self.master.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0]
            for t in digest.list_tables(self.master)
        }

    def sample(self, rows: int = 5) -> dict[str, list[dict[str, Any]]]:
        """The first ``rows`` rows of every seed table, for schema/data discovery."""
        return {t: digest.table_rows(self.master, t, limit=rows) for t in digest.list_tables(self.master)}
