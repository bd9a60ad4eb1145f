"""Validated ``conf/evolve.yaml``: rounds, the task sets, the policy, the trainer and where to store."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from arena.eval.settings import (
    PolicySettings,
    PoolSettings,
    ReportSettings,
    RolloutSettings,
    StoreSettings,
    TrackerSettings,
)
from arena.evolve.targeting import REACH
from arena.rollout.episode import EpisodeConfig


class EvolveError(ValueError):
    """A run that cannot start as configured (one line, naming the problem)."""


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
    replays the conversations of every earlier training stage (the warm start's, earlier rounds').
    ``mode`` ``uniform`` is the gap-blind control: the same count spread evenly over the environments and
    levels 1..``max_level``, with its own seeds (the gap report is still recorded). ``sft_tokens``: train
    each round's SFT on this many tokens (passes repeated until no example fits), so that arms whose
    tasks differ in length train the same compute; None = the trainer's epochs. ``reach``: levels above
    each environment's frontier that ``gap`` mode practises (``arena.evolve.targeting``). ``recovery``:
    in ``gap`` mode, a share of each environment's new reference solutions first make a wrong call (an
    unknown tool, invalid arguments: as many as the evaluation failed that way) and recover from its
    error (``arena.policies.slips``)."""

    tasks: int = Field(48, ge=1)
    max_level: int = Field(3, ge=1, le=5)
    reach: int = Field(REACH, ge=0, le=4)
    sft: bool = True
    replay: bool = True
    mode: Literal["gap", "uniform"] = "gap"
    sft_tokens: int | None = Field(None, ge=1)
    recovery: bool = False


BFCL_MULTI_TURN = "bfcl_multi_turn"


class BfclSettings(_Section):
    """The fixed BFCL v4 multi-turn subset of ``benchmarks=[bfcl_multi_turn]``: the first
    ``tasks_per_category`` entries of each category, ``max_turns`` policy turns over all user turns."""

    tasks_per_category: int = Field(5, ge=1, le=200)
    categories: str | list[str] = "all"
    max_turns: int = Field(120, ge=1)


class TrainerSettings(BaseModel):
    """``factory`` (``module:function``) builds the trainer from these settings; the rest is its own."""

    model_config = ConfigDict(extra="allow")

    name: str
    factory: str


class EvolveSettings(_Section):
    """One self-evolving run. ``heldout_envs``: environments never trained on (left out of the warm start
    and every round's synthesis) but evaluated every round on their own held-out tasks; ``auto`` = the
    last built-in by name when ``envs`` is ``all``, none otherwise. ``from_round0``: the id of a finished
    run (same store and report directory) whose sets, warm start, checkpoint and round-0 evaluation this
    run reuses instead of paying for them again. ``benchmarks``: fixed suites played every round beside
    the held-out set (``bfcl_multi_turn``: ``bfcl.*``), never trained on."""

    policy: PolicySettings
    trainer: TrainerSettings
    tracker: TrackerSettings = Field(default_factory=TrackerSettings)
    run_id: str | None = None
    rounds: int = Field(2, ge=0)
    base_eval: bool = True
    envs: str | list[str] = "all"
    heldout_envs: str | list[str] = "auto"
    from_round0: str | None = None
    seed: int = 0
    train_set: TaskSetSettings
    heldout: TaskSetSettings
    targeted: TargetedSettings = Field(default_factory=TargetedSettings)
    benchmarks: list[Literal["bfcl_multi_turn"]] = Field(default_factory=list)
    bfcl: BfclSettings = Field(default_factory=BfclSettings)
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

    @field_validator("heldout_envs")
    @classmethod
    def _heldout_envs(cls, value: str | list[str]) -> str | list[str]:
        return value if value == "auto" else [value] if isinstance(value, str) else value

    def environments(self, builtins: list[str]) -> tuple[list[str], list[str]]:
        """(environments trained on, environments only evaluated) of this run, ``builtins`` being the
        built-in names; raises ``EvolveError`` when no environment is left to train on."""
        names = (
            list(builtins) if self.envs == "all" else [self.envs] if isinstance(self.envs, str) else self.envs
        )
        if self.heldout_envs == "auto":
            unseen = [max(names)] if self.envs == "all" and len(names) > 1 else []
        else:
            unseen = list(dict.fromkeys(self.heldout_envs))
        trained = [name for name in names if name not in unseen]
        if not trained:
            raise EvolveError(f"heldout_envs {unseen} leaves no environment to train on")
        return trained, unseen

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
