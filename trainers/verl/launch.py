"""``arena train trainer=verl ...``: compose ``conf/train.yaml`` (verl's own ``ppo_trainer`` plus the
arena's defaults, ``conf/trainer/verl.yaml``; ``trainer=verl_cpu`` for CPU processes), then, on the Ray
cluster at ``cluster.address`` (a local Ray when null): start the environment pool actor if it is not
running, and run verl's PPO/GRPO trainer (``run_ppo`` with ``TaskRunnerV1``) with it. ``python -m
trainers.verl.launch JOB.yaml`` runs a saved job the same way (``arena evolve trainer=verl``'s rounds).

The arena's own keys (``model``, ``cluster``, ``arena``, ``trainer.name``/``trainer.factory``) sit beside
verl's; ``verl_config`` strips what verl does not know (``arena`` stays: the agent loop reads it), fills
in what depends on the machine (the attention kernel, an absolute checkpoint directory) and refuses keys
the ``arena_agent`` loop would ignore.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
import uuid
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from arena.cli.hydra_config import CONF_DIR, ConfigError

logger = logging.getLogger(__name__)

ARENA_TRAINER_KEYS = ("name", "factory", "steps_per_round")
IGNORED_KEYS = {
    "actor_rollout_ref.rollout.multi_turn.max_user_turns": "arena_agent has no user turns to limit",
    "arena.max_turns": "arena_agent reads actor_rollout_ref.rollout.multi_turn.max_assistant_turns",
}
"""Keys ``arena_agent`` does not read, with what to set instead: a non-null value is refused."""


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


def attention_kernel() -> str:
    """``flash_attention_2`` where flash-attn is importable, else ``sdpa`` (PyTorch's own kernel)."""
    return "flash_attention_2" if importlib.util.find_spec("flash_attn") is not None else "sdpa"


def verl_config(config: DictConfig) -> DictConfig:
    """What verl's trainer gets: the composed config without the arena's launcher-only keys, the attention
    kernel chosen (``attention_kernel``) unless ``actor_rollout_ref.model.override_config.
    attn_implementation`` is set, and ``trainer.default_local_dir`` made absolute (every node and the
    driver must see the same directory: ``check_shared_storage``). ``ConfigError`` on an ignored key."""
    out = OmegaConf.create(OmegaConf.to_container(config, resolve=True))
    for key, instead in IGNORED_KEYS.items():
        if OmegaConf.select(out, key) is not None:
            raise ConfigError(f"{key} is not read by the arena_agent loop ({instead})")
    with open_dict(out):
        for key in ("model", "cluster"):
            out.pop(key, None)
        for key in ARENA_TRAINER_KEYS:
            out.trainer.pop(key, None)
        override = out.actor_rollout_ref.model.get("override_config") or {}
        if override.get("attn_implementation") is None:
            kernel = attention_kernel()
            logger.info(
                "attention kernel: %s (set actor_rollout_ref.model.override_config.attn_implementation)",
                kernel,
            )
            OmegaConf.update(out, "actor_rollout_ref.model.override_config.attn_implementation", kernel)
        out.trainer.default_local_dir = str(Path(str(out.trainer.default_local_dir)).absolute())
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


def on_cpu(config: DictConfig) -> bool:
    """``trainer.device=cpu``: verl's workers run on the arena's CPU platform (``cpu_platform``)."""
    return str(config.trainer.get("device")) == "cpu"


def local_ray_resources(config: DictConfig) -> dict[str, Any]:
    """What a local Ray started here advertises: ``arena_env_slots`` (one per CPU: its one node runs
    everything) and, for a CPU job, one ``verl_cpu`` per trainer rank plus the logical CPUs that verl's
    placement bundles reserve beside each rank (``max_colocate_count`` apiece) and TransferQueue's actors
    hold (one for its controller, one per storage unit): placeholders, not cores, without which those
    actors would wait for CPUs a small machine does not have."""
    from verl.single_controller.ray.base import ResourcePoolManager

    from arena.runtime.containers import ENV_SLOT_RESOURCE
    from trainers.verl.cpu_platform import RESOURCE

    cores = os.cpu_count() or 1
    kwargs: dict[str, Any] = {"resources": {ENV_SLOT_RESOURCE: cores}}
    if on_cpu(config):
        ranks = int(config.trainer.nnodes) * int(config.trainer.n_gpus_per_node)
        kwargs["resources"][RESOURCE] = ranks
        queue = 1 + int(config.transfer_queue.backend.SimpleStorage.num_data_storage_units)
        kwargs["num_cpus"] = cores + ResourcePoolManager.max_colocate_count * ranks + queue
    return kwargs


def connect(config: DictConfig, address: str | None) -> None:
    """``ray.init`` on ``address`` (a local Ray when None, ``local_ray_resources``) with the job's runtime
    env: its ``worker_process_setup_hook`` registers the arena's agent loop and estimator in every worker;
    a CPU job (``on_cpu``) also selects the CPU platform there."""
    import ray
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    from arena.runtime.pool import start_local_ray
    from trainers.verl import cpu_platform

    if ray.is_initialized():
        return
    ours = config.ray_kwargs.ray_init.runtime_env
    runtime_env = OmegaConf.to_container(OmegaConf.merge(get_ppo_ray_runtime_env(config), ours), resolve=True)
    if on_cpu(config):
        runtime_env.setdefault("env_vars", {})[cpu_platform.ENV] = cpu_platform.NAME
    if address is None:
        start_local_ray(runtime_env=runtime_env, log_to_driver=True, **local_ray_resources(config))
    else:
        ray.init(address=address, runtime_env=runtime_env)


def check_env_slots(arena: DictConfig) -> None:
    """With ``arena.env_slots_resource``, some live node must advertise ``arena_env_slots``, else the
    pool's workers would wait for it forever: ``ConfigError`` saying what to do."""
    import ray

    from arena.runtime.containers import ENV_SLOT_RESOURCE

    if arena.env_slots_resource and ray.cluster_resources().get(ENV_SLOT_RESOURCE, 0) < 1:
        raise ConfigError(
            f"no node of this Ray cluster advertises {ENV_SLOT_RESOURCE} (start the environment nodes "
            f"with ray start --resources='{{\"{ENV_SLOT_RESOURCE}\": N}}', or set "
            "arena.env_slots_resource=false to run environments anywhere)"
        )


def check_shared_storage(directory: Path, timeout_s: float = 300.0) -> None:
    """Every live Ray node must see ``directory`` (verl's checkpoints: workers write them, the driver
    reads the Hugging Face export and resumes from them): a marker written here is looked for on each
    node; ``ConfigError`` naming the nodes that do not see it."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    directory.mkdir(parents=True, exist_ok=True)
    marker = directory / f".arena-shared-{uuid.uuid4().hex}"
    marker.write_text("")

    @ray.remote(num_cpus=0)
    def sees(path: str) -> bool:
        return Path(path).is_file()

    try:
        nodes = [node for node in ray.nodes() if node["Alive"]]
        checks = [
            sees.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
            ).remote(str(marker))
            for node in nodes
        ]
        seen = ray.get(checks, timeout=timeout_s)
    except ray.exceptions.GetTimeoutError:
        raise ConfigError(
            f"cannot check trainer.default_local_dir={directory} is shared: not every Ray node answered "
            f"within {timeout_s:.0f} s"
        ) from None
    finally:
        marker.unlink(missing_ok=True)
    blind = [node["NodeManagerAddress"] for node, ok in zip(nodes, seen, strict=True) if not ok]
    if blind:
        raise ConfigError(
            f"trainer.default_local_dir={directory} is not shared storage: not visible on {', '.join(blind)} "
            "(put it on a file system every node mounts)"
        )


async def ensure_pool(config: DictConfig) -> Any:
    """The pool actor named in ``arena``; started (detached) with its workers if absent."""
    from arena.runtime.containers import ENV_SLOT_RESOURCE
    from arena.runtime.pool import PoolConfig
    from trainers.verl.pool_service import start_pool

    arena = config.arena
    check_env_slots(arena)
    pool = PoolConfig(
        envs={env: int(arena.workers_per_env) for env in pool_envs(arena)},
        warm_sessions_per_worker=int(arena.warm_sessions_per_worker),
        worker_resources={ENV_SLOT_RESOURCE: 1} if arena.env_slots_resource else {},
    )
    return await start_pool(pool, name=arena.pool_name, namespace=arena.pool_namespace)


def train(config: DictConfig) -> None:
    """Run verl's trainer on the cluster with the arena's pool (blocks until training ends)."""
    run(verl_config(config), config.cluster.address)


def run(job: DictConfig, address: str | None) -> None:
    """verl's trainer (``TaskRunnerV1``) on ``job`` (``verl_config``'s output) on the Ray cluster at
    ``address`` (local when None), the pool actor started first."""
    from trainers.verl import cpu_platform

    if on_cpu(job):  # before verl resolves its platform: once per process, on importing its trainer
        os.environ[cpu_platform.ENV] = cpu_platform.NAME
    from verl.trainer.main_ppo import TaskRunnerV1, run_ppo
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config
    from verl.utils.device import auto_set_device

    import trainers.verl.setup

    trainers.verl.setup.register()
    connect(job, address)
    check_shared_storage(Path(job.trainer.default_local_dir))
    asyncio.run(ensure_pool(job))
    auto_set_device(job)
    validate_config(config=job, use_reference_policy=need_reference_policy(job), use_critic=need_critic(job))
    run_ppo(job, task_runner_class=TaskRunnerV1)


def main(argv: list[str] | None = None) -> None:
    """``python -m trainers.verl.launch JOB.yaml [ADDRESS]``: ``run`` on a job saved as YAML, in a process
    of its own (``arena evolve trainer=verl`` runs each round's job so: verl's platform and Ray are the
    job's, not the evolve driver's)."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    run(OmegaConf.load(args[0]), args[1] if len(args) > 1 else None)


if __name__ == "__main__":
    main()
