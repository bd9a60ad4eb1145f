"""The ``arena synth`` configuration: ``conf/synth.yaml`` composed with Hydra overrides, then validated."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from arena.cli.hydra_config import ConfigError, validation_line
from arena.eval.settings import ExtraBody

if TYPE_CHECKING:
    from arena.policies.openai_compat import PolicyConfig
    from task_synth.llm import LLMConfig

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
LEVELS = range(1, 6)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StoreSettings(_Section):
    url: str | None = None


class PoolSettings(_Section):
    workers_per_env: int = Field(1, ge=1)
    warm_sessions_per_worker: int = Field(4, ge=1)


class LLMSettings(_Section):
    base_url: str | None = None
    model: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    max_tokens: int | None = Field(1024, ge=1)
    extra_body: ExtraBody = Field(default_factory=dict)
    concurrency: int = Field(4, ge=1)
    timeout_s: float = Field(120.0, gt=0)


class PolicySettings(_Section):
    base_url: str | None = None
    model: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = Field(0.7, ge=0, le=2)
    max_turns: int = Field(12, ge=1)


class FilterSettings(_Section):
    """The solvability filter: a task is kept if ``policy`` solves it in at least ``k`` of ``n`` tries."""

    policy: PolicySettings = Field(default_factory=PolicySettings)
    k: int = Field(1, ge=1)
    n: int = Field(4, ge=1)
    concurrency: int = Field(8, ge=1)

    @model_validator(mode="after")
    def _k_at_most_n(self) -> FilterSettings:
        if self.k > self.n:
            raise ValueError(f"k must be at most n, got k={self.k}, n={self.n}")
        return self

    def policy_config(self) -> PolicyConfig | None:
        """The policy when ``policy.base_url`` and ``policy.model`` are set (the filter is on), else None."""
        from arena.policies.openai_compat import PolicyConfig

        policy = self.policy
        if policy.base_url is None and policy.model is None:
            return None
        if policy.base_url is None or policy.model is None:
            raise ConfigError("filter.policy.base_url and filter.policy.model must be set together")
        return PolicyConfig(
            base_url=policy.base_url,
            model=policy.model,
            api_key_env=policy.api_key_env,
            temperature=policy.temperature,
            max_turns=policy.max_turns,
        )


class OutputSettings(_Section):
    jsonl: str | None = None


class SynthSettings(_Section):
    """Validated ``conf/synth.yaml``."""

    env: str | list[str] = "all"
    n: int = Field(50, ge=1)
    difficulty: int | list[int] = Field(default_factory=lambda: [1, 5])
    seed: int = 0
    store: StoreSettings = Field(default_factory=StoreSettings)
    pool: PoolSettings = Field(default_factory=PoolSettings)
    llm: LLMSettings = Field(default_factory=LLMSettings)
    filter: FilterSettings = Field(default_factory=FilterSettings)
    output: OutputSettings = Field(default_factory=OutputSettings)

    @field_validator("env", mode="before")
    @classmethod
    def _env_names(cls, value: Any) -> Any:
        names = value if isinstance(value, list) else [value]
        if not names or not all(isinstance(name, str) and name for name in names):
            raise ValueError(f"expected `all`, a name or a list of names, got {value!r}")
        return value

    @field_validator("difficulty", mode="before")
    @classmethod
    def _levels_in_range(cls, value: Any) -> Any:
        bounds = value if isinstance(value, list) else [value]
        if (
            len(bounds) not in (1, 2)
            or not all(type(level) is int and level in LEVELS for level in bounds)
            or bounds[0] > bounds[-1]
        ):
            raise ValueError(
                f"expected a level 1..5 (difficulty=3) or a range (difficulty=[1,5]), got {value!r}"
            )
        return value

    @property
    def levels(self) -> list[int]:
        if isinstance(self.difficulty, int):
            return [self.difficulty]
        return list(range(self.difficulty[0], self.difficulty[1] + 1))

    def llm_config(self) -> LLMConfig | None:
        """The rewriting and program-writing LLM when one is configured, else None."""
        from task_synth.llm import LLMConfig

        llm = self.llm
        if llm.base_url is None and llm.model is None:
            return None
        if llm.base_url is None or llm.model is None:
            raise ConfigError("llm.base_url and llm.model must be set together")
        return LLMConfig(
            base_url=llm.base_url,
            model=llm.model,
            api_key=os.environ.get(llm.api_key_env),
            max_tokens=llm.max_tokens,
            extra_body=llm.extra_body,
            concurrency=llm.concurrency,
            timeout_s=llm.timeout_s,
        )


def _keys(node: Any, prefix: str = "") -> list[str]:
    if not isinstance(node, dict):
        return [prefix]
    return [key for name, value in node.items() for key in _keys(value, f"{prefix}{name}.")]


def _override_line(exc: BaseException, conf_dir: Path) -> str:
    key = getattr(exc.__cause__, "full_key", None)
    if key:
        known = _keys(OmegaConf.to_container(OmegaConf.load(conf_dir / "synth.yaml")))
        return f"unknown key {key!r}; keys: {', '.join(k.rstrip('.') for k in known)}"
    return str(exc).splitlines()[0]


def load_settings(overrides: list[str], conf_dir: Path = CONF_DIR) -> SynthSettings:
    """Compose ``synth.yaml`` with Hydra overrides (``key=value``) and validate it."""
    if not (conf_dir / "synth.yaml").is_file():
        raise ConfigError(f"no synth.yaml in {conf_dir} (the arena's conf/ directory is missing)")
    try:
        with initialize_config_dir(version_base=None, config_dir=str(conf_dir)):
            raw: Any = OmegaConf.to_container(compose("synth", overrides=overrides), resolve=True)
    except (HydraException, OmegaConfBaseException) as exc:
        raise ConfigError(f"bad override: {_override_line(exc, conf_dir)}") from exc
    try:
        return SynthSettings.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"bad config: {validation_line(exc)}") from exc
