"""Canonical digests and row-level diffs of SQLite databases.

Both work on raw ``sqlite3`` connections and are independent of row insertion order:
rows are canonicalised to sorted-key JSON and sorted before hashing.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


def _canonical_value(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"$bytes": value.hex()}
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def list_tables(conn: sqlite3.Connection) -> list[str]:
    """User tables in name order (SQLite's internal tables excluded)."""
    rows = conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
    ).fetchall()
    return [r[0] for r in rows]


def primary_key(conn: sqlite3.Connection, table: str) -> list[str]:
    """Primary-key column names of ``table`` (all columns when it has none)."""
    info = conn.execute(f'PRAGMA table_info("{table}")').fetchall()
    pk = [row[1] for row in sorted(info, key=lambda r: r[5]) if row[5] > 0]
    return pk or [row[1] for row in info]


def table_rows(conn: sqlite3.Connection, table: str, limit: int | None = None) -> list[dict[str, Any]]:
    """The rows of ``table`` (all, or the first ``limit``) as column->value dicts."""
    sql = f'SELECT * FROM "{table}"' + (f" LIMIT {int(limit)}" if limit is not None else "")
    cursor = conn.execute(sql)
    columns = [d[0] for d in cursor.description]
    return [dict(zip(columns, map(_canonical_value, row), strict=True)) for row in cursor]


def _keyed_rows(
    conn: sqlite3.Connection, table: str, pk: list[str]
) -> tuple[list[str], dict[tuple[Any, ...], tuple[Any, ...]]]:
    """Column names and raw rows of ``table`` keyed by their primary-key values."""
    cursor = conn.execute(f'SELECT * FROM "{table}"')
    columns = [d[0] for d in cursor.description]
    index = [columns.index(k) for k in pk]
    return columns, {tuple(row[i] for i in index): row for row in cursor}


def _row_json(row: dict[str, Any]) -> str:
    return json.dumps(row, sort_keys=True, separators=(",", ":"), default=str)


def table_hash(conn: sqlite3.Connection, table: str) -> str:
    """Order-independent SHA-256 of one table's rows."""
    digest = hashlib.sha256(table.encode())
    for line in sorted(_row_json(row) for row in table_rows(conn, table)):
        digest.update(b"\n")
        digest.update(line.encode())
    return digest.hexdigest()


def table_hashes(conn: sqlite3.Connection) -> dict[str, str]:
    """``table_hash`` of every table."""
    return {table: table_hash(conn, table) for table in list_tables(conn)}


def state_hash(conn: sqlite3.Connection, known: Mapping[str, str] | None = None) -> str:
    """Canonical digest of all tables: equal contents give equal hashes whatever the insertion order.

    ``known`` maps tables whose hash the caller already has (because they cannot have changed) to it.
    """
    known = known or {}
    digest = hashlib.sha256()
    for table in list_tables(conn):
        table_digest = known.get(table) or table_hash(conn, table)
        digest.update(f"{table}:{table_digest}\n".encode())
    return digest.hexdigest()


def action_references(conn: sqlite3.Connection) -> dict[str, set[str]]:
    """Parent table -> the tables a foreign-key action on it (cascade, set null/default) can write."""
    references: dict[str, set[str]] = {}
    for table in list_tables(conn):
        for row in conn.execute(f'PRAGMA foreign_key_list("{table}")'):
            on_update, on_delete = row[5], row[6]
            if {on_update.upper(), on_delete.upper()} - {"NO ACTION", "RESTRICT"}:
                references.setdefault(row[2], set()).add(table)
    return references


def dependent_tables(references: Mapping[str, set[str]], tables: Iterable[str]) -> set[str]:
    """``tables`` plus every table that foreign-key actions reach from them (``action_references``)."""
    closure, frontier = set(tables), list(tables)
    while frontier:
        for child in references.get(frontier.pop(), ()):
            if child not in closure:
                closure.add(child)
                frontier.append(child)
    return closure


@dataclass
class TableDiff:
    """Rows of one table that differ between two states, keyed by primary key."""

    inserted: list[dict[str, Any]] = field(default_factory=list)
    deleted: list[dict[str, Any]] = field(default_factory=list)
    changed: list[dict[str, Any]] = field(default_factory=list)

    def is_empty(self) -> bool:
        return not (self.inserted or self.deleted or self.changed)

    def to_dict(self) -> dict[str, Any]:
        return {"inserted": self.inserted, "deleted": self.deleted, "changed": self.changed}


def diff_states(
    before: sqlite3.Connection, after: sqlite3.Connection, only: Iterable[str] | None = None
) -> dict[str, TableDiff]:
    """Row-level differences from ``before`` to ``after``; tables without changes are omitted.

    ``only`` restricts the comparison to those tables (the caller knows the others are equal); a table
    present on one side only is always reported.
    A changed row is reported as ``{"key": {...pk...}, "before": {...}, "after": {...}, "columns": [...]}``.
    """
    result: dict[str, TableDiff] = {}
    before_tables, after_tables = set(list_tables(before)), set(list_tables(after))
    compared = before_tables | after_tables
    if only is not None:
        compared = (compared & set(only)) | (before_tables ^ after_tables)
    for table in sorted(compared):
        pk = primary_key(after if table in after_tables else before, table)
        old_columns, old = _keyed_rows(before, table, pk) if table in before_tables else ([], {})
        new_columns, new = _keyed_rows(after, table, pk) if table in after_tables else ([], {})
        same_layout = old_columns == new_columns

        def record(columns: list[str], row: tuple[Any, ...]) -> dict[str, Any]:
            return dict(zip(columns, map(_canonical_value, row), strict=True))

        def label(key: tuple[Any, ...], pk: list[str] = pk) -> str:
            return _row_json(dict(zip(pk, map(_canonical_value, key), strict=True)))

        diff = TableDiff()
        for key in sorted(new.keys() - old.keys(), key=label):
            diff.inserted.append(record(new_columns, new[key]))
        for key in sorted(old.keys() - new.keys(), key=label):
            diff.deleted.append(record(old_columns, old[key]))
        # Raw tuples compare like their canonical forms (2.0 == 2, equal bytes); only rows that
        # differ are turned into dicts.
        differing = [k for k in old.keys() & new.keys() if not (same_layout and old[k] == new[k])]
        for key in sorted(differing, key=label):
            was, now = record(old_columns, old[key]), record(new_columns, new[key])
            if was != now:
                columns = sorted(c for c in now if was.get(c) != now[c])
                diff.changed.append(
                    {"key": json.loads(label(key)), "before": was, "after": now, "columns": columns}
                )
        if not diff.is_empty():
            result[table] = diff
    return result
