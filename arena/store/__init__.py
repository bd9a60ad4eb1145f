"""The arena's SQL results store: one database (SQLite by default, any SQLAlchemy URL) for tasks,
environment profiles and, later, runs, episodes and verdicts."""

from arena.store.db import Database, StoreError, arena_home, default_url
from arena.store.profiles import ProfileStore
from arena.store.tasks import TaskNotFound, TaskStore, read_jsonl, write_jsonl

__all__ = [
    "Database",
    "ProfileStore",
    "StoreError",
    "TaskNotFound",
    "TaskStore",
    "arena_home",
    "default_url",
    "read_jsonl",
    "write_jsonl",
]
