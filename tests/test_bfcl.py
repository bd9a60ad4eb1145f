"""BFCL v4 multi-turn in the arena: ground truth replayed over MCP passes BFCL's own checker, perturbed
trajectories fail with its reason, ``miss_func`` functions stay hidden until their turn, and concurrent
sessions of one backend are isolated. Needs the ``bfcl-eval`` wheel (fetched from PyPI once)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from jsonschema import Draft202012Validator

from arena.policies.base import PolicyTurn, TokenTrajectory, ToolCall
from arena.policies.scripted import RandomPolicy, ReferencePolicy
from arena.rollout.episode import EpisodeConfig, run_episode
from arena.runtime.pool import EnvPool
from environments.bfcl import NAME, BfclMissing, fetch, is_fetched
from task_synth.bfcl import PERTURBATIONS, perturb
from task_synth.model import CallStep, Task
from tests.conftest import local_pool

CATEGORIES = ("base", "long_context", "miss_func", "miss_param")
PER_CATEGORY = 3
CONFIG = EpisodeConfig(max_turns=120)
GRAPH_TASK_ID = "library-4ef344d28807"
module_loop = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture(scope="module", autouse=True)
def _package() -> None:
    if not is_fetched():
        try:
            fetch()
        except BfclMissing as exc:
            pytest.skip(f"bfcl-eval is not unpacked and PyPI is unreachable: {exc}")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pool() -> AsyncIterator[EnvPool]:
    async with local_pool({NAME: 1}, warm_sessions_per_worker=2) as started:
        yield started


def _tasks(category: str) -> list[Task]:
    from task_synth.bfcl import bfcl_tasks

    return bfcl_tasks([category])[:PER_CATEGORY]


def test_tools_keep_bfcl_schemas() -> None:
    from environments.bfcl import build, data

    env = build()
    docs = data.function_docs()
    assert {"mv", "sort", "post_tweet", "book_flight"} <= set(env.tools)
    for name, doc in docs.items():
        schema = env.tools[name].input_schema
        Draft202012Validator.check_schema(schema)
        assert schema == doc.parameters and schema["type"] == "object"
        assert env.tools[name].description == doc.description


def test_perturbations_and_parse() -> None:
    from task_synth.bfcl import parse_call

    assert parse_call("sort('final_report.pdf')") == ("sort", {"file_name": "final_report.pdf"})
    assert parse_call("mv(source='a', destination='b')") == ("mv", {"source": "a", "destination": "b"})


@pytest.mark.parametrize("category", CATEGORIES)
@module_loop
async def test_ground_truth_passes_and_perturbed_fail(pool: EnvPool, category: str) -> None:
    for task in _tasks(category):
        record = await run_episode(pool, task, ReferencePolicy(), CONFIG)
        assert record.infra_error is None
        assert record.verdict is not None and record.verdict.passed, (task.provenance, record.verdict)
        assert record.verdict.criteria == {"turns": True, "state_and_response": True}
        for how in PERTURBATIONS:
            bad = await run_episode(pool, perturb(task, how), ReferencePolicy(), CONFIG)
            assert bad.verdict is not None and not bad.verdict.passed, (task.provenance, how)
            assert bad.verdict.reasons[0].startswith("multi_turn:"), bad.verdict.reasons
            assert bad.verdict.criteria["state_and_response"] is False


@module_loop
async def test_random_policy_fails(pool: EnvPool) -> None:
    task = _tasks("base")[0]
    record = await run_episode(pool, task, RandomPolicy(calls=3, seed=1), CONFIG)
    assert record.verdict is not None and not record.verdict.passed


class _Probe:
    """Calls one function at every user turn, recording the tool names offered at each act."""

    name = "probe"

    def __init__(self, function: str) -> None:
        self.function = function
        self.seen: list[set[str]] = []

    def start(self, task: Task, tools: list[dict[str, Any]]) -> _Probe:
        self.tools = tools
        self.turn = -1
        return self

    async def act(self, messages: list[dict[str, Any]]) -> PolicyTurn:
        self.seen.append({t["function"]["name"] for t in self.tools})
        turn = sum(1 for m in messages if m.get("role") == "user") - 1
        if turn != self.turn:
            self.turn = turn
            arguments = {"file_name": "final_report.pdf"}
            return PolicyTurn(tool_calls=[ToolCall(f"p{turn}", self.function, arguments, "{}")])
        return PolicyTurn(content="{}")

    def trajectory(self) -> TokenTrajectory | None:
        return None

    async def aclose(self) -> None:
        return None


@module_loop
async def test_miss_func_functions_hidden_until_their_turn(pool: EnvPool) -> None:
    task = next(t for t in _tasks("miss_func") if t.provenance["bfcl_id"] == "multi_turn_miss_func_0")
    assert task.added_tools == {3: ["sort"]} and "sort" not in (task.tools or [])
    probe = _Probe("sort")
    record = await run_episode(pool, task, probe, CONFIG)
    offered = [probe.seen[t.index] for t in record.turns if t.tool_calls]
    assert ["sort" in names for names in offered] == [False, False, False, True, True]
    assert not any(name.startswith("bfcl_") for names in probe.seen for name in names)
    assert record.verdict is not None and not record.verdict.passed
    # Listed from its turn on, but like BFCL's executor the environment runs it if named earlier.
    assert record.turns[0].tool_calls[0].error_code is None


@module_loop
async def test_tools_outside_the_task_are_refused(pool: EnvPool) -> None:
    task = next(t for t in _tasks("miss_func") if t.provenance["bfcl_id"] == "multi_turn_miss_func_0")
    assert "cp" not in (task.tools or [])  # BFCL's excluded function of this entry
    for name in ("cp", "bfcl_load_scenario", "bfcl_check"):
        record = await run_episode(pool, task, _Probe(name), CONFIG)
        calls = [c for t in record.turns for c in t.tool_calls]
        assert calls and all(c.error_code == "UNKNOWN_TOOL" for c in calls), name
        assert "nothing ran" in calls[0].result["error"]["message"]


@module_loop
async def test_concurrent_sessions_are_isolated(pool: EnvPool) -> None:
    entry = {"entry_id": "multi_turn_base_0"}
    async with pool.session(NAME) as one, pool.session(NAME) as two:
        loaded = await asyncio.gather(
            one.call_as_arena("bfcl_load_scenario", entry), two.call_as_arena("bfcl_load_scenario", entry)
        )
        assert loaded[0]["value"]["state_hash"] == loaded[1]["value"]["state_hash"]
        before = (await two.call_as_arena("bfcl_state_hash"))["value"]["hash"]
        sdk_before = await two.state_hash()
        written = await one.call_tool("mkdir", {"dir_name": "only_in_one"})
        assert not written.is_error
        assert (await one.call_as_arena("bfcl_state_hash"))["value"]["hash"] != before
        assert (await two.call_as_arena("bfcl_state_hash"))["value"]["hash"] == before
        assert await two.state_hash() == sdk_before
        assert "bfcl_backend" in await one.diff() and await two.diff() != await one.diff()
        again = await one.call_as_arena("bfcl_load_scenario", entry)
        assert not again["ok"] and again["value"]["code"] == "CONFLICT"


def test_tasks_round_trip_through_the_store_and_jsonl(tmp_path: Path) -> None:
    from arena.store import Database, TaskStore
    from arena.store.tasks import write_jsonl

    tasks = _tasks("miss_func")
    db = Database(f"sqlite:///{tmp_path / 'arena.db'}")
    try:
        store = TaskStore(db)
        store.add(tasks)
        stored = {t.id: t for t in store.list(env=NAME)}
        assert [stored[t.id] for t in tasks] == tasks  # setup, tools, added_tools, turn solutions kept
        assert write_jsonl(tmp_path / "t.jsonl", tasks) == len(tasks)
    finally:
        db.close()
    assert [
        Task.model_validate_json(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()
    ] == tasks


@module_loop
async def test_check_tool_names_only_backend_functions(pool: EnvPool) -> None:
    async with pool.session(NAME) as lease:
        turns = [[[{"name": "open", "arguments": {"file": "/tmp/x", "mode": "w"}}]]]
        refused = await lease.call_as_arena("bfcl_check", {"entry_id": "multi_turn_base_0", "turns": turns})
        assert not refused["ok"] and "not BFCL functions: ['open']" in refused["value"]["message"]
        short = await lease.call_as_arena("bfcl_check", {"entry_id": "multi_turn_base_0", "turns": []})
        assert short["ok"] and short["value"]["error_type"] == "multi_turn:force_terminated"


def test_fetch_unpacks_only_the_package_and_missing_data_says_how(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from environments.bfcl import package

    fetched = package.package_root()  # the session's (conftest keeps the fetched package in place)
    monkeypatch.setenv(package.ROOT_ENV, str(tmp_path / "absent"))
    monkeypatch.setenv(package.NO_FETCH_ENV, "1")
    with pytest.raises(BfclMissing, match="arena bfcl fetch"):
        package.require()
    monkeypatch.setenv(package.ROOT_ENV, str(fetched))
    root = package.package_root()
    assert package.is_fetched(root) and sorted(p.name for p in root.iterdir()) == ["bfcl_eval"]
    assert not list(root.rglob("*.dist-info"))  # no installed-package metadata: nothing pip can see


def test_task_ids_of_tasks_without_the_new_fields_are_unchanged() -> None:
    from tests.task_samples import graph_task

    # The id main computed for this sample before multi-turn fields existed (content-addressed ids stay put).
    assert graph_task().with_id().id == GRAPH_TASK_ID


@module_loop
async def test_a_failed_setup_is_an_infrastructure_error_not_a_score(pool: EnvPool) -> None:
    task = _tasks("base")[0]
    broken = task.model_copy(
        update={"setup": [CallStep(tool="bfcl_load_scenario", arguments={"entry_id": "nope_1"})]}
    )
    record = await run_episode(pool, broken, ReferencePolicy(), CONFIG)
    assert record.verdict is None and "unknown BFCL multi-turn entry 'nope_1'" in (record.infra_error or "")
