"""Composing the arena's Hydra configs (``conf/*.yaml`` and their groups) into validated settings, with
one-line errors, and expanding ``--multirun`` sweeps with Hydra's own sweep parser."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException
from pydantic import BaseModel, ValidationError

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
Settings = TypeVar("Settings", bound=BaseModel)


class ConfigError(ValueError):
    """The configuration or an override is invalid (the message is one line)."""


def validation_line(exc: ValidationError) -> str:
    """A pydantic validation error as one line naming every bad key."""
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"])
        if error["type"] == "value_error":
            parts.append(f"{where}: {error['msg'].removeprefix('Value error, ')}")
        else:
            parts.append(f"{where}: {error['msg']}, got {error.get('input')!r}")
    return "; ".join(parts)


def compose_raw(name: str, overrides: list[str], conf_dir: Path = CONF_DIR) -> dict[str, Any]:
    """``conf/<name>.yaml`` with its defaults list and the overrides applied, resolved to plain data."""
    if not (conf_dir / f"{name}.yaml").is_file():
        raise ConfigError(f"no {name}.yaml in {conf_dir} (the arena's conf/ directory is missing)")
    try:
        with initialize_config_dir(version_base=None, config_dir=str(conf_dir)):
            config = compose(name, overrides=overrides)
            missing = sorted(OmegaConf.missing_keys(config))
            if missing:
                raise ConfigError(f"missing value for {', '.join(missing)} (set it: {missing[0]}=...)")
            return OmegaConf.to_container(config, resolve=True)  # type: ignore[return-value]
    except (HydraException, OmegaConfBaseException) as exc:
        raise ConfigError(f"bad override: {str(exc).splitlines()[0]}") from exc


def load(name: str, overrides: list[str], model: type[Settings], conf_dir: Path = CONF_DIR) -> Settings:
    """Compose ``conf/<name>.yaml`` with overrides and validate it as ``model``."""
    raw = compose_raw(name, overrides, conf_dir)
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"bad config: {validation_line(exc)}") from exc


def expand_sweep(overrides: list[str]) -> list[list[str]]:
    """Hydra's multirun expansion: ``a=1,2 b=x,y`` -> one override list per combination (in Hydra's
    order); without sweeps, the overrides themselves."""
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException as exc:
        raise ConfigError(f"bad override: {str(exc).splitlines()[0]}") from exc
    batches = BasicSweeper.split_arguments(parsed, max_batch_size=None)
    return [list(job) for batch in batches for job in batch] or [[]]
