"""A local Hugging Face causal LM as a policy (``transformers``, CPU or CUDA).

Messages and tools are rendered with the tokenizer's chat template, incrementally: each episode keeps a
token buffer (the first prompt, then every later token), appends only the tokens of the messages added
since its last turn (mask 0) and generates the next turn (mask 1, with each token's sampling log-prob).
The buffer is the ``TokenTrajectory`` a trainer consumes (verl's ``AgentLoopOutput`` layout). Tool calls
are parsed from the generated text (``toolcall_parsing``).

Generation runs in a worker thread so the event loop keeps serving tools; requests of concurrent episodes
that arrive while the model is busy are generated together as one batch
(``arena.policies.generation``).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import time
from collections import Counter
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import torch
from transformers import AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from arena.policies.attention import load_causal_lm, supports_shared_prefixes
from arena.policies.base import IMITATE, PolicyRefused, PolicyTurn, PolicyUnavailable, TokenTrajectory
from arena.policies.generation import (
    KV,
    GenerationRequest,
    GenerationResult,
    PrefixCache,
    Sampling,
    generation_steps,
)
from arena.policies.precision import autocast, cast_linear_copy, resolve_precision
from arena.policies.toolcall_parsing import parse_reply
from task_synth.model import Task

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class HFPolicyConfig:
    """Where the model is, where it runs, and how it samples. ``temperature`` 0 is greedy; a conversation
    longer than ``context_limit`` tokens is refused; at most ``max_batch`` turns are generated together,
    a batch starting once no turn has joined it for ``gather_s`` seconds, or it is full, or every live
    episode has a turn waiting and none started or closed within ``gather_s``.
    ``precision`` is ``bf16`` (autocast) or ``fp32`` (``arena.policies.precision`` resolves ``auto``);
    ``reuse_cache`` keeps each episode's keys and values between its turns and each environment's prompt
    prefix across episodes; ``tool_result_chars`` is how much of each tool result the chat template shows
    (None: the template's own default)."""

    path: str = ""
    device: str = "cpu"
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 128
    context_limit: int = 4096
    max_batch: int = 32
    gather_s: float = 0.2
    seed: int = 0
    precision: str = "fp32"
    reuse_cache: bool = True
    tool_result_chars: int | None = None


def check_tool_result_chars(tokenizer: PreTrainedTokenizerBase, tool_result_chars: int | None) -> None:
    """Refuse a ``tool_result_chars`` setting that the tokenizer's chat template would silently ignore."""
    if tool_result_chars is not None and "tool_result_chars" not in str(tokenizer.chat_template or ""):
        raise ValueError(
            "tool_result_chars is set but this model's chat template does not cut tool results "
            "(only the arena's templates do: arena model fetch, the tiny preset); set it to null"
        )


class ChatRenderer:
    """The chat template applied incrementally: the tokens that a conversation adds to an earlier one
    (tool results cut to ``tool_result_chars`` characters; None: the template's default)."""

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        tools: list[dict[str, Any]],
        tool_result_chars: int | None = None,
    ) -> None:
        self.tokenizer, self.tools = tokenizer, tools
        self.variables = {} if tool_result_chars is None else {"tool_result_chars": tool_result_chars}

    def text(self, messages: list[dict[str, Any]], generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            messages,
            tools=self.tools or None,
            tokenize=False,
            add_generation_prompt=generation_prompt,
            **self.variables,
        )

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def added(
        self, messages: list[dict[str, Any]], upto: int, before_prompt: bool, generation_prompt: bool
    ) -> list[int]:
        """Tokens of ``messages[upto:]`` (plus a generation prompt if asked), given the tokens of
        ``messages[:upto]`` (rendered with its generation prompt when ``before_prompt``)."""
        before = self.text(messages[:upto], before_prompt)
        after = self.text(messages, generation_prompt)
        if not after.startswith(before):
            raise PolicyUnavailable(
                "the chat template does not render a conversation as a prefix of its sequel"
            )
        return self.encode(after[len(before) :])


def encode_conversation(
    tokenizer: PreTrainedTokenizerBase,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    tool_result_chars: int | None = None,
) -> TokenTrajectory:
    """A whole recorded conversation as the trajectory a policy would have built: the prompt up to the
    first assistant turn, then assistant turns with mask 1 (but those whose ``IMITATE`` key is False) and
    everything else with mask 0."""
    renderer = ChatRenderer(tokenizer, tools, tool_result_chars)
    first = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), len(messages))
    trajectory = TokenTrajectory(renderer.encode(renderer.text(messages[:first], True)))
    for index in range(first, len(messages)):
        if messages[index]["role"] == "assistant":
            ids = renderer.added(messages[: index + 1], index, True, False)
            trajectory.extend(ids, generated=messages[index].get(IMITATE, True) is not False)
        else:
            prompt = index + 1 < len(messages) and messages[index + 1]["role"] == "assistant"
            ids = renderer.added(messages[: index + 1], index, False, prompt)
            trajectory.extend(ids, generated=False)
    return trajectory


class HFPolicy:
    """A causal LM playing episodes; ``model`` and ``tokenizer`` are shared with a trainer, which calls
    ``weights_changed`` after every update (cached prompt prefixes and the inference copy are dropped
    then)."""

    def __init__(
        self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, config: HFPolicyConfig
    ) -> None:
        if tokenizer.eos_token_id is None:
            raise ValueError("the tokenizer has no eos_token: generation could never end")
        check_tool_result_chars(tokenizer, config.tool_result_chars)
        self.model, self.tokenizer, self.config = model, tokenizer, config
        self.name = f"hf:{config.path or model.name_or_path}"
        self._pending: list[tuple[GenerationRequest, asyncio.Future[GenerationResult]]] = []
        self._worker: asyncio.Task[None] | None = None
        self._live = 0  # episodes started and not closed: the most turns that can still join a batch
        self._changed_at = -math.inf  # when an episode last started or closed (time.monotonic)
        self._joined_at = -math.inf  # when a turn last joined the waiting ones
        self._started: Counter[str] = Counter()  # episodes started per task: each has its own stream
        self.batches: list[int] = []  # sizes of the generated batches (throughput diagnostics)
        self.prefixes = PrefixCache()
        self.shares_prefixes = supports_shared_prefixes(model)  # decode reads each prefix once a batch
        self._inference: PreTrainedModel | None = None
        pad = tokenizer.pad_token_id
        self.sampling = Sampling(
            temperature=config.temperature,
            top_p=config.top_p,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.eos_token_id if pad is None else pad,
        )

    @classmethod
    def load(cls, config: HFPolicyConfig) -> HFPolicy:
        """Load the model and tokenizer at ``config.path`` (a local Hugging Face folder)."""
        tokenizer = AutoTokenizer.from_pretrained(config.path)
        model = load_causal_lm(config.path, config.device)
        return cls(model, tokenizer, config)

    @classmethod
    def from_settings(cls, settings: Any, seed: int = 0) -> HFPolicy:
        """The policy ``conf/policy/hf.yaml``-style settings describe: ``path`` a Hugging Face folder or
        a model of the catalog (``arena.models``; fetched on first use), ``device`` and ``precision``
        resolved (``auto``)."""
        from arena.models.fetch import resolve

        device = settings.device
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        config = HFPolicyConfig(
            path=resolve(settings.path),
            device=device,
            temperature=settings.temperature,
            top_p=settings.top_p,
            max_new_tokens=settings.max_new_tokens,
            context_limit=settings.context_tokens,
            seed=seed,
            precision=resolve_precision(getattr(settings, "precision", "auto"), device),
            tool_result_chars=getattr(settings, "tool_result_chars", None),
        )
        return cls.load(config)

    def start(self, task: Task | None, tools: list[dict[str, Any]]) -> HFEpisode:
        """An episode of ``task``, sampling from its own random stream, seeded by the policy's seed, the
        task and how many of its episodes this policy started before: what an episode draws does not
        depend on which others share its batches (the concurrency, the order tool calls come back in)."""
        self._live += 1
        self._changed_at = time.monotonic()
        task_id = task.id if task is not None else ""
        self._started[task_id] += 1
        key = f"{self.config.seed}:{task_id}:{self._started[task_id]}".encode()
        generator = torch.Generator(device=self.config.device)
        generator.manual_seed(int.from_bytes(hashlib.sha256(key).digest()[:8], "little"))
        return HFEpisode(self, tools, generator)

    def weights_changed(self) -> None:
        """Forget cached prompt prefixes and the inference copy: they hold the old weights."""
        self.prefixes.clear()
        self._inference = None

    def prefix_cache(self, prefix: list[int]) -> KV:
        """Keys and values of a shared prompt prefix under the current weights."""
        return self.prefixes.get(self.inference_model(), prefix, self._precision())

    def inference_model(self) -> PreTrainedModel:
        """The model generation runs on: under bf16 on a CPU, a copy of the current weights whose linear
        layers are bfloat16 already (``cast_linear_copy``, built once per weights: prefills skip
        autocast's cast of every weight at each call, and decode steps run their products in bfloat16,
        ``decode_context``); otherwise the model itself."""
        if self.config.precision != "bf16" or torch.device(self.config.device).type != "cpu":
            return self.model
        if self._inference is None:
            self._inference = cast_linear_copy(self.model)
        return self._inference

    def _precision(self) -> AbstractContextManager:
        return autocast(self.config.precision, self.config.device)

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        """The continuation of ``request``, generated in a batch with any other waiting request."""
        future: asyncio.Future[GenerationResult] = asyncio.get_running_loop().create_future()
        self._pending.append((request, future))
        self._joined_at = time.monotonic()
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._drain())
        return await future

    async def _gather(self) -> None:
        """Wait while turns keep arriving: the episodes of the batch just generated run their tool calls
        and come back within milliseconds. Without the wait the next batch started with whoever was
        waiting already and the rest missed it: two cohorts alternated (a held-out evaluation of 120
        episodes: 17 batches of 1-31 turns, 701 decode steps; with it 8 batches of 24-32, 370 steps).
        The batch starts once no turn has joined for ``gather_s``, or it is full, or every live episode
        (started, not closed) has a turn waiting and none started or closed for ``gather_s``: episodes
        that start beside each other (a rollout's first turns, new episodes taking ended ones' places)
        come as their environments are set up, and the first one's prompt prefix holds the event loop
        while it is encoded. Without that wait a rollout's first turn went alone (16 episodes: a batch
        of 1, then of 16; ``benchmarks/train.py``), and the other turns waited for it."""
        gather_s = self.config.gather_s
        while len(self._pending) < self.config.max_batch:
            now = time.monotonic()
            if now - self._joined_at >= gather_s:
                return
            if len(self._pending) >= self._live and now - self._changed_at >= gather_s:
                return
            await asyncio.sleep(gather_s / 4)

    async def _drain(self) -> None:
        while self._pending:
            await self._gather()
            batch, self._pending = (
                self._pending[: self.config.max_batch],
                self._pending[self.config.max_batch :],
            )
            self.batches.append(len(batch))
            try:
                results = await self._generated([r for r, _ in batch])
            except Exception as exc:  # the model crashed (out of memory, bad device): not the task's fault
                logger.exception("local model failed on a batch of %d turns", len(batch))
                for _, future in batch:
                    if not future.done():
                        future.set_exception(PolicyUnavailable(f"local model failed: {exc!r}"))
                continue
            for (_, future), result in zip(batch, results, strict=True):
                if not future.done():
                    future.set_result(result)

    async def _generated(self, requests: list[GenerationRequest]) -> list[GenerationResult]:
        """The batch's continuations, generated on the event loop's own thread one forward pass at a time,
        the loop serving tool calls and timers between passes. Not in a worker thread: torch's OpenMP
        keeps a team of threads for every thread that runs its kernels, and once two teams exist (this
        process trains on its main thread) libgomp has more threads than cores and stops spinning between
        parallel regions, so every kernel waits for its threads to wake: a decode step of one row took 45
        instead of 27 ms, a 16-row generation 4.5 instead of 3.0 s (2 cores, torch 2.13)."""
        steps = generation_steps(self.inference_model(), requests, self.sampling, self._precision())
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value
            await asyncio.sleep(0)

    async def aclose(self) -> None:
        if self._worker is not None:
            await asyncio.gather(self._worker, return_exceptions=True)


class HFEpisode:
    """One episode's token buffer, the cache of the tokens the model has seen, and its turn count."""

    def __init__(self, policy: HFPolicy, tools: list[dict[str, Any]], generator: torch.Generator) -> None:
        self.policy = policy
        self.generator = generator
        self.renderer = ChatRenderer(policy.tokenizer, tools, policy.config.tool_result_chars)
        self._trajectory: TokenTrajectory | None = None
        self._seen = 0  # messages already in the buffer (the last one: this policy's own turn)
        self._prefix: KV | None = None  # the environment's shared prompt prefix (policy.prefixes)
        self._cache: KV | None = None  # keys and values of the buffer's tokens after it, up to ``_cached``
        self._cached = 0
        self._closed = False

    def close(self) -> None:
        """The episode ended: the policy no longer waits for its turns when it gathers a batch."""
        if not self._closed:
            self._closed = True
            self.policy._live -= 1
            self.policy._changed_at = time.monotonic()

    def _first_prompt(self, messages: list[dict[str, Any]]) -> TokenTrajectory:
        """The first prompt's tokens; its leading system message (with the tool list) comes from the
        policy's prefix cache when it renders as a token prefix of the prompt: as the shared prefix of
        this episode's requests (or as the start of its own cache where the model cannot share)."""
        trajectory = TokenTrajectory(self.renderer.encode(self.renderer.text(messages, True)))
        if self.policy.config.reuse_cache and messages and messages[0]["role"] == "system":
            prefix = self.renderer.encode(self.renderer.text(messages[:1], False))
            if (
                0 < len(prefix) < len(trajectory.prompt_ids)
                and trajectory.prompt_ids[: len(prefix)] == prefix
            ):
                cached = self.policy.prefix_cache(prefix)
                if self.policy.shares_prefixes:
                    self._prefix = cached
                else:
                    self._cache = cached
                self._cached = len(prefix)
        return trajectory

    async def act(self, messages: list[dict[str, Any]]) -> PolicyTurn:
        config, trajectory = self.policy.config, self._trajectory
        if trajectory is None:
            trajectory = self._trajectory = self._first_prompt(messages)
            self.policy._changed_at = time.monotonic()  # encoding its prefix held the other episodes
        else:
            trajectory.extend(self.renderer.added(messages, self._seen, False, True), generated=False)
        context = trajectory.prompt_ids + trajectory.response_ids
        budget = min(config.max_new_tokens, config.context_limit - len(context))
        if budget <= 0:
            raise PolicyRefused(
                f"the conversation has {len(context)} tokens; the context limit is {config.context_limit}"
            )
        generated = await self.policy.generate(
            GenerationRequest(
                context[self._cached :], self._cache, budget, prefix=self._prefix, generator=self.generator
            )
        )
        if config.reuse_cache:
            self._cache, self._cached = generated.cache, len(context) + len(generated.ids) - 1
        trajectory.extend(generated.ids, generated=True, logprobs=generated.logprobs)
        if not generated.stopped:  # cut at max_new_tokens: close the turn as the template would
            trajectory.extend([self.policy.tokenizer.eos_token_id], generated=False)
        self._seen = len(messages) + 1
        text = self.policy.tokenizer.decode(generated.ids, skip_special_tokens=True)
        reply = parse_reply(text, f"call_{len(messages)}_")
        return PolicyTurn(
            content=reply.content,
            tool_calls=reply.tool_calls,
            format_error=reply.format_error,
            prompt_tokens=len(context),
            completion_tokens=len(generated.ids),
        )

    def trajectory(self) -> TokenTrajectory | None:
        return self._trajectory
