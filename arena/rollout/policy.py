"""A policy behind any OpenAI-compatible chat endpoint (``POST /v1/chat/completions`` with tools)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import mcp_types as types
import openai
from openai.types.chat import ChatCompletionMessage


@dataclass(frozen=True)
class PolicyConfig:
    """Where the policy is served and how it samples."""

    base_url: str
    model: str
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = 0.7
    max_turns: int = 12
    max_tokens: int | None = None
    max_retries: int = 2
    timeout_s: float = 120.0


class PolicyUnavailable(RuntimeError):
    """The endpoint could not answer (unreachable, timed out, HTTP 5xx or 429): not the policy's failure."""


def tool_specs(tools: list[types.Tool]) -> list[dict[str, Any]]:
    """MCP tools as OpenAI function tools (the MCP ``inputSchema`` is the function's ``parameters``)."""
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description or "", "parameters": t.input_schema},
        }
        for t in tools
    ]


class OpenAIPolicy:
    """Chat completions with tools through ``openai.AsyncOpenAI``; close it (``async with``) when done."""

    def __init__(self, config: PolicyConfig) -> None:
        self.config = config
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

    async def reply(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> ChatCompletionMessage:
        """The model's next message; raises ``PolicyUnavailable`` when the endpoint cannot answer."""
        options: dict[str, Any] = {"max_tokens": self.config.max_tokens} if self.config.max_tokens else {}
        try:
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
        if not response.choices:
            raise PolicyUnavailable("policy endpoint answered without a choice")
        return response.choices[0].message

    async def aclose(self) -> None:
        await self._client.close()
