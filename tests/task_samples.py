"""Hand-built tasks of every kind (shared by the store and CLI tests)."""

from __future__ import annotations

from arena.runtime.pool import EnvPool
from task_synth.model import (
    AggregateStep,
    CallStep,
    Condition,
    FieldRule,
    ForEachStep,
    Knobs,
    Ref,
    Rubric,
    Solution,
    StateCheck,
    Task,
    TaskKind,
    Verifier,
)
from task_synth.verify import normalize_diff

KNOBS = Knobs(
    chain_length=(2, 3),
    weak_edge_share=0.2,
    min_distinct_tools=2,
    aggregation=False,
    branching=False,
    distractors=0,
    hidden_references=False,
    writes=False,
)


def graph_task(env: str = "library", difficulty: int = 1, title: str = "Dune") -> Task:
    return Task(
        env=env,
        env_version="1.0",
        kind=TaskKind.GRAPH,
        request=f"Who wrote the book titled {title}, and how many copies are on the shelf?",
        difficulty=difficulty,
        knobs=KNOBS,
        solution=Solution(
            steps=[
                CallStep(tool="search_books", arguments={"query": title}),
                CallStep(tool="get_book", bindings={"book_id": Ref(step=0, path="[0].id")}),
            ],
            answer={"author": Ref(step=1, path="author"), "copies": Ref(step=1, path="copies")},
        ),
        reference_answer={"author": "Frank Herbert", "copies": 3},
        verifier=Verifier(
            rubric=Rubric(
                fields={
                    "author": FieldRule(type="string", value="Frank Herbert"),
                    "copies": FieldRule(type="integer", value=3),
                }
            )
        ),
        provenance={"seed": 0, "generator": "hand"},
        measured={"chain_length": 2.0, "distinct_tools": 2.0},
    ).with_id()


def state_task() -> Task:
    return Task(
        env="banking",
        env_version="1.0",
        kind=TaskKind.STATE,
        request="Move 50 from the checking account of Ada Park to her savings account.",
        difficulty=3,
        knobs=KNOBS.model_copy(update={"writes": True}),
        solution=Solution(steps=[CallStep(tool="transfer", arguments={"from": 1, "to": 2, "amount": 50})]),
        verifier=Verifier(
            state=StateCheck(
                expected={
                    "accounts": {
                        "changed": [
                            {"key": [1], "after": {"id": 1, "balance": 50.0}},
                            {"key": [2], "after": {"id": 2, "balance": 150.0}},
                        ]
                    },
                    "transfers": {"inserted": [{"id": 8, "amount": 50.0, "created_at": "x"}]},
                },
                ignore_columns=["transfers.created_at"],
            )
        ),
    ).with_id()


def program_task() -> Task:
    return Task(
        env="ecommerce",
        env_version="2.1",
        kind=TaskKind.PROGRAM,
        request="What is the total of the shipped orders of customer 7?",
        difficulty=4,
        knobs=KNOBS.model_copy(update={"aggregation": True, "branching": True}),
        solution=Solution(
            steps=[
                CallStep(tool="list_orders", arguments={"customer_id": 7}),
                ForEachStep(source=Ref(step=0), tool="get_order", item_bindings={"order_id": "id"}),
                AggregateStep(
                    source=Ref(step=1),
                    function="sum",
                    field="total",
                    where=[Condition(field="status", op="eq", value="shipped")],
                ),
            ],
            answer={"total": Ref(step=2)},
        ),
        reference_answer={"total": 129.5},
        verifier=Verifier(
            rubric=Rubric(fields={"total": FieldRule(type="number", value=129.5, tolerance=0.01)})
        ),
    ).with_id()


def imported_task() -> Task:
    return Task(
        env="agentworld/0061000",
        env_version="1.abc",
        kind=TaskKind.IMPORTED,
        request="Which station has the most bikes?",
        difficulty=2,
        verifier=Verifier(matcher="agentworld", reference_answer=["Station 4", 12]),
        provenance={"source": "agentworld", "question": 3},
    ).with_id()


def every_kind() -> list[Task]:
    return [graph_task(), state_task(), program_task(), imported_task()]


HOLD = [("place_hold", {"member_id": 10, "book_id": 22, "pickup_branch_id": "OAK"})]


async def hold_task(pool: EnvPool) -> Task:
    """A library state task: place one hold; the expected rows come from a real session of ``pool``."""
    async with pool.session("library") as lease:
        for tool, arguments in HOLD:
            assert (await lease.call_as_arena(tool, arguments))["ok"]
        expected = normalize_diff(await lease.diff(), [])
    return Task(
        env="library",
        env_version="test",
        kind=TaskKind.STATE,
        request="Put member 10 on the hold queue of book 22, to be picked up at the OAK branch.",
        difficulty=1,
        solution=Solution(steps=[CallStep(tool=t, arguments=a) for t, a in HOLD]),
        verifier=Verifier(state=StateCheck(expected=expected)),
    ).with_id()
