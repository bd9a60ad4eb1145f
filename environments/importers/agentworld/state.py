"""The state model of an imported environment: its data files stored as SQLite rows.

Agent-World tools read and write JSON/CSV files in a directory. Here those files live in the
session's SQLite database, so reset, snapshots, hashing and diffs come from the SDK:

* every JSON container file gets a *collection table* (``key TEXT PRIMARY KEY, value TEXT``), one
  row per record: list items keyed by an id field (``id``, ``uid``, ``*_id``...) when it is unique,
  else by index; dict entries keyed by their dict key. A top-level dict entry that is itself a
  collection of records (``{"team_qc": [{...}, ...]}``) gets its own table ``<file>/<entry>``.
* a CSV file gets a table with one row per line (a JSON object of column -> text).
* ``_files`` holds one row per file: its kind, the *layout* (container types, order of keys,
  CSV columns) needed to rebuild it, or the whole content for text files and for JSON that no
  longer fits the tables planned at import (for instance a file a tool creates).

Values are stored as canonical JSON (sorted keys), so the state hash does not depend on the key
order a tool happened to write; the key order of the seed is kept in the plan (not in the state)
and used when files are written back out for a tool.
"""

from __future__ import annotations

import base64
import csv
import io
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from sqlalchemy import Column, MetaData, String, Table, Text, delete, insert, select, update
from sqlalchemy.orm import Session

FILES_TABLE = "_files"
KEY_FIELD_NAMES = ("id", "uid", "uuid", "key")
MAX_NESTED_TABLES = 32
_UNSAFE_TABLE_CHARS = re.compile(r"[^A-Za-z0-9_.\-/]")

Rows = dict[str, dict[str, str]]  # table -> row key -> canonical JSON value


def canonical(value: Any) -> str:
    """Canonical JSON text: sorted keys, no whitespace, unicode kept."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def file_kind(path: str) -> str:
    """``json``, ``csv`` or ``text`` by extension (``binary`` is decided from the content)."""
    suffix = Path(path).suffix.lower()
    return {".json": "json", ".csv": "csv"}.get(suffix, "text")


def _is_record_collection(value: Any) -> bool:
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else None
    return bool(items) and all(isinstance(item, dict) for item in items)


def _pick_key_field(records: list[Any]) -> str | None:
    """The first id-like field whose values are present, scalar and unique in every record."""
    if not records or not all(isinstance(r, dict) for r in records):
        return None
    for name in records[0]:
        id_like = name.lower() in KEY_FIELD_NAMES or name.endswith(("_id", "Id"))
        if id_like and _list_keys(records, name)[1] == name:
            return name
    return None


def _list_keys(items: list[Any], key_field: str | None) -> tuple[list[str], str | None]:
    """Row keys of a list: values of ``key_field`` when usable and unique, else positions."""
    if key_field is not None and all(isinstance(i, dict) for i in items):
        values = [i.get(key_field) for i in items]
        if all(isinstance(v, str | int) and not isinstance(v, bool) for v in values):
            keys = [str(v) for v in values]
            if len(set(keys)) == len(keys):
                return keys, key_field
    return [str(i) for i in range(len(items))], None


def key_sequences(value: Any) -> list[list[str]]:
    """The distinct key orders of the dicts in ``value``, in first-seen order (the seed's field order)."""
    seen: dict[tuple[str, ...], None] = {}
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            seen[tuple(node)] = None
            stack.extend(reversed(list(node.values())))
        elif isinstance(node, list):
            stack.extend(reversed(node))
    return [list(keys) for keys in seen]


class KeyOrder:
    """Orders dict keys as the seed did: the seed's order for a key set it had, else the order of the
    most similar seed dict for known keys, followed by the unknown keys alphabetically."""

    def __init__(self, sequences: Iterable[list[str]]) -> None:
        self.sequences = list(sequences)
        self.exact = {frozenset(s): s for s in self.sequences}

    def keys(self, keys: Iterable[str]) -> list[str]:
        wanted = set(keys)
        known = self.exact.get(frozenset(wanted))
        if known is not None:
            return known
        closest = max(self.sequences, key=lambda s: len(wanted.intersection(s)), default=[])
        ranked = [k for k in closest if k in wanted]
        return ranked + sorted(wanted.difference(ranked))

    def apply(self, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: self.apply(value[k]) for k in self.keys(value)}
        if isinstance(value, list):
            return [self.apply(v) for v in value]
        return value


@dataclass(frozen=True)
class FilePlan:
    """How one seed file maps to tables; fixed at import time."""

    path: str
    kind: str
    table: str | None = None
    nested: dict[str, str] = field(default_factory=dict)
    key_fields: dict[str, str | None] = field(default_factory=dict)
    key_orders: list[list[str]] = field(default_factory=list)

    @property
    def tables(self) -> list[str]:
        return ([self.table] if self.table else []) + list(self.nested.values())

    @cached_property
    def order(self) -> KeyOrder:
        return KeyOrder(self.key_orders)

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "kind": self.kind,
            "table": self.table,
            "nested": self.nested,
            "key_fields": self.key_fields,
            "key_orders": self.key_orders,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FilePlan:
        return cls(
            path=data["path"],
            kind=data["kind"],
            table=data.get("table"),
            nested=dict(data.get("nested") or {}),
            key_fields=dict(data.get("key_fields") or {}),
            key_orders=[list(keys) for keys in data.get("key_orders") or []],
        )


@dataclass(frozen=True)
class FileRow:
    """The ``_files`` row of one file."""

    path: str
    kind: str
    layout: str | None
    content: str | None

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "kind": self.kind, "layout": self.layout, "content": self.content}


@dataclass
class StateSnapshot:
    """The rows of one session as read at the start of a tool call."""

    files: dict[str, FileRow]
    rows: Rows


class _TableNamer:
    """Readable, unique, SQLite-safe table names derived from file paths and entry keys."""

    def __init__(self) -> None:
        self.used: set[str] = {FILES_TABLE}

    def name(self, raw: str) -> str:
        base = _UNSAFE_TABLE_CHARS.sub("_", raw)
        if base.lower().startswith("sqlite_"):
            base = f"t_{base}"
        candidate, n = base, 1
        while candidate in self.used:
            n += 1
            candidate = f"{base}~{n}"
        self.used.add(candidate)
        return candidate


def _plan_file(path: str, data: bytes, namer: _TableNamer) -> FilePlan:
    kind = file_kind(path)
    if kind == "csv":
        try:
            parsed = _csv_records(data.decode("utf-8"))
        except UnicodeDecodeError:
            parsed = None
        if parsed is None:
            return FilePlan(path, "text")
        table = namer.name(path)
        return FilePlan(path, "csv", table, key_fields={table: _pick_key_field(parsed[1])})
    if kind != "json":
        return FilePlan(path, kind)
    value = json.loads(data)
    if not isinstance(value, list | dict):
        return FilePlan(path, "json", key_orders=key_sequences(value))
    table = namer.name(path)
    key_fields: dict[str, str | None] = {table: _pick_key_field(value) if isinstance(value, list) else None}
    nested: dict[str, str] = {}
    if isinstance(value, dict):
        collections = [k for k, v in value.items() if _is_record_collection(v)]
        for entry in collections if len(collections) <= MAX_NESTED_TABLES else []:
            nested[entry] = namer.name(f"{path}/{entry}")
            items = value[entry]
            key_fields[nested[entry]] = _pick_key_field(items) if isinstance(items, list) else None
    return FilePlan(path, "json", table, nested, key_fields, key_sequences(value))


@dataclass(frozen=True)
class StatePlan:
    """The tables of an imported environment and the file each belongs to."""

    files: dict[str, FilePlan]

    @classmethod
    def from_seed(cls, files: Mapping[str, bytes]) -> StatePlan:
        """Plan tables from the seed files (JSON must parse; raises ``ValueError`` otherwise)."""
        namer = _TableNamer()
        return cls({path: _plan_file(path, files[path], namer) for path in sorted(files)})

    @classmethod
    def from_json(cls, data: Iterable[Mapping[str, Any]]) -> StatePlan:
        plans = [FilePlan.from_json(item) for item in data]
        return cls({p.path: p for p in plans})

    def to_json(self) -> list[dict[str, Any]]:
        return [plan.to_json() for plan in self.files.values()]

    def table_names(self) -> list[str]:
        return [t for plan in self.files.values() for t in plan.tables]

    def metadata(self) -> MetaData:
        """SQLAlchemy metadata: ``_files`` plus one ``(key, value)`` table per collection."""
        metadata = MetaData()
        Table(
            FILES_TABLE,
            metadata,
            Column("path", String, primary_key=True),
            Column("kind", String, nullable=False),
            Column("layout", Text),
            Column("content", Text),
        )
        for name in self.table_names():
            Table(
                name, metadata, Column("key", String, primary_key=True), Column("value", Text, nullable=False)
            )
        return metadata

    def plan_for(self, path: str) -> FilePlan:
        """The plan of ``path``; a file unknown at import time gets no tables."""
        return self.files.get(path) or FilePlan(path, file_kind(path))


# -- decomposition: file bytes -> rows ----------------------------------------------------------


def _csv_records(text: str) -> tuple[list[str], list[dict[str, str]]] | None:
    """Header and rows of a rectangular CSV with unique column names, else ``None``."""
    lines = list(csv.reader(io.StringIO(text)))
    if not lines:
        return [], []
    header, body = lines[0], lines[1:]
    if len(set(header)) != len(header) or any(len(line) != len(header) for line in body):
        return None
    return header, [dict(zip(header, line, strict=True)) for line in body]


def _container_layout(
    value: list[Any] | dict[str, Any], table: str, key_field: str | None, rows: Rows
) -> dict:
    if isinstance(value, dict):
        rows[table].update({k: canonical(v) for k, v in value.items()})
        return {"type": "dict", "table": table, "keys": list(value)}
    keys, by = _list_keys(value, key_field)
    rows[table].update({k: canonical(v) for k, v in zip(keys, value, strict=True)})
    return {"type": "list", "table": table, "by": by, "keys": keys}


def _json_layout(plan: FilePlan, value: Any, rows: Rows) -> dict | None:
    if plan.table is None or not isinstance(value, list | dict):
        return None
    if isinstance(value, list):
        return _container_layout(value, plan.table, plan.key_fields.get(plan.table), rows)
    entries: list[list[Any]] = []
    for key, item in value.items():
        nested = plan.nested.get(key)
        if nested is not None and isinstance(item, list | dict):
            entries.append([key, _container_layout(item, nested, plan.key_fields.get(nested), rows)])
        else:
            rows[plan.table][key] = canonical(item)
            entries.append([key, None])
    return {"type": "dict", "table": plan.table, "entries": entries}


def _text_row(path: str, data: bytes) -> FileRow:
    try:
        return FileRow(path, "text", None, data.decode("utf-8"))
    except UnicodeDecodeError:
        return FileRow(path, "binary", None, base64.b64encode(data).decode("ascii"))


def decompose(plan: FilePlan, data: bytes) -> tuple[FileRow, Rows]:
    """The ``_files`` row and the table rows that represent ``data`` under ``plan``."""
    rows: Rows = {t: {} for t in plan.tables}
    if plan.kind == "csv" and plan.table is not None:
        parsed = _csv_records(data.decode("utf-8", errors="replace"))
        if parsed is not None:
            header, records = parsed
            layout = _container_layout(records, plan.table, plan.key_fields.get(plan.table), rows)
            layout.update(type="csv", columns=header)
            return FileRow(plan.path, "csv", canonical(layout), None), rows
    if plan.kind == "json":
        try:
            value = json.loads(data)
        except ValueError:
            return _text_row(plan.path, data), {t: {} for t in plan.tables}
        layout = _json_layout(plan, value, rows)
        if layout is not None:
            return FileRow(plan.path, "json", canonical(layout), None), rows
        return FileRow(plan.path, "json", None, canonical(value)), rows
    return _text_row(plan.path, data), rows


# -- composition: rows -> file bytes ------------------------------------------------------------


def _compose_container(layout: Mapping[str, Any], rows: Rows, order: KeyOrder) -> Any:
    table = rows.get(layout["table"], {})
    items = [order.apply(json.loads(table[k])) for k in layout["keys"]]
    return dict(zip(layout["keys"], items, strict=True)) if layout["type"] == "dict" else items


def _compose_json(layout: Mapping[str, Any], rows: Rows, order: KeyOrder) -> Any:
    if "entries" not in layout:
        return _compose_container(layout, rows, order)
    table = rows.get(layout["table"], {})
    return {
        key: _compose_container(sub, rows, order) if sub else order.apply(json.loads(table[key]))
        for key, sub in layout["entries"]
    }


def _compose_csv(layout: Mapping[str, Any], rows: Rows) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    columns = layout["columns"]
    if columns:
        writer.writerow(columns)
    for record in _compose_container(layout, rows, KeyOrder(())):
        writer.writerow([record.get(c, "") for c in columns])
    return out.getvalue().encode("utf-8")


def compose(plan: FilePlan, row: FileRow, rows: Rows) -> bytes:
    """The file content represented by ``row`` and the rows of its tables."""
    if row.kind == "binary":
        return base64.b64decode(row.content or "")
    if row.kind == "text":
        return (row.content or "").encode("utf-8")
    if row.kind == "csv" and row.layout is not None:
        return _compose_csv(json.loads(row.layout), rows)
    if row.layout is not None:
        value = _compose_json(json.loads(row.layout), rows, plan.order)
    else:
        value = plan.order.apply(json.loads(row.content or "null"))
    return json.dumps(value, ensure_ascii=False, indent=2).encode("utf-8")


# -- the session database -----------------------------------------------------------------------


class FileStateStore:
    """Reads a session's files out of its database and writes changed files back, row by row."""

    def __init__(self, plan: StatePlan, metadata: MetaData) -> None:
        self.plan = plan
        self.files_table = metadata.tables[FILES_TABLE]
        self.tables = {name: metadata.tables[name] for name in plan.table_names()}

    def seed(self, db: Session, files: Mapping[str, bytes]) -> None:
        """Insert the rows of the seed files (deterministic: sorted paths, file order of records)."""
        for path in sorted(files):
            row, rows = decompose(self.plan.plan_for(path), files[path])
            db.execute(insert(self.files_table), [row.as_dict()])
            for table, values in rows.items():
                if values:
                    db.execute(
                        insert(self.tables[table]), [{"key": k, "value": v} for k, v in values.items()]
                    )

    def read(self, db: Session) -> StateSnapshot:
        """All files and rows of the session."""
        files = {
            r.path: FileRow(r.path, r.kind, r.layout, r.content) for r in db.execute(select(self.files_table))
        }
        rows = {
            name: dict(db.execute(select(t.c.key, t.c.value)).tuples().all())
            for name, t in self.tables.items()
        }
        return StateSnapshot(files, rows)

    def files(self, snapshot: StateSnapshot) -> dict[str, bytes]:
        """Every file's content, by relative path (what a tool call's data folder starts with)."""
        return {
            path: compose(self.plan.plan_for(path), row, snapshot.rows)
            for path, row in snapshot.files.items()
        }

    def write_back(self, db: Session, snapshot: StateSnapshot, changed: Mapping[str, bytes | None]) -> None:
        """Store changed files (``None`` = deleted); only rows that differ are written."""
        for path, data in sorted(changed.items()):
            plan = self.plan.plan_for(path)
            if data is None:
                new_row, new_rows = None, {t: {} for t in plan.tables}
            else:
                new_row, new_rows = decompose(plan, data)
            self._sync_file_row(db, snapshot.files.get(path), new_row, path)
            for table, values in new_rows.items():
                self._sync_table(db, table, snapshot.rows.get(table, {}), values)

    def _sync_file_row(self, db: Session, old: FileRow | None, new: FileRow | None, path: str) -> None:
        t = self.files_table
        if new is None:
            if old is not None:
                db.execute(delete(t).where(t.c.path == path))
        elif old is None:
            db.execute(insert(t), [new.as_dict()])
        elif old != new:
            db.execute(
                update(t)
                .where(t.c.path == path)
                .values(kind=new.kind, layout=new.layout, content=new.content)
            )

    def _sync_table(self, db: Session, name: str, old: Mapping[str, str], new: Mapping[str, str]) -> None:
        t = self.tables[name]
        gone = [k for k in old if k not in new]
        if gone:
            db.execute(delete(t).where(t.c.key.in_(gone)))
        added = [{"key": k, "value": v} for k, v in new.items() if k not in old]
        if added:
            db.execute(insert(t), added)
        for key, value in new.items():
            if key in old and old[key] != value:
                db.execute(update(t).where(t.c.key == key).values(value=value))
