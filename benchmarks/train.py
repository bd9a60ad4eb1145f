"""Local-trainer benchmark on the pretrained policy (``smollm2-135m``, fetched once): SFT and GRPO-update
tokens/s per precision and fine-tuning mode on the same batch, rollout episodes/s with and without reused
keys and values, and the environments' share of a GRPO step.

Usage: python benchmarks/train.py [--tasks 4] [--n 4] [--sft-examples 16] [--repeats 3] [--model NAME_OR_DIR]
[--bf16]

Synthesizes level 1-2 tasks of two built-in environments (offline) and plays them with the ``reference``
policy: their conversations are the SFT batch. Every variant (float32 full fine-tune of every weight,
float32 LoRA r=16 on every linear layer, and with ``--bf16`` or where the processor has native bfloat16 the
same two under bf16 autocast; then float32 full and bf16 LoRA in the main job's scope, the top 10 of 30
layers, ``top 10``) starts from the same weights and trains one epoch on the same batch, then one GRPO
update on the same rollouts, with the main job's settings otherwise (``conf/trainer/local.yaml`` and
``conf/policy/smollm2.yaml``: 4 conversations a batch). The ``>= 2x`` target (bf16 LoRA's SFT against the
float32 full fine-tune) is read on the whole model, as the issue measured it; in the main job's scope the
forward pass through the 20 frozen layers, the same in every variant, and the attention kernel (as slow in
bfloat16 as in float32 on a CPU) are most of a step, and the ratio is lower. The fetched model
rarely calls a tool; ``--model`` a warm-started checkpoint (an ``arena evolve`` run's
``checkpoints/round0``) makes the rollouts multi-turn, as in training. Rollouts: ``tasks`` x ``n`` episodes
through the real episode loop on a local pool, in the main job's precision (``auto``: bf16 where native),
as after a weight update (prompt prefixes and the bf16 copy built again), once with the environment's
prompt prefix and each episode's earlier turns reused (``reuse_cache``) and once re-encoding the whole
conversation every turn (the baseline). Each episode samples from its own stream (``HFPolicy.start``), the
same in both; bf16 prefills of different shapes round the probabilities differently, so a draw near a
boundary may fall the other way and the episode goes its own way from there (of 16 episodes, 5-8 were the
same token for token, 14-16 took as many turns; the JSON line gives each rollout's turns). Every variant
runs ``repeats`` times (rollouts with seeds 0, 1, ...; which goes first alternates) and the table gives the
median and the spread; the JSON line the medians, and each rollout's seconds and turns. The env share is
the time episodes spent waiting on tool calls over the GRPO step's wall time. The last line printed is one
JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from omegaconf import OmegaConf  # noqa: E402

from arena.models.fetch import resolve  # noqa: E402
from arena.policies.hf import HFPolicy  # noqa: E402
from arena.policies.precision import native_bf16  # noqa: E402
from arena.policies.scripted import ReferencePolicy  # noqa: E402
from arena.rollout.conversation import messages_of  # noqa: E402
from arena.rollout.episode import SYSTEM_PROMPT, EpisodeConfig, run_episode, tool_specs  # noqa: E402
from arena.rollout.records import EpisodeRecord  # noqa: E402
from arena.runtime.pool import EnvPool, PoolConfig  # noqa: E402
from benchmarks.stats import Row, print_table  # noqa: E402
from task_synth.model import Task  # noqa: E402
from task_synth.synthesizer import synthesize  # noqa: E402
from trainers.local import GRPOTrainer, SFTExample  # noqa: E402
from trainers.local.evolve import trainer_config  # noqa: E402
from trainers.local.trainer import scored_rollouts  # noqa: E402

ENVS = ("library", "airline")
LORA_RANK = 16


async def reference_example(pool: EnvPool, task: Task) -> SFTExample:
    """The ``reference`` policy's episode of the task, as the conversation a policy would have seen."""
    record = await run_episode(pool, task, ReferencePolicy(), EpisodeConfig(max_turns=64))
    async with pool.session(task.env) as lease:
        tools = tool_specs(await lease.list_tools())
    return SFTExample(messages_of(record, SYSTEM_PROMPT), tools)


def scope_name(top_layers: int) -> str:
    """The suffix of the variants trained in the main job's scope, its top ``top_layers`` layers."""
    return f"top {top_layers}"


def variants(bf16: bool, top_layers: int) -> list[tuple[str, dict[str, Any]]]:
    """Every variant's name and trainer fields: the four fine-tuning modes over the whole model (a full
    fine-tune trains every weight, LoRA adapts every linear layer), then the float32 full fine-tune and
    bf16 LoRA in the main job's scope (the top ``top_layers`` layers)."""
    modes = [
        ("fp32 full", {"precision": "fp32"}),
        ("fp32 LoRA", {"precision": "fp32", "lora_rank": LORA_RANK}),
    ]
    if bf16:
        modes += [
            ("bf16 full", {"precision": "bf16"}),
            ("bf16 LoRA", {"precision": "bf16", "lora_rank": LORA_RANK}),
        ]
    whole = [(name, {**fields, "train_top_layers": 0}) for name, fields in modes]
    scoped = [
        (f"{name}, {scope_name(top_layers)}", {**fields, "train_top_layers": top_layers})
        for name, fields in modes
        if name in ("fp32 full", "bf16 LoRA")
    ]
    return whole + scoped


async def timed_rollout(
    player: GRPOTrainer, pool: EnvPool, tasks: list[Task], episode: EpisodeConfig, reuse: bool, seed: int
) -> tuple[list[EpisodeRecord], float]:
    """One GRPO step's rollouts as the main job plays them after an update (a fresh policy over the
    player's weights: prompt prefixes and the bf16 copy built again), with or without reused keys and
    values, its episodes sampling from the streams of ``seed``; the records and the wall seconds."""
    config = replace(player.policy.config, reuse_cache=reuse, seed=seed)
    player.policy = HFPolicy(player.model, player.tokenizer, config)
    started = time.perf_counter()
    records = await player.rollout(pool, tasks, episode)
    return records, time.perf_counter() - started


def trained(model: str, config: Any, examples: list[SFTExample], batch: list[Any]) -> dict[str, float]:
    """One SFT epoch on ``examples`` then one GRPO update on ``batch``, from the model's weights."""
    trainer = GRPOTrainer(model, config)
    sft = trainer.sft(examples)
    started = time.perf_counter()
    update = trainer.update(batch)
    update_s = time.perf_counter() - started
    return {
        "sft_tokens_per_s": sft["tokens_per_s"],
        "update_tokens_per_s": update["update_tokens"] / update_s,
        "update_s": update_s,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    model = resolve(args.model)
    bf16 = args.bf16 or native_bf16("cpu")
    main_job = trainer_config(
        OmegaConf.to_container(OmegaConf.load(ROOT / "conf/trainer/local.yaml")),
        OmegaConf.to_container(OmegaConf.load(ROOT / "conf/policy/smollm2.yaml")),
    )
    base = replace(main_job, epochs=1, n_rollouts=args.n, tasks_per_step=args.tasks, precision="fp32")
    async with EnvPool(PoolConfig(envs=dict.fromkeys(ENVS, 1), warm_sessions_per_worker=8)) as pool:
        per_env = max(args.sft_examples, args.tasks) // len(ENVS) + 1
        tasks = [
            t for env in ENVS for t in (await synthesize(pool, env, n=per_env, levels=[1, 2], seed=3)).tasks
        ]
        examples = [await reference_example(pool, task) for task in tasks][: args.sft_examples]
        episode, step_tasks = EpisodeConfig(max_turns=4), tasks[: args.tasks]
        player = GRPOTrainer(model, replace(base, precision=main_job.precision))  # as the main job plays
        played: dict[bool, list[tuple[list[EpisodeRecord], float]]] = {True: [], False: []}
        for repeat in range(args.repeats):  # seed r for both; which goes first alternates
            for reuse in (True, False) if repeat % 2 == 0 else (False, True):
                played[reuse].append(await timed_rollout(player, pool, step_tasks, episode, reuse, repeat))
        records, rollout_s = played[True][0]
        batch, _ = scored_rollouts(records)
        results = {
            name: [trained(model, replace(base, **fields), examples, batch) for _ in range(args.repeats)]
            for name, fields in variants(bf16, main_job.train_top_layers)
        }
    scope = scope_name(main_job.train_top_layers)
    rates = {reuse: [len(recs) / seconds for recs, seconds in runs] for reuse, runs in played.items()}
    cached, plain = statistics.median(rates[True]), statistics.median(rates[False])
    median = {
        name: {key: statistics.median(run[key] for run in runs) for key in runs[0]}
        for name, runs in results.items()
    }
    env_share = sum(sum(t.tool_wait_s for t in r.turns) for r in records) / (
        rollout_s + median[f"fp32 full, {scope}"]["update_s"]
    )
    rows = [
        Row.from_samples(
            "rollout episodes/s (reused KV)",
            rates[True],
            unit="ep/s",
            target=">= 2x",
            lower_is_better=False,
            baseline_name="whole conversation re-encoded every turn",
            baseline=plain,
        ),
    ]
    for name, runs in results.items():
        baseline = f"fp32 full, {scope}" if name.endswith(scope) else "fp32 full"
        for key, label in (("sft_tokens_per_s", "SFT"), ("update_tokens_per_s", "GRPO update")):
            rows.append(
                Row.from_samples(
                    f"{label} tokens/s, {name}",
                    [run[key] for run in runs],
                    unit="tok/s",
                    lower_is_better=False,
                    baseline_name=baseline,
                    baseline=median[baseline][key],
                    target=">= 2x" if name.startswith("bf16 LoRA") and label == "SFT" else "",
                )
            )
    rows.append(Row("env share of a GRPO step", env_share, unit="share"))
    print_table(
        f"local trainer on {Path(model).name}: {args.tasks} tasks x {args.n} rollouts, "
        f"{len(examples)} SFT conversations, median of {args.repeats} runs",
        rows,
    )
    return {
        "model": Path(model).name,
        "native_bf16": native_bf16("cpu"),
        "repeats": args.repeats,
        "rollout_episodes_per_s": round(cached, 3),
        "rollout_episodes_per_s_no_reuse": round(plain, 3),
        "rollout_speedup": round(cached / plain, 2),
        "rollout_runs": {
            "reused" if reuse else "re-encoded": [
                {"seconds": round(seconds, 2), "turns": sum(len(r.turns) for r in recs)}
                for recs, seconds in runs
            ]
            for reuse, runs in played.items()
        },
        "rollout_precision": main_job.precision,
        "sft_tokens_per_s": {k: round(v["sft_tokens_per_s"], 1) for k, v in median.items()},
        "update_tokens_per_s": {k: round(v["update_tokens_per_s"], 1) for k, v in median.items()},
        "env_share_of_grpo_step": round(env_share, 4),
        "rollout_success": round(statistics.mean(r.reward for r in batch), 3) if batch else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=4, help="tasks per GRPO step")
    parser.add_argument("--n", type=int, default=4, help="rollouts per task")
    parser.add_argument("--sft-examples", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3, help="runs of each rollout and training variant")
    parser.add_argument("--model", default="smollm2-135m", help="a catalog name or a Hugging Face folder")
    parser.add_argument("--bf16", action="store_true", help="also bf16 where the processor lacks native bf16")
    print(json.dumps(asyncio.run(run(parser.parse_args()))))


if __name__ == "__main__":
    main()
