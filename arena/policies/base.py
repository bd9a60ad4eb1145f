"""The one ``Policy`` protocol every policy implements, and what a policy turn returns.

A policy is asked to ``start`` an episode on a task with the environment's tools (OpenAI function specs)
and gets a ``PolicyEpisode``: per-episode state (a token buffer, a script's progress). The episode loop
calls ``act(messages)`` with the whole conversation so far (OpenAI chat format: system, user, assistant
with ``tool_calls``, tool) and runs whatever calls the turn asks for. Token policies (a local Hugging Face
model, verl's server) also hand back the token-level trajectory a trainer needs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from task_synth.model import Task

IMITATE = "imitate"
"""Key of an assistant message that SFT must not imitate (value False): in a recorded conversation, a
turn whose every call the environment refused, such as a reference episode's deliberate slip
(``arena.policies.slips``; set by ``arena.rollout.conversation.messages_of``). It stays in the
conversation, with its error, as context."""


class PolicyUnavailable(RuntimeError):
    """The policy could not answer (endpoint unreachable, HTTP 5xx/429, model crashed): an infrastructure
    failure, never the policy failing the task."""


class PolicyRefused(RuntimeError):
    """The policy refused the conversation (HTTP 400: most often longer than its context). On an episode's
    first turn that is a configuration problem; later it is the policy failing to finish the task."""


class PolicyRequestInvalid(PolicyRefused):
    """The endpoint rejected the request itself, not its length (an HTTP 4xx such as a wrong model name or
    key, or a 5xx whose body says the request did not validate): the policy settings or the server do not
    fit. A configuration error at whatever turn it happens, never the policy failing a task."""


@dataclass(frozen=True)
class ToolCall:
    """One call a policy asked for. ``arguments`` is None when ``raw`` is not a JSON object."""

    id: str
    name: str
    arguments: dict[str, Any] | None
    raw: str = ""


@dataclass
class PolicyTurn:
    """One policy message: text and/or tool calls, or a format error (output that should have been a tool
    call but could not be parsed). Token counts are None where the policy cannot tell."""

    content: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    format_error: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


@dataclass
class TokenTrajectory:
    """A whole episode as tokens, in verl's ``AgentLoopOutput`` layout: the first prompt, then everything
    after it; ``response_mask`` is 1 on tokens the policy generated and 0 on tool and user tokens;
    ``response_logprobs`` holds the sampling log-prob of each generated token (0.0 where the mask is 0)."""

    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    response_logprobs: list[float] = field(default_factory=list)

    def extend(self, ids: list[int], *, generated: bool, logprobs: list[float] | None = None) -> None:
        """Append tokens: generated ones (mask 1, with their log-probs) or context ones (mask 0)."""
        self.response_ids += ids
        self.response_mask += [int(generated)] * len(ids)
        self.response_logprobs += logprobs if logprobs is not None else [0.0] * len(ids)


class PolicyEpisode(Protocol):
    """One episode's view of a policy."""

    async def act(self, messages: list[dict[str, Any]]) -> PolicyTurn:
        """The next turn given the conversation so far; raises ``PolicyUnavailable`` on infrastructure
        failure."""
        ...

    def trajectory(self) -> TokenTrajectory | None:
        """The token-level trajectory so far (token policies), else None."""
        ...


@runtime_checkable
class ClosingPolicyEpisode(Protocol):
    """A policy episode holding work of its own (a solver task) that must be released when the episode
    ends, also when a limit cuts it short; the episode loop calls ``close`` then."""

    def close(self) -> None: ...


class Policy(Protocol):
    """Anything that can play episodes: ``start`` one per episode, ``aclose`` when done."""

    name: str

    def start(self, task: Task, tools: list[dict[str, Any]]) -> PolicyEpisode: ...

    async def aclose(self) -> None: ...


def tool_message_content(message: dict[str, Any]) -> str:
    """The text of a chat message's ``content`` (a string or a list of text parts)."""
    content = message.get("content")
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""
