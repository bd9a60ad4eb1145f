"""The local GRPO trainer: rollouts through the real episode loop on a real pool, verl's losses, the
infra-failure rule, and checkpoints that resume identically."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import ray
import torch

from arena.policies.hf import encode_conversation
from arena.rollout.episode import EpisodeConfig, EpisodeSession
from arena.runtime.pool import EnvPool
from task_synth.model import Task
from tests.conftest import local_pool
from tests.hf_samples import book_conversation, tiny_dir
from trainers.local import GRPOTrainer, Rollout, SFTExample, TrainerConfig
from trainers.local.trainer import scored_rollouts

module_loop = pytest.mark.asyncio(loop_scope="module")
CONFIG = TrainerConfig(
    epochs=30,
    sft_lr=3e-3,
    sft_batch_size=1,
    lr=1e-3,
    n_rollouts=4,
    max_new_tokens=40,
    kl_coef=0.01,
    concurrency=8,
)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pool() -> AsyncIterator[EnvPool]:
    async with local_pool({"library": 1}, warm_sessions_per_worker=8) as pool:
        yield pool


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def warm(pool: EnvPool, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Task, SFTExample]:
    """A tiny model half-way through learning the book conversation (so its samples differ)."""
    async with pool.session("library") as session:
        messages, tools, task = await book_conversation(session)
    example = SFTExample(messages, tools)
    trainer = GRPOTrainer(tiny_dir(tmp_path_factory.mktemp("tiny"), messages, tools), CONFIG)
    trainer.sft([example])
    return trainer.save(tmp_path_factory.mktemp("warm") / "ckpt"), task, example


def _logprob(trainer: GRPOTrainer, rollout: Rollout) -> float:
    with torch.no_grad():
        logprobs, mask = trainer._logprobs(trainer.model, [rollout.trajectory], 1.0)
    return float((logprobs * mask).sum())


def _margin(trainer: GRPOTrainer, graded: list[Rollout]) -> float:
    """How much likelier the rewarded episode is than the unrewarded ones (shared tokens cancel out)."""
    rewarded, *others = graded
    return _logprob(trainer, rewarded) - sum(_logprob(trainer, r) for r in others) / len(others)


@module_loop
async def test_grpo_moves_the_policy_toward_the_rewarded_episode(
    pool: EnvPool, warm: tuple[Path, Task, SFTExample]
) -> None:
    path, task, _ = warm
    trainer = GRPOTrainer(path, CONFIG)
    records = await trainer.rollout(pool, [task], EpisodeConfig(max_turns=3))
    assert len(records) == 4 and all(r.infra_error is None for r in records)
    batch, dropped = scored_rollouts(records)
    assert dropped == 0 and len(batch) == 4
    responses = [tuple(r.trajectory.response_ids) for r in batch]
    best = next(r for r, ids in zip(batch, responses, strict=True) if responses.count(ids) == 1)
    rest = [r for r in batch if r is not best]
    graded = [Rollout(best.trajectory, 1.0, "t"), *(Rollout(r.trajectory, 0.0, "t") for r in rest)]
    before = _margin(trainer, graded)
    losses = [trainer.update(graded) for _ in range(3)]
    assert all(m["pg_loss"] != 0.0 and m["grad_norm"] > 0 for m in losses)
    assert losses[-1]["kl"] > losses[0]["kl"] >= 0.0  # the reference is the weights before the first update
    assert _margin(trainer, graded) > before + 1.0
    uniform = trainer.update([Rollout(r.trajectory, 1.0, "u") for r in batch])
    assert uniform["pg_loss"] == pytest.approx(0.0, abs=1e-6)  # one group, same reward: no advantage


@asynccontextmanager
async def _killing(pool: EnvPool, kills: list[int], env: str) -> AsyncIterator[EpisodeSession]:
    async with pool.session(env) as lease:
        if kills:
            kills.pop()
            ray.get(pool.workers[env][0].actor.kill_server.remote())
        yield lease


class KillFirstSessions:
    """The real pool, whose worker's server is killed right after the first leases (a real crash)."""

    def __init__(self, pool: EnvPool, kills: int) -> None:
        self.pool, self.kills = pool, [0] * kills

    def session(self, env: str) -> Any:
        return _killing(self.pool, self.kills, env)


@module_loop
async def test_infra_failed_episodes_never_enter_a_batch(
    pool: EnvPool, warm: tuple[Path, Task, SFTExample]
) -> None:
    path, task, _ = warm
    trainer = GRPOTrainer(path, TrainerConfig(**{**CONFIG.__dict__, "concurrency": 1, "n_rollouts": 3}))
    metrics = await trainer.grpo_step(KillFirstSessions(pool, 1), [task], EpisodeConfig(max_turns=3))
    await pool.wait_healthy(60)
    failed = [r for r in metrics.records if r.infra_error is not None]
    assert failed and all(r.passed is None for r in failed)
    assert metrics.infra_dropped == len(failed) and metrics.batch_episodes == 3 - len(failed)
    batch, dropped = scored_rollouts(metrics.records)
    assert dropped == len(failed) and all(r.trajectory not in [f.trajectory for f in failed] for r in batch)
    assert metrics.step == trainer.step == 1


@module_loop
async def test_a_checkpoint_resumes_identically(
    pool: EnvPool, warm: tuple[Path, Task, SFTExample], tmp_path: Path
) -> None:
    path, task, example = warm
    trainer = GRPOTrainer(path, CONFIG)
    await trainer.grpo_step(pool, [task], EpisodeConfig(max_turns=3))
    saved = trainer.save(tmp_path / "step1")
    assert (saved / "config.json").is_file() and (saved / "ref" / "config.json").is_file()
    resumed = GRPOTrainer.resume(saved)
    assert resumed.step == 1 and resumed.config == CONFIG
    ids = torch.tensor([[1, 5, 9, 20, 33, 7]])
    with torch.no_grad():
        assert torch.equal(trainer.model(ids).logits, resumed.model(ids).logits)
        assert torch.equal(trainer.ref_model(ids).logits, resumed.ref_model(ids).logits)
    original, loaded = trainer.optimizer.state_dict(), resumed.optimizer.state_dict()
    for key, state in original["state"].items():
        assert torch.equal(state["exp_avg"], loaded["state"][key]["exp_avg"])
    one = trainer.sft([example])["epoch_loss"]
    two = resumed.sft([example])["epoch_loss"]
    assert one == pytest.approx(two, rel=1e-5)


def _turn_nll(trainer: GRPOTrainer, example: SFTExample) -> list[float]:
    """Mean negative log-likelihood of each assistant turn of ``example`` under ``trainer``'s model."""
    trajectory = encode_conversation(trainer.tokenizer, example.messages, example.tools)
    with torch.no_grad():
        logprobs, mask = trainer._logprobs(trainer.model, [trajectory], 1.0)
    values, turns, previous = logprobs[0].tolist(), [], 0
    for index, flag in enumerate(mask[0].tolist()):
        if flag and not previous:
            turns.append([])
        if flag:
            turns[-1].append(-values[index])
        previous = flag
    return [sum(turn) / len(turn) for turn in turns]


@module_loop
async def test_first_turn_epochs_train_the_first_turn_only(pool: EnvPool, tmp_path: Path) -> None:
    async with pool.session("library") as session:
        messages, tools, _ = await book_conversation(session)
    example = SFTExample(messages, tools)
    config = TrainerConfig(epochs=0, sft_first_turn_epochs=40, sft_lr=3e-3, sft_batch_size=1)
    trainer = GRPOTrainer(tiny_dir(tmp_path, messages, tools), config)
    first_before = _turn_nll(trainer, example)[0]
    metrics = trainer.sft([example])
    first_after, second_after = _turn_nll(trainer, example)
    assert len(metrics["first_turn_epoch_loss"]) == 40 and metrics["epoch_loss"] == []
    assert first_after < first_before / 10, (first_before, first_after)
    assert second_after > 5 * first_after, (first_after, second_after)


@module_loop
async def test_a_token_budget_trains_that_many_tokens_whatever_the_examples(
    pool: EnvPool, tmp_path: Path
) -> None:
    async with pool.session("library") as session:
        messages, tools, _ = await book_conversation(session)
    first = next(i for i, m in enumerate(messages) if m["role"] == "assistant")
    short, whole = SFTExample(messages[: first + 1], tools), SFTExample(messages, tools)
    trainer = GRPOTrainer(tiny_dir(tmp_path, messages, tools), TrainerConfig(epochs=1, sft_batch_size=2))
    lengths = [
        len(t.prompt_ids) + len(t.response_ids)
        for t in (encode_conversation(trainer.tokenizer, e.messages, e.tools) for e in (short, whole))
    ]
    assert lengths[0] < lengths[1]
    budget = 3 * lengths[1] + lengths[0] // 2
    for examples in ([whole], [short, whole], [short]):  # different data, the same compute
        metrics = trainer.sft(examples, tokens=budget)
        shortest = min(lengths[0] if short in examples else lengths[1], lengths[1])
        assert budget - shortest < metrics["tokens"] <= budget, (examples, metrics["tokens"])
        assert metrics["first_turn_epoch_loss"] == [] and len(metrics["epoch_loss"]) >= 1


@module_loop
async def test_linear_sft_decay_lowers_the_learning_rate_step_by_step_to_near_zero(
    pool: EnvPool, tmp_path: Path
) -> None:
    async with pool.session("library") as session:
        messages, tools, _ = await book_conversation(session)
    example = SFTExample(messages, tools)
    steps: dict[str, list[float]] = {}
    for decay in ("constant", "linear"):
        config = TrainerConfig(epochs=5, sft_lr=2e-3, lr=1e-4, sft_batch_size=1, sft_lr_decay=decay)
        trainer = GRPOTrainer(tiny_dir(tmp_path / decay, messages, tools), config)
        seen = steps.setdefault(decay, [])
        trainer.optimizer.register_step_pre_hook(lambda opt, *_, s=seen: s.append(opt.param_groups[0]["lr"]))
        trainer.sft([example])
        assert trainer.optimizer.param_groups[0]["lr"] == 1e-4  # GRPO's rate again after SFT
    assert steps["constant"] == [2e-3] * 5
    assert steps["linear"] == pytest.approx([2e-3, 1.6e-3, 1.2e-3, 0.8e-3, 0.4e-3])
    with pytest.raises(ValueError, match="sft_lr_decay must be one of constant, linear"):
        TrainerConfig(sft_lr_decay="cosine")
