"""One episode: a policy works on a task in a fresh environment session, over MCP, and is verified.

Infrastructure failures (a dead worker, an unreachable session, the policy endpoint down) end the episode
with ``infra_error`` set and no verdict: they are never scored as the policy failing the task.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import mcp_types as types
import openai
from openai.types.chat import ChatCompletionMessage, ChatCompletionMessageFunctionToolCall

from arena.rollout.policy import OpenAIPolicy, PolicyUnavailable, tool_specs
from arena.runtime.errors import InfrastructureError
from task_synth.model import Task, Verdict
from task_synth.verify import verify

if TYPE_CHECKING:
    from arena.runtime.pool import EnvPool, Lease

SYSTEM_PROMPT = (
    "You are an assistant that completes the user's request using the tools provided. Call tools as "
    "needed; tool results come back as JSON. When you are done, reply without calling a tool: your final "
    "message must be only the JSON object the user asked for (or {} if no written answer is needed)."
)
_FENCE = re.compile(r"```(?:json)?\s*(.*?)\s*```", re.S)


@dataclass
class ToolCallRecord:
    """One tool call the policy made, and whether it came back as an error."""

    name: str
    arguments: dict[str, Any] | str
    is_error: bool


@dataclass
class EpisodeResult:
    """What happened: turns, tool calls, the parsed final answer, and the verdict (None if not scored)."""

    task_id: str
    turns: int = 0
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    answer: Any = None
    verdict: Verdict | None = None
    infra_error: str | None = None

    @property
    def passed(self) -> bool | None:
        """True/False when scored; None when an infrastructure failure left the episode unscored."""
        return None if self.verdict is None else self.verdict.passed

    @property
    def reasons(self) -> list[str]:
        return [] if self.verdict is None else self.verdict.reasons


def parse_answer(content: str | None) -> Any:
    """The final message as JSON (a ```json fence is stripped); the text itself if it is not JSON."""
    text = (content or "").strip()
    if fenced := _FENCE.search(text):
        text = fenced.group(1)
    try:
        return json.loads(text)
    except ValueError:
        return text


def _result_text(result: types.CallToolResult) -> str:
    if result.structured_content is not None:
        return json.dumps(result.structured_content, default=str)
    return "\n".join(block.text for block in result.content if isinstance(block, types.TextContent))


def _problem(message: str) -> str:
    return json.dumps({"error": {"code": "INVALID_ARGUMENTS", "message": message}})


async def _run_call(
    lease: Lease, call: ChatCompletionMessageFunctionToolCall, record: list[ToolCallRecord]
) -> str:
    """Run one tool call over MCP; its result (or the problem with its arguments) as the tool message."""
    name, raw = call.function.name, call.function.arguments
    try:
        arguments = json.loads(raw or "{}")
    except ValueError as exc:
        arguments = exc
    if not isinstance(arguments, dict):
        record.append(ToolCallRecord(name, raw, is_error=True))
        return _problem(f"the arguments of {name} are not a JSON object ({arguments}); nothing was run")
    result = await lease.call_tool(name, arguments)
    record.append(ToolCallRecord(name, arguments, is_error=bool(result.is_error)))
    return _result_text(result)


def _assistant(message: ChatCompletionMessage) -> dict[str, Any]:
    out: dict[str, Any] = {"role": "assistant", "content": message.content}
    if message.tool_calls:
        out["tool_calls"] = [call.model_dump(exclude_none=True) for call in message.tool_calls]
    return out


async def _converse(lease: Lease, task: Task, policy: OpenAIPolicy, result: EpisodeResult) -> Verdict:
    tools = tool_specs(await lease.list_tools())
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": task.request},
    ]
    while result.turns < policy.config.max_turns:
        try:
            message = await policy.reply(messages, tools)
        except openai.BadRequestError as exc:
            if result.turns == 0:
                raise  # the first request is refused: a configuration problem, not this episode's
            # Later, the conversation itself is what the endpoint refuses (most often: longer than the
            # model's context): the policy could not finish the task.
            reason = f"the policy endpoint refused turn {result.turns + 1}: {exc}"
            return Verdict(passed=False, reasons=[reason])
        result.turns += 1
        messages.append(_assistant(message))
        if not message.tool_calls:
            result.answer = parse_answer(message.content)
            diff = await lease.diff() if task.verifier.state is not None else None
            return verify(task, result.answer, diff)
        for call in message.tool_calls:
            content = (
                await _run_call(lease, call, result.tool_calls)
                if isinstance(call, ChatCompletionMessageFunctionToolCall)
                else _problem(f"{call.type} tool calls are not supported; call one of the functions")
            )
            messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
    return Verdict(passed=False, reasons=[f"no final answer within {policy.config.max_turns} turns"])


async def run_episode(pool: EnvPool, task: Task, policy: OpenAIPolicy) -> EpisodeResult:
    """Run ``policy`` on ``task`` in a fresh session of ``task.env`` and verify the outcome."""
    result = EpisodeResult(task.id)
    try:
        async with pool.session(task.env) as lease:
            result.verdict = await _converse(lease, task, policy, result)
    except (InfrastructureError, PolicyUnavailable) as exc:
        result.verdict, result.infra_error = None, str(exc)
    return result
