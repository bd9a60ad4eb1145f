"""LLM-written programmatic tasks: debugged by execution in the environment server, then kept only if the
replayed reference verifies and wrong answers fail. The model is a scripted OpenAI-compatible HTTP server;
the environments, pool, MCP servers and program runs are real."""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio
from rich.console import Console

from arena.cli.tasks_view import task_view
from arena.runtime.pool import EnvPool
from task_synth.difficulty import knobs_for
from task_synth.llm import LLMConfig
from task_synth.llm_programs import ProgramDraft, _parse, draft_program
from task_synth.model import CodeStep
from task_synth.program import execute
from task_synth.quality import answer_probes
from task_synth.runner import LeaseRunner
from task_synth.synthesizer import load_profile, synthesize
from task_synth.verify import verify
from tests.conftest import local_pool
from tests.fixtures.openai_server import FakeOpenAI, text

module_loop = pytest.mark.asyncio(loop_scope="module")

PROGRAM = """
def solve(tools):
    orders = tools.call("search_orders", customer_id={customer}, status="delivered")
    units = 0
    for order in orders:
        detail = tools.call("get_order", order_id=order["id"])
        units += sum(item["{field}"] for item in detail["items"])
    return {{"delivered_units": units, "delivered_orders": len(orders)}}
"""
REQUEST = (
    "Customer {customer} wants to know how many of their orders were delivered and how many units those "
    'orders held in total. Reply with a JSON object with the keys "delivered_units" and "delivered_orders".'
)


def reply(customer: int, field: str = "quantity") -> dict[str, Any]:
    code = PROGRAM.format(customer=customer, field=field)
    return text(json.dumps({"request": REQUEST.format(customer=customer), "code": code}))


@pytest.fixture(scope="module")
def model() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pool() -> AsyncIterator[EnvPool]:
    async with local_pool({"ecommerce": 1}, warm_sessions_per_worker=10) as pool:
        yield pool


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def customer(pool: EnvPool) -> tuple[int, dict[str, int]]:
    """A customer with at least three delivered orders, and the answer computed by plain tool calls."""
    async with pool.session("ecommerce") as lease:
        for customer_id in range(1, 60):
            orders = (
                await lease.call_as_arena(
                    "search_orders", {"customer_id": customer_id, "status": "delivered"}
                )
            )["value"]
            if len(orders) >= 3:
                details = [
                    (await lease.call_as_arena("get_order", {"order_id": o["id"]}))["value"] for o in orders
                ]
                units = sum(item["quantity"] for d in details for item in d["items"])
                return customer_id, {"delivered_units": units, "delivered_orders": len(orders)}
    raise AssertionError("no customer with three delivered orders in the seed")


async def scripted_draft(
    pool: EnvPool, model: FakeOpenAI, replies: list[dict[str, Any]]
) -> tuple[ProgramDraft | str, dict[str, Any]]:
    """``draft_program`` at level 3 against the model answering ``replies`` in turn; its outcome and the
    session's diff afterwards."""
    scripted = iter(replies)
    model.script = lambda request: next(scripted)
    model.requests.clear()
    profile = await load_profile(pool, "ecommerce", seed=0)
    llm = LLMConfig(base_url=model.base_url, model="scripted")
    async with pool.session("ecommerce") as lease:
        runner = LeaseRunner(lease, profile.mutating)
        return await draft_program(llm, profile, knobs_for(3), runner, random.Random(0)), await lease.diff()


@module_loop
async def test_a_failing_program_is_fixed_from_its_traceback(
    pool: EnvPool, model: FakeOpenAI, customer: tuple[int, dict[str, int]]
) -> None:
    customer_id, expected = customer
    draft, _ = await scripted_draft(pool, model, [reply(customer_id, field="qty"), reply(customer_id)])
    assert not isinstance(draft, str), draft
    assert draft.answer == expected
    assert draft.calls[0] == ("search_orders", {"customer_id": customer_id, "status": "delivered"})
    assert len(draft.calls) == expected["delivered_orders"] + 1
    feedback = model.requests[1]["messages"][-1]["content"]
    assert (
        "Running solve(tools) failed" in feedback and "KeyError: 'qty'" in feedback and "line 7" in feedback
    )
    assert "search_orders(customer_id: integer" in model.requests[0]["messages"][1]["content"]


@module_loop
async def test_writing_or_unasked_keys_are_sent_back_and_rounds_are_bounded(
    pool: EnvPool, model: FakeOpenAI, customer: tuple[int, dict[str, int]]
) -> None:
    customer_id, _ = customer
    writer = 'def solve(tools):\n    tools.call("adjust_stock", product_id=1, change=1)\n    return {"x": 1}'
    unasked = PROGRAM.format(customer=customer_id, field="quantity").replace(
        "delivered_orders", "orders_seen"
    )
    replies = [
        text(json.dumps({"request": REQUEST.format(customer=customer_id), "code": writer})),
        text(json.dumps({"request": REQUEST.format(customer=customer_id), "code": unasked})),
        text("no JSON here"),
    ]
    outcome, diff = await scripted_draft(pool, model, replies)
    assert diff == {}  # the write was undone before the next round
    assert outcome == "llm program: not fixed in 3 rounds (last: the reply was not the JSON object)"
    feedback = [r["messages"][-1]["content"] for r in model.requests[1:]]
    assert "must only read; it called adjust_stock" in feedback[0]
    assert 'must ask for the key "orders_seen"' in feedback[1]


@module_loop
async def test_synthesis_keeps_llm_programs_only_after_replay_and_probes(
    pool: EnvPool, model: FakeOpenAI, customer: tuple[int, dict[str, int]]
) -> None:
    customer_id, expected = customer

    def script(request: dict[str, Any]) -> dict[str, Any]:
        if request["messages"][0]["content"].startswith("You rewrite task requests"):
            return text(request["messages"][1]["content"])  # wording refinement: keep the template
        return reply(customer_id)

    model.script = script
    llm = LLMConfig(base_url=model.base_url, model="scripted")
    result = await synthesize(pool, "ecommerce", n=5, levels=[4], seed=1, llm=llm)
    written = [t for t in result.tasks if t.provenance["synthesizer"] == "llm-program"]
    assert len(written) == 1  # the same program twice is a duplicate request
    task = written[0]
    assert isinstance(task.solution.steps[0], CodeStep) and task.reference_answer == expected
    assert task.measured["chain_length"] == expected["delivered_orders"] + 1
    async with pool.session("ecommerce") as lease:
        replay = await execute(task.solution, LeaseRunner(lease))
    assert verify(task, replay.answer, None).passed
    probes = answer_probes(task.reference_answer, result.profile, random.Random(0))
    assert len(probes) >= 3 and not any(verify(task, wrong, None).passed for _, wrong in probes)
    console = Console(record=True, width=120)
    console.print(task_view(task))  # what `arena tasks show` prints
    shown = console.export_text()
    assert "run in the environment server" in shown and 'tools.call("get_order"' in shown


def test_a_reply_with_raw_newlines_in_its_code_is_read() -> None:
    """Models often write the program with real line breaks and tabs inside the JSON string (not strict
    JSON); the reply is read all the same."""
    reply = '{"request": "How many?", "code": "def solve(tools):\n\treturn {\\"n\\": 1}"}'
    assert "\n" in reply and "\t" in reply
    assert _parse(reply) == ("How many?", 'def solve(tools):\n\treturn {"n": 1}')
