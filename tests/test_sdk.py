"""The authoring SDK: tool specs from type hints, transactions, isolated states, hash and diff."""

from __future__ import annotations

import sqlite3
from typing import Annotated, Literal

import pytest
from pydantic import Field
from sqlalchemy.orm import Session

from environments.registry import load_path
from environments.sdk import (
    Environment,
    EnvironmentSpecError,
    ErrorCode,
    StateStore,
    ToolError,
    ToolSpec,
    execute_tool,
)
from environments.sdk.digest import diff_states, state_hash
from environments.sdk.testing import EnvHarness
from environments.sdk.tools import ToolDefinitionError
from tests.conftest import TESTBED


def book(
    db: Session,
    flight: str,
    seats: Annotated[int, Field(ge=1, le=9)] = 1,
    cabin: Literal["economy", "business"] = "economy",
) -> dict:
    """Book seats on a flight.

    Args:
        flight: Flight number, e.g. BA117.
        seats: How many seats.
        cabin: Cabin class.
    """
    return {"flight": flight, "seats": seats, "cabin": cabin}


def test_schema_comes_from_type_hints_and_docstring() -> None:
    spec = ToolSpec.from_function(book, mutates=True)
    schema = spec.input_schema
    assert spec.description == "Book seats on a flight."
    assert schema["required"] == ["flight"]
    assert schema["properties"]["flight"] == {"type": "string", "description": "Flight number, e.g. BA117."}
    assert schema["properties"]["seats"]["maximum"] == 9
    assert schema["properties"]["cabin"]["enum"] == ["economy", "business"]
    assert schema["additionalProperties"] is False
    assert spec.mutates


def test_arguments_are_validated_before_the_tool_runs() -> None:
    spec = ToolSpec.from_function(book)
    assert spec.validate_arguments({"flight": "BA1", "seats": 2}) == {
        "flight": "BA1",
        "seats": 2,
        "cabin": "economy",
    }
    for bad in (
        {"seats": 2},
        {"flight": "BA1", "seats": 12},
        {"flight": "BA1", "cabin": "first"},
        {"flight": "X", "x": 1},
    ):
        with pytest.raises(ToolError) as err:
            spec.validate_arguments(bad)
        assert err.value.code == ErrorCode.VALIDATION_ERROR


def test_tool_definition_errors_are_clear() -> None:
    def undocumented(db: Session, x: int) -> int:
        return x

    def untyped(db: Session, x):  # type: ignore[no-untyped-def]
        """Doc."""

    def no_session(x: int) -> int:
        """Doc."""
        return x

    for fn, needle in ((undocumented, "docstring"), (untyped, "type hint"), (no_session, "database session")):
        with pytest.raises(ToolDefinitionError, match=needle):
            ToolSpec.from_function(fn)


def test_environment_rejects_bad_names_and_duplicate_tools() -> None:
    from tests.fixtures.testbed import Base

    with pytest.raises(EnvironmentSpecError, match="name"):
        Environment("Bad Name", theme="t", category="c", description="d", base=Base)
    env = Environment("dup", theme="t", category="c", description="d", base=Base)
    env.tool(book)
    with pytest.raises(EnvironmentSpecError, match="duplicate tool"):
        env.tool(book)


@pytest.fixture
def harness():
    with EnvHarness(load_path(TESTBED)) as h:
        yield h


def test_failed_call_does_not_half_apply(harness: EnvHarness) -> None:
    before = harness.state.state_hash()
    outcome = harness.outcome("explode_after_write", account_id=1)
    assert not outcome.ok and outcome.error_code == "INTERNAL" and "boom" in outcome.value["message"]
    typed = harness.outcome("deposit", account_id=1, amount=-5)  # writes, then raises CONFLICT
    assert typed.error_code == "CONFLICT"
    assert harness.state.state_hash() == before
    assert harness.query("SELECT COUNT(*) FROM entries") == [(0,)]


def test_read_only_tool_cannot_write(harness: EnvHarness) -> None:
    outcome = harness.outcome("sneaky_write", account_id=2)
    assert outcome.error_code == "INTERNAL" and "read-only" in outcome.value["message"]
    assert harness.query("SELECT owner FROM accounts WHERE id = 2") == [("owner2",)]


def test_unknown_tool_is_an_error_result(harness: EnvHarness) -> None:
    outcome = harness.outcome("drop_tables")
    assert outcome.error_code == "UNKNOWN_TOOL" and "get_account" in outcome.value["message"]


def test_states_are_isolated_and_reset_restores_seed() -> None:
    store = StateStore(load_path(TESTBED))
    a, b = store.create(), store.create()
    assert execute_tool(store.env, a, "deposit", {"account_id": 1, "amount": 50}).ok
    assert a.state_hash() != store.seed_hash
    assert b.state_hash() == store.seed_hash
    a.reset()
    assert a.state_hash() == store.seed_hash
    store.close_all()


def test_snapshot_restore_and_diff() -> None:
    store = StateStore(load_path(TESTBED))
    state = store.create()
    execute_tool(store.env, state, "deposit", {"account_id": 3, "amount": 10})
    snap = state.snapshot()
    execute_tool(store.env, state, "deposit", {"account_id": 4, "amount": 20})
    diff = state.diff(snap, "current")
    assert list(diff) == ["accounts", "entries"]
    assert [c["key"] for c in diff["accounts"]["changed"]] == [{"id": 4}]
    assert diff["accounts"]["changed"][0]["columns"] == ["balance"]
    assert len(diff["entries"]["inserted"]) == 1 and diff["entries"]["inserted"][0]["amount"] == 20
    state.restore(snap)
    assert state.diff(snap, "current") == {}
    assert len(state.diff("seed", "current")["entries"]["inserted"]) == 1
    store.close_all()


def test_file_backed_states_for_large_databases() -> None:
    store = StateStore(load_path(TESTBED), file_copy_threshold=0)
    assert store.file_backed
    state = store.create()
    execute_tool(store.env, state, "deposit", {"account_id": 1, "amount": 5})
    assert state.state_hash() != store.seed_hash
    state.reset()
    assert state.state_hash() == store.seed_hash
    scratch = store.scratch_dir
    store.close_all()
    assert not scratch.exists()


def test_hash_ignores_insertion_order_and_diff_names_rows() -> None:
    def make(rows: list[tuple[int, str]]) -> sqlite3.Connection:
        conn = sqlite3.connect(":memory:")
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
        conn.executemany("INSERT INTO t VALUES (?, ?)", rows)
        return conn

    forward = make([(1, "a"), (2, "b"), (3, "c")])
    backward = make([(3, "c"), (2, "b"), (1, "a")])
    assert state_hash(forward) == state_hash(backward)
    changed = make([(1, "a"), (2, "B"), (4, "d")])
    assert state_hash(changed) != state_hash(forward)
    diff = diff_states(forward, changed)["t"]
    assert [r["id"] for r in diff.inserted] == [4]
    assert [r["id"] for r in diff.deleted] == [3]
    assert diff.changed == [
        {"key": {"id": 2}, "before": {"id": 2, "v": "b"}, "after": {"id": 2, "v": "B"}, "columns": ["v"]}
    ]


def _full(state_conn: sqlite3.Connection, seed: sqlite3.Connection) -> tuple[str, dict]:
    """Hash and diff computed from scratch, over every table (what the tracked versions must equal)."""
    changes = diff_states(seed, state_conn)
    return state_hash(state_conn), {t: d.to_dict() for t, d in changes.items()}


def test_tracked_hash_and_diff_equal_a_full_recomputation() -> None:
    """Hash and diff only revisit tables the episode may have written; that must never miss a change:
    raw SQL, a trigger writing elsewhere, an ON DELETE CASCADE, a table a tool creates, a rolled-back
    write, a snapshot restored."""
    store = StateStore(load_path(TESTBED))
    state = store.create()
    assert state.pristine and state.diff() == {} and state.state_hash() == store.seed_hash
    conn = state.conn
    conn.execute("CREATE TABLE audit (id INTEGER PRIMARY KEY, what TEXT)")
    conn.execute(
        "CREATE TABLE holds (id INTEGER PRIMARY KEY, entry_id REFERENCES entries(id) ON DELETE CASCADE)"
    )
    conn.execute(
        "CREATE TRIGGER log AFTER UPDATE ON accounts BEGIN INSERT INTO audit (what) VALUES (NEW.id); END"
    )
    conn.commit()
    assert not state.pristine  # a schema change alone writes no row
    for amount in (1, 2, 3):
        assert execute_tool(store.env, state, "deposit", {"account_id": 5, "amount": amount}).ok
    conn.execute("INSERT INTO holds (entry_id) SELECT id FROM entries")
    conn.commit()
    snap = state.snapshot()
    conn.execute("UPDATE accounts SET balance = balance + 1 WHERE id = 2")
    conn.execute("DELETE FROM entries")
    conn.commit()
    conn.execute("UPDATE accounts SET balance = 0")
    conn.rollback()
    expected_hash, expected_diff = _full(conn, store.master)
    assert state.state_hash() == expected_hash
    assert state.diff() == expected_diff
    assert set(expected_diff) == {"audit", "accounts"}  # entries and holds are back to empty
    since_snapshot = state.diff(snap, "current")
    assert len(since_snapshot["holds"]["deleted"]) == len(since_snapshot["entries"]["deleted"]) == 3
    state.restore(snap)
    assert not state.pristine
    assert state.state_hash() == _full(conn, store.master)[0]
    state.reset()
    assert state.pristine and state.diff() == {} and state.state_hash() == store.seed_hash
    assert execute_tool(store.env, state, "deposit", {"account_id": 1, "amount": 7}).ok
    assert (state.state_hash(), state.diff()) == _full(conn, store.master)
    store.close_all()
