"""Task synthesis through a real pool: discovery, tool graph, synthesis, verifiers and probes."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from arena.runtime.pool import EnvPool, PoolConfig
from task_synth.difficulty import parse_levels
from task_synth.graph import EdgeKind, ToolGraph
from task_synth.model import (
    AggregateStep,
    Condition,
    FieldRule,
    Ref,
    Rubric,
    StateCheck,
    Task,
    TaskKind,
    Verifier,
)
from task_synth.profile import EnvProfile
from task_synth.program import SolutionFailed, aggregate, execute
from task_synth.quality import answer_probes
from task_synth.runner import LeaseRunner
from task_synth.synthesizer import load_profile, synthesize
from task_synth.verify import check_answer, check_state, normalize_diff, rule_for, verify, verify_submission
from tests.conftest import local_pool

AGENTWORLD = Path(__file__).resolve().parents[2] / "shared" / "agentworld" / "environment_mix"


module_loop = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pool() -> AsyncIterator[EnvPool]:
    async with local_pool({"airline": 1, "library": 1}, warm_sessions_per_worker=10) as pool:
        yield pool


@module_loop
async def test_discovery_profiles_tools_and_data_without_writing(pool: EnvPool) -> None:
    profile = await load_profile(pool, "airline", seed=0)
    assert profile.tools["get_booking"].kind == "query"
    assert profile.tools["cancel_booking"].mutates
    assert {"flight_id", "passenger_id", "price"} <= set(profile.tools["get_booking"].output_fields)
    assert profile.tools["list_bookings"].returns_list
    assert profile.tables["bookings"].rows > 200
    assert profile.values["booking_id"] and profile.values["passenger_id"]
    assert profile.version.startswith("1:")


@module_loop
async def test_an_attempts_working_copy_learns_apart_until_absorbed(pool: EnvPool) -> None:
    profile = await load_profile(pool, "airline", seed=0)
    before = profile.model_dump()
    copy = profile.working_copy()
    tool = next(name for name, t in profile.tools.items() if t.kind == "mutation")
    copy.observe(tool, {"id": 1, "confirmation": "ZX-1", "seat_label": "99Z"})
    assert profile.model_dump() == before  # nothing the copy learned leaks into the run's profile
    assert copy.facts is profile.facts and copy.tools[tool].kind == "both"
    assert copy.values["seat_label"] == ["99Z"] and "seat_label" in copy.tools[tool].output_fields
    profile.absorb(copy)
    assert profile.tools[tool].kind == "both" and profile.values["seat_label"] == ["99Z"]


@module_loop
async def test_graph_has_strong_weak_and_independent_edges(pool: EnvPool) -> None:
    graph = ToolGraph.build(await load_profile(pool, "airline", seed=0))
    booking_to_flight = graph.edges[("get_booking", "get_flight")]
    assert booking_to_flight.kind is EdgeKind.STRONG and booking_to_flight.weight == 3
    assert booking_to_flight.bindings["flight_id"] == "flight_id"
    counts = graph.counts()
    assert counts["strong"] > 0 and counts["weak"] > 0 and counts["independent"] > 0
    for (src, dst), edge in graph.edges.items():
        if edge.kind is EdgeKind.WEAK:
            assert graph.edges[(dst, src)].kind in (EdgeKind.WEAK, EdgeKind.STRONG)


@module_loop
async def test_synthesized_tasks_verify_in_fresh_sessions_and_reject_wrong_answers(pool: EnvPool) -> None:
    result = await synthesize(pool, "library", n=10, levels=[1, 2, 3, 4, 5], seed=3)
    assert len(result.tasks) >= 8
    assert len({t.id for t in result.tasks}) == len(result.tasks)
    profile = result.profile
    assert profile is not None
    rng = random.Random(0)
    for task in result.tasks:
        assert task.solution is not None
        assert not any(name in task.request for name in profile.tools if "_" in name), task.request
        async with pool.session("library") as lease:
            run = await execute(task.solution, LeaseRunner(lease))
        submission = {"answer": run.answer, "calls": [{"tool": t, "arguments": a} for t, a in run.calls]}
        assert (await verify_submission(pool, task, submission)).passed, task.request
        for what, wrong in answer_probes(task.reference_answer or {}, profile, rng):
            wrong_submission = {"answer": wrong, "calls": submission["calls"]}
            assert not (await verify_submission(pool, task, wrong_submission)).passed, what
        if task.verifier.state is not None:
            assert not (await verify_submission(pool, task, {"answer": run.answer, "calls": []})).passed
    lengths = {lv: s["mean_chain_length"] for lv, s in result.per_level().items()}
    assert lengths[min(lengths)] < lengths[max(lengths)]


@module_loop
async def test_state_check_rejects_an_extra_write(pool: EnvPool) -> None:
    async with pool.session("airline") as lease:
        runner = LeaseRunner(lease, frozenset({"cancel_booking"}))
        assert (await runner.call("cancel_booking", {"booking_id": 2000})).ok
        reference = await runner.diff()
        assert (await runner.call("cancel_booking", {"booking_id": 2001})).ok
        with_extra = await runner.diff()

    check = StateCheck(expected=normalize_diff(reference, []))
    assert check_state(check, reference) == []
    assert any("unexpected" in reason for reason in check_state(check, with_extra))
    assert check_state(check, {})


def test_rubric_checks_types_values_tolerance_and_fields() -> None:
    rubric = Rubric(
        fields={
            "price": FieldRule(type="number", value=100.0, tolerance=1e-3),
            "name": FieldRule(type="string", value="Ada"),
            "ids": FieldRule(type="array", value=[3, 1]),
        }
    )
    assert check_answer(rubric, {"price": 100.05, "name": " ada ", "ids": [1, 3]}) == []
    assert check_answer(rubric, {"price": 101, "name": "Ada", "ids": [1, 3]}) == [
        "field 'price' has a wrong value"
    ]
    assert check_answer(rubric, {"price": "100", "name": "Ada", "ids": [1, 3]})[0].startswith(
        "field 'price' should"
    )
    assert check_answer(rubric, {"name": "Ada", "ids": [1]}) == [
        "missing field 'price'",
        "field 'ids' has a wrong value",
    ]
    assert check_answer(rubric, [1, 2]) == ["the answer must be a JSON object, got array"]


def test_aggregates_filter_and_refuse_ties() -> None:
    items = [
        {"id": 1, "status": "late", "amount": 5},
        {"id": 2, "status": "ok", "amount": 9},
        {"id": 3, "status": "late", "amount": 7},
    ]
    late = [Condition(field="status", op="eq", value="late")]
    source = Ref(step=0)
    assert aggregate(AggregateStep(source=source, function="count", where=late), items) == 2
    assert aggregate(AggregateStep(source=source, function="sum", field="amount", where=late), items) == 12
    assert (
        aggregate(AggregateStep(source=source, function="argmax", field="amount", key_field="id"), items) == 2
    )
    with pytest.raises(SolutionFailed, match="tied"):
        aggregate(
            AggregateStep(source=source, function="argmax", field="amount"), [*items, {"id": 4, "amount": 9}]
        )


def test_difficulty_levels_parse_as_inclusive_ranges() -> None:
    assert parse_levels([1, 5]) == [1, 2, 3, 4, 5]
    assert parse_levels(3) == [3]
    with pytest.raises(ValueError, match="1-5"):
        parse_levels([0, 2])


def test_state_task_without_episode_state_fails_clearly() -> None:
    task = Task(
        env="airline",
        env_version="1",
        kind=TaskKind.STATE,
        request="cancel it",
        difficulty=1,
        verifier=Verifier(state=StateCheck(expected={})),
    )
    verdict = verify(task, {}, None)
    assert not verdict.passed and "no episode state" in verdict.reasons[0]


@pytest.mark.slow
@pytest.mark.skipif(not AGENTWORLD.is_dir(), reason="needs ../shared/agentworld")
async def test_synthesis_runs_on_an_imported_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from environments.importers.agentworld.importer import import_directory
    from task_synth.imported import imported_question_tasks

    monkeypatch.setenv("ARENA_HOME", str(tmp_path))
    import_directory(AGENTWORLD, replay=False, progress=False)
    env = "agentworld/0546000"
    async with EnvPool(PoolConfig(envs={env: 1}, warm_sessions_per_worker=10)) as imported_pool:
        result = await synthesize(imported_pool, env, n=4, levels=[1, 2], seed=0)
        assert result.tasks, result.dropped
        for task in result.tasks:
            assert task.solution is not None
            async with imported_pool.session(env) as lease:
                run = await execute(task.solution, LeaseRunner(lease))
            calls = [{"tool": t, "arguments": a} for t, a in run.calls]
            assert (
                await verify_submission(imported_pool, task, {"answer": run.answer, "calls": calls})
            ).passed
    questions = imported_question_tasks(env)
    assert questions and all(q.kind is TaskKind.IMPORTED for q in questions)
    reference = questions[0].verifier.reference_answer
    assert verify(questions[0], reference, None).passed
    assert not verify(questions[0], {"unrelated": True}, None).passed


def test_wrong_entity_probes_are_never_answers_the_rubric_accepts() -> None:
    """A near number, the same text in other case or an integer-valued float is not a wrong answer."""
    profile = EnvProfile(
        env="x",
        version="1",
        tools={},
        tables={},
        values={
            "fare": [168.82, 168.823333, 200.5],
            "status": ["Delayed", "delayed", "landed"],
            "count": [3.0, 4],
        },
    )
    answer = {"mean_fare": 168.823333, "flight_status": "delayed", "seat_count": 3}
    rubric = Rubric(fields={k: rule_for(v, tolerance=1e-4) for k, v in answer.items()})
    for seed in range(40):
        probes = dict(answer_probes(answer, profile, random.Random(seed)))
        assert probes["wrong entity"] == {"mean_fare": 200.5, "flight_status": "landed", "seat_count": 4}
        assert all(check_answer(rubric, wrong) for wrong in probes.values())


def test_state_check_counts_a_repeated_write() -> None:
    """With the differing column ignored, two identical inserted rows are still two writes, not one."""
    row = {"id": 7, "issue_key": "PAY-1", "body": "+1", "created_at": "10:00"}
    once = {"comments": {"inserted": [row], "deleted": [], "changed": []}}
    twice = {"comments": {"inserted": [row, row | {"id": 8}], "deleted": [], "changed": []}}
    check = StateCheck(expected=normalize_diff(once, ["comments.id"]), ignore_columns=["comments.id"])
    assert check_state(check, once) == []
    assert check_state(check, twice) == ["comments: 1 unexpected inserted row(s)"]


@module_loop
async def test_answer_keys_are_tied_to_one_call_and_wording_reads_plainly(pool: EnvPool) -> None:
    import re

    from task_synth.clarity import untied_keys
    from task_synth.model import CallStep

    result = await synthesize(pool, "airline", n=15, levels=[1, 2, 3, 4, 5], seed=11)
    profile = result.profile
    assert profile is not None and len(result.tasks) >= 10
    assert result.ambiguous_share == 0.0
    measured = 0
    for task in result.tasks:
        assert untied_keys(task, profile) == [], task.request
        assert task.knobs.aggregation == (task.kind is TaskKind.PROGRAM)
        assert not re.search(r"on file has [^()]* [01]\.\)", task.request), (
            task.request
        )  # raw SQLite booleans
        assert not re.search(r"\b(true|false)\b", task.request), task.request
        for entity in {t.entity for t in profile.tools.values()}:
            assert f"the {entity}'s {entity} " not in task.request, task.request
        steps = task.solution.steps
        if task.kind is TaskKind.GRAPH and all(isinstance(s, CallStep) for s in steps):
            # The measure can fail: a second identical call makes every key of that call ambiguous
            # (from level 3 a call gives two keys).
            ref = next(iter(task.solution.answer.values()))
            if "when you" in task.request or "time you" in task.request:
                continue
            doubled = task.solution.model_copy(update={"steps": [*steps, steps[ref.step]]})
            of_call = [k for k, r in task.solution.answer.items() if r.step == ref.step]
            assert untied_keys(task.model_copy(update={"solution": doubled}), profile) == of_call
            measured += 1
    assert measured


def test_field_labels_and_written_numbers_read_like_a_person() -> None:
    from task_synth.chains import _near_current
    from task_synth.wording import arguments_phrase, field_label

    assert field_label("vet_name", "vet") == "name"
    assert field_label("prescribed_on") == "prescribed-on date"
    assert (
        arguments_phrase({"active_only": False, "day": "2026-06-30"})
        == "active only set to no and day '2026-06-30'"
    )
    pet = {"pet": {"id": 3, "weight_kg": 4.0, "age": 5}}
    refs = {"pet_id": Ref(step=0, path="pet.id")}
    moved = _near_current(
        {"pet_id": 3, "weight_kg": 35.86, "age": 12, "note": "x"}, refs, pet, random.Random(0)
    )
    assert moved["weight_kg"] in (3.6, 4.4) and moved["age"] in (4, 6) and moved["note"] == "x"


@module_loop
async def test_the_same_seed_synthesizes_the_same_tasks(pool: EnvPool) -> None:
    """Concurrent attempts must not race: whatever order the environment answers in, a seed gives one
    task set (before the fix, airline seed 11 gave 11 different sets in 16 runs under load)."""
    runs = [await synthesize(pool, "airline", n=15, levels=[1, 2, 3, 4, 5], seed=11) for _ in range(3)]
    ids = [[t.id for t in r.tasks] for r in runs]
    assert len(ids[0]) == 15 and ids[1] == ids[0] and ids[2] == ids[0]
    assert [r.attempts for r in runs] == [runs[0].attempts] * 3
