"""``arena tasks ...`` and ``arena synth`` through ``arena.cli.main.main`` against real SQLite stores."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from arena.cli.main import main
from arena.runtime.pool import EnvPool, PoolConfig
from arena.store import Database, TaskStore
from task_synth.model import Task
from task_synth.program import execute
from task_synth.runner import LeaseRunner
from tests.task_samples import every_kind, graph_task, hold_task, state_task


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ARENA_HOME", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "200")
    return tmp_path


@pytest.fixture
def filled(home: Path) -> str:
    """The default store (``$ARENA_HOME/arena.db``) holding one task of every kind."""
    db = Database()
    TaskStore(db).add(every_kind())
    db.close()
    return f"sqlite:///{home / 'arena.db'}"


def test_list_filters_and_json(filled: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tasks", "list"]) == 0
    out = capsys.readouterr().out
    assert "4 tasks" in out and graph_task().id in out
    assert main(["tasks", "list", "--env", "library", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in rows] == [graph_task().id]
    assert main(["tasks", "list", "--difficulty", "3", "--json", "--store", filled]) == 0
    assert [r["env"] for r in json.loads(capsys.readouterr().out)] == ["banking"]


def test_show_renders_request_solution_and_verifier(filled: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tasks", "show", graph_task().id]) == 0
    out = capsys.readouterr().out
    for expected in ("Who wrote the book titled Dune", "search_books", "get_book(book_id=⟨step 1.[0].id⟩)"):
        assert expected in out
    assert "Frank Herbert" in out and "chain_length" in out and "answer rubric" in out
    assert main(["tasks", "show", state_task().id]) == 0
    assert "final state must change exactly these rows" in capsys.readouterr().out


def test_unknown_id_is_exit_2_with_a_hint(filled: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tasks", "show", "library-nope"]) == 2
    err = capsys.readouterr().err
    assert "library-nope" in err and "arena tasks list" in err and "Traceback" not in err


def test_verify_answer_tasks(filled: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    task = graph_task()
    good, bad, broken = tmp_path / "good.json", tmp_path / "bad.json", tmp_path / "broken.json"
    good.write_text(json.dumps(task.reference_answer))
    bad.write_text(json.dumps({"author": "Frank Herbert", "copies": 4}))
    broken.write_text("{oops")
    assert main(["tasks", "verify", task.id, "--answer", str(good)]) == 0
    assert "PASS" in capsys.readouterr().out
    assert main(["tasks", "verify", task.id, "--answer", str(bad)]) == 1
    assert "field 'copies' has a wrong value" in capsys.readouterr().out
    assert main(["tasks", "verify", task.id, "--answer", str(broken)]) == 2
    assert "not valid JSON" in capsys.readouterr().err
    assert main(["tasks", "verify", task.id, "--answer", str(tmp_path / "missing.json")]) == 2
    assert "cannot read" in capsys.readouterr().err
    assert main(["tasks", "verify", "library-nope", "--answer", str(good)]) == 2
    assert main(["tasks", "verify", state_task().id, "--answer", str(good)]) == 2
    assert "final database state" in capsys.readouterr().err


def test_export_then_import(filled: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "out.jsonl"
    assert main(["tasks", "export", str(path), "--env", "library"]) == 0
    assert "exported 1 tasks" in capsys.readouterr().out
    assert main(["tasks", "export", str(path)]) == 0
    path.write_text(path.read_text() + "not json\n")
    other = f"sqlite:///{tmp_path / 'other.db'}"
    assert main(["tasks", "import", str(path), "--store", other]) == 1
    captured = capsys.readouterr()
    assert "imported 4 new tasks" in captured.out and f"{path}:5" in captured.err
    assert main(["tasks", "list", "--json", "--store", other]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 4
    assert main(["tasks", "import", str(tmp_path / "missing.jsonl")]) == 2


def test_bad_store_url_is_exit_2(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tasks", "list", "--store", "not a url"]) == 2
    assert "bad store URL" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["nope=1"], "unknown key 'nope'"),
        (["n=many"], "n: Input should be a valid integer"),
        (["difficulty=[1,"], "bad override"),
        (["difficulty=[4,2]"], "difficulty: expected a level 1..5"),
        (["env=atlantis"], "unknown environment 'atlantis'"),
        (["llm.model=gpt"], "llm.base_url and llm.model must be set together"),
        (["env=library", "store.url=not a url"], "bad store URL"),
    ],
)
def test_synth_rejects_bad_config_in_one_line(
    home: Path, overrides: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["synth", *overrides]) == 2
    err = capsys.readouterr().err
    assert message in err and err.strip().count("\n") == 0, err


@pytest.fixture
def ray_local(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Local Ray without auth, shut down afterwards; joins the one an earlier test left running (the pool
    gives workers this test's ARENA_HOME, so a shared Ray is fine)."""
    import ray

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    if ray.is_initialized():
        yield
        return
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


async def _reference_calls(task: Task) -> list[dict[str, object]]:
    """The concrete tool calls of a task's reference solution, run in a fresh session."""
    async with (
        EnvPool(PoolConfig(envs={task.env: 1}, warm_sessions_per_worker=1)) as pool,
        pool.session(task.env) as lease,
    ):
        assert task.solution is not None
        run = await execute(task.solution, LeaseRunner(lease))
    return [{"tool": tool, "arguments": arguments} for tool, arguments in run.calls]


async def _hold_task() -> Task:
    async with EnvPool(PoolConfig(envs={"library": 1}, warm_sessions_per_worker=1)) as pool:
        return await hold_task(pool)


@pytest.mark.slow
def test_synth_end_to_end_then_show_and_verify(
    home: Path, ray_local: None, capsys: pytest.CaptureFixture[str]
) -> None:
    out = home / "run.jsonl"
    assert main(["synth", "env=library", "n=5", "difficulty=[1,2]", f"output.jsonl={out}"]) == 0
    printed = capsys.readouterr().out
    assert "synthesized tasks" in printed and f"{home / 'arena.db'}" in printed and "holds 5 tasks" in printed
    tasks = TaskStore(Database()).list(env="library")
    assert len(tasks) == 5 and {t.difficulty for t in tasks} <= {1, 2}
    assert len(out.read_text().splitlines()) == 5

    answer_only = next(t for t in tasks if t.verifier.state is None)
    assert main(["tasks", "show", answer_only.id]) == 0
    shown = capsys.readouterr().out
    assert answer_only.id in shown and "reference solution" in shown and "answer rubric" in shown
    good, bad = home / "good.json", home / "bad.json"
    good.write_text(json.dumps(answer_only.reference_answer))
    bad.write_text(json.dumps({key: "not-the-answer" for key in answer_only.reference_answer or {}}))
    assert main(["tasks", "verify", answer_only.id, "--answer", str(good)]) == 0
    assert main(["tasks", "verify", answer_only.id, "--answer", str(bad)]) == 1
    assert "FAIL" in capsys.readouterr().out

    hold = asyncio.run(_hold_task())
    TaskStore(Database()).add([hold])
    for state in [hold, *(t for t in tasks if t.verifier.state is not None)]:
        calls = asyncio.run(_reference_calls(state))
        good.write_text(json.dumps({"calls": calls, "answer": state.reference_answer}))
        bad.write_text(json.dumps({"calls": [], "answer": state.reference_answer}))
        assert main(["tasks", "verify", state.id, "--answer", str(good)]) == 0
        assert "PASS" in capsys.readouterr().out
        assert main(["tasks", "verify", state.id, "--answer", str(bad)]) == 1
        assert "missing or different" in capsys.readouterr().out
