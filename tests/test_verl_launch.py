"""``arena train trainer=verl``: the composed config is verl's own ``ppo_trainer`` with the arena's GRPO
defaults, every verl key overridable, and valid for verl's trainer."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import subprocess
import time
from pathlib import Path

import pytest
import ray
import yaml
from omegaconf import OmegaConf
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import validate_config

import trainers.verl.setup
from arena.cli.hydra_config import ConfigError, load
from arena.cli.main import main
from arena.evolve.settings import EvolveError, EvolveSettings
from arena.policies.tiny import build_tiny
from arena.rollout.episode import SYSTEM_PROMPT, EpisodeConfig
from tests.hf_samples import SIZE
from trainers.verl import cpu_platform
from trainers.verl.evolve import VerlRoundTrainer, latest_hf, make_trainer, round_job, run_job
from trainers.verl.launch import (
    check_shared_storage,
    compose_train,
    connect,
    ensure_pool,
    local_ray_resources,
    on_cpu,
    verl_config,
)

REQUIRED = ["trainer=verl", "model.path=/models/tiny", "data.train_files=/data/arena/train.parquet"]


def composed(capsys: pytest.CaptureFixture[str], *overrides: str) -> dict:
    assert main(["train", *REQUIRED, *overrides, "--cfg", "job"]) == 0
    return yaml.safe_load(capsys.readouterr().out)


def test_cfg_job_prints_verl_config_with_grpo_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    config = composed(capsys, "cluster.address=ray://head:10001")
    actor, rollout = config["actor_rollout_ref"]["actor"], config["actor_rollout_ref"]["rollout"]
    assert config["algorithm"]["adv_estimator"] == "arena_grpo"  # GRPO, infra-failed samples left out
    assert (actor["clip_ratio_low"], actor["clip_ratio_high"]) == (0.2, 0.28)
    assert rollout["n"] == 8 and config["data"]["train_batch_size"] == 32
    assert actor["use_kl_loss"] is True and actor["kl_loss_coef"] == 0.001
    assert rollout["temperature"] == 1.0
    assert rollout["agent"]["default_agent_loop"] == "arena_agent"
    assert rollout["multi_turn"]["format"] == "hermes"
    assert config["actor_rollout_ref"]["model"]["path"] == "/models/tiny"
    assert config["data"]["val_files"] == "/data/arena/val.parquet"
    assert config["cluster"]["address"] == "ray://head:10001"
    hook = config["ray_kwargs"]["ray_init"]["runtime_env"]["worker_process_setup_hook"]
    assert hook == "trainers.verl.setup.register"
    # verl's own config, not a copy: every section of its ppo_trainer is there, from the installed package
    for section in ("critic", "reward", "distillation", "transfer_queue", "global_profiler"):
        assert section in config
    assert actor["_target_"].startswith("verl.workers.config")


def test_every_verl_key_is_overridable(capsys: pytest.CaptureFixture[str]) -> None:
    config = composed(
        capsys,
        "actor_rollout_ref.rollout.n=16",
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.actor.optim.lr=3e-6",
        "trainer.total_epochs=5",
    )
    assert config["actor_rollout_ref"]["rollout"]["n"] == 16
    assert config["algorithm"]["adv_estimator"] == "grpo"
    assert config["actor_rollout_ref"]["actor"]["optim"]["lr"] == 3e-6
    assert config["trainer"]["total_epochs"] == 5


def test_bad_input_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "trainer=verl", "data.train_files=/d/train.parquet"]) == 2
    assert main(["train", *REQUIRED, "no_such.key=1", "--cfg", "job"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "error: missing value for model.path (set it: model.path=...)",
        "error: bad override: Could not override 'no_such.key'.",
    ]


def test_job_config_passes_verls_validation() -> None:
    trainers.verl.setup.register()
    job = verl_config(compose_train([*REQUIRED[1:], "trainer.n_gpus_per_node=8"]))
    assert "model" not in job and "cluster" not in job and "factory" not in job.trainer
    assert job.arena.pool_name == "arena_env_pool"  # the agent loop reads it
    assert not need_critic(job) and need_reference_policy(job)  # GRPO: no critic; the KL loss needs a ref
    validate_config(config=job, use_reference_policy=True, use_critic=False)


def test_evolve_with_trainer_verl_builds_each_rounds_verl_job(tmp_path: Path) -> None:
    settings = load(
        "evolve",
        ["trainer=verl", "trainer.steps_per_round=3", "cluster.address=ray://h:10001", "rounds=3"],
        EvolveSettings,
    )
    trainer = settings.trainer.model_dump(mode="json")
    assert trainer["factory"] == "trainers.verl.evolve:make_trainer"
    assert (
        trainer["verl"]["algorithm"]["adv_estimator"] == "arena_grpo"
    )  # verl's sections, under trainer.verl
    assert settings.rounds == 3 and settings.rollout.max_turns == 5  # the loop's own keys stay its own
    model = build_tiny(tmp_path / "tiny", [SYSTEM_PROMPT], SIZE)
    round_trainer = make_trainer(trainer, {"path": str(model), "device": "cpu"}, None)
    assert isinstance(round_trainer, VerlRoundTrainer) and round_trainer.cluster_address == "ray://h:10001"
    job = round_job(
        trainer, model, tmp_path / "data", tmp_path / "round1", EpisodeConfig(max_turns=4), ["library"]
    )
    assert job.actor_rollout_ref.model.path == str(model)
    assert job.data.train_files == str(tmp_path / "data" / "train.parquet")
    assert job.trainer.total_training_steps == 3 and job.trainer.resume_mode == "auto"
    assert job.trainer.total_epochs == 3  # verl ends at its last epoch: a small round still takes its steps
    assert job.trainer.default_local_dir == str(tmp_path / "round1" / "verl")
    assert job.actor_rollout_ref.rollout.multi_turn.max_assistant_turns == 4
    assert list(job.arena.envs) == ["library"]
    trainers.verl.setup.register()
    validate_config(config=job, use_reference_policy=True, use_critic=False)
    assert latest_hf(tmp_path / "round1") is None  # nothing trained yet: the round has no checkpoint


def test_evolve_local_is_unchanged() -> None:
    settings = load("evolve", [], EvolveSettings)
    assert settings.trainer.name == "local" and "verl" not in settings.trainer.model_dump()


def test_composed_defaults_a_verl_user_would_otherwise_fix_by_hand(tmp_path: Path) -> None:
    config = compose_train(REQUIRED[1:])
    actor, rollout = config.actor_rollout_ref.actor, config.actor_rollout_ref.rollout
    # several policy updates per step, so clip-higher acts
    assert actor.ppo_mini_batch_size < config.data.train_batch_size
    assert config.data.train_batch_size % actor.ppo_mini_batch_size == 0
    assert rollout.tensor_model_parallel_size == 1
    assert "hf_model" in actor.checkpoint.save_contents  # the export an evolve round continues from
    job = verl_config(config)
    flash = importlib.util.find_spec("flash_attn") is not None
    kernel = job.actor_rollout_ref.model.override_config.attn_implementation
    assert kernel == ("flash_attention_2" if flash else "sdpa")
    explicit = verl_config(
        compose_train([*REQUIRED[1:], "+actor_rollout_ref.model.override_config.attn_implementation=eager"])
    )
    assert explicit.actor_rollout_ref.model.override_config.attn_implementation == "eager"
    # checkpoints: an absolute directory (workers write it, the driver reads the HF export from it)
    assert Path(job.trainer.default_local_dir).is_absolute()
    assert job.trainer.default_local_dir == str(Path.cwd() / "checkpoints/agent-arena/grpo")


def test_keys_the_agent_loop_ignores_fail_loudly(capsys: pytest.CaptureFixture[str]) -> None:
    job = verl_config(
        compose_train([*REQUIRED[1:], "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3"])
    )
    assert job.actor_rollout_ref.rollout.multi_turn.max_assistant_turns == 3  # the one turn-limit key
    for override, message in (
        ("actor_rollout_ref.rollout.multi_turn.max_user_turns=2", "max_user_turns is not read"),
        ("+arena.max_turns=4", "arena.max_turns is not read"),
    ):
        with pytest.raises(ConfigError, match=message):
            verl_config(compose_train([*REQUIRED[1:], override]))


def test_local_ray_without_env_slots_fails_within_seconds(tmp_path: Path) -> None:
    """A Ray cluster where no node advertises arena_env_slots: a one-line error, not a wait forever; the
    local Ray `arena train` starts itself advertises them."""
    config = compose_train([*REQUIRED[1:], "arena.envs=[library]", "arena.workers_per_env=1"])
    ray.init(num_cpus=1, include_dashboard=False, configure_logging=False)
    try:
        started = time.monotonic()
        with pytest.raises(ConfigError, match="no node of this Ray cluster advertises arena_env_slots"):
            asyncio.run(asyncio.wait_for(ensure_pool(config), timeout=60))
        assert time.monotonic() - started < 10
    finally:
        ray.shutdown()
    connect(config, None)  # a local Ray
    try:
        assert ray.cluster_resources().get("arena_env_slots", 0) >= 1
        check_shared_storage(tmp_path / "ckpt")  # one node: it sees the driver's directory
        assert list((tmp_path / "ckpt").iterdir()) == []  # the marker is gone
    finally:
        ray.shutdown()


def test_slurm_gpu_nodes_alone_advertise_gpus(tmp_path: Path) -> None:
    """infra/slurm/ray.sbatch with Slurm's commands replaced by recorders (no Slurm here): head and
    environment nodes start Ray with --num-gpus=0 and arena_env_slots, GPU nodes with their GPUs and no
    slots."""
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    stubs = {
        "scontrol": "printf 'n0\\nn1\\nn2\\nn3\\n'",
        "srun": f'echo "$*" >> {log}; case "$*" in *hostname*) echo 10.0.0.1;; esac',
        "sleep": "true",
        # the script's wait for every node to join: here, for the 4 backgrounded `ray start` calls to land
        "python": f'cat > /dev/null; for _ in $(seq 300); do (( $(grep -c "ray start" {log}) >= 4 ))'
        " && exit 0; /bin/sleep 0.1; done; exit 1",
    }
    for name, body in stubs.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    (tmp_path / "bin" / "activate").write_text(f'export PATH="{bin_dir}:$PATH"\n')
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "ARENA_VENV": str(tmp_path),
        "SLURM_SUBMIT_DIR": str(tmp_path),
        "SLURM_JOB_NODELIST": "n[0-3]",
        "SLURM_CPUS_PER_TASK": "16",
        "SLURM_GPUS_ON_NODE": "8",
        "ARENA_GPU_NODES": "2",
    }
    script = Path(__file__).parents[1] / "infra/slurm/ray.sbatch"
    subprocess.run(["bash", str(script), "true"], env=env, check=True, timeout=30)
    starts = {}
    for line in log.read_text().splitlines():
        if "ray start" in line:
            node = line.split("-w ")[1].split()[0]
            starts[node] = line
    assert sorted(starts) == ["n0", "n1", "n2", "n3"]
    for node, gpus, slots in (("n0", 0, False), ("n1", 0, True), ("n2", 8, False), ("n3", 8, False)):
        assert f"--num-gpus={gpus}" in starts[node], starts[node]
        assert ("arena_env_slots" in starts[node]) is slots, starts[node]


def test_verl_cpu_preset_and_the_local_ray_it_needs() -> None:
    """``trainer=verl_cpu``: verl's trainer on the CPU platform with the hf rollout, valid for verl; a local
    Ray started for it offers a verl_cpu unit per rank and the logical CPUs that verl's bundles and
    TransferQueue's actors hold (else they wait forever on a small machine)."""
    config = compose_train(["trainer=verl_cpu", *REQUIRED[1:]])
    assert on_cpu(config) and config.actor_rollout_ref.rollout.name == "hf"
    assert config.actor_rollout_ref.actor.strategy == config.actor_rollout_ref.ref.strategy == "fsdp2"
    assert config.algorithm.adv_estimator == "arena_grpo"  # the arena's verl defaults underneath
    trainers.verl.setup.register()
    validate_config(config=verl_config(config), use_reference_policy=True, use_critic=False)
    cores = os.cpu_count() or 1
    ranks, units = (
        config.trainer.n_gpus_per_node,
        config.transfer_queue.backend.SimpleStorage.num_data_storage_units,
    )
    resources = local_ray_resources(config)
    assert resources["resources"] == {"arena_env_slots": cores, "verl_cpu": ranks}
    assert resources["num_cpus"] == cores + 3 * ranks + 1 + units
    gpu = compose_train(REQUIRED[1:])
    assert not on_cpu(gpu) and local_ray_resources(gpu) == {"resources": {"arena_env_slots": cores}}


def test_verls_placement_check_counts_cpu_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    """verl checks a worker group's placement against GPU/NPU node resources only; on the CPU platform it
    counts verl_cpu, and a shortfall is one line saying how to advertise it."""
    from verl.single_controller.ray.base import ResourcePoolManager

    monkeypatch.setattr(
        ResourcePoolManager, "_check_resource_available", ResourcePoolManager._check_resource_available
    )
    ray.init(num_cpus=1, resources={"verl_cpu": 2}, include_dashboard=False, configure_logging=False)
    try:
        with pytest.raises(ValueError, match="GPUs"):  # verl's own check on a CPU Ray
            ResourcePoolManager({"pool": [1]}, {})._check_resource_available()
        cpu_platform.count_platform_resource()
        ResourcePoolManager({"pool": [2]}, {})._check_resource_available()
        with pytest.raises(ValueError, match=r"wants 3 trainer ranks but .* offers 2 verl_cpu \(start nodes"):
            ResourcePoolManager({"pool": [3]}, {})._check_resource_available()
    finally:
        ray.shutdown()


def test_a_failed_round_job_is_one_line_naming_its_error(tmp_path: Path) -> None:
    """``arena evolve trainer=verl`` runs each round's job in a child process: when it fails, the round
    fails with the exception the child's log ends with, and where the log is."""
    job = OmegaConf.create({"trainer": {"device": "cuda"}})  # no verl sections at all
    with pytest.raises(
        EvolveError, match=r"the round's verl job failed: [\w.]+Error: Missing key .+\(log: .+verl\.log\)"
    ):
        run_job(job, None, tmp_path)
    assert (tmp_path / "verl_job.yaml").is_file() and "Traceback" in (tmp_path / "verl.log").read_text()
