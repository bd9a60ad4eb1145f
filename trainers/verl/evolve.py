"""verl as ``arena evolve``'s round trainer (``arena evolve trainer=verl``; ``conf/trainer/verl.yaml``).

Each round: the targeted tasks are exported to parquet, the round's verl job (verl's ``ppo_trainer`` with
the arena's defaults and the evolve overrides) trains the current model for ``steps_per_round`` GRPO
steps on the Ray cluster with the ``arena_agent`` loop, and the last step's Hugging Face export
(``.../global_step_N/actor/huggingface``, verl's ``hf_model`` checkpoint content) becomes the current
model. verl resumes a killed round from its latest checkpoint in the round's directory
(``trainer.resume_mode=auto``). The SFT warm start and the greedy evaluation policy between rounds run
on the driver with the local trainer's code (``trainers.local``): verl's SFT trainer is not wired here.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from arena.evolve.settings import EvolveError
from arena.policies.hf import HFPolicy
from arena.rollout.episode import EpisodeConfig, SessionProvider
from task_synth.model import Task
from trainers.local.evolve import current_policy, sft_on, trainer_config
from trainers.local.trainer import GRPOTrainer
from trainers.verl.dataset import export
from trainers.verl.launch import verl_config

ARENA_KEYS = ("name", "factory", "steps_per_round", "verl")
LATEST = "latest_checkpointed_iteration.txt"


def round_job(
    trainer: dict[str, Any],
    model_dir: Path,
    data_dir: Path,
    checkpoint_dir: Path,
    episode: EpisodeConfig,
    envs: list[str],
) -> DictConfig:
    """The verl job of one round: the composed verl sections (``trainer["verl"]``) with the round's
    model, data, checkpoint directory, step count and episode limits."""
    verl_trainer = {k: v for k, v in trainer.items() if k not in ARENA_KEYS}
    steps = int(trainer.get("steps_per_round", 4))
    config = OmegaConf.create({**trainer["verl"], "trainer": verl_trainer})
    overrides = {
        "actor_rollout_ref.model.path": str(model_dir),
        "data.train_files": str(data_dir / "train.parquet"),
        "data.val_files": str(data_dir / "train.parquet"),
        "trainer.total_training_steps": steps,
        "trainer.total_epochs": steps,  # verl stops at the end of its epochs: never before the steps
        "trainer.default_local_dir": str(checkpoint_dir / "verl"),
        "trainer.resume_mode": "auto",
        "trainer.val_before_train": False,
        "trainer.test_freq": -1,  # the loop evaluates every round on its held-out set
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns": episode.max_turns,
        "arena.max_tokens": episode.max_tokens,
        "arena.envs": envs,
    }
    for key, value in overrides.items():
        OmegaConf.update(config, key, value, force_add=True)
    return verl_config(OmegaConf.merge(config, {"model": {}, "cluster": {}}))


def latest_hf(checkpoint_dir: Path) -> Path | None:
    """The Hugging Face export of verl's latest checkpoint under ``checkpoint_dir/verl``, if any."""
    root = checkpoint_dir / "verl"
    if not (root / LATEST).is_file():
        return None
    step = (root / LATEST).read_text().strip()
    hf = root / f"global_step_{step}" / "actor" / "huggingface"
    return hf if (hf / "config.json").is_file() else None


class VerlRoundTrainer:
    """The evolve loop's ``RoundTrainer`` over verl jobs; ``local`` holds the current model on the driver."""

    def __init__(self, trainer: dict[str, Any], local: GRPOTrainer, model_dir: Path) -> None:
        self.trainer, self.local, self.model_dir = trainer, local, model_dir
        self.cluster_address = ((trainer.get("verl") or {}).get("cluster") or {}).get("address")

    def policy(self, *, greedy: bool) -> HFPolicy:
        return current_policy(self.local, greedy=greedy)

    def warm_start(
        self, examples: list[tuple[list[dict[str, Any]], list[dict[str, Any]]]], tokens: int | None = None
    ) -> dict[str, float]:
        return sft_on(self.local, examples, tokens)

    async def train_round(
        self,
        sessions: SessionProvider,
        tasks: list[Task],
        config: EpisodeConfig,
        checkpoint_dir: Path,
        progress: Callable[[str], None],
    ) -> dict[str, float]:
        start = checkpoint_dir / "start"
        if not (start / "config.json").is_file():
            self.local.save(start)  # the model this round starts from (SFT included)
        counts = export(tasks, checkpoint_dir / "data", val_fraction=0.0)
        envs = sorted({task.env for task in tasks})
        job = round_job(self.trainer, start, checkpoint_dir / "data", checkpoint_dir, config, envs)
        progress(f"verl: {counts['train']} tasks, {job.trainer.total_training_steps} GRPO steps on Ray")
        await asyncio.to_thread(run_job, job, self.cluster_address, checkpoint_dir)
        trained = latest_hf(checkpoint_dir)
        if trained is None:
            raise RuntimeError(
                f"verl finished without a Hugging Face checkpoint under {checkpoint_dir / 'verl'}"
            )
        self.local = GRPOTrainer(trained, self.local.config)
        self.model_dir = trained
        return {"steps": float(job.trainer.total_training_steps), "tasks": float(counts["train"])}

    def save(self, directory: Path) -> None:
        self.local.save(directory)


ERROR_LINE = re.compile(r"^(?:\(\S+ pid=\d+\) )?((?:\w+\.)*\w+(?:Error|Exception): .+)$")
"""The line of a Python traceback naming the exception, with or without Ray's ``(Actor pid=N)`` prefix."""


def run_job(job: DictConfig, address: str | None, directory: Path) -> None:
    """verl's trainer on the job, on the Ray cluster at ``address`` (a local Ray of its own when None), in
    a child process (``trainers.verl.launch``) with its output in ``directory/verl.log``. A failed job is
    an ``EvolveError`` naming the exception the log ends with and the log."""
    spec = directory / "verl_job.yaml"
    OmegaConf.save(job, spec)
    log = directory / "verl.log"
    command = [sys.executable, "-m", "trainers.verl.launch", str(spec), *([address] if address else [])]
    with log.open("w") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        text = re.sub(r"\x1b\[[0-9;]*m", "", log.read_text(errors="replace"))
        errors = [m.group(1) for m in map(ERROR_LINE.match, text.splitlines()) if m]
        cause = errors[-1] if errors else f"exit {done.returncode}"
        raise EvolveError(f"the round's verl job failed: {cause} (log: {log})")


def make_trainer(
    trainer: dict[str, Any], policy: dict[str, Any], checkpoint: Path | None
) -> VerlRoundTrainer:
    """The round trainer for the model at ``policy["path"]``, or resumed from ``checkpoint``."""
    if "verl" not in trainer:
        raise ValueError("trainer=verl needs verl's sections in trainer.verl (compose conf/evolve.yaml)")
    local_config = trainer_config({}, policy)
    source = Path(checkpoint) if checkpoint is not None else Path(policy["path"])
    local = (
        GRPOTrainer.resume(source, local_config)
        if checkpoint is not None
        else GRPOTrainer(source, local_config)
    )
    return VerlRoundTrainer(trainer, local, source)
