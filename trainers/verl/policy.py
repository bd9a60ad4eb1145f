"""verl's rollout server as an arena ``Policy``: the shared episode (``arena.rollout.episode``) drives the
turns, tools, verification and failure classification; this policy only turns messages into tokens and
back, token-in/token-out, with verl's own machinery:

- the prompt and every appended context message (tool results, follow-up users, format errors) are
  tokenized by the agent loop's Continuous Token builder (``ct_build_initial_tokens`` /
  ``ct_merge_context_msg``), exactly as verl's ``ToolAgentLoop`` does: mask 0;
- each turn is ``server_manager.generate(...)`` and merged with ``ct_merge_assistant_token``: mask 1, with
  the server's log-probs;
- a tool result longer than ``rollout.multi_turn.max_tool_response_length`` characters is cut (keeping
  its start, end or both: ``tool_response_truncate_side``) before it is tokenized, as verl's
  ``ToolAgentLoop`` cuts it; the episode's record keeps the whole result;
- tool schemas are normalised (``trainers.verl.schemas``) so nested types survive both the chat template
  and verl's tool-schema model;
- tool calls are parsed by verl's ``ToolParser`` (``rollout.multi_turn.format``, ``hermes`` by default);
  output that tried to be a call and could not be read falls back to the arena's parser, which reports
  the format error the episode feeds back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from uuid import uuid4

import ray

from arena.policies.base import PolicyRefused, PolicyTurn, PolicyUnavailable, TokenTrajectory, ToolCall
from arena.policies.toolcall_parsing import parse_reply
from task_synth.model import Task
from trainers.verl.schemas import normalise_tool, verl_tool

if TYPE_CHECKING:
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase
    from verl.experimental.agent_loop.tool_parser import ToolParser

SERVER_DOWN = (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError, ConnectionError)
"""What ``server_manager.generate`` raises when the rollout server is gone: infrastructure, not the task."""


@dataclass(frozen=True)
class ToolResultLimit:
    """At most ``length`` characters of a tool result reach the model; ``side`` says which are kept:
    ``left`` (the end), ``right`` (the start) or ``middle`` (both ends)."""

    length: int
    side: str = "middle"

    def cut(self, text: str) -> str:
        if len(text) <= self.length:
            return text
        if self.side == "left":
            return "(truncated)..." + text[len(text) - self.length :]
        if self.side == "right":
            return text[: self.length] + "...(truncated)"
        half = self.length // 2
        return text[:half] + "...(truncated)..." + text[len(text) - half :]

    def view(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``messages`` as the model sees them: every tool result cut to the limit."""
        return [
            {**m, "content": self.cut(m["content"])}
            if m.get("role") == "tool" and isinstance(m.get("content"), str)
            else m
            for m in messages
        ]


class VerlPolicy:
    """Generation through one agent loop's ``server_manager`` (one instance per trajectory attempt)."""

    def __init__(
        self,
        loop: AgentLoopBase,
        parser: ToolParser,
        sampling_params: dict[str, Any],
        response_length: int,
        tool_limit: ToolResultLimit,
    ) -> None:
        self.loop, self.parser = loop, parser
        self.sampling_params, self.response_length = sampling_params, response_length
        self.tool_limit = tool_limit
        self.name = "verl"
        self.episodes: list[VerlEpisode] = []

    def start(self, task: Task, tools: list[dict[str, Any]]) -> VerlEpisode:
        episode = VerlEpisode(self, tools)
        self.episodes.append(episode)
        return episode

    async def aclose(self) -> None:
        return None


class VerlEpisode:
    """One trajectory's runtime tokens, response mask and log-probs (verl's ``AgentData`` layout)."""

    def __init__(self, policy: VerlPolicy, tools: list[dict[str, Any]]) -> None:
        self.policy = policy
        self.tools = [normalise_tool(tool) for tool in tools]  # what the chat template renders
        self.verl_tools = [verl_tool(tool) for tool in tools]  # what verl's parsers read
        self.request_id = uuid4().hex  # sticky routing: every turn to the same server (prefix cache)
        self.token_ids: list[int] = []
        self.response_mask: list[int] = []
        self.response_logprobs: list[float] = []
        self.seen: list[dict[str, Any]] = []  # the messages already in token_ids
        self.generated_turns = 0
        self.weight_versions: list[int] = []  # the servers' global_steps of each turn's weights

    async def act(self, messages: list[dict[str, Any]]) -> PolicyTurn:
        loop, policy = self.policy.loop, self.policy
        messages = policy.tool_limit.view(messages)
        if not self.token_ids:
            self.token_ids = await loop.ct_build_initial_tokens(messages, tools=self.tools)
        else:
            previous = messages[: len(self.seen) + 1]  # + the assistant message of our last turn
            merged, self.response_mask, logprobs = await loop.ct_merge_context_msg(
                previous,
                messages,
                self.token_ids,
                self.response_mask,
                self.response_logprobs or None,
                self.tools,
            )
            self.token_ids, self.response_logprobs = merged.token_ids, logprobs or []
        if len(self.response_mask) >= policy.response_length:
            raise PolicyRefused(f"the response has reached rollout.response_length={policy.response_length}")
        sampling = dict(policy.sampling_params)
        if policy.parser.stop_token_ids:
            sampling["stop_token_ids"] = sorted(
                set(sampling.get("stop_token_ids") or []) | set(policy.parser.stop_token_ids)
            )
        prompt_tokens = len(self.token_ids)
        try:
            output = await loop.server_manager.generate(
                request_id=self.request_id, prompt_ids=self.token_ids, sampling_params=sampling
            )
        except SERVER_DOWN as exc:
            raise PolicyUnavailable(f"the rollout server is unavailable: {exc!r:.300}") from exc
        merged, self.response_mask, logprobs = await loop.ct_merge_assistant_token(
            self.token_ids,
            output.token_ids,
            self.response_mask,
            self.response_logprobs if output.log_probs else None,
            assistant_logprobs=output.log_probs or None,
        )
        self.token_ids, self.response_logprobs = merged.token_ids, logprobs or []
        self.seen = list(messages)
        self.generated_turns += 1
        self.weight_versions += [
            int(output.extra_fields[key])
            for key in ("min_global_steps", "max_global_steps")
            if output.extra_fields.get(key) is not None
        ]
        turn = await self._parse(output.token_ids, f"call_{len(messages)}_")
        turn.prompt_tokens, turn.completion_tokens = prompt_tokens, len(output.token_ids)
        return turn

    async def _parse(self, token_ids: list[int], prefix: str) -> PolicyTurn:
        """verl's parser first; the arena's for what it could not read (format errors, bare JSON calls)."""
        _, calls = await self.policy.parser.extract_tool_calls(token_ids, self.verl_tools)
        text = self.policy.loop.tokenizer.decode(token_ids, skip_special_tokens=True)
        reply = parse_reply(text, prefix)
        if not calls or reply.format_error is not None:
            return PolicyTurn(
                content=reply.content, tool_calls=reply.tool_calls, format_error=reply.format_error
            )
        parsed = []
        for index, call in enumerate(calls):
            try:
                arguments = json.loads(call.arguments)
            except ValueError:
                arguments = None
            arguments = arguments if isinstance(arguments, dict) else None
            parsed.append(
                ToolCall(call.tool_call_id or f"{prefix}{index}", call.name, arguments, call.arguments)
            )
        return PolicyTurn(content=reply.content, tool_calls=parsed)

    def trajectory(self) -> TokenTrajectory | None:
        if not self.token_ids:
            return None
        cut = len(self.token_ids) - len(self.response_mask)
        logprobs = self.response_logprobs if len(self.response_logprobs) == len(self.response_mask) else []
        return TokenTrajectory(
            self.token_ids[:cut], self.token_ids[cut:], list(self.response_mask), list(logprobs)
        )
