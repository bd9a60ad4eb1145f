"""Canonical digests and row-level diffs of SQLite databases.

Both work on raw ``sqlite3`` connections and are independent of row insertion order:
rows are canonicalised to sorted-key JSON and sorted before hashing.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
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


def _row_json(row: dict[str, Any]) -> str:
    return json.dumps(row, sort_keys=True, separators=(",", ":"), default=str)


def table_hash(conn: sqlite3.Connection, table: str) -> str:
    """Order-independent SHA-256 of one table's rows."""
    digest = hashlib.sha256(table.encode())
    for line in sorted(_row_json(row) for row in table_rows(conn, table)):
        digest.update(b"\n")
        digest.update(line.encode())
    return digest.hexdigest()


def state_hash(conn: sqlite3.Connection) -> str:
    """Canonical digest of all tables: equal contents give equal hashes whatever the insertion order."""
    digest = hashlib.sha256()
    for table in list_tables(conn):
        digest.update(f"{table}:{table_hash(conn, table)}\n".encode())
    return digest.hexdigest()


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


def diff_states(before: sqlite3.Connection, after: sqlite3.Connection) -> dict[str, TableDiff]:
    """Row-level differences from ``before`` to ``after``; tables without changes are omitted.

    A changed row is reported as ``{"key": {...pk...}, "before": {...}, "after": {...}, "columns": [...]}``.
    """
    result: dict[str, TableDiff] = {}
    before_tables, after_tables = set(list_tables(before)), set(list_tables(after))
    for table in sorted(before_tables | after_tables):
        pk = primary_key(after if table in after_tables else before, table)

        def keyed(
            conn: sqlite3.Connection, present: set[str], table: str = table, pk: list[str] = pk
        ) -> dict:
            if table not in present:
                return {}
            return {_row_json({k: row[k] for k in pk}): row for row in table_rows(conn, table)}

        old, new = keyed(before, before_tables), keyed(after, after_tables)
        diff = TableDiff()
        for key in sorted(new.keys() - old.keys()):
            diff.inserted.append(new[key])
        for key in sorted(old.keys() - new.keys()):
            diff.deleted.append(old[key])
        for key in sorted(old.keys() & new.keys()):
            if old[key] != new[key]:
                columns = sorted(c for c in new[key] if old[key].get(c) != new[key][c])
                diff.changed.append(
                    {"key": json.loads(key), "before": old[key], "after": new[key], "columns": columns}
                )
        if not diff.is_empty():
            result[table] = diff
    return result
