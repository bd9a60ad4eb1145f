"""The local trainer as ``arena evolve``'s round trainer (``conf/trainer/local.yaml`` names this factory)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from arena.policies.hf import HFPolicy
from arena.policies.precision import resolve_precision
from arena.rollout.episode import EpisodeConfig, SessionProvider
from task_synth.model import Task
from trainers.local.config import TrainerConfig
from trainers.local.sft import SFTExample
from trainers.local.trainer import GRPOTrainer

STEP_PREFIX = "step"


def trainer_config(trainer: dict[str, Any], policy: dict[str, Any]) -> TrainerConfig:
    """``TrainerConfig`` from the trainer's keys, with the policy's sampling settings (temperature,
    top_p, max_new_tokens, context, device) and its cut of tool results."""
    names = {f.name for f in dataclasses.fields(TrainerConfig)}
    values = {k: v for k, v in trainer.items() if k in names}
    sampling = {
        "temperature": policy.get("temperature"),
        "top_p": policy.get("top_p"),
        "max_new_tokens": policy.get("max_new_tokens"),
        "context_limit": policy.get("context_tokens"),
        "tool_result_chars": policy.get("tool_result_chars"),
    }
    values |= {k: v for k, v in sampling.items() if v is not None}
    device = policy.get("device", "auto")
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    precision = resolve_precision(policy.get("precision") or "auto", device)
    return TrainerConfig(**(values | {"device": device, "precision": precision}))


def current_policy(trainer: GRPOTrainer, *, greedy: bool) -> HFPolicy:
    """A policy playing ``trainer``'s current weights (greedy for evaluation, else its sampling)."""
    config = trainer.policy.config
    if greedy:
        config = dataclasses.replace(config, temperature=0.0)
    return HFPolicy(trainer.model, trainer.tokenizer, config)


def sft_on(
    trainer: GRPOTrainer,
    examples: list[tuple[list[dict[str, Any]], list[dict[str, Any]]]],
    tokens: int | None = None,
) -> dict[str, float]:
    """SFT ``trainer`` on (messages, tools) conversations (on ``tokens`` tokens when given); its numeric
    metrics and the last epoch's loss."""
    metrics = trainer.sft([SFTExample(messages, tools) for messages, tools in examples], tokens=tokens)
    losses = metrics.get("epoch_loss") or []
    return {k: float(v) for k, v in metrics.items() if isinstance(v, int | float)} | {
        "final_epoch_loss": float(losses[-1]) if losses else float("nan")
    }


class LocalRoundTrainer:
    """``GRPOTrainer`` behind the loop's ``RoundTrainer`` protocol: ``steps_per_round`` GRPO steps per
    round, each on the next ``tasks_per_step`` tasks, a checkpoint after each."""

    def __init__(self, trainer: GRPOTrainer, steps_per_round: int) -> None:
        self.trainer, self.steps_per_round = trainer, steps_per_round

    def policy(self, *, greedy: bool) -> HFPolicy:
        return current_policy(self.trainer, greedy=greedy)

    def warm_start(
        self, examples: list[tuple[list[dict[str, Any]], list[dict[str, Any]]]], tokens: int | None = None
    ) -> dict[str, float]:
        return sft_on(self.trainer, examples, tokens)

    async def train_round(
        self,
        sessions: SessionProvider,
        tasks: list[Task],
        config: EpisodeConfig,
        checkpoint_dir: Path,
        progress: Callable[[str], None],
    ) -> dict[str, float]:
        done = sorted(
            int(p.name.removeprefix(STEP_PREFIX)) for p in checkpoint_dir.glob(f"{STEP_PREFIX}*[0-9]")
        )
        if done:  # resume the round from its latest finished step
            self.trainer = GRPOTrainer.resume(
                checkpoint_dir / f"{STEP_PREFIX}{done[-1]}", self.trainer.config
            )
            progress(f"resuming at GRPO step {done[-1] + 1} of {self.steps_per_round}")
        per_step = self.trainer.config.tasks_per_step
        successes, losses, update_tokens = [], [], 0
        for step in range(len(done), self.steps_per_round):
            batch = [tasks[(step * per_step + i) % len(tasks)] for i in range(min(per_step, len(tasks)))]
            metrics = await self.trainer.grpo_step(sessions, batch, config)
            self.trainer.save(checkpoint_dir / f"{STEP_PREFIX}{step}")
            successes.append(metrics.success)
            losses.append(metrics.pg_loss)
            update_tokens += metrics.update_tokens
            progress(
                f"GRPO step {step + 1}/{self.steps_per_round}: {metrics.batch_episodes} episodes, "
                f"success {metrics.success:.0%}, pg_loss {metrics.pg_loss:.4f}, kl {metrics.kl:.4f}, "
                f"{metrics.rollout_s:.1f}s rollout + {metrics.update_s:.1f}s update"
            )
        return {
            "steps": float(self.steps_per_round),
            "rollout_success_mean": sum(successes) / len(successes) if successes else 0.0,
            "pg_loss_last": losses[-1] if losses else 0.0,
            "update_tokens": float(update_tokens),
        }

    def save(self, directory: Path) -> None:
        self.trainer.save(directory)


def make_trainer(
    trainer: dict[str, Any], policy: dict[str, Any], checkpoint: Path | None
) -> LocalRoundTrainer:
    """The round trainer for the model at ``policy["path"]``, or resumed from ``checkpoint``."""
    config = trainer_config(trainer, policy)
    steps = int(trainer.get("steps_per_round", 4))
    if checkpoint is not None:
        return LocalRoundTrainer(GRPOTrainer.resume(checkpoint, config), steps)
    return LocalRoundTrainer(GRPOTrainer(policy["path"], config), steps)
