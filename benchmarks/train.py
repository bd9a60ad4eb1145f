"""Local-trainer benchmark on the tiny policy: rollout episodes/s, update tokens/s, seconds per GRPO step
and the environment's share of rollout wall time.

Usage: python benchmarks/train.py [--tasks 8] [--n 4] [--steps 2] [--sft-epochs 3] [--model DIR]

Synthesizes level-1 tasks of two built-in environments (offline), builds the ``tiny`` model (tokenizer
trained on their tool schemas, requests and results), warms it up by SFT on the tasks' reference
conversations (so it makes tool calls; ``--model`` starts from a trained checkpoint instead), then
runs GRPO steps (tasks x n rollouts each, through the real episode loop on a local pool) and times them.
Baseline for the rollout: the same step's episodes with generation one turn at a time (``max_batch=1``,
no batching across concurrent episodes). The env share is the time episodes spent waiting on tool calls
over their wall time. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from arena.policies.scripted import ReferencePolicy  # noqa: E402
from arena.policies.tiny import build_tiny, conversation_corpus, tool_corpus  # noqa: E402
from arena.rollout.conversation import messages_of  # noqa: E402
from arena.rollout.episode import SYSTEM_PROMPT, EpisodeConfig, run_episode, tool_specs  # noqa: E402
from arena.runtime.pool import EnvPool, PoolConfig  # noqa: E402
from benchmarks.stats import Row, print_table  # noqa: E402
from task_synth.model import Task  # noqa: E402
from task_synth.synthesizer import synthesize  # noqa: E402
from trainers.local import GRPOTrainer, SFTExample, TrainerConfig  # noqa: E402

ENVS = ("library", "airline")


async def reference_example(pool: EnvPool, task: Task) -> SFTExample:
    """The ``reference`` policy's episode of the task, as the conversation a policy would have seen."""
    record = await run_episode(pool, task, ReferencePolicy(), EpisodeConfig(max_turns=64))
    async with pool.session(task.env) as lease:
        tools = tool_specs(await lease.list_tools())
    return SFTExample(messages_of(record, SYSTEM_PROMPT), tools)


async def run(tasks_per_step: int, n: int, steps: int, sft_epochs: int, model: Path | None) -> dict[str, Any]:
    async with EnvPool(PoolConfig(envs=dict.fromkeys(ENVS, 1), warm_sessions_per_worker=8)) as pool:
        tasks = [
            t
            for env in ENVS
            for t in (await synthesize(pool, env, n=tasks_per_step, levels=[1], seed=3)).tasks
        ]
        examples = [await reference_example(pool, task) for task in tasks]
        corpus = [SYSTEM_PROMPT, *(s for e in examples for s in tool_corpus(e.tools))]
        corpus += conversation_corpus(e.messages for e in examples)
        with tempfile.TemporaryDirectory() as scratch:
            config = TrainerConfig(
                epochs=sft_epochs,
                n_rollouts=n,
                tasks_per_step=tasks_per_step,
                max_new_tokens=64,
                concurrency=32,
            )
            trainer = GRPOTrainer(model or build_tiny(Path(scratch) / "tiny", corpus), config)
            sft = trainer.sft(examples) if sft_epochs else {"tokens_per_s": None}
            episode = EpisodeConfig(max_turns=4)
            step_tasks = tasks[:tasks_per_step]
            batched = trainer.policy.config
            trainer.policy.config = replace(batched, max_batch=1)  # the baseline first: both see warm state
            unbatched = await trainer.grpo_step(pool, step_tasks, episode)
            trainer.policy.config = batched
            metrics = [await trainer.grpo_step(pool, step_tasks, episode) for _ in range(steps)]
    rollout = [m.episodes / m.rollout_s for m in metrics]
    update = [m.update_tokens / m.update_s for m in metrics]
    step = [m.rollout_s + m.update_s for m in metrics]
    env_share = [m.tool_wait_s / m.episode_wall_s for m in metrics]
    print_table(
        f"local GRPO on the tiny policy: {tasks_per_step} tasks x {n} rollouts per step, {steps} steps",
        [
            Row.from_samples(
                "rollout episodes/s",
                rollout,
                unit="ep/s",
                baseline_name="generation one turn at a time",
                baseline=unbatched.episodes / unbatched.rollout_s,
                lower_is_better=False,
            ),
            Row.from_samples("update tokens/s", update, unit="tok/s", lower_is_better=False),
            Row.from_samples("GRPO step", step, unit="s"),
            Row.from_samples("env share of rollout wall", env_share, unit="share"),
            Row("SFT warm start tokens/s", sft["tokens_per_s"], unit="tok/s", lower_is_better=False),
        ],
    )
    return {
        "rollout_episodes_per_s": round(statistics.median(rollout), 3),
        "rollout_episodes_per_s_unbatched": round(unbatched.episodes / unbatched.rollout_s, 3),
        "update_tokens_per_s": round(statistics.median(update), 1),
        "step_s": round(statistics.median(step), 2),
        "env_share_of_rollout": round(statistics.median(env_share), 4),
        "sft_tokens_per_s": sft["tokens_per_s"] and round(sft["tokens_per_s"], 1),
        "success_per_step": [round(m.success, 3) for m in metrics],
        "mean_turns": round(statistics.mean(len(r.turns) for m in metrics for r in m.records), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=8, help="tasks per GRPO step")
    parser.add_argument("--n", type=int, default=4, help="rollouts per task")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--sft-epochs", type=int, default=3, help="0: no warm start (use with --model)")
    parser.add_argument("--model", type=Path, help="a trained tiny checkpoint to start from")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args.tasks, args.n, args.steps, args.sft_epochs, args.model))))


if __name__ == "__main__":
    main()
