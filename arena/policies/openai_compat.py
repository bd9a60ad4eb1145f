"""A policy behind any OpenAI-compatible chat endpoint (``POST /v1/chat/completions`` with tools).

Requests carry ``tool_choice`` (``auto`` by default: llama.cpp's server, and vLLM without
``--enable-auto-tool-choice``, drop the tools of a request without it), ``max_tokens`` and any
server-specific fields (``extra_body``). Messages go out as ``openai_wire`` writes them for the
``tool_format``. Errors are sorted by what they mean: an unreachable endpoint, HTTP 408/429 or a server
fault is retried, then ``PolicyUnavailable`` (an infrastructure failure); a conversation longer than the
context is ``PolicyRefused``; any other rejection of the request is ``PolicyRequestInvalid`` (the settings
or the server do not fit), never retried. A server fault that repeats identically on every try of a request
carrying a setting the server may not support (``tool_choice`` other than ``auto``, ``extra_body``) is
tried once more without it: answered, it is ``PolicyRequestInvalid`` naming that setting.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

import openai
from openai.types.chat import ChatCompletionMessage

from arena.policies.base import (
    PolicyRefused,
    PolicyRequestInvalid,
    PolicyTurn,
    PolicyUnavailable,
    TokenTrajectory,
    ToolCall,
)
from arena.policies.openai_wire import ToolFormat, hermes_messages, native_messages
from arena.policies.toolcall_parsing import parse_reply
from task_synth.model import Task

# A rejected request whose body says this is about length: the conversation outgrew the context.
_CONTEXT_FULL = re.compile(r"context|too long|maximum.{0,40}tokens|exceed", re.I)
# A server fault whose body says the request did not validate (llama.cpp answers a bad body with HTTP 500).
_INVALID_BODY = re.compile(
    r"validation error|input should be|invalid|field required|not supported|unsupported", re.I
)
_RETRY_STATUS = frozenset({408, 429})
TEXT_CALL_ERROR = (
    "the reply wrote a tool call as text, which is not run: call tools through the function-calling "
    "interface (tool_calls)"
)


@dataclass(frozen=True)
class PolicyConfig:
    """Where the policy is served, how it samples, and how many requests may be in flight at once."""

    base_url: str
    model: str
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = 0.7
    max_turns: int = 12
    max_tokens: int | None = 1024
    max_retries: int = 2
    timeout_s: float = 120.0
    concurrency: int = 64
    tool_choice: str | None = "auto"
    tool_format: ToolFormat = "native"
    extra_body: dict[str, Any] = field(default_factory=dict)


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


def to_turn(
    message: ChatCompletionMessage,
    usage: Any = None,
    tool_format: ToolFormat = "native",
    call_id_prefix: str = "call_",
) -> PolicyTurn:
    """An OpenAI assistant message (and the response's usage) as a ``PolicyTurn``. ``native``: the calls
    are the message's ``tool_calls``, and text that parses as a call is a format error; ``hermes``: the
    calls are parsed from the text."""
    turn = PolicyTurn(
        content=message.content,
        tool_calls=[_tool_call(call) for call in message.tool_calls or []],
        prompt_tokens=getattr(usage, "prompt_tokens", None),
        completion_tokens=getattr(usage, "completion_tokens", None),
    )
    if turn.tool_calls or not message.content:
        return turn
    parsed = parse_reply(message.content, call_id_prefix)
    if tool_format == "hermes":
        turn.content, turn.tool_calls, turn.format_error = (
            parsed.content,
            parsed.tool_calls,
            parsed.format_error,
        )
    elif parsed.tool_calls or parsed.format_error:
        turn.format_error = TEXT_CALL_ERROR
    return turn


def _one_line(text: str, limit: int = 400) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def request_error(exc: openai.APIStatusError) -> PolicyUnavailable | PolicyRefused:
    """What an HTTP error answer means: ``PolicyUnavailable`` (worth a retry), ``PolicyRefused`` (the
    context is full) or ``PolicyRequestInvalid`` (the request itself was refused)."""
    said = f"{exc.message} {json.dumps(exc.body, default=str) if exc.body is not None else ''}"
    detail = f"HTTP {exc.status_code}: {_one_line(exc.message)}"
    if exc.status_code in _RETRY_STATUS or (exc.status_code >= 500 and not _INVALID_BODY.search(said)):
        return PolicyUnavailable(f"policy endpoint failed: {detail}")
    if exc.status_code < 500 and _CONTEXT_FULL.search(said):
        return PolicyRefused(detail)
    return PolicyRequestInvalid(f"the policy endpoint rejected the request: {detail}")


class OpenAIPolicy:
    """Chat completions with tools through ``openai.AsyncOpenAI``; close it (``async with``) when done."""

    def __init__(self, config: PolicyConfig) -> None:
        self.config = config
        self.name = f"openai:{config.model}"
        self._limit = asyncio.Semaphore(config.concurrency)
        self._client = openai.AsyncOpenAI(
            base_url=config.base_url,
            api_key=os.environ.get(config.api_key_env) or "unused",
            max_retries=0,  # retried here, where the error is understood
            timeout=config.timeout_s,
        )

    async def __aenter__(self) -> OpenAIPolicy:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def start(self, task: Task, tools: list[dict[str, Any]]) -> _OpenAIEpisode:
        return _OpenAIEpisode(self, tools)

    def request(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        """The chat-completions request for this conversation (``extra_body`` goes beside it)."""
        config = self.config
        body: dict[str, Any] = {"model": config.model, "temperature": config.temperature}
        if config.max_tokens:
            body["max_tokens"] = config.max_tokens
        if config.tool_format == "hermes":
            body["messages"] = hermes_messages(messages, tools)
        else:
            body["messages"] = native_messages(messages)
            if tools:
                body["tools"] = tools
                if config.tool_choice:
                    body["tool_choice"] = config.tool_choice
        return body

    async def reply(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], call_id_prefix: str = "call_"
    ) -> PolicyTurn:
        """The model's next turn; ``PolicyUnavailable`` when the endpoint cannot answer (after
        ``max_retries`` retries), ``PolicyRefused`` when the conversation is too long for it,
        ``PolicyRequestInvalid`` when it rejects the request."""
        body = self.request(messages, tools)
        extra = self.config.extra_body or None
        faults: set[str] = set()
        for attempt in range(self.config.max_retries + 1):
            try:
                async with self._limit:
                    response = await self._client.chat.completions.create(**body, extra_body=extra)
                break
            except openai.APIConnectionError as exc:  # also timeouts
                failure: PolicyUnavailable | PolicyRefused = PolicyUnavailable(
                    f"policy endpoint unreachable: {exc}"
                )
                faults.add("unreachable")
            except openai.APIStatusError as exc:
                failure = request_error(exc)
                faults.add(f"{exc.status_code} {exc.message} {exc.body}")
            if not isinstance(failure, PolicyUnavailable):
                raise failure
            if attempt == self.config.max_retries:
                if len(faults) == 1 and "unreachable" not in faults:
                    await self._blame_settings(body, tools, failure)
                raise failure
            await asyncio.sleep(min(0.5 * 2**attempt, 8.0))
        if not response.choices:
            raise PolicyUnavailable("policy endpoint answered without a choice")
        return to_turn(response.choices[0].message, response.usage, self.config.tool_format, call_id_prefix)

    def _optional_settings(self, tools: list[dict[str, Any]]) -> list[str]:
        """The settings in this policy's requests that a server may not support: a ``tool_choice`` other
        than ``auto`` and ``extra_body``."""
        settings = []
        if tools and self.config.tool_format == "native" and self.config.tool_choice not in (None, "auto"):
            settings.append(f"policy.tool_choice={self.config.tool_choice}")
        if self.config.extra_body:
            settings.append(f"policy.extra_body={json.dumps(self.config.extra_body)}")
        return settings

    async def _blame_settings(
        self, body: dict[str, Any], tools: list[dict[str, Any]], fault: PolicyUnavailable
    ) -> None:
        """After a server fault that repeated identically on every try, ask once more without the optional
        settings; ``PolicyRequestInvalid`` naming them when the server answers that. (llama.cpp's server
        answers ``tool_choice: required`` with an empty HTTP 500, as it would a crash.)"""
        settings = self._optional_settings(tools)
        if not settings:
            return
        plain = {key: value for key, value in body.items() if key != "tool_choice"} | {"max_tokens": 1}
        if "tools" in plain:
            plain["tool_choice"] = "auto"
        try:
            async with self._limit:
                await self._client.chat.completions.create(**plain)
        except openai.APIError:
            return  # it fails without them too: the server's fault
        raise PolicyRequestInvalid(
            f"the policy endpoint does not support {' and '.join(settings)}: every try of a request with it "
            f"failed ({fault}) and the same request without it was answered; change or drop it"
        ) from fault

    async def aclose(self) -> None:
        await self._client.close()


class _OpenAIEpisode:
    def __init__(self, policy: OpenAIPolicy, tools: list[dict[str, Any]]) -> None:
        self._policy, self._tools = policy, tools
        self._turns = 0

    async def act(self, messages: list[dict[str, Any]]) -> PolicyTurn:
        self._turns += 1
        return await self._policy.reply(messages, self._tools, f"call_{self._turns}_")

    def trajectory(self) -> TokenTrajectory | None:
        return None
