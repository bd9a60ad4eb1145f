"""``arena train trainer=verl ...``: compose ``conf/train.yaml`` (verl's own ``ppo_trainer`` plus the
arena's defaults, ``conf/trainer/verl.yaml``), then, on the Ray cluster at ``cluster.address``: start the
environment pool actor if it is not running, and run verl's PPO/GRPO trainer (``run_ppo``) with it.

The arena's own keys (``model``, ``cluster``, ``arena``, ``trainer.name``/``trainer.factory``) sit beside
verl's; ``verl_config`` strips what verl does not know (``arena`` stays: the agent loop reads it).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from arena.cli.hydra_config import CONF_DIR, ConfigError

ARENA_TRAINER_KEYS = ("name", "factory", "steps_per_round")


def compose_train(overrides: list[str], conf_dir: Path = CONF_DIR, check_missing: bool = True) -> DictConfig:
    """``conf/train.yaml`` with the overrides, resolved; one-line ``ConfigError`` on a bad override."""
    try:
        with initialize_config_dir(version_base=None, config_dir=str(conf_dir)):
            config = compose("train", overrides=overrides)
        if check_missing:
            missing = [
                f"{section}.{key}"
                for section, key in (("model", "path"), ("data", "train_files"))
                if config[section].get(key) is None
            ]
            if missing:
                raise ConfigError(f"missing value for {', '.join(missing)} (set it: {missing[0]}=...)")
        if config.data.get("val_files") is None and config.data.get("train_files") is not None:
            config.data.val_files = str(Path(str(config.data.train_files)).with_name("val.parquet"))
        OmegaConf.resolve(config)
        return config
    except (HydraException, OmegaConfBaseException) as exc:
        raise ConfigError(f"bad override: {str(exc).splitlines()[0]}") from exc


def verl_config(config: DictConfig) -> DictConfig:
    """What verl's trainer gets: the composed config without the arena's launcher-only keys."""
    out = OmegaConf.create(OmegaConf.to_container(config, resolve=True))
    with open_dict(out):
        for key in ("model", "cluster"):
            out.pop(key, None)
        for key in ARENA_TRAINER_KEYS:
            out.trainer.pop(key, None)
    return out


def pool_envs(arena: DictConfig) -> list[str]:
    """The environments the pool serves (``all``: the built-in ones)."""
    from environments.registry import builtin_names, load_environment

    envs = arena.envs
    if envs == "all":
        return builtin_names()
    names = [envs] if isinstance(envs, str) else list(envs)
    for name in names:
        load_environment(name)
    return names


def connect(config: DictConfig) -> None:
    """``ray.init`` on ``cluster.address`` (a local Ray when null) with the job's runtime env: its
    ``worker_process_setup_hook`` registers the arena's agent loop and estimator in every worker."""
    import ray
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    if ray.is_initialized():
        return
    ours = config.ray_kwargs.ray_init.runtime_env
    runtime_env = OmegaConf.to_container(OmegaConf.merge(get_ppo_ray_runtime_env(config), ours), resolve=True)
    ray.init(address=config.cluster.address, runtime_env=runtime_env)


async def ensure_pool(config: DictConfig) -> Any:
    """The pool actor named in ``arena``; started (detached) with its workers if absent."""
    from arena.runtime.containers import ENV_SLOT_RESOURCE
    from arena.runtime.pool import PoolConfig
    from trainers.verl.pool_service import start_pool

    arena = config.arena
    pool = PoolConfig(
        envs={env: int(arena.workers_per_env) for env in pool_envs(arena)},
        warm_sessions_per_worker=int(arena.warm_sessions_per_worker),
        worker_resources={ENV_SLOT_RESOURCE: 1} if arena.env_slots_resource else {},
    )
    return await start_pool(pool, name=arena.pool_name, namespace=arena.pool_namespace)


def train(config: DictConfig) -> None:
    """Run verl's trainer on the cluster with the arena's pool (blocks until training ends)."""
    from verl.trainer.main_ppo import TaskRunnerV1, run_ppo
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config
    from verl.utils.device import auto_set_device

    import trainers.verl.setup

    trainers.verl.setup.register()
    connect(config)
    asyncio.run(ensure_pool(config))
    job = verl_config(config)
    auto_set_device(job)
    validate_config(config=job, use_reference_policy=need_reference_policy(job), use_critic=need_critic(job))
    run_ppo(job, task_runner_class=TaskRunnerV1)
