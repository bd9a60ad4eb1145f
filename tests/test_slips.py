"""Recovery references: a slip (a wrong call the environment must refuse) before the right call, played
through a real pool by the reference policy; SFT never imitates the refused turn; the gap analysis decides
how many references slip, and of which kind."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from transformers import AutoTokenizer

from arena.evolve.gaps import GapReport, Rate
from arena.evolve.targeting import allocate, slip_counts, slips_for
from arena.policies.hf import encode_conversation
from arena.policies.scripted import ReferencePolicy
from arena.policies.slips import Slip, slipped_call
from arena.rollout.conversation import REJECTED_CALL_CODES, messages_of
from arena.rollout.episode import SYSTEM_PROMPT, EpisodeConfig, run_episode, tool_specs
from arena.runtime.pool import EnvPool
from task_synth.synthesizer import synthesize
from tests.conftest import local_pool
from tests.hf_samples import tiny_dir

module_loop = pytest.mark.asyncio(loop_scope="module")


def spec(name: str, properties: dict[str, str], required: list[str], closed: bool = True) -> dict:
    parameters = {
        "type": "object",
        "properties": {key: {"type": kind} for key, kind in properties.items()},
        "required": required,
    } | ({"additionalProperties": False} if closed else {})
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


TOOLS = [
    spec("get_booking", {"booking_id": "integer"}, ["booking_id"]),
    spec("list_bookings", {"status": "string"}, []),
    spec("find_passengers", {"name": "string"}, ["name"], closed=False),
]


def test_an_unknown_tool_slip_is_a_near_miss_that_no_tool_has() -> None:
    names = {t["function"]["name"] for t in TOOLS}
    seen = set()
    for seed in range(20):
        name, arguments = slipped_call(
            "unknown_tool", "get_booking", {"booking_id": 7}, TOOLS, random.Random(seed)
        )
        assert name not in names and arguments == {"booking_id": 7}
        seen.add(name)
    assert seen <= {"get_bookings", "list_booking", "search_booking", "find_booking"} and len(seen) > 1
    assert slipped_call("unknown_tool", "find_passengers", {}, TOOLS, random.Random(0))[0] not in names


def test_an_invalid_arguments_slip_is_one_the_schema_must_refuse() -> None:
    shapes = set()
    for seed in range(30):
        tool, wrong = slipped_call(
            "invalid_arguments", "get_booking", {"booking_id": 7}, TOOLS, random.Random(seed)
        )
        assert tool == "get_booking" and wrong != {"booking_id": 7}
        shapes.add(tuple(sorted(wrong)))
    # left out, renamed to another tool's parameter, or another tool's parameter added (the schema is closed)
    assert shapes == {(), ("status",), ("name",), ("booking_id", "status"), ("booking_id", "name")}
    # an open schema refuses no extra key: only leaving the required argument out is certain
    assert slipped_call("invalid_arguments", "find_passengers", {"name": "Ada"}, TOOLS, random.Random(1)) == (
        "find_passengers",
        {},
    )
    assert slipped_call("invalid_arguments", "list_bookings", {}, TOOLS[1:2], random.Random(1)) is None
    with pytest.raises(ValueError, match="slip kind must be one of"):
        Slip("typo", 0)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pool() -> AsyncIterator[EnvPool]:
    async with local_pool({"library": 1}, warm_sessions_per_worker=4) as pool:
        yield pool


@module_loop
async def test_slipping_references_recover_and_sft_skips_the_refused_turn(
    pool: EnvPool, tmp_path: Path
) -> None:
    tasks = (await synthesize(pool, "library", n=6, levels=[1, 2], seed=5)).tasks
    slips = {t.id: Slip(("unknown_tool", "invalid_arguments")[i % 2], i % 2) for i, t in enumerate(tasks)}
    policy = ReferencePolicy(slips)
    async with pool.session("library") as lease:
        tools = tool_specs(await lease.list_tools())
    for task in tasks:
        clean = await run_episode(pool, task, ReferencePolicy(), EpisodeConfig(max_turns=64))
        record = await run_episode(pool, task, policy, EpisodeConfig(max_turns=64))
        slip = slips[task.id]
        assert record.passed, (task.id, record.verdict)
        calls = record.tool_calls
        if slip.call >= len(clean.tool_calls):  # the solution makes fewer calls: played as it is
            assert len(calls) == len(clean.tool_calls)
            continue
        wrong, right = calls[slip.call], calls[slip.call + 1]
        assert wrong.error_code in REJECTED_CALL_CODES
        assert (wrong.error_code == "UNKNOWN_TOOL") == (slip.kind == "unknown_tool")
        assert [(c.name, c.arguments) for c in calls if c is not wrong] == [
            (c.name, c.arguments) for c in clean.tool_calls
        ]
        assert right.error_code is None and record.answer == clean.answer
        messages = messages_of(record, SYSTEM_PROMPT)
        skipped = [i for i, m in enumerate(messages) if m.get("imitate") is False]
        assert len(skipped) == 1 and messages[skipped[0]]["tool_calls"][0]["function"]["name"] == wrong.name

    # SFT: the refused turn is context (mask 0), every other assistant turn a target (mask 1)
    tokenizer_dir = tiny_dir(tmp_path / "tiny", messages, tools)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    marked = encode_conversation(tokenizer, messages, tools)
    plain = encode_conversation(
        tokenizer, [{k: v for k, v in m.items() if k != "imitate"} for m in messages], tools
    )
    assert marked.response_ids == plain.response_ids
    dropped = [
        i for i, (a, b) in enumerate(zip(marked.response_mask, plain.response_mask, strict=True)) if a != b
    ]
    assert dropped and all(plain.response_mask[i] == 1 for i in dropped)
    assert dropped == list(range(dropped[0], dropped[-1] + 1))  # one turn's tokens
    assert sum(marked.response_mask) > 0


def rate(env: str, scored: int, passed: int, modes: dict[str, int]) -> Rate:
    return Rate("env", env, scored, passed, 0.0, 1.0, modes)


def test_the_evaluation_decides_how_many_references_slip_and_of_which_kind() -> None:
    report = GapReport(mean_success=0.2, scored=40)
    report.rates = [
        rate("airline", 20, 2, {"unknown_tool": 3, "invalid_arguments": 5, "wrong_answer": 10}),
        rate("library", 20, 4, {"wrong_answer": 16}),
    ]
    assert slip_counts(report, "airline", 20) == {"unknown_tool": 3, "invalid_arguments": 5}
    assert slip_counts(report, "library", 20) == {}
    report.rates[0] = rate("airline", 20, 0, {"unknown_tool": 4, "invalid_arguments": 16})
    assert sum(slip_counts(report, "airline", 10).values()) == 5  # at most half of the references
    batches = {b.env: b for b in allocate(report, ["airline", "library"], 20, max_level=3, recovery=True)}
    assert sum(batches["airline"].slips.values()) > 0 and batches["library"].slips == {}
    assert "recover from a wrong call first" in batches["airline"].reason
    assert all(b.slips == {} for b in allocate(report, ["airline", "library"], 20, max_level=3))


@module_loop
async def test_slips_are_drawn_over_tasks_that_make_calls_and_are_reproducible(pool: EnvPool) -> None:
    tasks = (await synthesize(pool, "library", n=6, levels=[1, 2], seed=9)).tasks
    drawn = slips_for(tasks, {"unknown_tool": 2, "invalid_arguments": 1}, seed=4)
    assert drawn == slips_for(tasks, {"unknown_tool": 2, "invalid_arguments": 1}, seed=4)
    assert sorted(s.kind for s in drawn.values()) == ["invalid_arguments", "unknown_tool", "unknown_tool"]
    by_id = {t.id: t for t in tasks}
    for task_id, slip in drawn.items():
        assert 0 <= slip.call < len(by_id[task_id].solution.steps)
    assert len(slips_for(tasks[:1], {"unknown_tool": 3}, seed=4)) == 1
