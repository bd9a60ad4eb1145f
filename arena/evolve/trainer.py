"""What the loop needs of a trainer, whichever it is (``trainers.local`` on one machine, verl on a
cluster): the loop finds it by the ``factory`` of ``conf/trainer/*.yaml`` and never imports it directly."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from arena.policies.base import Policy
from arena.rollout.episode import EpisodeConfig, SessionProvider
from task_synth.model import Task

Conversation = tuple[list[dict[str, Any]], list[dict[str, Any]]]
"""An SFT example: OpenAI-format messages (ending with the assistant's final reply) and the tools."""


class RoundTrainer(Protocol):
    """A policy being trained round after round."""

    def policy(self, *, greedy: bool) -> Policy:
        """The current policy (greedy for evaluation, sampling for rollouts)."""
        ...

    def warm_start(self, examples: list[Conversation], tokens: int | None = None) -> dict[str, float]:
        """SFT on reference conversations (on ``tokens`` tokens when given, whatever their number);
        returns its metrics (loss, ``tokens`` trained on...)."""
        ...

    async def train_round(
        self,
        sessions: SessionProvider,
        tasks: list[Task],
        config: EpisodeConfig,
        checkpoint_dir: Path,
        progress: Callable[[str], None],
    ) -> dict[str, float]:
        """One round of RL on ``tasks``; saves a checkpoint in ``checkpoint_dir`` after every step and
        resumes from the latest one there, so a killed round repeats no finished step. Its metrics
        include ``update_tokens`` (tokens the updates trained on) when the trainer counts them."""
        ...

    def save(self, directory: Path) -> None:
        """A Hugging Face checkpoint (``save_pretrained``) of the current policy, with trainer state."""
        ...


TrainerFactory = Callable[[dict[str, Any], dict[str, Any], Path | None], RoundTrainer]


def make_trainer(trainer: dict[str, Any], policy: dict[str, Any], checkpoint: Path | None) -> RoundTrainer:
    """Build the trainer ``trainer["factory"]`` names (``module:function``) for the model ``policy``
    describes, from ``checkpoint`` when resuming."""
    module_name, _, function = str(trainer["factory"]).partition(":")
    factory: TrainerFactory = getattr(importlib.import_module(module_name), function)
    return factory(trainer, policy, checkpoint)
