"""Scripted baselines: ``reference`` replays the task's reference solution through the real tools, then
answers; ``random`` calls random tools with schema-valid random arguments, then guesses.

They play through the same episode loop as any model (one tool call per turn), so a reference score below
100% points at the environment or the runtime, never at the policy.
"""

from __future__ import annotations

import asyncio
import json
import random
import string
from collections import Counter
from collections.abc import Mapping
from typing import Any

from arena.policies.base import PolicyTurn, TokenTrajectory, ToolCall, tool_message_content
from arena.policies.slips import Slip, slipped_call
from task_synth.model import CallStep, Task
from task_synth.program import SolutionFailed, execute
from task_synth.runner import ProgramOutcome, StepOutcome

RETRIED_CODES = frozenset({"UNAVAILABLE", "TIMEOUT"})
"""Error codes of transient faults the reference policy retries (see ``arena.rollout.faults``)."""
MAX_RETRIES = 3


class _EpisodeRunner:
    """A ``task_synth`` ToolRunner whose calls are handed to the episode loop one turn at a time."""

    def __init__(self) -> None:
        self.requests: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()
        self.results: asyncio.Queue[Any] = asyncio.Queue()

    async def call(self, tool: str, arguments: dict[str, Any]) -> StepOutcome:
        for _ in range(MAX_RETRIES + 1):
            await self.requests.put((tool, arguments))
            value = await self.results.get()
            error = value.get("error") if isinstance(value, dict) else None
            if not isinstance(error, dict) or error.get("code") not in RETRIED_CODES:
                break
        return StepOutcome(not isinstance(error, dict), error if isinstance(error, dict) else value)

    async def run_program(self, source: str) -> ProgramOutcome:
        raise SolutionFailed("a generated program's calls cannot be replayed as an agent's tool calls")

    async def reset(self, *, force: bool = False) -> None:
        raise SolutionFailed("an agent cannot reset its session")

    async def diff(self) -> dict[str, Any]:
        raise SolutionFailed("an agent cannot read the session's diff")


def _answer_turn(answer: Any) -> PolicyTurn:
    return PolicyTurn(content=answer if isinstance(answer, str) else json.dumps(answer, default=str))


class _ReferenceEpisode:
    def __init__(self, task: Task) -> None:
        self._task = task
        self._runner = _EpisodeRunner()
        self._solving: asyncio.Task[Any] | None = None
        self._calls = 0

    def _recorded_answer(self) -> Any:
        """The answer the task records: its reference answer, else the verifier's (imported tasks)."""
        task = self._task
        if task.reference_answer is not None:
            return task.reference_answer
        return task.verifier.reference_answer if task.verifier.reference_answer is not None else {}

    async def _solve(self) -> Any:
        solution = self._task.solution
        if solution is None or not solution.steps:
            return self._recorded_answer()
        try:
            run = await execute(solution, self._runner)
        except SolutionFailed:
            # A generated program, or a step the environment refused: answer what the task recorded.
            return self._recorded_answer()
        # A chain without an answer mapping (an imported question's verified chain) answers the record.
        return run.answer if solution.answer else self._recorded_answer()

    async def act(self, messages: list[dict[str, Any]]) -> PolicyTurn:
        if self._solving is None or self._solving.done():
            if self._solving is not None:  # a follow-up user turn after the answer: answer it again
                return _answer_turn(self._solving.result())
            self._solving = asyncio.create_task(self._solve())
        elif messages and messages[-1].get("role") == "tool":
            await self._runner.results.put(json.loads(tool_message_content(messages[-1]) or "null"))
        request = asyncio.create_task(self._runner.requests.get())
        done, _ = await asyncio.wait({request, self._solving}, return_when=asyncio.FIRST_COMPLETED)
        if request in done:
            tool, arguments = request.result()
            self._calls += 1
            return PolicyTurn(
                tool_calls=[ToolCall(f"ref-{self._calls}", tool, arguments, json.dumps(arguments))]
            )
        request.cancel()
        return _answer_turn(self._solving.result())

    def trajectory(self) -> TokenTrajectory | None:
        return None

    def close(self) -> None:
        """Cancel the solver when the episode ended before it did (a turn or token limit)."""
        if self._solving is not None and not self._solving.done():
            self._solving.cancel()


class _TurnReferenceEpisode:
    """A multi-turn task's reference: user turn k's calls, one per policy turn, then an empty answer."""

    def __init__(self, task: Task) -> None:
        self._turns = [[s for s in sol.steps if isinstance(s, CallStep)] for sol in task.turn_solutions]
        self._turn, self._next, self._calls = -1, 0, 0

    async def act(self, messages: list[dict[str, Any]]) -> PolicyTurn:
        turn = sum(1 for m in messages if m.get("role") == "user") - 1
        if turn != self._turn:
            self._turn, self._next = turn, 0
        steps = self._turns[turn] if 0 <= turn < len(self._turns) else []
        if self._next >= len(steps):
            return _answer_turn({})
        step = steps[self._next]
        self._next += 1
        self._calls += 1
        arguments = dict(step.arguments)
        return PolicyTurn(
            tool_calls=[ToolCall(f"ref-{self._calls}", step.tool, arguments, json.dumps(arguments))]
        )

    def trajectory(self) -> TokenTrajectory | None:
        return None


class _SlippingEpisode:
    """A reference episode that first makes a wrong call (``slip``) in place of its call number
    ``slip.call``, reads the environment's error, then makes the right call and goes on as the reference
    (``arena.policies.slips``). Where the tools leave no certain slip, it plays the reference as is."""

    def __init__(
        self,
        inner: _ReferenceEpisode | _TurnReferenceEpisode,
        slip: Slip,
        tools: list[dict[str, Any]],
        seed: str,
    ) -> None:
        self._inner, self._slip, self._tools = inner, slip, tools
        self._rng = random.Random(seed)
        self._calls = 0
        self._held: PolicyTurn | None = None  # the right call, made after the slip's error

    async def act(self, messages: list[dict[str, Any]]) -> PolicyTurn:
        if self._held is not None:
            turn, self._held = self._held, None
            return turn
        turn = await self._inner.act(messages)
        if not turn.tool_calls:
            return turn
        self._calls += 1
        if self._calls - 1 != self._slip.call:
            return turn
        right = turn.tool_calls[0]
        wrong = slipped_call(self._slip.kind, right.name, right.arguments or {}, self._tools, self._rng)
        if wrong is None:
            return turn
        self._held = turn
        name, arguments = wrong
        call = ToolCall(f"slip-{self._calls}", name, arguments, json.dumps(arguments))
        return PolicyTurn(tool_calls=[call])

    def trajectory(self) -> TokenTrajectory | None:
        return None

    def close(self) -> None:
        if isinstance(self._inner, _ReferenceEpisode):
            self._inner.close()


class ReferencePolicy:
    """Replays each task's reference solution through the episode's real tools, then answers (a
    multi-turn task's reference, turn by turn). ``slips`` (by task id): those tasks' episodes first make
    a wrong call and recover from its error (``_SlippingEpisode``)."""

    name = "reference"

    def __init__(self, slips: Mapping[str, Slip] | None = None) -> None:
        self._slips = dict(slips or {})

    def start(
        self, task: Task, tools: list[dict[str, Any]]
    ) -> _ReferenceEpisode | _TurnReferenceEpisode | _SlippingEpisode:
        episode = _TurnReferenceEpisode(task) if task.turn_solutions else _ReferenceEpisode(task)
        slip = self._slips.get(task.id)
        return episode if slip is None else _SlippingEpisode(episode, slip, tools, task.id)

    async def aclose(self) -> None:
        return None


def random_value(schema: dict[str, Any], rng: random.Random, depth: int = 0) -> Any:
    """A random value valid for a (simple) JSON Schema: enums, scalars, arrays and objects."""
    if "enum" in schema:
        return rng.choice(schema["enum"])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            options = [s for s in schema[key] if s.get("type") != "null"] or schema[key]
            return random_value(rng.choice(options), rng, depth)
    kind = schema.get("type", "string")
    kind = rng.choice(kind) if isinstance(kind, list) else kind
    if kind == "integer":
        return rng.randint(int(schema.get("minimum", 1)), int(schema.get("maximum", 50)))
    if kind == "number":
        return round(rng.uniform(float(schema.get("minimum", 0)), float(schema.get("maximum", 100))), 2)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "array":
        return [random_value(schema.get("items", {}), rng, depth + 1) for _ in range(rng.randint(0, 2))]
    if kind == "object" and depth < 3:
        return random_arguments(schema, rng, depth + 1)
    if kind == "null":
        return None
    return "".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 8)))


def random_arguments(schema: dict[str, Any], rng: random.Random, depth: int = 0) -> dict[str, Any]:
    """Every required property and about half of the optional ones, with random valid values."""
    properties: dict[str, Any] = schema.get("properties", {})
    required = set(schema.get("required", []))
    return {
        name: random_value(prop, rng, depth)
        for name, prop in properties.items()
        if name in required or rng.random() < 0.5
    }


class _RandomEpisode:
    def __init__(self, tools: list[dict[str, Any]], calls: int, rng: random.Random) -> None:
        self._tools, self._calls, self._rng = tools, calls, rng
        self._made = 0

    async def act(self, messages: list[dict[str, Any]]) -> PolicyTurn:
        if self._made >= self._calls or not self._tools:
            return _answer_turn({"answer": self._rng.randint(0, 100)})
        self._made += 1
        function = self._rng.choice(self._tools)["function"]
        arguments = random_arguments(function.get("parameters") or {}, self._rng)
        call = ToolCall(f"rnd-{self._made}", function["name"], arguments, json.dumps(arguments))
        return PolicyTurn(tool_calls=[call])

    def trajectory(self) -> TokenTrajectory | None:
        return None


class RandomPolicy:
    """Random tools with schema-valid random arguments (``calls`` per episode), then a random guess."""

    def __init__(self, calls: int = 3, seed: int = 0) -> None:
        self.name = "random"
        self._calls, self._seed = calls, seed
        self._started: Counter[str] = Counter()

    def start(self, task: Task, tools: list[dict[str, Any]]) -> _RandomEpisode:
        """Each episode draws from its own generator (seed, task, how often the task was started)."""
        self._started[task.id] += 1
        rng = random.Random(f"{self._seed}:{task.id}:{self._started[task.id]}")
        return _RandomEpisode(tools, self._calls, rng)

    async def aclose(self) -> None:
        return None
