"""The arena's SQL results store: one database (SQLite by default, any SQLAlchemy URL) for tasks,
environment profiles, evaluation runs, episodes and steps."""

from arena.store.db import Database, StoreError, arena_home, default_url
from arena.store.profiles import ProfileStore
from arena.store.runs import EpisodeSummary, RunInfo, RunNotFound, RunStore
from arena.store.tasks import TaskNotFound, TaskStore, read_jsonl, write_jsonl

__all__ = [
    "Database",
    "EpisodeSummary",
    "ProfileStore",
    "RunInfo",
    "RunNotFound",
    "RunStore",
    "StoreError",
    "TaskNotFound",
    "TaskStore",
    "arena_home",
    "default_url",
    "read_jsonl",
    "write_jsonl",
]
