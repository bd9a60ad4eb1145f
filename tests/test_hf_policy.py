"""The local Hugging Face policy: tool-call parsing, and a tiny model built at test time playing a real
episode against a real library server, with token ids, mask and log-probs that line up."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from arena.policies.hf import HFPolicy, HFPolicyConfig, encode_conversation
from arena.policies.toolcall_parsing import parse_reply
from arena.rollout.conversation import messages_of
from arena.rollout.episode import SYSTEM_PROMPT, EpisodeConfig, episodes, run_episode
from arena.runtime.pool import EnvPool
from task_synth.model import Task
from tests.conftest import local_pool
from tests.hf_samples import SIZE, book_conversation, tiny_dir
from trainers.local import GRPOTrainer, SFTExample, TrainerConfig

module_loop = pytest.mark.asyncio(loop_scope="module")


def test_hermes_calls_with_content_and_several_blocks() -> None:
    reply = parse_reply(
        'Looking.<tool_call>{"name": "get_book", "arguments": {"book_id": 1}}</tool_call>\n'
        '<tool_call>{"name": "get_member", "arguments": "{\\"member_id\\": 2}"}</tool_call>',
        "c",
    )
    assert reply.format_error is None and reply.content == "Looking."
    assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == [
        ("c0", "get_book", {"book_id": 1}),
        ("c1", "get_member", {"member_id": 2}),
    ]


def test_bare_json_call_a_list_of_calls_and_a_fenced_call() -> None:
    one = parse_reply('{"name": "get_book", "arguments": {"book_id": 3}}')
    assert [(c.name, c.arguments) for c in one.tool_calls] == [("get_book", {"book_id": 3})]
    assert one.content is None
    many = parse_reply('[{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"x": 1}}]')
    assert [(c.name, c.arguments) for c in many.tool_calls] == [("a", {}), ("b", {"x": 1})]
    fenced = parse_reply('```json\n{"name": "a", "arguments": {"k": "v"}}\n```')
    assert [(c.name, c.arguments) for c in fenced.tool_calls] == [("a", {"k": "v"})]


def test_a_final_answer_is_content_not_a_call() -> None:
    for text in ('{"copies": 3}', '{"name": "Dune"}', "The answer is 3.", '[{"name": "Dune"}]'):
        reply = parse_reply(text)
        assert reply.tool_calls == [] and reply.format_error is None and reply.content == text


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('<tool_call>{"name": "get_book", "arguments": {"book_id": 1}</tool_call>', "not valid JSON"),
        ('<tool_call>{"name": "get_book", "arguments": {}}', "no closing </tool_call>"),
        ('<tool_call>{"arguments": {"book_id": 1}}</tool_call>', 'must be an object with a "name"'),
        ("<tool_call>[1, 2]</tool_call>", 'must be an object with a "name"'),
        ('[{"name": "a", "arguments": {}}, 7]', 'must be an object with a "name"'),
    ],
)
def test_a_malformed_call_is_a_format_error(text: str, problem: str) -> None:
    reply = parse_reply(text)
    assert reply.tool_calls == [] and reply.format_error is not None and problem in reply.format_error


def test_arguments_that_are_not_an_object_are_kept_raw() -> None:
    reply = parse_reply('<tool_call>{"name": "get_book", "arguments": "book 1"}</tool_call>')
    assert reply.format_error is None
    assert reply.tool_calls[0].arguments is None and reply.tool_calls[0].raw == "book 1"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pool() -> AsyncIterator[EnvPool]:
    async with local_pool({"library": 1}, warm_sessions_per_worker=4) as pool:
        yield pool


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def learned(
    pool: EnvPool, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, list[dict[str, Any]], list[dict[str, Any]], Task]:
    """A tiny model that has memorised the book conversation by SFT (the trainer's own SFT)."""
    async with pool.session("library") as session:
        messages, tools, task = await book_conversation(session)
    base = tiny_dir(tmp_path_factory.mktemp("tiny"), messages, tools)
    trainer = GRPOTrainer(base, TrainerConfig(epochs=60, sft_lr=3e-3, sft_batch_size=1))
    metrics = trainer.sft([SFTExample(messages, tools)])
    assert metrics["epoch_loss"][-1] < metrics["epoch_loss"][0] / 10, metrics["epoch_loss"]
    return trainer.save(tmp_path_factory.mktemp("sft") / "ckpt"), messages, tools, task


def _segments(ids: list[int], mask: list[int]) -> list[tuple[int, list[int]]]:
    out: list[tuple[int, list[int]]] = []
    for token, flag in zip(ids, mask, strict=True):
        if out and out[-1][0] == flag:
            out[-1][1].append(token)
        else:
            out.append((flag, [token]))
    return out


@module_loop
async def test_a_tiny_model_plays_a_real_episode_and_records_aligned_tokens(
    pool: EnvPool, learned: tuple[Path, list[dict[str, Any]], list[dict[str, Any]], Task]
) -> None:
    path, messages, tools, task = learned
    policy = HFPolicy.load(HFPolicyConfig(path=str(path), temperature=0.0, max_new_tokens=48))
    record = await run_episode(pool, task, policy, EpisodeConfig(max_turns=4))
    assert record.infra_error is None and record.finished
    assert [c.name for c in record.tool_calls] == ["get_book"]
    assert record.tool_calls[0].arguments == {"book_id": 1} and record.tool_calls[0].error_code is None
    assert record.passed is True, record.verdict
    turns = record.turns
    trajectory = record.trajectory
    assert trajectory is not None
    tokenizer = policy.tokenizer
    assert turns[0].prompt_tokens == len(trajectory.prompt_ids)
    assert tokenizer.decode(trajectory.prompt_ids) == tokenizer.apply_chat_template(
        messages[:2], tools=tools, tokenize=False, add_generation_prompt=True
    )
    lengths = [len(trajectory.response_ids), len(trajectory.response_mask), len(trajectory.response_logprobs)]
    assert len(set(lengths)) == 1
    segments = _segments(trajectory.response_ids, trajectory.response_mask)
    assert [flag for flag, _ in segments] == [1, 0, 1]
    assert [len(ids) for flag, ids in segments if flag] == [t.completion_tokens for t in turns]
    call_text = tokenizer.decode(segments[0][1])
    assert call_text.startswith("<tool_call>") and call_text.endswith("<|end|>")
    tool_text = tokenizer.decode(segments[1][1])
    tool_message = record.tool_calls[0].result
    shown = json.dumps(tool_message)[: SIZE.tool_result_chars]  # the tiny template's cut
    assert tool_text == f"<|tool|>{shown}<|end|><|assistant|>"
    assert tokenizer.decode(segments[2][1], skip_special_tokens=True) == turns[1].content
    assert all(
        lp == 0.0
        for lp, m in zip(trajectory.response_logprobs, trajectory.response_mask, strict=True)
        if not m
    )
    full = torch.tensor([trajectory.prompt_ids + trajectory.response_ids])
    with torch.no_grad():
        logits = policy.model(full).logits[0, len(trajectory.prompt_ids) - 1 : -1]
    again = torch.log_softmax(logits, -1).gather(-1, full[0, len(trajectory.prompt_ids) :, None]).squeeze(-1)
    generated = torch.tensor(trajectory.response_mask, dtype=torch.bool)
    recorded = torch.tensor(trajectory.response_logprobs)
    assert torch.allclose(again[generated], recorded[generated], atol=1e-4)
    encoded = encode_conversation(tokenizer, messages_of(record, SYSTEM_PROMPT), tools)
    assert encoded.prompt_ids == trajectory.prompt_ids
    assert (
        encoded.response_ids == trajectory.response_ids and encoded.response_mask == trajectory.response_mask
    )


@module_loop
async def test_sampled_concurrent_episodes_are_generated_in_batches(
    pool: EnvPool, learned: tuple[Path, list[dict[str, Any]], list[dict[str, Any]], Task]
) -> None:
    path, _, _, task = learned
    policy = HFPolicy.load(HFPolicyConfig(path=str(path), temperature=1.0, max_new_tokens=48, max_batch=8))
    records = [
        r async for r in episodes(pool, [(task, i) for i in range(6)], policy, EpisodeConfig(max_turns=3), 6)
    ]
    assert len(records) == 6 and all(r.infra_error is None for r in records)
    assert max(policy.batches) > 1
    for record in records:
        t = record.trajectory
        assert t is not None and len(t.response_ids) == len(t.response_mask) == len(t.response_logprobs)


@module_loop
async def test_a_conversation_over_the_context_limit_is_refused_after_the_first_turn(
    pool: EnvPool, learned: tuple[Path, list[dict[str, Any]], list[dict[str, Any]], Task]
) -> None:
    path, messages, tools, task = learned
    tokenizer = AutoTokenizer.from_pretrained(path)
    prompt = len(
        tokenizer.encode(
            tokenizer.apply_chat_template(
                messages[:2], tools=tools, tokenize=False, add_generation_prompt=True
            )
        )
    )
    policy = HFPolicy.load(HFPolicyConfig(path=str(path), temperature=0.0, context_limit=prompt + 40))
    record = await run_episode(pool, task, policy, EpisodeConfig(max_turns=4))
    assert record.infra_error is None and record.passed is False
    assert "refused turn 2" in record.verdict.reasons[0] and "context limit" in record.verdict.reasons[0]


def test_the_tiny_folder_loads_with_the_auto_classes(
    learned: tuple[Path, list[dict[str, Any]], list[dict[str, Any]], Task],
) -> None:
    path, messages, tools, _ = learned
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    assert model.config.model_type == "llama" and tokenizer.eos_token == "<|end|>"
    text = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False)
    assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text
    assert (
        "\nget_book(book_id)" in text
        and '<tool_call>{"name": "get_book", "arguments": {"book_id": 1}}' in text
    )
