"""One episode, the one implementation that evaluation and both trainers run: lease a fresh session, list
its tools, let the policy act (parallel tool calls over MCP, scripted follow-up user turns), verify,
classify the failure mode, release.

Infrastructure failures (a dead worker, an unreachable session, the policy endpoint down) end the episode
with ``infra_error`` set and no verdict: they are never scored as the policy failing the task.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections import deque
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

import mcp_types as types

from arena.policies.base import (
    ClosingPolicyEpisode,
    Policy,
    PolicyEpisode,
    PolicyRefused,
    PolicyRequestInvalid,
    PolicyUnavailable,
    ToolCall,
)
from arena.rollout.conversation import assistant_message, format_error_message, tool_message
from arena.rollout.failure import classify
from arena.rollout.faults import FaultConfig, FaultInjector
from arena.rollout.records import EpisodeRecord, ToolCallRecord, TurnRecord
from arena.runtime.errors import InfrastructureError
from task_synth.model import Task, Verdict
from task_synth.verify import verify

SYSTEM_PROMPT = (
    "You are an assistant that completes the user's request using the tools provided. Call tools as "
    "needed; tool results come back as JSON. When you are done, reply without calling a tool: your final "
    "message must be only the JSON object the user asked for (or {} if no written answer is needed)."
)
_FENCE = re.compile(r"```(?:json)?\s*(.*?)\s*```", re.S)


class EpisodeSession(Protocol):
    """What an episode needs of an environment session (``arena.runtime.pool.Lease`` is one)."""

    async def list_tools(self) -> list[types.Tool]: ...

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> types.CallToolResult: ...

    async def diff(self) -> dict[str, Any]: ...

    async def call_as_arena(self, tool: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]: ...


class SessionProvider(Protocol):
    """Leases one fresh isolated session of an environment (``EnvPool`` is one)."""

    def session(self, env: str) -> AbstractAsyncContextManager[EpisodeSession]: ...


@dataclass(frozen=True)
class EpisodeConfig:
    """Limits of one episode (a turn limit and a budget of generated tokens) and injected faults."""

    max_turns: int = 12
    max_tokens: int | None = None
    system_prompt: str = SYSTEM_PROMPT
    faults: FaultConfig = field(default_factory=FaultConfig)


def tool_specs(tools: list[types.Tool]) -> list[dict[str, Any]]:
    """MCP tools as OpenAI function tools (the MCP ``inputSchema`` is the function's ``parameters``)."""
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description or "", "parameters": t.input_schema},
        }
        for t in tools
    ]


def parse_answer(content: str | None) -> Any:
    """The final message as JSON (a ```json fence is stripped); the text itself if it is not JSON."""
    text = (content or "").strip()
    if fenced := _FENCE.search(text):
        text = fenced.group(1)
    try:
        return json.loads(text)
    except ValueError:
        return text


def _result_payload(result: types.CallToolResult) -> Any:
    """A tool result as data: the tool's JSON value, or ``{"error": {...}}`` for an error result."""
    if result.is_error and result.structured_content is not None:
        return result.structured_content
    text = "\n".join(block.text for block in result.content if isinstance(block, types.TextContent))
    try:
        return json.loads(text)
    except ValueError:
        return result.structured_content if result.structured_content is not None else text


def _error_code(payload: Any) -> str:
    error = payload.get("error") if isinstance(payload, dict) else None
    return str(error.get("code") or "ERROR") if isinstance(error, dict) else "ERROR"


class _Episode:
    """The state of one running episode."""

    def __init__(self, task: Task, config: EpisodeConfig, record: EpisodeRecord) -> None:
        self.task, self.config, self.record = task, config, record
        self.faults = FaultInjector(config.faults, f"{task.id}:{record.repeat}")
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": config.system_prompt},
            {"role": "user", "content": task.request},
        ]
        self.follow_ups = deque(task.follow_ups)
        self.pending_user: str | None = task.request
        self.generated = 0
        self.user_turn = 0
        self.all_tools: dict[str, dict[str, Any]] = {}
        self.offered: list[dict[str, Any]] = []  # grows in place when a user turn adds tools

    def offer(self, tools: list[types.Tool]) -> list[dict[str, Any]]:
        """The tool specs the policy starts with: the task's list if it has one, else every tool."""
        specs = tool_specs(tools)
        self.all_tools = {spec["function"]["name"]: spec for spec in specs}
        added = {name for names in self.task.added_tools.values() for name in names}
        if self.task.tools is None:
            self.offered[:] = [spec for name, spec in self.all_tools.items() if name not in added]
        else:
            self.offered[:] = [self.all_tools[name] for name in self.task.tools if name in self.all_tools]
        self._add_tools(0)
        return self.offered

    def _add_tools(self, user_turn: int) -> None:
        names = self.task.added_tools.get(user_turn, [])
        self.offered += [self.all_tools[name] for name in names if name in self.all_tools]

    @property
    def restricted(self) -> bool:
        """Whether the task offers only some tools (then others are refused here, never sent)."""
        return self.task.tools is not None or bool(self.task.added_tools)

    def callable_names(self) -> set[str]:
        """The tools a call may name: those offered so far, and those a later user turn will add (listed
        only from that turn on, but not refused before it: BFCL's rule for held-out functions)."""
        later = {name for names in self.task.added_tools.values() for name in names}
        return {spec["function"]["name"] for spec in self.offered} | (later & self.all_tools.keys())

    async def call(self, session: EpisodeSession, call: ToolCall) -> ToolCallRecord:
        arguments = call.arguments if call.arguments is not None else call.raw
        record = ToolCallRecord(call.id, call.name, arguments)
        started = time.perf_counter()
        if self.restricted and call.name not in self.callable_names():
            record.error_code = "UNKNOWN_TOOL"
            message = f"no tool named {call.name!r} is offered now; nothing ran"
            record.result = {"error": {"code": record.error_code, "message": message}}
        elif call.arguments is None:
            record.error_code = "INVALID_ARGUMENTS"
            message = f"the arguments of {call.name} are not a JSON object ({call.raw[:200]!r}); nothing ran"
            record.result = {"error": {"code": record.error_code, "message": message}}
        elif injected := await self.faults.before_call(call.name):
            record.injected = "timeout" if injected["code"] == "TIMEOUT" else "error"
            record.error_code, record.result = injected["code"], {"error": injected}
        else:
            result = await session.call_tool(call.name, call.arguments)
            record.result = _result_payload(result)
            record.error_code = _error_code(record.result) if result.is_error else None
        record.latency_s = time.perf_counter() - started
        return record

    async def turn(self, session: EpisodeSession, agent: PolicyEpisode) -> bool:
        """One policy turn and its calls; True when the episode has its final answer."""
        started = time.perf_counter()
        try:
            turn = await agent.act(self.messages)
        except PolicyRefused as exc:
            if not self.record.turns or isinstance(exc, PolicyRequestInvalid):
                raise  # a configuration problem (the first request refused), not this episode's
            raise _Refused(f"the policy refused turn {len(self.record.turns) + 1}: {exc}") from exc
        record = TurnRecord(
            index=len(self.record.turns),
            content=turn.content,
            format_error=turn.format_error,
            user_message=self.pending_user,
            prompt_tokens=turn.prompt_tokens,
            completion_tokens=turn.completion_tokens,
            policy_latency_s=time.perf_counter() - started,
        )
        self.pending_user = None
        self.record.turns.append(record)
        self.generated += turn.completion_tokens or 0
        self.messages.append(assistant_message(turn))
        if turn.format_error is not None:
            self.messages.append(format_error_message(turn.format_error))
            return False
        if turn.tool_calls:
            waited = time.perf_counter()
            record.tool_calls = list(await asyncio.gather(*(self.call(session, c) for c in turn.tool_calls)))
            record.tool_wait_s = time.perf_counter() - waited
            self.messages += [tool_message(call) for call in record.tool_calls]
            return False
        self.record.answer = parse_answer(turn.content)
        if self.follow_ups:
            self.pending_user = self.follow_ups.popleft()
            self.user_turn += 1
            self._add_tools(self.user_turn)
            self.messages.append({"role": "user", "content": self.pending_user})
            return False
        return True

    def out_of_budget(self) -> str | None:
        limits = self.config
        if len(self.record.turns) >= limits.max_turns:
            return f"no final answer within {limits.max_turns} turns"
        if limits.max_tokens is not None and self.generated >= limits.max_tokens:
            return f"no final answer within the budget of {limits.max_tokens} generated tokens"
        return None


class _Refused(Exception):
    """A later turn was refused by the policy (its context is full): the policy's failure."""


class ArenaCallFailed(RuntimeError):
    """A call the arena makes in the environment (a task's setup, its check) failed: not the agent's fault."""


async def _setup(session: EpisodeSession, task: Task) -> None:
    for step in task.setup:
        outcome = await session.call_as_arena(step.tool, dict(step.arguments))
        if not outcome.get("ok"):
            raise ArenaCallFailed(f"setup call {step.tool} failed: {outcome.get('value')}")


def calls_by_user_turn(record: EpisodeRecord) -> list[list[list[dict[str, Any]]]]:
    """The calls that ran, by user turn, then by policy turn (step): what a multi-turn checker reads."""
    turns: list[list[list[dict[str, Any]]]] = []
    for turn in record.turns:
        if turn.user_message is not None or not turns:
            turns.append([])
        ran = [
            {"name": c.name, "arguments": c.arguments}
            for c in turn.tool_calls
            if c.error_code not in ("UNKNOWN_TOOL", "INVALID_ARGUMENTS") and c.injected is None
        ]
        turns[-1].append(ran)
    return turns


async def _environment_verdict(session: EpisodeSession, task: Task, record: EpisodeRecord) -> Verdict:
    """The verdict of the task's check tool, run in the environment server on the episode's calls."""
    verifier = task.verifier
    arguments = {**verifier.check_arguments, "turns": calls_by_user_turn(record)}
    outcome = await session.call_as_arena(str(verifier.check_tool), arguments)
    value = outcome.get("value")
    if not outcome.get("ok") or not isinstance(value, dict):
        raise ArenaCallFailed(f"check tool {verifier.check_tool} failed: {value}")
    criteria = {str(k): bool(v) for k, v in (value.get("criteria") or {}).items()}
    reasons = [] if value.get("valid") else [f"{value.get('error_type')}: {value.get('error_message')}"]
    return Verdict(passed=bool(value.get("valid")), reasons=reasons, criteria=criteria)


async def _play(session: EpisodeSession, task: Task, policy: Policy, episode: _Episode) -> None:
    await _setup(session, task)
    agent = policy.start(task, episode.offer(await session.list_tools()))
    record = episode.record
    try:
        while (limit := episode.out_of_budget()) is None:
            if await episode.turn(session, agent):
                record.finished = True
                if task.verifier.check_tool is not None:
                    record.verdict = await _environment_verdict(session, task, record)
                    return
                record.state_diff = await session.diff()
                record.verdict = verify(task, record.answer, record.state_diff)
                return
        record.state_diff = await session.diff()
        record.verdict = Verdict(passed=False, reasons=[limit])
    except _Refused as exc:
        record.verdict = Verdict(passed=False, reasons=[str(exc)])
    finally:
        record.trajectory = agent.trajectory()
        if isinstance(agent, ClosingPolicyEpisode):
            agent.close()


async def run_episode(
    sessions: SessionProvider,
    task: Task,
    policy: Policy,
    config: EpisodeConfig | None = None,
    *,
    repeat: int = 0,
) -> EpisodeRecord:
    """Run ``policy`` on ``task`` in a fresh session of ``task.env``; verify and classify the outcome."""
    config = config or EpisodeConfig()
    record = EpisodeRecord(task.id, task.env, task.difficulty, str(task.kind), repeat)
    started = time.perf_counter()
    try:
        async with sessions.session(task.env) as session:
            await _play(session, task, policy, _Episode(task, config, record))
    except (InfrastructureError, PolicyUnavailable, ArenaCallFailed) as exc:
        record.verdict, record.infra_error = None, str(exc)
    record.wall_s = time.perf_counter() - started
    record.failure_mode = classify(record, task)
    return record


async def episodes(
    sessions: SessionProvider,
    items: list[tuple[Task, int]],
    policy: Policy,
    config: EpisodeConfig,
    concurrency: int,
) -> AsyncIterator[EpisodeRecord]:
    """Run (task, repeat) episodes with at most ``concurrency`` at once, yielding each as it finishes.
    When an episode raises (e.g. the policy refused a request) or the caller stops early, the episodes
    not finished are cancelled: none keeps using a policy or a pool its caller is closing."""
    limit = asyncio.Semaphore(concurrency)

    async def one(task: Task, repeat: int) -> EpisodeRecord:
        async with limit:
            return await run_episode(sessions, task, policy, config, repeat=repeat)

    running = [asyncio.ensure_future(one(task, repeat)) for task, repeat in items]
    try:
        for finished in asyncio.as_completed(running):
            yield await finished
    finally:
        for episode in running:
            episode.cancel()
        await asyncio.gather(*running, return_exceptions=True)
