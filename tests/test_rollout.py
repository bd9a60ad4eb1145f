"""Policy rollouts on a real Ray pool over real MCP, the policy behind a scripted OpenAI-compatible server."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import ray

from arena.cli.main import main
from arena.cli.synth import filter_solvable, summary_table
from arena.cli.synth_config import FilterSettings
from arena.policies.base import PolicyRefused
from arena.policies.openai_compat import OpenAIPolicy, PolicyConfig
from arena.rollout.episode import run_episode
from arena.rollout.solvability import INFRA_RETRIES, solved_k_of_n
from arena.runtime.pool import EnvPool
from arena.store import Database, TaskStore
from task_synth.model import FieldRule, Rubric, Task, TaskKind, Verifier
from task_synth.program import execute
from task_synth.runner import LeaseRunner
from task_synth.synthesizer import SynthResult, synthesize
from tests.conftest import local_pool
from tests.fixtures.openai_server import FakeOpenAI, HttpFailure, openai_server_fixture, text, tool_calls
from tests.task_samples import HOLD, hold_task

__all__ = ["openai_server_fixture"]  # the `openai_server` fixture

module_loop = pytest.mark.asyncio(loop_scope="module")


@dataclass
class Plan:
    """What a scripted policy does for one request: these tool calls, one per turn, then this answer."""

    calls: list[tuple[str, dict[str, Any]]]
    answer: Any


def replay(plans: dict[str, Plan]) -> Any:
    """A script that follows the plan of the episode's request (several episodes may interleave)."""

    def script(request: dict[str, Any]) -> dict[str, Any]:
        messages = request["messages"]
        plan = plans[next(m["content"] for m in messages if m["role"] == "user")]
        turn = sum(m["role"] == "assistant" for m in messages)
        if turn < len(plan.calls):
            return tool_calls(plan.calls[turn])
        return text(f"Done.\n```json\n{json.dumps(plan.answer)}\n```")

    return script


def policy(server: FakeOpenAI, **overrides: Any) -> OpenAIPolicy:
    return OpenAIPolicy(PolicyConfig(server.base_url, "fake-policy", max_retries=0, **overrides))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pool() -> AsyncIterator[EnvPool]:
    async with local_pool({"library": 1}, warm_sessions_per_worker=8) as pool:
        yield pool


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def tasks(pool: EnvPool) -> list[Task]:
    result = await synthesize(pool, "library", n=3, levels=[1, 2], seed=5)
    assert len(result.tasks) >= 2
    return result.tasks


async def reference_plan(pool: EnvPool, task: Task) -> Plan:
    """The task's reference solution resolved to concrete calls in a scratch session."""
    assert task.solution is not None
    async with pool.session(task.env) as lease:
        run = await execute(task.solution, LeaseRunner(lease))
    return Plan(run.calls, run.answer)


def answer_task(request: str = "How many copies of book 1 exist?") -> Task:
    return Task(
        env="library",
        env_version="test",
        kind=TaskKind.GRAPH,
        request=request,
        difficulty=1,
        verifier=Verifier(rubric=Rubric(fields={"copies": FieldRule(type="integer", value=3)})),
    ).with_id()


@module_loop
async def test_replaying_the_reference_solution_passes(
    pool: EnvPool, tasks: list[Task], openai_server: FakeOpenAI
) -> None:
    plans = {task.request: await reference_plan(pool, task) for task in tasks}
    openai_server.script = replay(plans)
    async with policy(openai_server, temperature=0.2) as agent:
        for task in tasks:
            episode = await run_episode(pool, task, agent)
            plan = plans[task.request]
            assert episode.infra_error is None and episode.passed is True, (task.request, episode.verdict)
            assert len(episode.turns) == len(plan.calls) + 1
            assert [(c.name, c.arguments) for c in episode.tool_calls] == plan.calls
            assert not any(c.error_code is not None for c in episode.tool_calls)
    first = openai_server.requests[0]
    assert first["model"] == "fake-policy" and first["temperature"] == 0.2
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    async with pool.session("library") as lease:
        mcp_tools = {t.name: t.input_schema for t in await lease.list_tools()}
    assert {t["function"]["name"]: t["function"]["parameters"] for t in first["tools"]} == mcp_tools
    followed = next(r for r in openai_server.requests if len(r["messages"]) > 3)
    tool_message = followed["messages"][3]
    assert tool_message["role"] == "tool"
    assert tool_message["tool_call_id"] == followed["messages"][2]["tool_calls"][0]["id"]
    assert "error" not in json.loads(tool_message["content"])


@module_loop
async def test_a_wrong_answer_fails_with_a_reason(
    pool: EnvPool, tasks: list[Task], openai_server: FakeOpenAI
) -> None:
    task = next(t for t in tasks if t.reference_answer)
    plan = await reference_plan(pool, task)
    wrong = {key: "not-the-answer" for key in task.reference_answer or {}}
    openai_server.script = replay({task.request: Plan(plan.calls, wrong)})
    async with policy(openai_server) as agent:
        episode = await run_episode(pool, task, agent)
    assert episode.infra_error is None and episode.passed is False
    assert episode.answer == wrong
    assert any("wrong value" in reason or "should be" in reason for reason in episode.verdict.reasons)


@module_loop
async def test_a_state_task_passes_with_real_writes_and_fails_without(
    pool: EnvPool, openai_server: FakeOpenAI
) -> None:
    task = await hold_task(pool)
    openai_server.script = replay({task.request: Plan(HOLD, {})})
    async with policy(openai_server) as agent:
        assert (await run_episode(pool, task, agent)).passed is True
        openai_server.script = replay({task.request: Plan([], {})})
        missed = await run_episode(pool, task, agent)
    assert missed.passed is False and len(missed.turns) == 1
    assert any("missing or different" in reason for reason in missed.verdict.reasons)


@module_loop
async def test_malformed_arguments_and_tool_errors_go_back_to_the_model(
    pool: EnvPool, openai_server: FakeOpenAI
) -> None:
    def script(request: dict[str, Any]) -> dict[str, Any]:
        if len(request["messages"]) == 2:
            return tool_calls(("get_book", '{"book_id": 1'), ("get_book", {"book_id": 999999}))
        return text('{"copies": 3}')

    openai_server.script = script
    async with policy(openai_server) as agent:
        episode = await run_episode(pool, answer_task(), agent)
    assert episode.infra_error is None and len(episode.turns) == 2 and episode.verdict is not None
    assert [c.error_code is not None for c in episode.tool_calls] == [True, True]
    malformed, missing = openai_server.requests[1]["messages"][3:5]
    assert malformed["role"] == missing["role"] == "tool"
    error = json.loads(malformed["content"])["error"]
    assert error["code"] == "INVALID_ARGUMENTS" and "get_book" in error["message"]
    assert "not a JSON object" in error["message"]
    assert json.loads(missing["content"])["error"]["code"] == "NOT_FOUND"


@module_loop
async def test_policy_endpoint_http_500_is_an_infra_error_not_a_failure(
    pool: EnvPool, openai_server: FakeOpenAI
) -> None:
    def fail(request: dict[str, Any]) -> dict[str, Any]:
        raise HttpFailure(500)

    openai_server.script = fail
    async with policy(openai_server) as agent:
        episode = await run_episode(pool, answer_task(), agent)
    assert episode.infra_error is not None and "500" in episode.infra_error
    assert episode.verdict is None and episode.passed is None


@module_loop
async def test_solved_k_of_n_counts_passes_of_an_alternating_policy(
    pool: EnvPool, openai_server: FakeOpenAI
) -> None:
    replies = iter(['{"copies": 3}', '{"copies": 4}'] * 4)
    openai_server.script = lambda request: text(next(replies))
    task = answer_task()
    async with policy(openai_server) as agent:
        two = await solved_k_of_n(pool, task, agent, k=2, n=4, concurrency=4)
        three = await solved_k_of_n(pool, task, agent, k=3, n=4, concurrency=2)
    for result in (two, three):
        assert (result.passes, result.scored, result.solve_rate) == (2, 4, 0.5)
    assert two.solved is True and three.solved is False and not three.undetermined


@module_loop
async def test_infra_failures_are_retried_and_never_count_as_unsolved(
    pool: EnvPool, openai_server: FakeOpenAI
) -> None:
    task = answer_task()
    failures = iter([True, True])

    def flaky(request: dict[str, Any]) -> dict[str, Any]:
        if next(failures, False):
            raise HttpFailure(503)
        return text('{"copies": 3}')

    openai_server.script = flaky
    async with policy(openai_server) as agent:
        recovered = await solved_k_of_n(pool, task, agent, k=4, n=4, concurrency=4)
        assert (recovered.passes, recovered.scored, recovered.retried, recovered.solved) == (4, 4, 2, True)

        def down(request: dict[str, Any]) -> dict[str, Any]:
            raise HttpFailure(502)

        openai_server.script = down
        before = len(openai_server.requests)
        result = await solved_k_of_n(pool, task, agent, k=1, n=3, concurrency=3)
    assert result.scored == 0 and result.passes == 0
    assert result.solved is None and result.undetermined and result.solve_rate is None
    assert len(openai_server.requests) - before == 3 * (1 + INFRA_RETRIES)
    assert all(e.infra_error and e.passed is None for e in result.episodes)


@module_loop
async def test_filter_keeps_solved_tasks_with_their_solve_rate(
    pool: EnvPool, tasks: list[Task], openai_server: FakeOpenAI
) -> None:
    solved, unsolved = tasks[0].model_copy(deep=True), tasks[1].model_copy(deep=True)
    plans = {solved.request: await reference_plan(pool, solved)}
    plans[unsolved.request] = Plan([], {"nothing": True})
    openai_server.script = replay(plans)
    result = SynthResult("library", tasks=[solved, unsolved], attempts=2)
    judged: list[int] = []
    async with policy(openai_server) as agent:
        await filter_solvable(pool, result, FilterSettings(k=2, n=2), agent, lambda: judged.append(1))
    assert result.tasks == [solved] and len(judged) == 2
    assert solved.measured["policy_solve_rate"] == 1.0
    assert solved.provenance["policy_filter"] == {"model": "fake-policy", "k": 2, "n": 2}
    assert result.dropped["solved in fewer than 2 of 2 tries"] == 1
    header = [column.header for column in summary_table([result], solve_rates=True).columns]
    assert "policy solve rate" in header


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("ARENA_HOME", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "240")
    yield tmp_path


def test_arena_synth_with_the_filter_on_drops_tasks_the_policy_fails(
    home: Path, openai_server: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    openai_server.script = lambda request: text('{"unrelated": 0}')
    overrides = [
        "env=library",
        "n=2",
        "difficulty=1",
        f"filter.policy.base_url={openai_server.base_url}",
        "filter.policy.model=fake-policy",
        "filter.policy.temperature=0.1",
        "filter.k=1",
        "filter.n=2",
    ]
    assert main(["synth", *overrides]) == 0
    out = capsys.readouterr().out
    assert "policy solve rate" in out and "solved in fewer than 1 of 2 tries" in out
    assert "holds 0 tasks" in out
    assert TaskStore(Database()).list(env="library") == []
    users = {next(m["content"] for m in r["messages"] if m["role"] == "user") for r in openai_server.requests}
    assert len(users) >= 2 and len(openai_server.requests) == 2 * len(users)
    assert {r["model"] for r in openai_server.requests} == {"fake-policy"}
    assert {r["temperature"] for r in openai_server.requests} == {0.1}


def test_arena_synth_stops_with_exit_1_when_the_policy_endpoint_refuses(
    home: Path, openai_server: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    def unauthorized(request: dict[str, Any]) -> dict[str, Any]:
        raise HttpFailure(401, "invalid api key")

    openai_server.script = unauthorized
    filter_on = [f"filter.policy.base_url={openai_server.base_url}", "filter.policy.model=fake-policy"]
    assert main(["synth", "env=library", "n=1", "difficulty=1", *filter_on]) == 1
    err = capsys.readouterr().err
    assert "the policy endpoint refused a request" in err and "invalid api key" in err
    assert "Traceback" not in err


@module_loop
async def test_a_worker_killed_mid_episode_is_an_infra_error(
    pool: EnvPool, openai_server: FakeOpenAI
) -> None:
    worker = pool.workers["library"][0]

    def kill_then_call(request: dict[str, Any]) -> dict[str, Any]:
        ray.get(worker.actor.kill_server.remote())
        return tool_calls(("get_book", {"book_id": 1}))

    openai_server.script = kill_then_call
    async with policy(openai_server) as agent:
        episode = await run_episode(pool, answer_task(), agent)
    assert episode.infra_error is not None and "worker_died" in episode.infra_error
    assert episode.verdict is None and episode.passed is None
    await pool.wait_healthy(60)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["filter.k=5", "filter.n=2"], "filter: k must be at most n, got k=5, n=2"),
        (["filter.policy.model=gpt"], "filter.policy.base_url and filter.policy.model must be set together"),
        (["filter.n=0"], "filter.n: Input should be greater than or equal to 1"),
        (["filter.policy.temperature=hot"], "filter.policy.temperature: Input should be a valid number"),
    ],
)
def test_arena_synth_rejects_a_bad_filter_config_in_one_line(
    home: Path, overrides: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["synth", "env=library", *overrides]) == 2
    err = capsys.readouterr().err
    assert message in err and err.strip().count("\n") == 0, err


@module_loop
async def test_a_refused_later_turn_is_the_policys_failure_a_refused_first_turn_is_not(
    pool: EnvPool, openai_server: FakeOpenAI
) -> None:
    """HTTP 400 once the conversation has grown (context length exceeded) scores the try as failed; the
    same refusal of the very first request is a configuration error and is raised."""
    replies = iter([tool_calls(("get_book", {"book_id": 1}))])

    def script(request: dict[str, Any]) -> dict[str, Any]:
        if (message := next(replies, None)) is None:
            raise HttpFailure(400, "maximum context length exceeded")
        return message

    openai_server.script = script
    async with policy(openai_server) as agent:
        episode = await run_episode(pool, answer_task(), agent)
        assert episode.passed is False and episode.infra_error is None
        assert episode.verdict is not None and "refused turn 2" in episode.verdict.reasons[0]
        assert "maximum context length exceeded" in episode.verdict.reasons[0]
        with pytest.raises(PolicyRefused):
            await run_episode(pool, answer_task(), agent)
