"""One GRPO step of verl on CPU, run as its own process
(``python -m tests.verl_cpu_step RESULT.json WORKDIR``) so the test that starts it can kill it with its
Ray on a timeout, and verl's platform choice stays out of the test process.

verl's own pieces, in the order of its trainer's ``fit`` (trainer/ppo/ray_trainer.py:1510-1690): the
``arena_agent`` loop run by verl's ``AgentLoopWorker`` against a real ``EnvPool`` (generation by a
scripted token server: a random tiny model never solves a task, and GRPO needs both verdicts in a
group), verl's ``ActorRolloutRefWorker`` as an actor and a ref worker group placed by verl's
``RayWorkerGroup`` on CPUs (``trainers.verl.cpu_platform``, installed by the job's
``worker_process_setup_hook``), FSDP2 on gloo, the log-prob, advantage and update calls of verl's
``RayPPOTrainer`` (its methods, called on this driver's worker groups), then a checkpoint with its
Hugging Face export. Writes what it measured as JSON.
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
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker  # noqa: E402
from verl.protocol import DataProto  # noqa: E402
from verl.single_controller.ray.base import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup  # noqa: E402
from verl.trainer.ppo.ray_trainer import RayPPOTrainer, compute_advantage  # noqa: E402
from verl.trainer.ppo.reward import extract_reward  # noqa: E402
from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn  # noqa: E402
from verl.workers.engine_workers import ActorRolloutRefWorker  # noqa: E402
from verl.workers.rollout.llm_server import LLMServerClient  # noqa: E402
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
    "trainer.n_gpus_per_node=1",
)


def worker_group(config: Any, pool: RayResourcePool, role: str) -> RayWorkerGroup:
    """verl's worker class in ``role``, one rank, placed by verl on the CPU platform's resources."""
    cls = RayClassWithInitArgs(ray.remote(ActorRolloutRefWorker), config=config.actor_rollout_ref, role=role)
    return RayWorkerGroup(pool, cls, device_name="cpu")


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
    actor, ref = worker_group(config, placement, "actor"), worker_group(config, placement, "ref")
    actor.init_model()
    ref.init_model()
    lap("workers")

    server = ScriptedServer.remote(str(model_dir), copies)
    agent = AgentLoopWorker(
        config, LLMServerClient(config, load_balancer_handle=get_router_handle({"s": server}))
    )
    out = root / "data"
    dataset.export(scripted_tasks(task, ["alternate"]), out, val_fraction=0.0)
    rows = RLHFDataset([str(out / "train.parquet")], agent.tokenizer, config.data)
    batch = DataProto.from_single_dict(collate_fn([rows[0]]))
    batch.meta_info["temperature"] = config.actor_rollout_ref.rollout.temperature
    batch.non_tensor_batch["uid"] = np.array([uuid.uuid4().hex], dtype=object)
    trainer = SimpleNamespace(config=config, actor_rollout_wg=actor, ref_policy_wg=ref, ref_in_actor=False)
    gen_batch = RayPPOTrainer._get_gen_batch(trainer, batch).repeat(repeat_times=N, interleave=True)
    batch = batch.repeat(repeat_times=N, interleave=True).union(await agent.generate_sequences(gen_batch))
    batch.meta_info["global_token_num"] = batch.batch["attention_mask"].sum(dim=-1).tolist()
    batch.meta_info["images_seqlens"] = []
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
