"""``arena train trainer=verl``: the composed config is verl's own ``ppo_trainer`` with the arena's GRPO
defaults, every verl key overridable, and valid for verl's trainer."""

from __future__ import annotations

import pytest
import yaml
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import validate_config

import trainers.verl.setup
from arena.cli.main import main
from trainers.verl.launch import compose_train, verl_config

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
