"""verl's agent-loop machinery driving the ``arena_agent`` loop against real environment sessions.

verl's own ``AgentLoopWorker`` (built from the arena's composed verl config) runs batches read through
verl's ``RLHFDataset`` from the arena's parquet export; generation goes through verl's ``LLMServerClient``
and router to a scripted Ray server of token ids; sessions come from a real ``EnvPool`` behind the named
pool actor. No GPU, no download.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import numpy as np
import pytest
import ray
import torch
from verl.protocol import DataProto
from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn
from verl.workers.rollout.llm_server import LLMServerClient
from verl.workers.rollout.router import get_router_handle

import trainers.verl.setup
from arena.runtime.pool import PoolConfig
from tests.hf_samples import book_conversation, tiny_dir
from tests.verl_samples import LOGPROB, ScriptedServer, scripted_tasks, verl_config
from trainers.verl import dataset
from trainers.verl.advantage import arena_grpo_advantage
from trainers.verl.pool_service import RemoteSessions, start_pool

trainers.verl.setup.register()
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker  # noqa: E402

pytestmark = pytest.mark.slow


class Harness:
    """The pool actor, a tiny tokenizer, the book task, and a factory of verl workers."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.pool_name = f"arena_pool_{uuid.uuid4().hex[:8]}"
        self.pool = None

    async def start(self) -> None:
        self.pool = await start_pool(
            PoolConfig(envs={"library": 1}, warm_sessions_per_worker=2), name=self.pool_name, detached=False
        )
        async with RemoteSessions(self.pool).session("library") as session:
            self.messages, self.tools, self.task = await book_conversation(session)
        self.copies = int(json.loads(self.messages[-1]["content"])["copies"])
        self.model_dir = tiny_dir(self.root / "tiny", self.messages, self.tools)

    def worker(self, server=None) -> tuple[AgentLoopWorker, object]:
        """verl's worker over the arena's composed config; the shared scripted server unless given one."""
        if not hasattr(self, "_worker"):
            self.config = verl_config(self.model_dir, self.root / "unused.parquet", self.pool_name)
            self.server = ScriptedServer.remote(str(self.model_dir), self.copies)
            self._worker = AgentLoopWorker(self.config, self.client(self.server))
        if server is not None:
            return AgentLoopWorker(self.config, self.client(server)), server
        return self._worker, self.server

    def client(self, server) -> LLMServerClient:
        return LLMServerClient(self.config, load_balancer_handle=get_router_handle({"scripted": server}))

    async def run(self, plays: list[str], server=None, infra_retries: int = 1):
        """verl's worker on one batch of scripted tasks, read from their parquet export by RLHFDataset."""
        tasks = scripted_tasks(self.task, plays)
        out = self.root / f"data-{uuid.uuid4().hex[:6]}"
        assert dataset.export(tasks, out, val_fraction=0.0) == {"train": len(tasks), "val": 0}
        worker, server = self.worker(server)
        worker.config.arena.infra_retries = infra_retries
        data = RLHFDataset([str(out / "train.parquet")], worker.tokenizer, worker.config.data)
        batch = DataProto.from_single_dict(collate_fn([data[i] for i in range(len(data))]))
        return await worker.generate_sequences(batch), tasks, worker, server

    def batch(self, plays: list[str]) -> dict:
        """A collated batch of scripted tasks, read from their parquet export by verl's RLHFDataset."""
        worker, _ = self.worker()
        out = self.root / f"data-{uuid.uuid4().hex[:6]}"
        dataset.export(scripted_tasks(self.task, plays), out, val_fraction=0.0)
        data = RLHFDataset([str(out / "train.parquet")], worker.tokenizer, worker.config.data)
        return collate_fn([data[i] for i in range(len(data))])

    async def leases(self) -> int:
        return (await self.pool.stats.remote())["leases"]


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory):
    started = not ray.is_initialized()
    if started:
        ray.init(include_dashboard=False, configure_logging=False)
    h = Harness(tmp_path_factory.mktemp("verl"))
    asyncio.run(h.start())
    yield h
    ray.get(h.pool.shutdown.remote())
    ray.kill(h.pool)
    if started:
        ray.shutdown()


def _row(output: DataProto, i: int) -> dict:
    return {key: values[i] for key, values in output.non_tensor_batch.items()}


async def test_correct_and_wrong_trajectories_masks_and_rewards(harness: Harness) -> None:
    output, tasks, worker, server = await harness.run(["correct", "wrong"])
    tokenizer = worker.tokenizer
    batch = output.batch
    rm = batch["rm_scores"].sum(dim=-1).tolist()
    assert rm == [1.0, 0.0]  # the verifier's verdicts: the right copy count passes, one more fails
    assert [_row(output, i)["failure_mode"] for i in range(2)] == ["solved", "wrong_answer"]
    assert [_row(output, i)["arena_infra_error"] for i in range(2)] == [0, 0]
    replies = await server.history.remote()
    for i, task in enumerate(tasks):
        prompt = batch["prompts"][i][batch["attention_mask"][i][: batch["prompts"].shape[1]].bool()].tolist()
        length = int(batch["attention_mask"][i][batch["prompts"].shape[1] :].sum())
        response = batch["responses"][i][:length].tolist()
        mask = batch["response_mask"][i][:length].tolist()
        # the tokens are the chat template's rendering of the whole conversation, tools included
        call = {
            "id": "c",
            "type": "function",
            "function": {"name": "get_book", "arguments": '{"book_id": 1}'},
        }
        answer = json.dumps({"copies": harness.copies + i})  # the correct count, then one more
        assert answer in replies
        conversation = [
            {"role": "system", "content": harness.messages[0]["content"]},
            {"role": "user", "content": task.request},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c", "content": "x"},
            {"role": "assistant", "content": answer},
        ]
        rendered = tokenizer.apply_chat_template(conversation, tools=harness.tools, tokenize=False)
        text = tokenizer.decode(prompt + response)
        before, after = rendered.split("<|tool|>x<|end|>")
        assert text.startswith(before) and text.endswith(after)
        # mask 1 exactly on the generated turns: the call and the answer, each with its <|end|>
        generated = tokenizer.decode([t for t, m in zip(response, mask, strict=True) if m])
        call_text = '<tool_call>{"name": "get_book", "arguments": {"book_id": 1}}</tool_call>'
        assert generated == f"{call_text}<|end|>{answer}<|end|>"
        context = tokenizer.decode([t for t, m in zip(response, mask, strict=True) if not m])
        assert context.startswith("<|tool|>") and context.endswith("<|end|><|assistant|>")
        assert '"copies"' in context  # the real tool result came back from the environment
        logprobs = batch["rollout_log_probs"][i][:length]
        assert torch.allclose(logprobs, torch.tensor([LOGPROB if m else 0.0 for m in mask]))
    assert await harness.leases() == 0


async def test_tool_error_is_fed_back_and_session_released(harness: Harness) -> None:
    output, _, _, _ = await harness.run(["tool_error"])
    row = _row(output, 0)
    assert row["failure_mode"] == "solved"  # it recovered from the error the environment returned
    assert row["episode_metrics"]["tool_errors"] == 1 and row["episode_metrics"]["tool_calls"] == 2
    assert output.batch["rm_scores"].sum().item() == 1.0
    assert await harness.leases() == 0


async def test_exception_propagates_and_session_released(harness: Harness) -> None:
    with pytest.raises(Exception, match="scripted crash"):
        await harness.run(["crash"])
    assert await harness.leases() == 0


async def test_dead_rollout_server_is_masked_never_scored(harness: Harness) -> None:
    output, _, _, _ = await harness.run(
        ["correct", "die"], server=ScriptedServer.remote(str(harness.model_dir), harness.copies)
    )
    # the server died serving the second sample; the first may or may not have finished before it
    rows = [_row(output, i) for i in range(2)]
    dead = rows[1]
    assert dead["arena_infra_error"] == 1 and dead["failure_mode"] == "infra_error"
    assert dead["attempts"] == 2  # retried once, then masked
    assert output.batch["response_mask"][1].sum().item() == 0
    # GRPO over the group leaves the masked sample out: it gets advantage 0 and no say in the baseline
    rewards = torch.zeros(3, 4)
    rewards[:, -1] = torch.tensor([1.0, 0.0, 0.0])
    mask = torch.ones(3, 4)
    mask[2] = 0
    adv, _ = arena_grpo_advantage(rewards, mask, np.array(["g", "g", "g"], dtype=object))
    alone, _ = arena_grpo_advantage(rewards[:2], mask[:2], np.array(["g", "g"], dtype=object))
    assert torch.equal(adv[2], torch.zeros(4))
    assert torch.allclose(adv[:2], alone)
    assert await harness.leases() == 0
    # verl's v1 trainer reads every trajectory's weight versions as integers (trainer_base.py:1897)
    versions = [[row[key] for key in ("min_global_steps", "max_global_steps")] for row in rows]
    assert np.array(versions, dtype=int).shape == (2, 2)


async def test_weight_versions_of_the_servers_turns_reach_the_trajectory(harness: Harness) -> None:
    server = ScriptedServer.remote(str(harness.model_dir), harness.copies)
    await server.set_weights_version.remote(4)
    output, _, _, _ = await harness.run(["correct"], server=server)
    row = _row(output, 0)
    assert (row["min_global_steps"], row["max_global_steps"]) == (4, 4)  # both turns on version 4


async def test_dead_environment_worker_is_retried_on_a_fresh_session(harness: Harness) -> None:
    await harness.pool.break_worker.remote("library")
    output, _, _, _ = await harness.run(["correct"], infra_retries=6)
    row = _row(output, 0)
    assert row["attempts"] >= 2  # the first session died with its worker
    assert row["failure_mode"] == "solved" and row["arena_infra_error"] == 0
    assert output.batch["rm_scores"].sum().item() == 1.0
    assert await harness.leases() == 0


async def test_tool_results_cut_to_max_tool_response_length(harness: Harness) -> None:
    worker, _ = harness.worker()
    multi_turn = worker.config.actor_rollout_ref.rollout.multi_turn
    multi_turn.max_tool_response_length, multi_turn.tool_response_truncate_side = 6, "right"
    try:
        output, _, _, _ = await harness.run(["correct"])
    finally:
        multi_turn.max_tool_response_length, multi_turn.tool_response_truncate_side = 16384, "middle"
    batch = output.batch
    length = int(batch["attention_mask"][0][batch["prompts"].shape[1] :].sum())
    response, mask = batch["responses"][0][:length].tolist(), batch["response_mask"][0][:length].tolist()
    context = worker.tokenizer.decode([t for t, m in zip(response, mask, strict=True) if not m])
    assert "...(truncated)" in context and '"copies"' not in context  # the model saw 6 characters of it
    assert _row(output, 0)["failure_mode"] == "solved"  # the verifier reads the environment, not the text
    assert await harness.leases() == 0


async def test_max_assistant_turns_is_the_turn_limit(harness: Harness) -> None:
    worker, _ = harness.worker()
    multi_turn = worker.config.actor_rollout_ref.rollout.multi_turn
    multi_turn.max_assistant_turns = 1
    try:
        output, _, _, _ = await harness.run(["correct"])  # the script needs two turns (a call, an answer)
    finally:
        multi_turn.max_assistant_turns = 12
    row = _row(output, 0)
    assert row["failure_mode"] != "solved" and row["episode_metrics"]["turns"] == 1
    assert output.batch["rm_scores"].sum().item() == 0.0
    assert await harness.leases() == 0
