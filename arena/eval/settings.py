"""Validated ``conf/eval.yaml``: the policy, the suite, rollout limits, faults, tracker and store."""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from arena.rollout.episode import EpisodeConfig
from arena.rollout.faults import FaultConfig

# Settings of where and how fast the policy is served: they do not change a run's results.
_NOT_RESULTS = {"policy": ("base_url", "api_key_env", "concurrency", "timeout_s", "max_retries")}


def _no_fields(value: Any) -> Any:
    return {} if value is None else value


ExtraBody = Annotated[dict[str, Any], BeforeValidator(_no_fields)]
"""Server-specific request fields. ``null`` in the YAML, not ``{}``: Hydra refuses new keys under a
mapping the YAML gives, so ``key={top_k: 20}`` must replace the whole value."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ReferencePolicySettings(_Section):
    kind: Literal["reference"] = "reference"


class RandomPolicySettings(_Section):
    kind: Literal["random"] = "random"
    calls: int = Field(3, ge=0)


class OpenAIPolicySettings(_Section):
    kind: Literal["openai"] = "openai"
    base_url: str
    model: str
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = Field(0.7, ge=0)
    max_tokens: int | None = Field(1024, ge=1, description="per reply; null: the server's own limit")
    concurrency: int = Field(64, ge=1)
    timeout_s: float = Field(120.0, gt=0)
    max_retries: int = Field(2, ge=0)
    tool_choice: Literal["auto", "required", "none"] | None = "auto"
    tool_format: Literal["native", "hermes"] = "native"
    extra_body: ExtraBody = Field(default_factory=dict)


class HFPolicySettings(_Section):
    kind: Literal["hf"] = "hf"
    path: str
    device: str = "auto"
    temperature: float = Field(0.7, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_new_tokens: int = Field(256, ge=1)
    context_tokens: int = Field(4096, ge=64)
    precision: Literal["auto", "bf16", "fp32"] = "auto"
    tool_result_chars: int | None = Field(
        None, ge=1, description="characters of each tool result the model sees; null: its template's default"
    )


PolicySettings = Annotated[
    ReferencePolicySettings | RandomPolicySettings | OpenAIPolicySettings | HFPolicySettings,
    Field(discriminator="kind"),
]


def _levels(value: Any) -> Any:
    if value is None:
        return value
    if not (
        isinstance(value, list)
        and len(value) == 2
        and all(type(level) is int and 1 <= level <= 5 for level in value)
        and value[0] <= value[1]
    ):
        raise ValueError(f"expected [lo, hi] within 1..5, got {value!r}")
    return value


class SuiteSettings(_Section):
    """Where a suite's tasks come from: synthesized for it (``synth``), imported questions (``imported``),
    tasks already in the store (``stored``) or BFCL v4 multi-turn entries (``bfcl``, by ``categories``)."""

    name: str
    source: Literal["synth", "imported", "stored", "bfcl"]
    envs: str | list[str] = "all"
    levels: list[int] | None = None
    synth_seed: int = 1000
    kind: str | None = None
    tag: str | None = None
    categories: str | list[str] = "all"
    max_turns: int | None = Field(None, ge=1, description="overrides rollout.max_turns for this suite")

    _check_levels = field_validator("levels")(_levels)

    @property
    def level_range(self) -> list[int] | None:
        return None if self.levels is None else list(range(self.levels[0], self.levels[1] + 1))


class RolloutSettings(_Section):
    max_turns: int = Field(12, ge=1)
    max_tokens: int | None = Field(None, ge=1)
    concurrency: int = Field(16, ge=1)
    repeats: int = Field(1, ge=1)


class TrackerSettings(_Section):
    kind: Literal["none", "wandb"] = "none"
    project: str = "agent-arena"
    entity: str | None = None
    mode: Literal["auto", "offline", "online"] = "auto"


class FaultSettings(_Section):
    delay: Literal["none", "fixed", "uniform", "lognormal"] = "none"
    delay_s: float = Field(0.0, ge=0)
    delay_sigma: float = Field(0.5, gt=0)
    error_rate: float = Field(0.0, ge=0, le=1)
    timeout_rate: float = Field(0.0, ge=0, le=1)
    timeout_s: float = Field(2.0, ge=0)
    tools: list[str] = Field(default_factory=list)


class StoreSettings(_Section):
    url: str | None = None


class PoolSettings(_Section):
    workers_per_env: int = Field(1, ge=1)
    warm_sessions_per_worker: int = Field(4, ge=1)


class ReportSettings(_Section):
    dir: str | None = None


class EvalSettings(_Section):
    """One evaluation run."""

    policy: PolicySettings
    suite: SuiteSettings
    rollout: RolloutSettings = Field(default_factory=RolloutSettings)
    tracker: TrackerSettings = Field(default_factory=TrackerSettings)
    run_id: str | None = None
    tasks_per_env: int = Field(5, ge=1)
    seed: int = 0
    store: StoreSettings = Field(default_factory=StoreSettings)
    pool: PoolSettings = Field(default_factory=PoolSettings)
    report: ReportSettings = Field(default_factory=ReportSettings)
    faults: FaultSettings = Field(default_factory=FaultSettings)
    max_infra_share: float = Field(
        0.05, ge=0, le=1, description="`arena eval` exits 1 when more episodes than this are infra errors"
    )

    def episode_config(self) -> EpisodeConfig:
        faults = FaultConfig(
            **(self.faults.model_dump() | {"tools": tuple(self.faults.tools)}), seed=self.seed
        )
        return EpisodeConfig(
            max_turns=self.suite.max_turns or self.rollout.max_turns,
            max_tokens=self.rollout.max_tokens,
            faults=faults,
        )

    def identity(self) -> dict[str, Any]:
        """What defines the run's results: not where they are stored, tracked or reported, nor where the
        policy is served and how many requests or episodes run at once (a changed port resumes)."""
        identity = self.model_dump(
            mode="json", exclude={"run_id", "store", "tracker", "report", "pool", "max_infra_share"}
        )
        for key in _NOT_RESULTS["policy"]:
            identity["policy"].pop(key, None)
        identity["rollout"].pop("concurrency")
        return identity

    def resolved_run_id(self) -> str:
        """``run_id``, else ``<policy>-<suite>-<hash of the identity>``: the same config resumes its run."""
        if self.run_id:
            return self.run_id
        digest = hashlib.sha256(json.dumps(self.identity(), sort_keys=True).encode()).hexdigest()[:10]
        return f"{self.policy.kind}-{self.suite.name}-{digest}"
