"""Optional LLM refinement of a request's wording, through any OpenAI-compatible endpoint.

The template request stays the source of truth: a rewrite is used only if it still states every
literal value, names no tool and quotes no answer; otherwise the template is kept.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from task_synth.profile import EnvProfile
from task_synth.wording import leaks

if TYPE_CHECKING:
    from openai import AsyncOpenAI

logger = logging.getLogger(__name__)

SYSTEM_PROMPT = (
    "You rewrite task requests for a tool-using assistant so they read like a real user's message. "
    "Keep every concrete value (ids, names, amounts, statuses) exactly as written, keep the requested "
    "JSON keys exactly, never mention function or tool names, never add facts or answers. "
    "Reply with the rewritten request only."
)


@dataclass(frozen=True)
class LLMConfig:
    """An OpenAI-compatible chat endpoint: ``max_tokens`` bounds each reply (a small model left unbounded
    writes to the end of its context); ``extra_body`` holds server-specific request fields, e.g.
    llama.cpp's ``response_format`` with a JSON schema. At most ``concurrency`` requests are in flight
    at once (1 for a server that answers one at a time, as llama.cpp's does by default); ``timeout_s``
    bounds each request once sent, not its wait for a free slot."""

    base_url: str
    model: str
    api_key: str | None = None
    max_tokens: int | None = 1024
    extra_body: dict[str, Any] = field(default_factory=dict)
    concurrency: int = 4
    timeout_s: float = 120.0
    _slots: asyncio.Semaphore = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_slots", asyncio.Semaphore(self.concurrency))

    def client(self) -> AsyncOpenAI:
        """An SDK client for this endpoint (close it when done)."""
        from openai import AsyncOpenAI

        return AsyncOpenAI(
            base_url=self.base_url, api_key=self.api_key or "unused", max_retries=1, timeout=self.timeout_s
        )

    async def complete(self, client: AsyncOpenAI, messages: list[dict[str, str]], temperature: float) -> str:
        """The reply's text to ``messages``, once one of the ``concurrency`` slots is free."""
        options: dict[str, Any] = {"extra_body": self.extra_body or None}
        if self.max_tokens:
            options["max_tokens"] = self.max_tokens
        async with self._slots:
            response = await client.chat.completions.create(
                model=self.model, messages=messages, temperature=temperature, **options
            )
        return (response.choices[0].message.content or "") if response.choices else ""


async def refine_request(
    llm: LLMConfig, request: str, answer: dict[str, Any], profile: EnvProfile, literals: set[str]
) -> str | None:
    """The LLM's rewrite of ``request``, or None when it fails a check (or the endpoint fails)."""
    from openai import OpenAIError

    client = llm.client()
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": request}]
    try:
        text = (await llm.complete(client, messages, temperature=0.3)).strip()
    except OpenAIError as exc:
        logger.warning("LLM refinement failed, keeping the template wording: %s", exc)
        return None
    finally:
        await client.close()
    if reason := rejection(text, answer, profile, literals):
        logger.info("LLM rewrite rejected (%s), keeping the template wording", reason)
        return None
    return text


def rejection(text: str, answer: dict[str, Any], profile: EnvProfile, literals: set[str]) -> str | None:
    """Why a rewrite cannot replace the template (empty, drops a literal or answer key, leaks), or None."""
    lowered = text.lower()
    if not text:
        return "empty"
    if missing := sorted(literal for literal in literals if literal not in lowered):
        return f"drops the literal {missing[0]!r}"
    if missing := [key for key in answer if f'"{key}"' not in text]:
        return f"drops the answer key {missing[0]!r}"
    return leaks(text, answer, profile, literals)
