"""Validated ``conf/evolve.yaml``: rounds, the task sets, the policy, the trainer and where to store."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from arena.eval.settings import (
    PolicySettings,
    PoolSettings,
    ReportSettings,
    RolloutSettings,
    StoreSettings,
    TrackerSettings,
)
from arena.rollout.episode import EpisodeConfig


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TaskSetSettings(_Section):
    """A synthesized task set: tasks per environment, levels lo..hi, and its own seed."""

    tasks_per_env: int = Field(ge=1)
    levels: list[int] = Field(default_factory=lambda: [1, 2])
    seed: int = 0

    @field_validator("levels")
    @classmethod
    def _range(cls, value: list[int]) -> list[int]:
        if len(value) != 2 or not 1 <= value[0] <= value[1] <= 5:
            raise ValueError(f"expected [lo, hi] within 1..5, got {value!r}")
        return value

    @property
    def level_range(self) -> list[int]:
        return list(range(self.levels[0], self.levels[1] + 1))


class TargetedSettings(_Section):
    """Each round's targeted synthesis: how many tasks in all, the highest level it may ask for,
    whether the new tasks' reference solutions are also used for SFT before GRPO, and whether that SFT
    replays the conversations of every earlier training stage (the warm start's, earlier rounds')."""

    tasks: int = Field(48, ge=1)
    max_level: int = Field(3, ge=1, le=5)
    sft: bool = True
    replay: bool = True


class TrainerSettings(BaseModel):
    """``factory`` (``module:function``) builds the trainer from these settings; the rest is its own."""

    model_config = ConfigDict(extra="allow")

    name: str
    factory: str


class EvolveSettings(_Section):
    """One self-evolving run."""

    policy: PolicySettings
    trainer: TrainerSettings
    tracker: TrackerSettings = Field(default_factory=TrackerSettings)
    run_id: str | None = None
    rounds: int = Field(2, ge=0)
    base_eval: bool = True
    envs: str | list[str] = "all"
    seed: int = 0
    train_set: TaskSetSettings
    heldout: TaskSetSettings
    targeted: TargetedSettings = Field(default_factory=TargetedSettings)
    rollout: RolloutSettings = Field(default_factory=RolloutSettings)
    store: StoreSettings = Field(default_factory=StoreSettings)
    pool: PoolSettings = Field(default_factory=PoolSettings)
    report: ReportSettings = Field(default_factory=ReportSettings)

    @model_validator(mode="before")
    @classmethod
    def _verl_sections(cls, data: Any) -> Any:
        """``trainer=verl`` composes verl's ``ppo_trainer`` at the top level: its sections (all but the
        loop's own keys) become the trainer's ``verl`` settings."""
        trainer = data.get("trainer") if isinstance(data, dict) else None
        if not isinstance(trainer, dict) or trainer.get("name") != "verl":
            return data
        own = {k: v for k, v in data.items() if k in cls.model_fields}
        return own | {
            "trainer": trainer | {"verl": {k: v for k, v in data.items() if k not in cls.model_fields}}
        }

    def episode_config(self) -> EpisodeConfig:
        return EpisodeConfig(max_turns=self.rollout.max_turns, max_tokens=self.rollout.max_tokens)

    def resolved_run_id(self) -> str:
        """``run_id``, else ``evolve-<hash of what defines the run>``: the same config resumes its run."""
        if self.run_id:
            return self.run_id
        identity: dict[str, Any] = self.model_dump(
            mode="json", exclude={"run_id", "store", "tracker", "report"}
        )
        digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:10]
        return f"evolve-{digest}"
