"""Discovery: profile an environment (schema, row counts, data sample, tools and what they return).

Runs read-only in one isolated session of the pool: it reads the control plane's ``info`` and
``sample``, then probes every query tool a few times with arguments drawn from the data to learn the
fields it returns. The profile is plain JSON, stored and reused (keyed by environment and version).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, Field

from task_synth.runner import LeaseRunner
from task_synth.values import is_scalar, list_path, records, scalar_fields, singular, tool_entity

MAX_VALUES_PER_FIELD = 64
PROBES_PER_TOOL = 3
SAMPLE_ROWS = 60


class ParamProfile(BaseModel):
    name: str
    type: str
    required: bool
    enum: list[Any] | None = None
    maximum: float | None = None
    description: str = ""


class ToolProfile(BaseModel):
    """What a tool takes and returns; ``kind`` is query, mutation, or both (a write that returns a record)."""

    name: str
    description: str
    kind: Literal["query", "mutation", "both"]
    entity: str
    params: list[ParamProfile]
    output_fields: list[str] = Field(default_factory=list)
    returns_list: bool = False
    probes: int = 0
    probe_errors: int = 0

    @property
    def mutates(self) -> bool:
        return self.kind != "query"

    def param(self, name: str) -> ParamProfile | None:
        return next((p for p in self.params if p.name == name), None)


class TableProfile(BaseModel):
    name: str
    rows: int
    columns: list[str]


class EnvProfile(BaseModel):
    """Everything synthesis knows about one environment version."""

    env: str
    version: str
    description: str = ""
    seed_hash: str = ""
    tools: dict[str, ToolProfile]
    tables: dict[str, TableProfile]
    values: dict[str, list[Any]] = Field(default_factory=dict)
    facts: list[tuple[str, str, Any]] = Field(default_factory=list)

    @property
    def mutating(self) -> frozenset[str]:
        return frozenset(name for name, tool in self.tools.items() if tool.mutates)

    def observe(self, tool: str, output: Any) -> None:
        """Learn from one successful output: its fields, whether it is a list, and its values."""
        profile = self.tools[tool]
        profile.returns_list |= list_path(output) is not None
        found = records(output)
        known = set(profile.output_fields)
        for record in found:
            fields = scalar_fields(record)
            known.update(fields)
            self.add_values(fields)
        profile.output_fields = sorted(known)
        if profile.kind == "mutation" and found and len(scalar_fields(found[0])) >= 3:
            profile.kind = "both"

    def working_copy(self) -> EnvProfile:
        """A copy to ``observe`` into and later ``absorb``: what ``observe`` changes (each tool's profile,
        rebound field by field, and the value pools, appended to) is copied; the rest (facts, tables,
        fixed at discovery) is shared. About 20x cheaper than a deep copy of a discovered profile."""
        return self.model_copy(
            update={
                "tools": {name: tool.model_copy() for name, tool in self.tools.items()},
                "values": {key: list(pool) for key, pool in self.values.items()},
            }
        )

    def absorb(self, other: EnvProfile) -> None:
        """Take in what ``other``, a copy of this profile that observed outputs on its own, learned."""
        for name, learned in other.tools.items():
            tool = self.tools[name]
            tool.returns_list |= learned.returns_list
            tool.output_fields = sorted({*tool.output_fields, *learned.output_fields})
            if tool.kind == "mutation" and learned.kind == "both":
                tool.kind = "both"
        for key, values in other.values.items():
            pool = self.values.setdefault(key, [])
            for value in values:
                if value not in pool and len(pool) < MAX_VALUES_PER_FIELD:
                    pool.append(value)

    def add_values(self, fields: Mapping[str, Any], entity: str | None = None) -> None:
        for name, value in fields.items():
            if value is None or not is_scalar(value) or (isinstance(value, str) and len(value) > 80):
                continue
            keys = [name] + ([f"{entity}_{name}"] if entity and name in ("id", "key", "code", "name") else [])
            for key in keys:
                pool = self.values.setdefault(key, [])
                if value not in pool and len(pool) < MAX_VALUES_PER_FIELD:
                    pool.append(value)


def _params(schema: Mapping[str, Any]) -> list[ParamProfile]:
    required = set(schema.get("required", []))
    params = []
    for name, spec in schema.get("properties", {}).items():
        options = [spec, *spec.get("anyOf", [])]
        types = [o["type"] for o in options if isinstance(o.get("type"), str) and o["type"] != "null"]
        enum = next((o["enum"] for o in options if "enum" in o), None)
        maximum = next((o["maximum"] for o in options if "maximum" in o), None)
        params.append(
            ParamProfile(
                name=name,
                type=types[0] if types else "string",
                required=name in required,
                enum=enum,
                maximum=maximum,
                description=spec.get("description", ""),
            )
        )
    return params


def _row_records(table: str, rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows as records; key/value collection tables of imported environments are unpacked."""
    out = []
    for row in rows:
        if set(row) == {"key", "value"} and isinstance(row["value"], str):
            try:
                value = json.loads(row["value"])
            except ValueError:
                continue
            if isinstance(value, dict):
                out.append({"key": row["key"], **value})
                continue
        out.append(row)
    return out


def _table_entity(table: str) -> str:
    stem = table.rsplit("/", 1)[-1].split(".", 1)[0]
    return singular(stem.lower())


def build_profile(info: Mapping[str, Any], sample: Mapping[str, list[dict[str, Any]]]) -> EnvProfile:
    """The static part of a profile: tools from their schemas, tables and values from the sample."""
    tools = {
        t["name"]: ToolProfile(
            name=t["name"],
            description=t.get("description", ""),
            kind="mutation" if t.get("mutates", True) else "query",
            entity=tool_entity(t["name"]),
            params=_params(t.get("input_schema", {})),
        )
        for t in info["tools"]
    }
    profile = EnvProfile(
        env=info["name"],
        version=str(info.get("version", "")),
        description=info.get("description", ""),
        seed_hash=info.get("seed_hash", ""),
        tools=tools,
        tables={},
    )
    for table, rows in sample.items():
        recs = _row_records(table, rows)
        entity = _table_entity(table)
        columns = sorted({c for r in recs for c in r})
        profile.tables[table] = TableProfile(
            name=table, rows=info.get("tables", {}).get(table, 0), columns=columns
        )
        for record in recs:
            fields = scalar_fields(record)
            profile.add_values(fields, entity)
            for column, value in fields.items():
                if column not in ("id", "key") and is_scalar(value) and value is not None:
                    profile.facts.append((entity, column, value))
    return profile


async def probe(runner: LeaseRunner, profile: EnvProfile, rng: random.Random) -> None:
    """Call each query tool a few times with data-drawn arguments and record what comes back."""
    from task_synth.arguments import fill_arguments

    for tool in profile.tools.values():
        if tool.mutates:
            continue
        for _ in range(PROBES_PER_TOOL):
            arguments = fill_arguments(tool, profile, rng, optional_share=0.0)
            if arguments is None:
                break
            outcome = await runner.call(tool.name, arguments)
            tool.probes += 1
            if outcome.ok and not outcome.empty:
                profile.observe(tool.name, outcome.value)
            else:
                tool.probe_errors += 1


async def discover(runner: LeaseRunner, *, seed: int = 0) -> EnvProfile:
    """Profile the environment behind ``runner`` (read-only; the session's state is left as seeded)."""
    info = await runner.info()
    profile = build_profile(info, await runner.sample(SAMPLE_ROWS))
    await probe(runner, profile, random.Random(seed))
    diff = await runner.diff()
    if diff:
        raise RuntimeError(f"discovery of {profile.env} changed its state (tables {sorted(diff)}); aborting")
    return profile
