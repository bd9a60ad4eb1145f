"""``TaskStore``: synthesized tasks in the store, with filters and JSONL export/import."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from sqlalchemy import Select, delete, func, insert, select, update

from arena.store.db import Database
from arena.store.schema import TaskRow
from task_synth.model import Task

logger = logging.getLogger(__name__)

_COLUMNS = tuple(c.key for c in TaskRow.__table__.columns if c.key != "created_at")
_CHUNK = 500


class TaskNotFound(KeyError):
    """No task has the requested id."""

    def __str__(self) -> str:
        return str(self.args[0])


def _row_values(task: Task) -> dict[str, Any]:
    data = task.model_dump(mode="json")
    return {column: data[column] for column in _COLUMNS}


def _task(row: TaskRow) -> Task:
    values = {column: getattr(row, column) for column in _COLUMNS}
    for column, empty in (("follow_ups", []), ("setup", []), ("added_tools", {}), ("turn_solutions", [])):
        values[column] = values[column] or empty
    return Task.model_validate(values)


def write_jsonl(path: Path, tasks: Iterable[Task]) -> int:
    """Write one task per line (``Task.model_dump_json``); returns the number written."""
    count = 0
    with Path(path).open("w", encoding="utf-8") as out:
        for task in tasks:
            out.write(task.model_dump_json() + "\n")
            count += 1
    return count


def read_jsonl(path: Path, on_error: Callable[[int, str], None]) -> Iterator[Task]:
    """Tasks of a JSONL file; a malformed line is passed to ``on_error(line_number, reason)`` and skipped."""
    with Path(path).open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                yield Task.model_validate_json(line)
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first["loc"]) or "line"
                on_error(number, f"{where}: {first['msg']} ({exc.error_count()} error(s))")


def _log_skipped(line: int, reason: str) -> None:
    logger.warning("skipped line %d: %s", line, reason)


class TaskStore:
    """Tasks keyed by their content-addressed id; adding the same task again updates it in place."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def add(self, tasks: Iterable[Task]) -> int:
        """Insert new tasks and update known ones (by id; a task without an id gets ``with_id()``).
        Returns the number newly inserted."""
        unique: dict[str, dict[str, Any]] = {}
        for task in tasks:
            values = _row_values(task if task.id else task.with_id())
            unique[values["id"]] = values
        rows = list(unique.values())
        inserted = 0
        with self.db.session() as session:
            for start in range(0, len(rows), _CHUNK):
                chunk = rows[start : start + _CHUNK]
                known = set(
                    session.scalars(select(TaskRow.id).where(TaskRow.id.in_([r["id"] for r in chunk])))
                )
                new = [r for r in chunk if r["id"] not in known]
                if new:
                    session.execute(insert(TaskRow), new)
                if known:
                    session.execute(update(TaskRow), [r for r in chunk if r["id"] in known])
                inserted += len(new)
        return inserted

    def get(self, task_id: str) -> Task:
        """The task with this id; ``TaskNotFound`` if there is none."""
        with self.db.session() as session:
            row = session.get(TaskRow, task_id)
            if row is None:
                raise TaskNotFound(f"no task {task_id!r} in the store (see `arena tasks list`)")
            return _task(row)

    @staticmethod
    def _select(env: str | None, difficulty: int | None, kind: str | None) -> Select[tuple[TaskRow]]:
        query = select(TaskRow)
        if env is not None:
            query = query.where(TaskRow.env == env)
        if difficulty is not None:
            query = query.where(TaskRow.difficulty == difficulty)
        if kind is not None:
            query = query.where(TaskRow.kind == str(kind))
        return query.order_by(TaskRow.env, TaskRow.difficulty, TaskRow.id)

    def stream(
        self, env: str | None = None, difficulty: int | None = None, kind: str | None = None
    ) -> Iterator[Task]:
        """Matching tasks, streamed in (env, difficulty, id) order."""
        with self.db.session() as session:
            query = self._select(env, difficulty, kind).execution_options(yield_per=_CHUNK)
            for row in session.scalars(query):
                yield _task(row)

    def list(
        self,
        env: str | None = None,
        difficulty: int | None = None,
        kind: str | None = None,
        limit: int | None = None,
    ) -> list[Task]:
        """Matching tasks in (env, difficulty, id) order, at most ``limit``."""
        with self.db.session() as session:
            return [_task(row) for row in session.scalars(self._select(env, difficulty, kind).limit(limit))]

    def count_by(self, env: str | None = None) -> dict[tuple[str, int], int]:
        """Number of tasks per (env, difficulty level)."""
        query = select(TaskRow.env, TaskRow.difficulty, func.count()).group_by(
            TaskRow.env, TaskRow.difficulty
        )
        if env is not None:
            query = query.where(TaskRow.env == env)
        with self.db.session() as session:
            return {(e, level): count for e, level, count in session.execute(query)}

    def export_jsonl(
        self, path: Path, env: str | None = None, difficulty: int | None = None, kind: str | None = None
    ) -> int:
        """Write the matching tasks to ``path``, one JSON object per line; returns how many."""
        return write_jsonl(path, self.stream(env, difficulty, kind))

    def import_jsonl(self, path: Path, on_error: Callable[[int, str], None] = _log_skipped) -> int:
        """Add every valid task of a JSONL file; malformed lines go to ``on_error`` and are skipped.
        Returns the number newly inserted."""
        return self.add(read_jsonl(path, on_error))

    def delete(self, env: str | None = None) -> int:
        """Delete the tasks of ``env`` (every task if None); returns how many."""
        query = delete(TaskRow)
        if env is not None:
            query = query.where(TaskRow.env == env)
        with self.db.session() as session:
            return session.execute(query).rowcount
