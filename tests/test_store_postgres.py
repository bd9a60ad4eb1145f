"""The store against a real PostgreSQL server through the same SQLAlchemy code as SQLite: tasks round
trip, and the same runs give byte-identical reports from both."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from arena.eval.report import write_report
from arena.store import Database, RunStore, TaskStore
from task_synth.model import FieldRule, Rubric, Task, TaskKind, Verifier
from tests.postgres import postgres_server
from tests.test_eval_report import fill


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    with postgres_server() as url:
        yield url


def test_tasks_round_trip_on_postgres(postgres_url: str) -> None:
    db = Database(postgres_url)
    try:
        store = TaskStore(db)
        task = Task(
            env="library",
            env_version="v1",
            kind=TaskKind.GRAPH,
            request="How many copies?",
            difficulty=2,
            verifier=Verifier(rubric=Rubric(fields={"copies": FieldRule(type="integer", value=3)})),
            provenance={"tags": ["suite:core:1000"], "nested": {"a": [1, 2.5, None]}},
            follow_ups=["And book 2?"],
        ).with_id()
        assert store.add([task]) == 1 and store.add([task]) == 0
        assert store.get(task.id) == task
        assert store.count_by() == {("library", 2): 1}
    finally:
        db.close()


def test_sqlite_and_postgres_give_identical_reports(postgres_url: str, tmp_path: Path) -> None:
    outputs = {}
    for name, url in {"sqlite": f"sqlite:///{tmp_path / 'r.db'}", "postgres": postgres_url}.items():
        db = Database(url)
        try:
            store = RunStore(db)
            fill(store)
            assert RunStore(db).get("weak").status == "finished"
            report = write_report(store, ["strong", "weak"], tmp_path / name)
        finally:
            db.close()
        outputs[name] = {p.name: p.read_text() for p in [report.markdown, *report.tables]}
    assert outputs["sqlite"] == outputs["postgres"]
    assert "75.0%" in outputs["postgres"]["overall.csv"]
