"""``GRPOTrainer``: SFT warm start, GRPO steps (rollouts through the arena's episode loop), checkpoints.

The RL math is verl's: ``compute_grpo_outcome_advantage`` for advantages, the ``vanilla`` policy loss
(clip-higher through ``clip_ratio_low`` / ``clip_ratio_high``), ``kl_penalty`` against a frozen reference
model and ``agg_loss``. The old log-probs are the rollout's own sampling log-probs (recorded by the HF
policy from the same weights, so the first mini-batch's ratio is 1).
"""

from __future__ import annotations

import copy
import json
import random
import shutil
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import AutoTokenizer, DynamicCache, PreTrainedModel
from verl.trainer.ppo.core_algos import (
    agg_loss,
    compute_grpo_outcome_advantage,
    get_policy_loss_fn,
    kl_penalty,
)
from verl.workers.config import ActorConfig

from arena.policies.attention import load_causal_lm
from arena.policies.base import TokenTrajectory
from arena.policies.hf import HFPolicy, HFPolicyConfig, encode_conversation
from arena.policies.precision import autocast
from arena.rollout.episode import EpisodeConfig, SessionProvider, episodes
from arena.rollout.records import EpisodeRecord
from task_synth.model import Task
from trainers.local.config import StepMetrics, TrainerConfig
from trainers.local.sft import SFTExample, first_turn

STATE_FILE, CONFIG_FILE, REF_DIR = "trainer_state.pt", "trainer_config.json", "ref"


@dataclass(frozen=True)
class Rollout:
    """One scored episode as the update sees it: its tokens, its reward and its GRPO group (the task)."""

    trajectory: TokenTrajectory
    reward: float
    group: str


def scored_rollouts(records: Sequence[EpisodeRecord]) -> tuple[list[Rollout], int]:
    """The batch of a step: episodes with a verdict and generated tokens, reward 1.0 if the verifier
    passed them. Episodes with an infrastructure error are dropped (and counted), never scored 0."""
    batch, dropped = [], 0
    for record in records:
        if record.infra_error is not None or record.passed is None:
            dropped += 1
        elif record.trajectory is not None and any(record.trajectory.response_mask):
            batch.append(Rollout(record.trajectory, float(record.passed), record.task_id))
    return batch, dropped


class GRPOTrainer:
    """A Hugging Face causal LM, its optimizer and the policy that plays its episodes."""

    def __init__(self, model_dir: str | Path, config: TrainerConfig | None = None) -> None:
        self.config = config = config or TrainerConfig()
        torch.manual_seed(config.seed)
        self.model_dir = str(model_dir)
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        model = load_causal_lm(model_dir, config.device)
        self.model: PreTrainedModel = with_lora(model, config) if config.lora_rank else model
        if config.train_top_layers and not config.lora_rank:
            freeze_below_top(self.model, config.train_top_layers)
        self.ref_model: PreTrainedModel | None = None
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(trainable, lr=config.lr, weight_decay=0.0)
        self.step = 0
        self.policy = HFPolicy(
            self.model,
            self.tokenizer,
            HFPolicyConfig(
                path=self.model_dir,
                device=config.device,
                temperature=config.temperature,
                top_p=config.top_p,
                max_new_tokens=config.max_new_tokens,
                context_limit=config.context_limit,
                max_batch=config.concurrency,
                seed=config.seed,
                precision=config.precision,
                tool_result_chars=config.tool_result_chars,
            ),
        )
        self._actor = ActorConfig(
            strategy="local",
            rollout_n=config.n_rollouts,
            clip_ratio_low=config.clip_ratio_low,
            clip_ratio_high=config.clip_ratio_high,
            loss_agg_mode=config.loss_agg_mode,
            ppo_mini_batch_size=config.tasks_per_step,
            ppo_micro_batch_size_per_gpu=1,
        )
        self._policy_loss = get_policy_loss_fn("vanilla")

    # -- SFT ------------------------------------------------------------------------------------------
    def sft(self, examples: Sequence[SFTExample], *, tokens: int | None = None) -> dict[str, Any]:
        """Imitate the assistant turns of ``examples`` (token-mean cross-entropy): first
        ``config.sft_first_turn_epochs`` epochs on each conversation cut after its first assistant turn,
        then ``config.epochs`` epochs on the whole conversations. Conversations longer than the context
        limit are left out and counted. ``tokens``: instead of the epochs, whole-conversation passes until
        no example fits in the tokens left (below it by less than the shortest example), for equal compute
        on different data."""
        config, started = self.config, time.perf_counter()
        encoded = [
            encode_conversation(self.tokenizer, e.messages, e.tools, config.tool_result_chars)
            for e in examples
        ]
        kept = [t for t in encoded if len(t.prompt_ids) + len(t.response_ids) <= config.context_limit]
        first_turns = [first_turn(t) for t in kept] if config.sft_first_turn_epochs else []
        order = random.Random(config.seed)
        self.model.train()
        if tokens is None:
            first_losses, first_tokens = self._sft_epochs(first_turns, config.sft_first_turn_epochs, order)
            losses, seen = self._sft_epochs(kept, config.epochs, order)
        else:
            first_losses, first_tokens = [], 0
            losses, seen = self._sft_epochs(kept, 0, order, budget=tokens)
        self._set_lr(config.lr)
        elapsed = time.perf_counter() - started
        return {
            "examples": len(kept),
            "too_long": len(encoded) - len(kept),
            "first_turn_epoch_loss": first_losses,
            "epoch_loss": losses,
            "tokens": first_tokens + seen,
            "tokens_per_s": (first_tokens + seen) / elapsed if elapsed else 0.0,
            "s": elapsed,
        }

    def _sft_epochs(
        self,
        trajectories: list[TokenTrajectory],
        epochs: int,
        order: random.Random,
        budget: int | None = None,
    ) -> tuple[list[float], int]:
        """``epochs`` passes over ``trajectories`` in length-grouped batches (with a ``budget``: passes
        until no example fits in the tokens left, each batch keeping the examples that fit, so the total
        stays within the shortest example below the budget): each pass's mean loss, and the tokens seen.
        The learning rate follows ``sft_lr_decay`` over the planned tokens (the budget, or every pass)."""
        losses, tokens = [], 0
        planned = budget if budget is not None else epochs * sum(_length(t) for t in trajectories)
        while trajectories and (len(losses) < epochs or budget is not None):
            epoch = []
            for batch in _length_grouped(trajectories, self.config.sft_batch_size, order):
                if budget is not None and not (batch := _within(batch, budget - tokens)):
                    continue
                self._set_lr(self._sft_lr(tokens, planned))
                epoch.append(self._sft_update(batch))
                tokens += sum(_length(t) for t in batch)
            if budget is not None and not epoch:
                break
            losses.append(float(np.mean(epoch)) if epoch else float("nan"))
        return losses, tokens

    def _sft_lr(self, seen: int, planned: int) -> float:
        """The SFT learning rate after ``seen`` of ``planned`` tokens: ``sft_lr``, or with ``linear``
        decay ``sft_lr`` times the share of the planned tokens still to come."""
        if self.config.sft_lr_decay == "constant" or planned <= 0:
            return self.config.sft_lr
        return self.config.sft_lr * max(1.0 - seen / planned, 0.0)

    def _set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def _sft_update(self, batch: list[TokenTrajectory]) -> float:
        total = sum(sum(t.response_mask) for t in batch)
        self.optimizer.zero_grad()
        loss_sum = 0.0
        for rows in self._micro_batches(batch):
            logprobs, mask = self._logprobs(self.model, [batch[i] for i in rows], 1.0)
            nll = -(logprobs * mask).sum() / total
            nll.backward()
            loss_sum += nll.item()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.max_grad_norm)
        self.optimizer.step()
        self.policy.weights_changed()
        return loss_sum

    # -- GRPO -----------------------------------------------------------------------------------------
    async def rollout(
        self, sessions: SessionProvider, tasks: Sequence[Task], episode_config: EpisodeConfig
    ) -> list[EpisodeRecord]:
        """``n_rollouts`` episodes of each task, played by the current weights through the episode loop."""
        items = [(task, repeat) for task in tasks for repeat in range(self.config.n_rollouts)]
        return [
            record
            async for record in episodes(
                sessions, items, self.policy, episode_config, self.config.concurrency
            )
        ]

    async def grpo_step(
        self, sessions: SessionProvider, tasks: Sequence[Task], episode_config: EpisodeConfig
    ) -> StepMetrics:
        """Roll out ``tasks`` and update on the scored episodes; the records are in ``metrics.records``."""
        started = time.perf_counter()
        records = await self.rollout(sessions, tasks, episode_config)
        rollout_s = time.perf_counter() - started
        batch, dropped = scored_rollouts(records)
        started = time.perf_counter()
        update = self.update(batch)
        self.step += 1
        return StepMetrics(
            step=self.step,
            episodes=len(records),
            infra_dropped=dropped,
            batch_episodes=len(batch),
            success=float(np.mean([r.reward for r in batch])) if batch else 0.0,
            rollout_s=rollout_s,
            update_s=time.perf_counter() - started,
            tool_wait_s=sum(sum(t.tool_wait_s for t in r.turns) for r in records),
            episode_wall_s=sum(r.wall_s for r in records),
            records=records,
            **update,
        )

    def update(self, batch: Sequence[Rollout]) -> dict[str, Any]:
        """One GRPO update on ``batch`` (``mini_batches`` optimizer steps): GRPO advantages per group,
        the clipped policy loss and the KL penalty, all from verl's ``core_algos``."""
        config = self.config
        empty = {"pg_loss": 0.0, "kl": 0.0, "clipfrac": 0.0, "grad_norm": 0.0}
        if not batch:
            return {**empty, "response_tokens": 0, "update_tokens": 0}
        width = max(len(r.trajectory.response_ids) for r in batch)
        mask = _padded([r.trajectory.response_mask for r in batch], width, 0).float()
        old = _padded([r.trajectory.response_logprobs for r in batch], width, 0.0).float()
        rewards = torch.zeros_like(mask)
        for row, rollout in enumerate(batch):
            rewards[row, int(mask[row].nonzero().max())] = rollout.reward
        groups = np.array([r.group for r in batch], dtype=object)
        advantages, _ = compute_grpo_outcome_advantage(rewards, mask, groups)
        if config.kl_coef > 0 and self.ref_model is None:
            self.ref_model = _frozen(self.model)
        trajectories = [r.trajectory for r in batch]
        ref = self._reference_logprobs(trajectories, width) if config.kl_coef > 0 else None
        rows = list(range(len(batch)))
        random.Random(config.seed + self.step).shuffle(rows)
        metrics: dict[str, list[float]] = {key: [] for key in empty}
        self.model.train()
        for part in np.array_split(np.array(rows), min(config.mini_batches, len(rows))):
            for key, value in self._policy_update(
                part.tolist(), trajectories, mask, old, advantages, ref
            ).items():
                metrics[key].append(value)
        return {
            **{key: float(np.mean(values)) for key, values in metrics.items()},
            "response_tokens": int(mask.sum()),
            "update_tokens": sum(len(t.prompt_ids) + len(t.response_ids) for t in trajectories),
        }

    def _policy_update(
        self,
        rows: list[int],
        trajectories: list[TokenTrajectory],
        mask: torch.Tensor,
        old: torch.Tensor,
        advantages: torch.Tensor,
        ref: torch.Tensor | None,
    ) -> dict[str, float]:
        config = self.config
        total = float(mask[rows].sum())
        self.optimizer.zero_grad()
        pg_sum = kl_sum = clip_sum = 0.0
        for micro in self._micro_batches([trajectories[i] for i in rows]):
            index = [rows[i] for i in micro]
            logprobs, _ = self._logprobs(self.model, [trajectories[i] for i in index], config.temperature)
            width = logprobs.shape[1]
            micro_mask = mask[index, :width]
            share = float(micro_mask.sum()) / total
            pg_loss, pg_metrics = self._policy_loss(
                old_log_prob=old[index, :width],
                log_prob=logprobs,
                advantages=advantages[index, :width],
                response_mask=micro_mask,
                loss_agg_mode=config.loss_agg_mode,
                config=self._actor,
            )
            loss = pg_loss
            if ref is not None:
                kl = agg_loss(
                    kl_penalty(logprobs, ref[index, :width], config.kl_type), micro_mask, "token-mean"
                )
                loss = loss + config.kl_coef * kl
                kl_sum += kl.item() * share
            (loss * share).backward()
            pg_sum += pg_loss.item() * share
            clip_sum += pg_metrics["actor/pg_clipfrac"] * share
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), config.max_grad_norm)
        self.optimizer.step()
        self.policy.weights_changed()
        return {"pg_loss": pg_sum, "kl": kl_sum, "clipfrac": clip_sum, "grad_norm": float(norm)}

    @torch.no_grad()
    def _reference_logprobs(self, trajectories: list[TokenTrajectory], width: int) -> torch.Tensor:
        assert self.ref_model is not None
        out = torch.zeros((len(trajectories), width))
        for micro in self._micro_batches(trajectories):
            logprobs, _ = self._logprobs(
                self.ref_model, [trajectories[i] for i in micro], self.config.temperature
            )
            out[micro, : logprobs.shape[1]] = logprobs
        return out

    def _micro_batches(self, trajectories: Sequence[TokenTrajectory]) -> Iterator[list[int]]:
        """Row indices in groups whose padded size stays within ``micro_batch_tokens``."""
        group: list[int] = []
        longest = 0
        for index, trajectory in enumerate(trajectories):
            length = len(trajectory.prompt_ids) + len(trajectory.response_ids)
            if group and max(longest, length) * (len(group) + 1) > self.config.micro_batch_tokens:
                yield group
                group, longest = [], 0
            group.append(index)
            longest = max(longest, length)
        if group:
            yield group

    def _logprobs(
        self, model: PreTrainedModel, trajectories: list[TokenTrajectory], temperature: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probs of the generated (mask 1) response tokens under ``model`` (logits / temperature, as
        sampled), 0 elsewhere, padded to the longest response; and the response mask. The prompt prefix
        the rows share (an environment's system prompt and tool list; a GRPO group's whole prompt) goes
        through the model once; the output head runs only where a generated token is predicted."""
        device = self.config.device
        sequences = [t.prompt_ids + t.response_ids for t in trajectories]
        with autocast(self.config.precision, device):
            hidden = shared_prefix_hidden(
                model.get_decoder(), sequences, min(len(t.prompt_ids) for t in trajectories), device
            )
        ids = _padded(sequences, hidden.shape[1], self.tokenizer.pad_token_id or 0).to(device)
        response = max(len(t.response_ids) for t in trajectories)
        mask = _padded([t.response_mask for t in trajectories], response, 0).to(device)
        rows, cols = mask.nonzero(as_tuple=True)
        starts = torch.tensor([len(t.prompt_ids) for t in trajectories], device=device)
        positions = starts[rows] + cols
        logits = model.get_output_embeddings()(hidden[rows, positions - 1].float()).float() / temperature
        chosen = torch.log_softmax(logits, dim=-1).gather(-1, ids[rows, positions].unsqueeze(-1)).squeeze(-1)
        out = torch.zeros((len(trajectories), response), device=device).index_put((rows, cols), chosen)
        return out.cpu(), mask.float().cpu()

    # -- checkpoints ----------------------------------------------------------------------------------
    def save(self, directory: str | Path) -> Path:
        """A Hugging Face checkpoint (model, tokenizer) plus the optimizer, step, RNG and reference model,
        written to a temporary folder and renamed into place (a crash never leaves half a checkpoint).
        LoRA adapters are merged into the saved weights; a trainer resumed from them starts fresh adapters
        and a fresh optimizer on the merged weights."""
        target = Path(directory)
        scratch = target.with_name(target.name + ".partial")
        shutil.rmtree(scratch, ignore_errors=True)
        merged(self.model).save_pretrained(scratch)
        self.tokenizer.save_pretrained(scratch)
        if self.ref_model is not None:
            merged(self.ref_model).save_pretrained(scratch / REF_DIR)
        optimizer = None if self.config.lora_rank else self.optimizer.state_dict()
        state = {"optimizer": optimizer, "step": self.step, "rng": torch.get_rng_state()}
        torch.save(state, scratch / STATE_FILE)
        (scratch / CONFIG_FILE).write_text(json.dumps(asdict(self.config), indent=2))
        shutil.rmtree(target, ignore_errors=True)
        scratch.rename(target)
        return target

    @classmethod
    def resume(cls, directory: str | Path, config: TrainerConfig | None = None) -> GRPOTrainer:
        """The trainer saved in ``directory`` (its own config unless ``config`` is given)."""
        directory = Path(directory)
        saved = TrainerConfig(**json.loads((directory / CONFIG_FILE).read_text()))
        trainer = cls(directory, config or saved)
        state = torch.load(directory / STATE_FILE, weights_only=False)
        if state["optimizer"] is not None and not trainer.config.lora_rank:
            trainer.optimizer.load_state_dict(state["optimizer"])
        trainer.step = state["step"]
        torch.set_rng_state(state["rng"])
        if (directory / REF_DIR).is_dir():
            ref = load_causal_lm(directory / REF_DIR, trainer.config.device)
            trainer.ref_model = _frozen(ref)
        return trainer


PROMPT_KEY_TOKENS = 256
"""Leading prompt tokens that tell apart the environments (the system prompt and the first tool lines)."""


def _length(trajectory: TokenTrajectory) -> int:
    return len(trajectory.prompt_ids) + len(trajectory.response_ids)


def _within(batch: list[TokenTrajectory], room: int) -> list[TokenTrajectory]:
    """The examples of ``batch``, in order, that fit together in ``room`` tokens."""
    kept: list[TokenTrajectory] = []
    for trajectory in batch:
        if _length(trajectory) <= room:
            kept.append(trajectory)
            room -= _length(trajectory)
    return kept


def _length_grouped(
    trajectories: list[TokenTrajectory], size: int, order: random.Random
) -> list[list[TokenTrajectory]]:
    """Shuffled batches of ``size``, each drawn from a window of examples sorted by environment (their
    leading prompt tokens, so a batch shares its system prompt and tool list: one pass of the shared
    prefix) and then by length (less padding)."""
    shuffled = order.sample(trajectories, len(trajectories))
    window = size * 8
    batches = []
    for start in range(0, len(shuffled), window):
        chunk = sorted(
            shuffled[start : start + window],
            key=lambda t: (t.prompt_ids[:PROMPT_KEY_TOKENS], len(t.prompt_ids) + len(t.response_ids)),
        )
        batches += [chunk[i : i + size] for i in range(0, len(chunk), size)]
    order.shuffle(batches)
    return batches


def shared_prefix_hidden(
    decoder: torch.nn.Module, sequences: list[list[int]], max_prefix: int, device: str
) -> torch.Tensor:
    """The decoder's last hidden states of right-padded ``sequences``: the longest prefix they all share
    (at most ``max_prefix`` tokens) is run once and its keys and values broadcast to every row (gradients
    flow back through it), then each row's remaining tokens."""
    width = max(len(s) for s in sequences)
    shared = 0
    limit = min(max_prefix, min(len(s) for s in sequences) - 1)
    while shared < limit and all(s[shared] == sequences[0][shared] for s in sequences):
        shared += 1
    if len(sequences) == 1 or shared < 2:
        ids = _padded(sequences, width, 0).to(device)
        attention = _padded([[1] * len(s) for s in sequences], width, 0).to(device)
        return decoder(input_ids=ids, attention_mask=attention).last_hidden_state
    prefix = decoder(input_ids=torch.tensor([sequences[0][:shared]], device=device), use_cache=True)
    batch = len(sequences)
    cache = DynamicCache(
        ddp_cache_data=[
            (layer.keys.expand(batch, -1, -1, -1), layer.values.expand(batch, -1, -1, -1))
            for layer in prefix.past_key_values.layers
        ]
    )
    rest = [s[shared:] for s in sequences]
    ids = _padded(rest, width - shared, 0).to(device)
    attention = _padded([[1] * len(s) for s in sequences], width, 0).to(device)
    positions = torch.arange(shared, width, device=device).expand(batch, -1)
    tail = decoder(
        input_ids=ids, attention_mask=attention, position_ids=positions, past_key_values=cache, use_cache=True
    ).last_hidden_state
    return torch.cat([prefix.last_hidden_state.expand(batch, -1, -1), tail], dim=1)


def with_lora(model: PreTrainedModel, config: TrainerConfig) -> PreTrainedModel:
    """``model`` with LoRA adapters (``peft``) of ``config.lora_rank`` on every linear layer; only the
    adapters train."""
    from peft import LoraConfig, get_peft_model

    layers = model.config.num_hidden_layers
    top = config.train_top_layers or layers
    decoder_linears = {
        name.rsplit(".", 1)[-1]
        for name, module in model.get_decoder().layers.named_modules()
        if isinstance(module, torch.nn.Linear)
    }
    lora = LoraConfig(
        r=config.lora_rank,
        lora_alpha=config.lora_alpha,
        lora_dropout=0.0,
        target_modules=sorted(decoder_linears),  # peft >= 0.21 refuses "all-linear" with layers_to_transform
        layers_to_transform=list(range(layers - top, layers)),
    )
    return get_peft_model(model, lora)


def freeze_below_top(model: PreTrainedModel, top: int) -> None:
    """Train only the top ``top`` decoder layers and the final norm: the embeddings (tied to the output
    head) and every lower layer are frozen, so neither the backward pass nor the optimizer visits them."""
    model.requires_grad_(False)
    decoder = model.get_decoder()
    for layer in decoder.layers[-top:]:
        layer.requires_grad_(True)
    decoder.norm.requires_grad_(True)


def merged(model: PreTrainedModel) -> PreTrainedModel:
    """``model`` as plain weights: a LoRA model's adapters merged into a copy, anything else as it is."""
    from peft import PeftModel

    if isinstance(model, PeftModel):
        return copy.deepcopy(model).merge_and_unload()
    return model


def _frozen(model: PreTrainedModel) -> PreTrainedModel:
    frozen = copy.deepcopy(model).eval()
    frozen.requires_grad_(False)
    return frozen


def _padded(rows: Sequence[Sequence[float]], width: int, value: float) -> torch.Tensor:
    out = torch.full((len(rows), width), value, dtype=torch.float if isinstance(value, float) else torch.long)
    for index, row in enumerate(rows):
        out[index, : len(row)] = torch.tensor(row, dtype=out.dtype)
    return out
