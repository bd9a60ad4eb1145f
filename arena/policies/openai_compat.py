"""A policy behind any OpenAI-compatible chat endpoint (``POST /v1/chat/completions`` with tools)."""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass
from typing import Any

import openai
from openai.types.chat import ChatCompletionMessage

from arena.policies.base import PolicyRefused, PolicyTurn, PolicyUnavailable, TokenTrajectory, ToolCall
from task_synth.model import Task


@dataclass(frozen=True)
class PolicyConfig:
    """Where the policy is served, how it samples, and how many requests may be in flight at once."""

    base_url: str
    model: str
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = 0.7
    max_turns: int = 12
    max_tokens: int | None = None
    max_retries: int = 2
    timeout_s: float = 120.0
    concurrency: int = 64


def _tool_call(call: Any) -> ToolCall:
    function = getattr(call, "function", None)
    if function is None:  # a custom (non-function) tool call: nothing to run
        return ToolCall(id=call.id, name=f"<{call.type}>", arguments=None, raw="")
    raw = function.arguments or "{}"
    try:
        arguments = json.loads(raw)
    except ValueError:
        arguments = None
    return ToolCall(call.id, function.name, arguments if isinstance(arguments, dict) else None, raw)


def to_turn(message: ChatCompletionMessage, usage: Any = None) -> PolicyTurn:
    """An OpenAI assistant message (and the response's usage) as a ``PolicyTurn``."""
    return PolicyTurn(
        content=message.content,
        tool_calls=[_tool_call(call) for call in message.tool_calls or []],
        prompt_tokens=getattr(usage, "prompt_tokens", None),
        completion_tokens=getattr(usage, "completion_tokens", None),
    )


class OpenAIPolicy:
    """Chat completions with tools through ``openai.AsyncOpenAI``; close it (``async with``) when done."""

    def __init__(self, config: PolicyConfig) -> None:
        self.config = config
        self.name = f"openai:{config.model}"
        self._limit = asyncio.Semaphore(config.concurrency)
        self._client = openai.AsyncOpenAI(
            base_url=config.base_url,
            api_key=os.environ.get(config.api_key_env) or "unused",
            max_retries=config.max_retries,
            timeout=config.timeout_s,
        )

    async def __aenter__(self) -> OpenAIPolicy:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def start(self, task: Task, tools: list[dict[str, Any]]) -> _OpenAIEpisode:
        return _OpenAIEpisode(self, tools)

    async def reply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> PolicyTurn:
        """The model's next turn; ``PolicyUnavailable`` when the endpoint cannot answer, ``PolicyRefused``
        when it refuses the request (HTTP 400)."""
        options: dict[str, Any] = {"max_tokens": self.config.max_tokens} if self.config.max_tokens else {}
        try:
            async with self._limit:
                response = await self._client.chat.completions.create(
                    model=self.config.model,
                    messages=messages,  # type: ignore[arg-type]
                    tools=tools,  # type: ignore[arg-type]
                    temperature=self.config.temperature,
                    **options,
                )
        except openai.APIConnectionError as exc:  # also timeouts
            raise PolicyUnavailable(f"policy endpoint unreachable: {exc}") from exc
        except (openai.InternalServerError, openai.RateLimitError) as exc:
            raise PolicyUnavailable(f"policy endpoint failed: HTTP {exc.status_code}: {exc.message}") from exc
        except openai.BadRequestError as exc:
            raise PolicyRefused(f"HTTP 400: {exc.message}") from exc
        if not response.choices:
            raise PolicyUnavailable("policy endpoint answered without a choice")
        return to_turn(response.choices[0].message, response.usage)

    async def aclose(self) -> None:
        await self._client.close()


class _OpenAIEpisode:
    def __init__(self, policy: OpenAIPolicy, tools: list[dict[str, Any]]) -> None:
        self._policy, self._tools = policy, tools

    async def act(self, messages: list[dict[str, Any]]) -> PolicyTurn:
        return await self._policy.reply(messages, self._tools)

    def trajectory(self) -> TokenTrajectory | None:
        return None
