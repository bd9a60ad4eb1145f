"""The SQL results store on real SQLite files: tasks, filters, JSONL, profiles, bad URLs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from arena.store import Database, ProfileStore, StoreError, TaskNotFound, TaskStore, default_url
from task_synth.model import Task
from tests.task_samples import every_kind, graph_task


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Database:
    monkeypatch.setenv("ARENA_HOME", str(tmp_path / "home"))
    database = Database(f"sqlite:///{tmp_path / 'store.db'}")
    yield database
    database.close()


def test_every_kind_round_trips(db: Database) -> None:
    tasks = every_kind()
    store = TaskStore(db)
    assert store.add(tasks) == 4
    for task in tasks:
        assert store.get(task.id) == task
    reopened = Database(db.url)
    assert {t.id for t in TaskStore(reopened).list()} == {t.id for t in tasks}
    reopened.close()


def test_add_is_an_idempotent_upsert(db: Database) -> None:
    store = TaskStore(db)
    task = graph_task()
    assert store.add([task, task]) == 1
    assert store.add([task]) == 0
    remeasured = task.model_copy(update={"measured": {"chain_length": 3.0}})
    assert store.add([remeasured, graph_task(title="Emma")]) == 1
    assert store.get(task.id).measured == {"chain_length": 3.0}
    assert len(store.list()) == 2


def test_task_without_id_gets_its_content_address(db: Database) -> None:
    store = TaskStore(db)
    bare = graph_task().model_copy(update={"id": ""})
    store.add([bare])
    assert store.get(bare.with_id().id).request == bare.request


def test_filters_and_counts(db: Database) -> None:
    store = TaskStore(db)
    store.add([*every_kind(), graph_task(difficulty=3, title="Emma"), graph_task(env="airline", title="x")])
    assert {t.env for t in store.list(env="library")} == {"library"}
    assert [t.difficulty for t in store.list(env="library")] == [1, 3]
    assert [t.kind for t in store.list(kind="program")] == ["program"]
    assert len(store.list(env="library", difficulty=3)) == 1
    assert len(store.list(limit=2)) == 2
    counts = store.count_by()
    assert counts[("library", 1)] == 1 and counts[("library", 3)] == 1 and sum(counts.values()) == 6
    assert store.count_by(env="banking") == {("banking", 3): 1}


def test_unknown_id_names_it_and_the_list_command(db: Database) -> None:
    with pytest.raises(TaskNotFound) as info:
        TaskStore(db).get("library-000000000000")
    assert isinstance(info.value, KeyError)
    assert "library-000000000000" in str(info.value) and "arena tasks list" in str(info.value)


def test_delete_by_env_and_all(db: Database) -> None:
    store = TaskStore(db)
    store.add(every_kind())
    assert store.delete(env="library") == 1
    assert "library" not in {t.env for t in store.list()}
    assert store.delete() == 3 and store.list() == []


def test_jsonl_export_then_import_skips_a_malformed_line(db: Database, tmp_path: Path) -> None:
    store = TaskStore(db)
    tasks = every_kind()
    store.add(tasks)
    path = tmp_path / "tasks.jsonl"
    assert store.export_jsonl(path) == 4
    assert store.export_jsonl(tmp_path / "lib.jsonl", env="library") == 1
    lines = path.read_text().splitlines()
    broken = json.loads(lines[1])
    broken["difficulty"] = 9
    lines[1] = json.dumps(broken)
    lines.insert(3, "{not json")
    path.write_text("\n".join(lines) + "\n\n")

    target = TaskStore(Database(f"sqlite:///{tmp_path / 'other.db'}"))
    skipped: list[tuple[int, str]] = []
    assert target.import_jsonl(path, on_error=lambda line, reason: skipped.append((line, reason))) == 3
    assert [line for line, _ in skipped] == [2, 4]
    assert "difficulty" in skipped[0][1]
    assert {t.id for t in target.list()} == {t.id for i, t in enumerate(tasks) if i != 1}
    assert target.get(tasks[0].id) == tasks[0]
    assert target.import_jsonl(path, on_error=lambda *_: None) == 0
    target.db.close()


def test_profiles_save_load_replace(db: Database) -> None:
    profiles = ProfileStore(db)
    assert profiles.load_profile("library", "1.0") is None
    profiles.save_profile("library", "1.0", {"tools": {"search_books": {"kind": "query"}}})
    profiles.save_profile("library", "1.1", {"tools": {}})
    assert profiles.load_profile("library", "1.0") == {"tools": {"search_books": {"kind": "query"}}}
    profiles.save_profile("library", "1.0", {"tools": {}, "rows": 3})
    assert profiles.load_profile("library", "1.0") == {"tools": {}, "rows": 3}


def test_default_url_lives_in_arena_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARENA_HOME", str(tmp_path / "home"))
    assert default_url() == f"sqlite:///{tmp_path / 'home' / 'arena.db'}"
    database = Database()
    TaskStore(database).add([graph_task()])
    database.close()
    assert (tmp_path / "home" / "arena.db").is_file()


def test_sqlite_uses_wal_and_foreign_keys(db: Database) -> None:
    with db.engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("not a url", "bad store URL 'not a url'"),
        ("nosuchdb://host/x", "no driver"),
        ("sqlite:////nonexistent-dir/sub/arena.db", "cannot open store"),
    ],
)
def test_bad_url_is_a_clear_store_error(url: str, message: str) -> None:
    with pytest.raises(StoreError, match=message):
        Database(url)


def test_password_is_hidden_in_the_display_url(tmp_path: Path) -> None:
    with pytest.raises(StoreError) as info:
        Database("postgresql+nosuchdriver://user:secret@localhost/arena")
    assert "secret" not in str(info.value)


def test_task_model_matches_rows(db: Database) -> None:
    task = every_kind()[2]
    TaskStore(db).add([task])
    assert Task.model_validate_json(TaskStore(db).get(task.id).model_dump_json()) == task
