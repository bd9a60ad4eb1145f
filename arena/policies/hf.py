"""A local Hugging Face causal LM as a policy (``transformers``, CPU or CUDA).

Messages and tools are rendered with the tokenizer's chat template, incrementally: each episode keeps a
token buffer (the first prompt, then every later token), appends only the tokens of the messages added
since its last turn (mask 0) and generates the next turn (mask 1, with each token's sampling log-prob).
The buffer is the ``TokenTrajectory`` a trainer consumes (verl's ``AgentLoopOutput`` layout). Tool calls
are parsed from the generated text (``toolcall_parsing``).

Generation runs in a worker thread so the event loop keeps serving tools; requests of concurrent episodes
that arrive while the model is busy are generated together as one left-padded batch.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from arena.policies.base import PolicyRefused, PolicyTurn, PolicyUnavailable, TokenTrajectory
from arena.policies.toolcall_parsing import parse_reply
from task_synth.model import Task


@dataclass(frozen=True)
class HFPolicyConfig:
    """Where the model is, where it runs, and how it samples. ``temperature`` 0 is greedy; a conversation
    longer than ``context_limit`` tokens is refused; at most ``max_batch`` turns are generated together."""

    path: str = ""
    device: str = "cpu"
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 128
    context_limit: int = 4096
    max_batch: int = 16
    seed: int = 0


@dataclass
class Generated:
    """One generated turn: its token ids, their sampling log-probs, and whether it ended with EOS."""

    ids: list[int]
    logprobs: list[float]
    stopped: bool


class ChatRenderer:
    """The chat template applied incrementally: the tokens that a conversation adds to an earlier one."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, tools: list[dict[str, Any]]) -> None:
        self.tokenizer, self.tools = tokenizer, tools

    def text(self, messages: list[dict[str, Any]], generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            messages, tools=self.tools or None, tokenize=False, add_generation_prompt=generation_prompt
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
    tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
) -> TokenTrajectory:
    """A whole recorded conversation as the trajectory a policy would have built: the prompt up to the
    first assistant turn, then assistant turns with mask 1 and everything else with mask 0."""
    renderer = ChatRenderer(tokenizer, tools)
    first = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), len(messages))
    trajectory = TokenTrajectory(renderer.encode(renderer.text(messages[:first], True)))
    for index in range(first, len(messages)):
        if messages[index]["role"] == "assistant":
            ids = renderer.added(messages[: index + 1], index, True, False)
            trajectory.extend(ids, generated=True)
        else:
            prompt = index + 1 < len(messages) and messages[index + 1]["role"] == "assistant"
            ids = renderer.added(messages[: index + 1], index, False, prompt)
            trajectory.extend(ids, generated=False)
    return trajectory


class HFPolicy:
    """A causal LM playing episodes; ``model`` and ``tokenizer`` are shared with a trainer."""

    def __init__(
        self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, config: HFPolicyConfig
    ) -> None:
        if tokenizer.eos_token_id is None:
            raise ValueError("the tokenizer has no eos_token: generation could never end")
        self.model, self.tokenizer, self.config = model, tokenizer, config
        self.name = f"hf:{config.path or model.name_or_path}"
        self._pending: list[tuple[list[int], int, asyncio.Future[Generated]]] = []
        self._worker: asyncio.Task[None] | None = None
        torch.manual_seed(config.seed)  # sampling draws from torch's global generator
        self.batches: list[int] = []  # sizes of the generated batches (throughput diagnostics)

    @classmethod
    def load(cls, config: HFPolicyConfig) -> HFPolicy:
        """Load the model and tokenizer at ``config.path`` (a local Hugging Face folder)."""
        tokenizer = AutoTokenizer.from_pretrained(config.path)
        model = AutoModelForCausalLM.from_pretrained(config.path).to(config.device)
        return cls(model, tokenizer, config)

    def start(self, task: Task, tools: list[dict[str, Any]]) -> HFEpisode:
        return HFEpisode(self, tools)

    async def generate(self, context: list[int], max_new_tokens: int) -> Generated:
        """The continuation of ``context``, generated in a batch with any other waiting request."""
        future: asyncio.Future[Generated] = asyncio.get_running_loop().create_future()
        self._pending.append((context, max_new_tokens, future))
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        while self._pending:
            batch, self._pending = (
                self._pending[: self.config.max_batch],
                self._pending[self.config.max_batch :],
            )
            try:
                results = await asyncio.to_thread(self._generate, [(c, n) for c, n, _ in batch])
            except Exception as exc:  # the model crashed (out of memory, bad device): not the task's fault
                for _, _, future in batch:
                    if not future.done():
                        future.set_exception(PolicyUnavailable(f"local model failed: {exc!r}"))
                continue
            for (_, _, future), result in zip(batch, results, strict=True):
                if not future.done():
                    future.set_result(result)

    @torch.inference_mode()
    def _generate(self, requests: list[tuple[list[int], int]]) -> list[Generated]:
        config, pad = self.config, self.tokenizer.pad_token_id
        pad = self.tokenizer.eos_token_id if pad is None else pad
        width = max(len(context) for context, _ in requests)
        ids = torch.full((len(requests), width), pad, dtype=torch.long)
        mask = torch.zeros((len(requests), width), dtype=torch.long)
        for row, (context, _) in enumerate(requests):
            ids[row, width - len(context) :] = torch.tensor(context)
            mask[row, width - len(context) :] = 1
        sample = config.temperature > 0
        self.model.eval()
        self.batches.append(len(requests))
        out = self.model.generate(
            input_ids=ids.to(config.device),
            attention_mask=mask.to(config.device),
            do_sample=sample,
            temperature=config.temperature if sample else None,
            top_p=config.top_p if sample else None,
            top_k=None,
            max_new_tokens=max(n for _, n in requests),
            output_logits=True,
            return_dict_in_generate=True,
            pad_token_id=pad,
            eos_token_id=self.tokenizer.eos_token_id,
        )
        tokens = out.sequences[:, width:].cpu()
        logits = torch.stack(out.logits, dim=1).float().cpu()
        logprobs = torch.log_softmax(logits / (config.temperature if sample else 1.0), dim=-1)
        chosen = logprobs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
        return [self._cut(tokens[row], chosen[row], limit) for row, (_, limit) in enumerate(requests)]

    def _cut(self, tokens: torch.Tensor, logprobs: torch.Tensor, limit: int) -> Generated:
        ids, eos = tokens.tolist()[:limit], self.tokenizer.eos_token_id
        end = ids.index(eos) + 1 if eos in ids else len(ids)
        return Generated(ids[:end], logprobs.tolist()[:end], stopped=eos in ids)

    async def aclose(self) -> None:
        if self._worker is not None:
            await asyncio.gather(self._worker, return_exceptions=True)


class HFEpisode:
    """One episode's token buffer and turn count."""

    def __init__(self, policy: HFPolicy, tools: list[dict[str, Any]]) -> None:
        self.policy = policy
        self.renderer = ChatRenderer(policy.tokenizer, tools)
        self._trajectory: TokenTrajectory | None = None
        self._seen = 0  # messages already in the buffer (the last one: this policy's own turn)

    async def act(self, messages: list[dict[str, Any]]) -> PolicyTurn:
        config, trajectory = self.policy.config, self._trajectory
        if trajectory is None:
            trajectory = self._trajectory = TokenTrajectory(
                self.renderer.encode(self.renderer.text(messages, True))
            )
        else:
            trajectory.extend(self.renderer.added(messages, self._seen, False, True), generated=False)
        context = trajectory.prompt_ids + trajectory.response_ids
        budget = min(config.max_new_tokens, config.context_limit - len(context))
        if budget <= 0:
            raise PolicyRefused(
                f"the conversation has {len(context)} tokens; the context limit is {config.context_limit}"
            )
        generated = await self.policy.generate(context, budget)
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
