"""One GRPO step of verl on CPU, run as its own process
(``python -m tests.verl_cpu_step RESULT.json WORKDIR``) so the test that starts it can kill it with its
Ray on a timeout, and verl's platform choice stays out of the test process.

verl's own pieces, in the order of its trainer's ``fit`` (trainer/ppo/ray_trainer.py:1510-1690): the
``arena_agent`` loop run by verl's ``AgentLoopWorker`` against a real ``EnvPool``, verl's
``ActorRolloutRefWorker`` as a hybrid actor-rollout and a ref worker group placed by verl's
``RayWorkerGroup`` on CPUs (``trainers.verl.cpu_platform``, installed by the job's
``worker_process_setup_hook``), FSDP2 on gloo, the ``hf`` rollout replica (``trainers.verl.hf_rollout``)
launched by verl's ``LLMServerManager``, the log-prob, advantage and update calls of verl's
``RayPPOTrainer`` (its methods, called on this driver's worker groups), the weight sync by verl's
``CheckpointEngineManager``, then a checkpoint with its Hugging Face export. Writes what it measured as JSON.

The update trains on a group played by a scripted token server (a random tiny model never solves a task,
and GRPO needs both verdicts in a group); the ``hf`` replica plays the same task with the tiny model
before the update and after the weight sync, and the actor scores what it generated.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

os.environ["VERL_PLATFORM"] = "cpu"  # before verl resolves its platform in this process

import numpy as np
import ray
import torch
from safetensors.torch import load_file

import trainers.verl.setup
from arena.runtime.pool import PoolConfig
from tests.hf_samples import book_conversation, tiny_dir
from tests.verl_samples import ScriptedServer, scripted_tasks, verl_config
from trainers.verl import dataset
from trainers.verl.cpu_platform import RESOURCE
from trainers.verl.pool_service import RemoteSessions, start_pool

trainers.verl.setup.register()
from verl.checkpoint_engine import CheckpointEngineManager  # noqa: E402
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker  # noqa: E402
from verl.protocol import DataProto  # noqa: E402
from verl.single_controller.ray.base import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup  # noqa: E402
from verl.trainer.ppo.ray_trainer import RayPPOTrainer, compute_advantage  # noqa: E402
from verl.trainer.ppo.reward import extract_reward  # noqa: E402
from verl.utils.config import omega_conf_to_dataclass  # noqa: E402
from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn  # noqa: E402
from verl.workers.engine_workers import ActorRolloutRefWorker  # noqa: E402
from verl.workers.rollout.llm_server import LLMServerClient, LLMServerManager  # noqa: E402
from verl.workers.rollout.router import get_router_handle  # noqa: E402

N = 2  # rollouts per task: one GRPO group of two
CPU_OVERRIDES = (
    "actor_rollout_ref.actor.strategy=fsdp2",
    "actor_rollout_ref.ref.strategy=fsdp2",
    "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
    f"actor_rollout_ref.rollout.n={N}",
    "data.train_batch_size=1",
    "actor_rollout_ref.actor.ppo_mini_batch_size=1",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
    "actor_rollout_ref.actor.optim.lr=1e-3",  # a random tiny model: a step large enough to see
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2",
    "actor_rollout_ref.rollout.name=hf",
    "actor_rollout_ref.rollout.n_gpus_per_node=1",
    "trainer.n_gpus_per_node=1",
)


def worker_group(config: Any, pool: RayResourcePool, role: str) -> RayWorkerGroup:
    """verl's worker class in ``role``, one rank, placed by verl on the CPU platform's resources."""
    cls = RayClassWithInitArgs(ray.remote(ActorRolloutRefWorker), config=config.actor_rollout_ref, role=role)
    return RayWorkerGroup(pool, cls, device_name="cpu")


async def rollout(agent: AgentLoopWorker, trainer: Any, rows: RLHFDataset, index: int) -> DataProto:
    """Row ``index`` played ``N`` times by ``agent``'s server, as ``fit`` prepares a batch for it."""
    batch = DataProto.from_single_dict(collate_fn([rows[index]]))
    batch.meta_info["temperature"] = trainer.config.actor_rollout_ref.rollout.temperature
    batch.non_tensor_batch["uid"] = np.array([uuid.uuid4().hex], dtype=object)
    gen_batch = RayPPOTrainer._get_gen_batch(trainer, batch).repeat(repeat_times=N, interleave=True)
    batch = batch.repeat(repeat_times=N, interleave=True).union(await agent.generate_sequences(gen_batch))
    batch.meta_info["global_token_num"] = batch.batch["attention_mask"].sum(dim=-1).tolist()
    batch.meta_info["images_seqlens"] = []
    return batch


def replica_vs_actor(batch: DataProto, trainer: Any) -> dict[str, Any]:
    """How far the log-probs the replica returned for its tokens are from the actor's and the ref's."""
    actor, _ = RayPPOTrainer._compute_old_log_prob(trainer, batch)
    ref = RayPPOTrainer._compute_ref_log_prob(trainer, batch)
    mask = batch.batch["response_mask"].bool()
    served = batch.batch["rollout_log_probs"][mask]
    return {
        "tokens": int(mask.sum()),
        "vs_actor": float((served - actor.batch["old_log_probs"][mask]).abs().mean()),
        "vs_ref": float((served - ref.batch["ref_log_prob"][mask]).abs().mean()),
        "failure_modes": [str(mode) for mode in batch.non_tensor_batch["failure_mode"]],
    }


def weights(model_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(str(next(model_dir.glob("*.safetensors"))))


async def step(root: Path) -> dict[str, Any]:
    started, timings = time.monotonic(), {}

    def lap(name: str) -> None:
        timings[name] = round(time.monotonic() - started, 1)

    pool_name = f"arena_pool_{uuid.uuid4().hex[:8]}"
    pool = await start_pool(
        PoolConfig(envs={"library": 1}, warm_sessions_per_worker=2), name=pool_name, detached=False
    )
    async with RemoteSessions(pool).session("library") as session:
        messages, tools, task = await book_conversation(session)
    copies = int(json.loads(messages[-1]["content"])["copies"])
    model_dir = tiny_dir(root / "tiny", messages, tools)
    config = verl_config(model_dir, root / "unused.parquet", pool_name, *CPU_OVERRIDES)
    lap("pool_and_model")

    placement = RayResourcePool([1], use_gpu=True, max_colocate_count=2)
    actor, ref = worker_group(config, placement, "actor_rollout"), worker_group(config, placement, "ref")
    actor.init_model()
    ref.init_model()
    lap("workers")

    servers = await LLMServerManager.create(config=config, worker_group=actor)
    weight_sync = CheckpointEngineManager(
        config=omega_conf_to_dataclass(config.actor_rollout_ref.rollout.checkpoint_engine),
        actor_wg=actor,
        replicas=servers.get_replicas(),
    )
    await weight_sync.sleep_replicas()
    lap("replica")

    scripted = ScriptedServer.remote(str(model_dir), copies)
    agent = AgentLoopWorker(
        config, LLMServerClient(config, load_balancer_handle=get_router_handle({"s": scripted}))
    )
    hf_agent = AgentLoopWorker(config, servers.get_client())
    out = root / "data"
    dataset.export([*scripted_tasks(task, ["alternate"]), task], out, val_fraction=0.0)
    rows = RLHFDataset([str(out / "train.parquet")], agent.tokenizer, config.data)
    trainer = SimpleNamespace(config=config, actor_rollout_wg=actor, ref_policy_wg=ref, ref_in_actor=False)
    scripted_row = next(i for i in range(len(rows)) if "[scripted" in rows[i]["extra_info"]["task"])
    model_row = 1 - scripted_row
    await weight_sync.wake_up_replicas()
    replica_before = replica_vs_actor(await rollout(hf_agent, trainer, rows, model_row), trainer)
    await weight_sync.sleep_replicas()
    batch = await rollout(agent, trainer, rows, scripted_row)
    lap("rollout")

    rewards, _ = extract_reward(batch)
    old, _ = RayPPOTrainer._compute_old_log_prob(trainer, batch)
    old.batch.pop("entropys")
    batch = batch.union(old)
    batch = batch.union(RayPPOTrainer._compute_ref_log_prob(trainer, batch))
    batch.batch["token_level_scores"] = batch.batch["token_level_rewards"] = rewards
    batch = compute_advantage(
        batch, adv_estimator=config.algorithm.adv_estimator, num_repeat=N, config=config.algorithm
    )
    lap("log_probs_and_advantages")
    metrics = RayPPOTrainer._update_actor(trainer, batch).meta_info["metrics"]
    lap("update")

    after, _ = RayPPOTrainer._compute_old_log_prob(trainer, batch)
    await weight_sync.update_weights(global_steps=1)
    hf_after = await rollout(hf_agent, trainer, rows, model_row)
    lap("weight_sync_and_rollout")
    mask = batch.batch["response_mask"].bool()
    checkpoint = root / "checkpoint" / "global_step_1" / "actor"
    actor.save_checkpoint(str(checkpoint), global_step=1)
    lap("checkpoint")
    before_w, after_w = weights(model_dir), weights(checkpoint / "huggingface")
    advantages = batch.batch["advantages"]
    return {
        "adv_estimator": config.algorithm.adv_estimator,
        "rewards": rewards.sum(dim=-1).tolist(),
        "failure_modes": [str(mode) for mode in batch.non_tensor_batch["failure_mode"]],
        "advantages": [float(advantages[i][mask[i]].mean()) for i in range(len(batch))],
        "response_tokens": int(mask.sum()),
        "metrics": {key: float(np.mean(value)) for key, value in metrics.items() if np.size(value)},
        "log_prob_delta": float(
            (after.batch["old_log_probs"][mask] - batch.batch["old_log_probs"][mask]).abs().max()
        ),
        "ref_equals_old": bool(
            torch.allclose(batch.batch["ref_log_prob"][mask], batch.batch["old_log_probs"][mask])
        ),
        "tensors": len(before_w),
        "tensors_exported": len(before_w.keys() & after_w.keys()),
        "export_dtype": str(next(iter(after_w.values())).dtype),
        "tensors_changed": sum(
            not torch.equal(before_w[k].to(after_w[k].dtype), after_w[k])
            for k in before_w.keys() & after_w.keys()
        ),
        "replica_before_update": replica_before,
        "replica_after_sync": {
            **replica_vs_actor(hf_after, trainer),
            "global_steps": hf_after.non_tensor_batch["min_global_steps"].tolist(),
        },
        "timings_s": timings,
    }


def start_ray(attempts: int = 3) -> None:
    """A local Ray for the job; retried, since Ray gives its raylet a fixed 30 s to register and a loaded
    machine can miss that."""
    for attempt in range(attempts):
        try:
            ray.init(
                include_dashboard=False,
                num_cpus=4,  # logical: verl's bundle holds max_colocate_count CPUs beside the pool's workers
                resources={RESOURCE: 1},  # one trainer rank: the actor and the ref worker share it
                runtime_env={
                    "worker_process_setup_hook": "trainers.verl.setup.register",
                    "env_vars": {"VERL_PLATFORM": "cpu", "PYTHONPATH": str(Path(__file__).parents[1])},
                },
            )
            return
        except Exception as exc:
            if "timed out during startup" not in str(exc) or attempt == attempts - 1:
                raise
            ray.shutdown()


def main() -> None:
    result_path, root = Path(sys.argv[1]), Path(sys.argv[2])
    start_ray()
    try:
        result_path.write_text(json.dumps(asyncio.run(step(root))))
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
