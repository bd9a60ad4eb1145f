"""``arena view`` at the HTTP level, over a real store (SQLite, and PostgreSQL for the queries): the runs
list, a run's breakdowns and paged episodes, an episode's transcript, verdict, diff and task, an evolve
run's rounds and flips, escaping, 404 pages, an older store, and the command's start-up errors."""

from __future__ import annotations

import html
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from arena.cli.main import main
from arena.eval.stats import wilson_interval
from arena.rollout.records import EpisodeRecord, FailureMode, ToolCallRecord, TurnRecord
from arena.store import Database, RunStore, TaskStore
from arena.view import create_app
from arena.view.app import episode_url
from task_synth.model import FieldRule, Rubric, Task, TaskKind, Verdict, Verifier
from tests.postgres import postgres_server

XSS = "<script>document.title='pwned'</script>"
TASK_ID = "library/dune copies?#1"  # a slash, a space, ? and # must survive the episode URL


def _episode(
    task_id: str,
    *,
    env: str = "library",
    level: int = 1,
    repeat: int = 0,
    passed: bool | None = True,
    result: object = None,
) -> EpisodeRecord:
    mode = {True: FailureMode.SOLVED, False: FailureMode.WRONG_ANSWER, None: FailureMode.INFRA_ERROR}[passed]
    verdict = (
        None
        if passed is None
        else Verdict(
            passed=passed,
            reasons=[] if passed else ["field total: expected 3, got 4"],
            criteria={"field:total": passed, "state": True},
        )
    )
    turns = [
        TurnRecord(
            index=0,
            content=None,
            tool_calls=[
                ToolCallRecord(
                    "c1", "search_books", {"title": "Dune"}, result or {"books": [{"id": 7}]}, None, 0.012
                )
            ],
            user_message="How many copies of Dune?",
            prompt_tokens=321,
            completion_tokens=17,
            policy_latency_s=0.25,
        ),
        TurnRecord(
            index=1, content='{"total": 3}', prompt_tokens=400, completion_tokens=9, policy_latency_s=0.5
        ),
    ]
    diff = {"loans": {"inserted": [{"id": 1, "book_id": 7}], "deleted": [], "changed": []}}
    return EpisodeRecord(
        task_id,
        env,
        level,
        "lookup",
        repeat,
        mode,
        verdict,
        {"total": 3},
        turns,
        "worker lost" if passed is None else None,
        passed is not None,
        0.9,
        diff if passed is not None else None,
    )


def _fill(db: Database) -> None:
    runs = RunStore(db)
    runs.start("older", policy="random", suite="core", config={}, git_revision="abc1234", planned=2)
    runs.record("older", _episode("t-a", passed=False), "education")
    runs.record("older", _episode("t-b", env="banking", passed=None), "finance")
    runs.finish("older", "finished", {})
    runs.start("newer", policy="reference", suite="mini", config={}, git_revision=None, planned=120)
    for i in range(120):
        passed = None if i == 5 else i % 3 != 0
        env = "banking" if i % 2 else "library"
        runs.record("newer", _episode(f"t-{i:03d}", env=env, level=1 + i % 3, passed=passed), "data")
    runs.record("newer", _episode("t-xss", passed=False, result={"note": XSS}), "data")
    runs.finish("newer", "finished", {})
    task = Task(
        id=TASK_ID,
        env="library",
        env_version="v1",
        kind=TaskKind.GRAPH,
        request="How many copies of <b>Dune</b> are there?",
        difficulty=1,
        verifier=Verifier(rubric=Rubric(fields={"total": FieldRule(type="integer", value=3)})),
    )
    TaskStore(db).add([task])
    runs.start("with-task", policy="reference", suite="mini", config={}, git_revision=None, planned=1)
    runs.record("with-task", _episode(task.id), "education")
    runs.finish("with-task", "finished", {})


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    with postgres_server() as url:
        yield url


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def client(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """The app over one filled store per backend, shared by the module's read-only page tests."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('view') / 'arena.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
    db = Database(url)
    if request.param == "postgresql":
        from arena.store.schema import Base

        Base.metadata.drop_all(db.engine)
        Base.metadata.create_all(db.engine)
    _fill(db)
    with TestClient(create_app(db)) as test_client:
        yield test_client
    db.close()


def _text(page: str) -> str:
    """The page's visible text, roughly: tags dropped, entities decoded, spaces collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def test_runs_list_is_newest_first_with_success_interval_and_infra_errors(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200
    text = _text(page.text)
    assert text.index("with-task") < text.index("newer") < text.index("older")
    # newer: 121 episodes, 1 infra error, 120 scored of which passed = 120 - 40 (i % 3 == 0) - xss + infra's
    passed = sum(1 for i in range(120) if i != 5 and i % 3 != 0)
    low, high = wilson_interval(passed, 120)
    assert f"{100 * passed / 120:.1f}% [{100 * low:.1f}%, {100 * high:.1f}%] n=120" in text
    older = text[text.index("older") :]
    assert "0.0% [0.0%, 79.3%] n=1 1 finished" in older  # 1 scored (failed), 1 infra error
    assert "banking, library" in older


def test_runs_list_filters(client: TestClient) -> None:
    only_random = _text(client.get("/", params={"policy": "random"}).text)
    assert "older" in only_random and "newer" not in only_random
    by_text = _text(client.get("/", params={"q": "new"}).text)
    assert "newer" in by_text and "older" not in by_text
    none = _text(client.get("/", params={"kind": "evolve"}).text)
    assert "No runs match these filters" in none


def test_run_page_breakdowns_link_to_filtered_episodes(client: TestClient) -> None:
    page = client.get("/runs/newer")
    assert page.status_code == 200
    assert 'href="?env=banking"' in page.text and 'href="?failure_mode=infra_error"' in page.text
    text = _text(page.text)
    assert "121 episode(s); page 1 of 3" in text
    assert "t-000" in text and "t-049" in text and "t-050" not in text
    banking = _text(client.get("/runs/newer", params={"env": "banking"}).text)
    assert "60 episode(s) match; page 1 of 2" in banking
    assert "t-001" in banking and "t-000 " not in banking


def test_run_page_pages_and_filters_on_the_server(client: TestClient) -> None:
    last = _text(client.get("/runs/newer", params={"page": 3}).text)
    assert "page 3 of 3" in last and "t-119" in last and "t-xss" in last and "t-049" not in last
    beyond = _text(client.get("/runs/newer", params={"page": 99}).text)
    assert "page 3 of 3" in beyond
    infra = _text(client.get("/runs/newer", params={"passed": "unscored"}).text)
    assert "1 episode(s) match" in infra and "t-005" in infra
    failed = _text(client.get("/runs/newer", params={"passed": "no", "level": 1, "env": "library"}).text)
    # library = even i; level 1 = i % 3 == 0; failed = i % 3 == 0 (and not i == 5): even multiples of 3
    assert f"{len([i for i in range(0, 120, 6)]) + 1} episode(s) match" in failed  # + t-xss (level 1)
    assert "t-006" in failed and "t-003" not in failed
    assert "1 episode(s) match" in _text(client.get("/runs/newer", params={"task": "xss"}).text)


def test_episode_page_shows_transcript_verdict_diff_and_tokens(client: TestClient) -> None:
    page = client.get(episode_url("older", "t-a", 0))
    assert page.status_code == 200
    text = _text(page.text)
    for expected in (
        "How many copies of Dune?",
        "tool call search_books",
        '"title": "Dune"',
        "result of search_books",
        '"id": 7',
        "321 prompt + 17 completion tokens",
        "0.250 s",
        "failed",
        "failure mode: wrong_answer",
        "✗ field:total",
        "✓ state",
        "field total: expected 3, got 4",
        "loans",
        '+ {"id": 1, "book_id": 7}',
        "You are an assistant",
    ):
        assert expected in text, expected
    assert "Task t-a is not in this store" in text


def test_episode_page_shows_the_task_and_an_infra_error(client: TestClient) -> None:
    assert f'href="{episode_url("with-task", TASK_ID, 0)}"' in client.get("/runs/with-task").text
    text = _text(client.get(episode_url("with-task", TASK_ID, 0)).text)
    assert "How many copies of <b>Dune</b> are there?" in text and "verifier" in text
    infra = _text(client.get(episode_url("older", "t-b", 0)).text)
    assert "unscored" in infra and "Infrastructure error (not scored): worker lost" in infra
    assert "Not recorded" in infra


def test_everything_from_the_store_is_escaped(client: TestClient) -> None:
    page = client.get(episode_url("newer", "t-xss", 0))
    assert page.status_code == 200
    assert "<script>" not in page.text
    assert "&lt;script&gt;document.title=" in page.text
    assert XSS in _text(page.text)
    task_page = client.get("/")
    assert "<b>Dune</b>" not in task_page.text


def test_missing_run_episode_or_page_is_a_404_page(client: TestClient) -> None:
    for path in ("/runs/nope", episode_url("newer", "nope", 0), "/evolve/nope", "/no/such/page"):
        page = client.get(path)
        assert page.status_code == 404, path
        assert "Not found" in page.text and "All runs" in page.text
    assert "no run 'nope' in the store" in _text(client.get("/runs/nope").text)
    assert client.get("/evolve/newer").status_code == 404  # an eval run is not an evolve run


def test_bad_parameters_are_a_400_page(client: TestClient) -> None:
    page = client.get("/runs/newer", params={"level": "two"})
    assert page.status_code == 400 and "level must be a whole number, got &#39;two&#39;" in page.text
    assert client.get("/runs/newer", params={"passed": "maybe"}).status_code == 400
    assert client.get("/compare", params={"a": "newer"}).status_code == 400


def _evolve(db: Database) -> None:
    runs = RunStore(db)
    outcomes = {0: [False, False, True, False], 1: [True, False, True, True]}
    stages: dict[str, object] = {
        "sets": {
            "train": ["x"],
            "heldout": ["h0", "h1", "h2", "h3"],
            "overlap": {"task_ids": 0, "requests": 0},
        },
        # the model before training, as every default run records it (not a round of the chart)
        "eval:base": {"run_id": "evo-rbase", "success": 0.0, "ci95": [0.0, 0.49], "scored": 4},
    }
    for round_, passes in outcomes.items():
        run_id = f"evo-r{round_}"
        runs.start(
            run_id,
            policy=f"hf@round{round_}",
            suite="heldout",
            config={"evolve": "evo", "round": round_},
            git_revision=None,
            planned=4,
        )
        for i, passed in enumerate(passes):
            runs.record(run_id, _episode(f"h{i}", passed=passed), "data")
        low, high = wilson_interval(sum(passes), 4)
        runs.finish(run_id, "finished", {})
        stages[f"eval:{round_}"] = {
            "run_id": run_id,
            "success": sum(passes) / 4,
            "ci95": [low, high],
            "scored": 4,
        }
    stages["targeted:1"] = {
        "gaps": {
            "mean_success": 0.25,
            "scored": 4,
            "weak_spots": [
                {
                    "env": "library",
                    "level": 2,
                    "failure_mode": "wrong_answer",
                    "success": 0.0,
                    "tasks": 3,
                    "score": 1.7,
                }
            ],
            "guidelines": {"library": "answers are wrong after the right calls: practise <reading> fields"},
        },
        "batches": [{"reason": "library level 2: wrong_answer at 0% (3 tasks)"}],
        "tasks": ["n1", "n2"],
    }
    runs.start("evo", policy="hf", suite="core", config={}, git_revision=None, planned=0, kind="evolve")
    runs.finish("evo", "finished", {"stages": stages})


def test_evolve_page_rounds_chart_gaps_and_flips(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'arena.db'}")
    _evolve(db)
    with TestClient(create_app(db)) as client:
        page = client.get("/evolve/evo")
        assert page.status_code == 200
        text = _text(page.text)
        assert "25.0% [4.6%, 69.9%]" in text and "75.0% [30.1%, 95.4%]" in text
        assert "library level 2: wrong_answer at 0% (3 tasks)" in text
        assert "practise <reading> fields" in text and "<reading>" not in page.text
        assert "Targeted synthesis made 2 task(s)" in text
        # h0 and h3 went from failed to passed; each links to both rounds' episodes
        assert "2 gained, 0 lost" in text
        for task in ("h0", "h3"):
            assert episode_url("evo-r0", task, 0) in page.text and episode_url("evo-r1", task, 0) in page.text
        assert episode_url("evo-r0", "h1", 0) not in page.text
        same = _text(client.get("/evolve/evo", params={"a": 1, "b": 1}).text)
        assert "Pick two different rounds" in same
        chart = client.get("/evolve/evo/success.png")
        assert chart.status_code == 200 and chart.headers["content-type"] == "image/png"
        assert chart.content.startswith(b"\x89PNG") and len(chart.content) > 5000
        assert client.get("/runs/evo", follow_redirects=False).headers["location"] == "/evolve/evo"
        compared = _text(client.get("/compare", params={"a": "evo-r1", "b": "evo-r0"}).text)
        assert "0 gained, 2 lost" in compared
        round_page = _text(client.get("/runs/evo-r1").text)
        assert "runs / evo /" in round_page
    db.close()


def test_a_store_from_before_the_diff_column_and_view_index_still_opens(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = Database(f"sqlite:///{path}")
    RunStore(db).start("old", policy="random", suite="core", config={}, git_revision=None, planned=1)
    db.close()
    with sqlite3.connect(path) as raw:
        raw.execute("ALTER TABLE episodes DROP COLUMN state_diff")
        raw.execute("DROP INDEX ix_episodes_run_outcome")
    db = Database(f"sqlite:///{path}")
    with sqlite3.connect(path) as raw:
        indexes = {row[1] for row in raw.execute("PRAGMA index_list(episodes)")}
    assert "ix_episodes_run_outcome" in indexes
    RunStore(db).record("old", _episode("t-old"), "data")
    with TestClient(create_app(db)) as client:
        assert "loans" in _text(client.get(episode_url("old", "t-old", 0)).text)
    db.close()


def test_view_command_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing.db"
    assert main(["view", f"store.url=sqlite:///{missing}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: no store at {missing} (run `arena eval` first, or pass store.url=URL)"
    assert not missing.exists()
    assert main(["view", "port=1"]) == 2
    assert "unknown argument 'port=1'" in capsys.readouterr().err
    assert main(["view", "store.url=nosuchdriver://x"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: store URL 'nosuchdriver://x': no driver") and "\n" not in err
