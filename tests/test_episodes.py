"""The shared episode loop on a real Ray pool over real MCP: parallel calls, follow-up user turns, the
token budget, injected faults, failure modes and the scripted baselines."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from arena.policies.openai_compat import OpenAIPolicy, PolicyConfig
from arena.policies.openai_wire import native_messages
from arena.policies.scripted import MAX_RETRIES, RandomPolicy, ReferencePolicy
from arena.rollout.conversation import messages_of
from arena.rollout.episode import SYSTEM_PROMPT, EpisodeConfig, run_episode
from arena.rollout.failure import classify
from arena.rollout.faults import FaultConfig
from arena.rollout.records import EpisodeRecord, FailureMode, TurnRecord
from arena.runtime.pool import EnvPool
from task_synth.model import CallStep, FieldRule, Rubric, Solution, Task, TaskKind, Verdict, Verifier
from task_synth.synthesizer import synthesize
from tests.conftest import local_pool
from tests.fixtures.openai_server import FakeOpenAI, openai_server_fixture, text, tool_calls
from tests.task_samples import hold_task

__all__ = ["openai_server_fixture"]

module_loop = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pool() -> AsyncIterator[EnvPool]:
    async with local_pool({"library": 1}, warm_sessions_per_worker=8) as pool:
        yield pool


def policy(server: FakeOpenAI) -> OpenAIPolicy:
    return OpenAIPolicy(PolicyConfig(server.base_url, "fake-policy", max_retries=0))


def copies_task(**extra: Any) -> Task:
    return Task(
        env="library",
        env_version="test",
        kind=TaskKind.GRAPH,
        request="How many copies of book 1 exist?",
        difficulty=1,
        verifier=Verifier(rubric=Rubric(fields={"copies": FieldRule(type="integer", value=3)})),
        **extra,
    ).with_id()


def turn_of(request: dict[str, Any]) -> int:
    return sum(m["role"] == "assistant" for m in request["messages"])


@module_loop
async def test_parallel_calls_in_one_turn_are_recorded_and_answered_in_order(
    pool: EnvPool, openai_server: FakeOpenAI
) -> None:
    def script(request: dict[str, Any]) -> dict[str, Any]:
        if turn_of(request) == 0:
            return tool_calls(("get_book", {"book_id": 1}), ("get_book", {"book_id": 2}))
        return text('{"copies": 3}')

    openai_server.script = script
    async with policy(openai_server) as agent:
        episode = await run_episode(pool, copies_task(), agent)
    assert episode.passed is True and episode.failure_mode is FailureMode.SOLVED
    first = episode.turns[0]
    assert [c.arguments for c in first.tool_calls] == [{"book_id": 1}, {"book_id": 2}]
    assert [c.result["id"] for c in first.tool_calls] == [1, 2]
    assert first.tool_wait_s > 0 and all(c.latency_s > 0 for c in first.tool_calls)
    tool_messages = [m for m in openai_server.requests[1]["messages"] if m["role"] == "tool"]
    assert [json.loads(m["content"])["id"] for m in tool_messages] == [1, 2]
    # what the server was sent is the recorded conversation in the wire form strict servers accept
    assert native_messages(messages_of(episode, SYSTEM_PROMPT)[:-1]) == openai_server.requests[1]["messages"]
    metrics = episode.metrics()
    assert metrics["tool_calls"] == 2 and metrics["completion_tokens"] > 0 and metrics["wall_s"] > 0


@module_loop
async def test_follow_up_user_turns_are_sent_one_by_one_after_each_reply(
    pool: EnvPool, openai_server: FakeOpenAI
) -> None:
    task = copies_task(follow_ups=["Now check book 2 as well.", "Reply with the JSON for book 1 again."])

    def script(request: dict[str, Any]) -> dict[str, Any]:
        users = [m["content"] for m in request["messages"] if m["role"] == "user"]
        if len(users) == 2 and request["messages"][-1]["role"] == "user":
            return tool_calls(("get_book", {"book_id": 2}))
        return text('{"copies": 3}') if len(users) == 3 else text("Book 1 has 3 copies.")

    openai_server.script = script
    async with policy(openai_server) as agent:
        episode = await run_episode(pool, task, agent)
    assert episode.passed is True
    assert [t.user_message for t in episode.turns] == [
        task.request,
        task.follow_ups[0],
        None,
        task.follow_ups[1],
    ]
    last = openai_server.requests[-1]["messages"]
    assert [m["content"] for m in last if m["role"] == "user"] == [task.request, *task.follow_ups]
    assert native_messages(messages_of(episode, SYSTEM_PROMPT)[:-1]) == last  # what the policy saw


@module_loop
async def test_turn_limit_and_token_budget_end_the_episode_unfinished(
    pool: EnvPool, openai_server: FakeOpenAI
) -> None:
    openai_server.script = lambda request: tool_calls(("get_book", {"book_id": 1}))
    async with policy(openai_server) as agent:
        by_turns = await run_episode(pool, copies_task(), agent, EpisodeConfig(max_turns=2))
        by_tokens = await run_episode(pool, copies_task(), agent, EpisodeConfig(max_tokens=1))
    assert len(by_turns.turns) == 2 and by_turns.failure_mode is FailureMode.NO_FINAL_ANSWER
    assert "within 2 turns" in by_turns.verdict.reasons[0]
    assert len(by_tokens.turns) == 1 and by_tokens.failure_mode is FailureMode.NO_FINAL_ANSWER
    assert "generated tokens" in by_tokens.verdict.reasons[0]


@module_loop
async def test_unknown_tools_and_bad_arguments_are_classified(
    pool: EnvPool, openai_server: FakeOpenAI
) -> None:
    scripts = [
        (FailureMode.UNKNOWN_TOOL, [tool_calls(("teleport_book", {"book_id": 1})), text('{"copies": 1}')]),
        # an unknown name corrected by a call of another tool is recovered from: the answer is what failed
        (
            FailureMode.WRONG_ANSWER,
            [
                tool_calls(("get_books", {"book_id": 1})),
                tool_calls(("get_book", {"book_id": 1})),
                text('{"copies": 1}'),
            ],
        ),
        (FailureMode.INVALID_ARGUMENTS, [tool_calls(("get_book", '{"book_id": ')), text('{"copies": 1}')]),
        (FailureMode.WRONG_ANSWER, [tool_calls(("get_book", {"book_id": 1})), text('{"copies": 1}')]),
        (FailureMode.PREMATURE_ANSWER, [text('{"copies": 1}')]),
    ]
    task = copies_task()
    task.solution = (await hold_task(pool)).solution  # a reference that calls a tool
    for expected, replies in scripts:
        openai_server.script = lambda request, replies=replies: replies[turn_of(request)]
        async with policy(openai_server) as agent:
            episode = await run_episode(pool, task, agent)
        assert episode.failure_mode is expected, (expected, episode.tool_calls)


@module_loop
async def test_injected_faults_are_scored_and_reported_apart_from_infra_errors(
    pool: EnvPool, openai_server: FakeOpenAI
) -> None:
    def script(request: dict[str, Any]) -> dict[str, Any]:
        if turn_of(request) == 0:
            return tool_calls(("get_book", {"book_id": 1}))
        failed = "error" in json.loads(request["messages"][-1]["content"])
        return text('{"copies": 0}' if failed else '{"copies": 3}')

    openai_server.script = script
    always_failing = EpisodeConfig(faults=FaultConfig(error_rate=1.0, delay="fixed", delay_s=0.05))
    async with policy(openai_server) as agent:
        episode = await run_episode(pool, copies_task(), agent, always_failing)
    call = episode.tool_calls[0]
    assert call.injected == "error" and call.error_code == "UNAVAILABLE" and call.latency_s >= 0.05
    assert episode.infra_error is None and episode.verdict is not None
    assert episode.failure_mode is FailureMode.TOOL_ERROR_UNRECOVERED
    assert episode.metrics()["injected_faults"] == 1

    untouched = EpisodeConfig(faults=FaultConfig(error_rate=1.0, tools=("list_loans",)))
    async with policy(openai_server) as agent:
        clean = await run_episode(pool, copies_task(), agent, untouched)
    assert clean.passed is True and clean.tool_calls[0].injected is None


@module_loop
async def test_reference_policy_solves_and_survives_transient_faults_random_does_not(pool: EnvPool) -> None:
    synthesized = (await synthesize(pool, "library", n=4, levels=[1, 3], seed=11)).tasks
    tasks = [await hold_task(pool), *synthesized]
    # Room for every call to be retried MAX_RETRIES times, then the answer: the retries are under test,
    # not the default turn limit (a 7-call program at 30% faults can need 15 turns).
    calls = max(
        max(len(t.solution.steps), int(t.measured.get("chain_length", 0))) for t in tasks if t.solution
    )
    turns = (MAX_RETRIES + 1) * calls + 1
    flaky = EpisodeConfig(max_turns=turns, faults=FaultConfig(error_rate=0.3, seed=3))
    reference: list[EpisodeRecord] = [await run_episode(pool, t, ReferencePolicy(), flaky) for t in tasks]
    assert all(e.passed for e in reference), [(e.task_id, e.verdict) for e in reference]
    assert sum(e.metrics()["injected_faults"] for e in reference) > 0
    guesses = [await run_episode(pool, t, RandomPolicy(seed=1)) for t in tasks]
    assert not any(e.passed for e in guesses) and all(e.verdict is not None for e in guesses)


def test_records_round_trip_through_json() -> None:
    record = EpisodeRecord("t", "library", 2, "graph", repeat=1, failure_mode=FailureMode.WRONG_ANSWER)
    assert EpisodeRecord.from_json(json.loads(json.dumps(record.to_json()))) == record


def test_an_answer_after_only_malformed_calls_is_a_format_error() -> None:
    task = copies_task()
    task.solution = Solution(steps=[CallStep(tool="get_book", arguments={"book_id": 1})])
    failed = Verdict(passed=False, reasons=["wrong"])
    malformed = [TurnRecord(0, "<tool_call>{", format_error="not JSON"), TurnRecord(1, "{}")]
    record = EpisodeRecord(task.id, "library", 1, "graph", verdict=failed, turns=malformed, finished=True)
    assert classify(record, task) is FailureMode.FORMAT_ERROR
    record.turns = [TurnRecord(0, "{}")]
    assert classify(record, task) is FailureMode.PREMATURE_ANSWER
    record.finished = False
    assert classify(record, task) is FailureMode.NO_FINAL_ANSWER


def test_an_answer_without_any_call_is_premature_on_every_suite() -> None:
    """A multi-turn task (BFCL's shape: a check tool, references per user turn) answered without a call is
    ``premature_answer``, as a core task is; a task whose reference makes no call is a wrong answer."""
    steps = [CallStep(tool="get_book", arguments={"book_id": 1})]
    bfcl_like = copies_task(turn_solutions=[Solution(steps=[]), Solution(steps=steps)])
    failed = Verdict(passed=False, reasons=["wrong"])
    record = EpisodeRecord(bfcl_like.id, "library", 1, "graph", verdict=failed, finished=True)
    record.turns = [TurnRecord(0, "done"), TurnRecord(1, "done", user_message="and then?")]
    assert classify(record, bfcl_like) is FailureMode.PREMATURE_ANSWER
    assert classify(record, copies_task()) is FailureMode.WRONG_ANSWER


@module_loop
async def test_reference_solver_is_cancelled_when_a_turn_limit_cuts_the_episode_short(pool: EnvPool) -> None:
    task = await hold_task(pool)
    record = await run_episode(pool, task, ReferencePolicy(), EpisodeConfig(max_turns=1))
    assert not record.passed and record.verdict is not None
    await asyncio.sleep(0)  # let the cancellation be delivered
    solvers = [t for t in asyncio.all_tasks() if "_ReferenceEpisode._solve" in repr(t.get_coro())]
    assert [t for t in solvers if not t.done()] == []
