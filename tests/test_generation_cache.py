"""Reused keys and values (each environment's prompt prefix, each episode's earlier turns) change nothing
that a policy generates: greedy turns are the same tokens with the same log-probs as without reuse."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from arena.policies.attention import load_causal_lm
from arena.policies.base import TokenTrajectory
from arena.policies.generation import (
    GenerationRequest,
    PrefixCache,
    ReservedLayer,
    Sampling,
    _prefill_groups,
    generate,
    kv_length,
)
from arena.policies.hf import HFPolicy, HFPolicyConfig
from arena.policies.tiny import build_tiny
from arena.rollout.episode import SYSTEM_PROMPT

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name} by id.",
            "parameters": {"type": "object", "properties": {"item_id": {"type": "integer"}}},
        },
    }
    for name in ("get_book", "get_member", "list_loans")
]
REQUESTS = [
    "How many copies of book 1 exist?",
    "Which member borrowed the most books last month, and what is their e-mail address?",
    "List loans.",
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    corpus = [SYSTEM_PROMPT, *REQUESTS, json.dumps(TOOLS), '{"id": 1, "title": "Dune", "copies": 3}']
    from tests.hf_samples import SIZE

    return build_tiny(tmp_path_factory.mktemp("tiny"), corpus, SIZE, seed=3)


async def _play(policy: HFPolicy, request: str, turns: int, task_id: str | None = None) -> TokenTrajectory:
    """``turns`` turns of one episode (of a task with ``task_id``), each answered by the same tool
    result, whatever was generated."""
    episode = policy.start(SimpleNamespace(id=task_id) if task_id else None, TOOLS)  # type: ignore[arg-type]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": request},
    ]
    for turn in range(turns):
        reply = await episode.act(messages)
        call = {"id": f"c{turn}", "type": "function", "function": {"name": "get_book", "arguments": "{}"}}
        messages += [
            {"role": "assistant", "content": reply.content, "tool_calls": [call]},
            {
                "role": "tool",
                "tool_call_id": f"c{turn}",
                "content": json.dumps({"id": turn, "n": "x" * turn}),
            },
        ]
    trajectory = episode.trajectory()
    assert trajectory is not None
    return trajectory


async def _all(policy: HFPolicy) -> list[TokenTrajectory]:
    return list(await asyncio.gather(*(_play(policy, request, 3) for request in REQUESTS)))


@pytest.mark.parametrize("shared", [True, False], ids=["shared-prefix", "prefix-in-cache"])
def test_greedy_turns_are_the_same_with_and_without_reused_keys_and_values(
    model_dir: Path, shared: bool
) -> None:
    """With ``sdpa_gqa`` attention the environment's prompt prefix is each request's shared prefix (read
    once per decode step); with transformers' ``sdpa`` it is the start of each episode's own cache."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = load_causal_lm(model_dir) if shared else AutoModelForCausalLM.from_pretrained(model_dir)
    runs = {}
    for reuse in (True, False):
        config = HFPolicyConfig(temperature=0.0, max_new_tokens=12, max_batch=8, reuse_cache=reuse)
        policy = HFPolicy(model, tokenizer, config)
        runs[reuse] = asyncio.run(_all(policy))
        if reuse:
            assert policy.shares_prefixes == shared
            assert policy.prefixes.misses == 1 and policy.prefixes.hits == len(REQUESTS) - 1
            assert max(policy.batches) > 1  # the episodes' turns were generated together
    assert sum(sum(t.response_mask) for t in runs[True]) > 3 * len(REQUESTS)  # more than EOS each turn
    for cached, plain in zip(runs[True], runs[False], strict=True):
        assert cached.prompt_ids == plain.prompt_ids
        assert cached.response_ids == plain.response_ids and cached.response_mask == plain.response_mask
        gaps = [abs(x - y) for x, y in zip(cached.response_logprobs, plain.response_logprobs, strict=True)]
        assert max(gaps) < 1e-4


def test_a_sampled_episode_draws_the_same_alone_as_beside_other_episodes(model_dir: Path) -> None:
    """At temperature 1 each episode samples from its own stream (the policy's seed, its task, how many
    episodes of the task came before): alone, or started last in batches with two other episodes, it
    generates the same tokens; another seed generates others."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = load_causal_lm(model_dir)

    def policy(seed: int) -> HFPolicy:
        config = HFPolicyConfig(temperature=1.0, max_new_tokens=12, max_batch=8, seed=seed)
        return HFPolicy(model, tokenizer, config)

    async def beside_others(player: HFPolicy) -> list[TokenTrajectory]:
        plays = [_play(player, request, 3, task) for request, task in zip(REQUESTS, "acb", strict=True)]
        return list(await asyncio.gather(*plays))

    alone = asyncio.run(_play(policy(5), REQUESTS[2], 3, "b"))
    player = policy(5)
    together = asyncio.run(beside_others(player))[2]
    assert max(player.batches) == 3
    assert together.response_ids == alone.response_ids
    gaps = [abs(x - y) for x, y in zip(together.response_logprobs, alone.response_logprobs, strict=True)]
    assert max(gaps) < 1e-4
    others = [asyncio.run(_play(policy(seed), REQUESTS[2], 3, "b")).response_ids for seed in (6, 7)]
    assert any(ids != alone.response_ids for ids in others)


def test_weights_changed_drops_cached_prefixes(model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    policy = HFPolicy(model, tokenizer, HFPolicyConfig(temperature=0.0, max_new_tokens=4))
    asyncio.run(_play(policy, REQUESTS[0], 1))
    policy.weights_changed()
    asyncio.run(_play(policy, REQUESTS[0], 1))
    assert policy.prefixes.misses == 2 and policy.prefixes.hits == 0


async def _staggered(policy: HFPolicy, delay_s: float) -> None:
    """The first turns of two live episodes, the second asked ``delay_s`` after the first (as an episode
    back from a tool call)."""
    first, second = (policy.start(None, TOOLS) for _ in range(2))  # type: ignore[arg-type]

    async def turn(episode: Any, request: str, delay: float) -> None:
        await asyncio.sleep(delay)
        messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": request}]
        await episode.act(messages)
        episode.close()

    await asyncio.gather(turn(first, REQUESTS[0], 0.0), turn(second, REQUESTS[1], delay_s))


async def _started_apart(policy: HFPolicy, delay_s: float, after_one_ended: bool = False) -> None:
    """A rollout's first turns: the second episode starts ``delay_s`` after the first one asked (its
    environment still being set up, or the first one's prompt prefix holding the event loop); with
    ``after_one_ended``, two new episodes taking an ended one's place."""
    if after_one_ended:
        policy.start(None, TOOLS).close()  # type: ignore[arg-type]

    async def episode(request: str, delay: float) -> None:
        await asyncio.sleep(delay)
        agent = policy.start(None, TOOLS)  # type: ignore[arg-type]
        await agent.act([{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": request}])
        agent.close()

    await asyncio.gather(episode(REQUESTS[0], 0.0), episode(REQUESTS[1], delay_s))


def _gathering_policy(model_dir: Path, gather_s: float) -> HFPolicy:
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    return HFPolicy(model, tokenizer, HFPolicyConfig(temperature=0.0, max_new_tokens=4, gather_s=gather_s))


@pytest.mark.parametrize("scenario", ["staggered", "started_apart", "refilled"])
@pytest.mark.parametrize(("gather_s", "batches"), [(1.0, [2]), (0.0, [1, 1])])
def test_a_turn_arriving_within_the_gather_window_joins_the_batch(
    model_dir: Path, scenario: str, gather_s: float, batches: list[int]
) -> None:
    """Both live episodes' first turns, the second 0.3 s later; a rollout's first turns, the second
    episode starting 0.3 s after the first one asked; the same as new episodes take an ended one's
    place. With a window: not [1, 1] (the first turn, its episode the one live, alone)."""
    policy = _gathering_policy(model_dir, gather_s)
    asyncio.run(
        _staggered(policy, 0.3)
        if scenario == "staggered"
        else _started_apart(policy, 0.3, scenario == "refilled")
    )
    assert policy.batches == batches


def test_no_wait_for_turns_once_every_live_episode_is_waiting(model_dir: Path) -> None:
    policy = _gathering_policy(model_dir, 30.0)
    episode = policy.start(None, TOOLS)  # type: ignore[arg-type]
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": REQUESTS[0]}]
    asyncio.run(episode.act(messages))  # its first turn waits a window: others may be starting beside it
    messages += [{"role": "assistant", "content": "x"}, {"role": "user", "content": REQUESTS[1]}]
    policy._changed_at -= 30.0  # as if the window had passed since it started: no one else came
    started = time.perf_counter()
    asyncio.run(episode.act(messages))
    assert time.perf_counter() - started < 10.0  # not the 30 s window: no other episode can join
    episode.close()
    episode.close()  # closing twice counts once
    assert policy._live == 0


def test_generation_runs_on_the_event_loop_thread_and_lets_the_loop_run_between_passes(
    model_dir: Path,
) -> None:
    """Every forward pass of a generation on the event loop's thread (a second thread running torch
    kernels makes OpenMP throttle both: ``HFPolicy._generated``), and other coroutines run between the
    passes, not after the whole generation."""
    policy = _gathering_policy(model_dir, 0.0)
    threads: set[int] = set()
    passes: list[int] = []

    def record(*_: Any) -> None:
        threads.add(threading.get_ident())
        passes.append(0)

    policy.model.register_forward_pre_hook(record)

    async def play() -> list[int]:
        ticks: list[int] = []  # how many passes had run at each tick of a concurrent coroutine
        episode = policy.start(None, TOOLS)  # type: ignore[arg-type]
        messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": REQUESTS[0]}]
        turn = asyncio.create_task(episode.act(messages))
        while not turn.done():
            ticks.append(len(passes))
            await asyncio.sleep(0)
        await turn
        return ticks

    ticks = asyncio.run(play())
    assert threads == {threading.get_ident()}
    assert len(passes) > 2 and len({tick for tick in ticks if 0 < tick < len(passes)}) >= 2


def _assert_each_row_as_alone(model: Any, requests: list[GenerationRequest], sampling: Sampling) -> None:
    together = generate(model, requests, sampling)
    for request, batched in zip(requests, together, strict=True):
        (alone,) = generate(model, [request], sampling)
        assert batched.ids == alone.ids and batched.stopped == alone.stopped
        assert max(abs(a - b) for a, b in zip(batched.logprobs, alone.logprobs, strict=True)) < 1e-4
        fed = kv_length(request.cache) + len(request.tokens) + len(alone.ids) - 1
        assert kv_length(batched.cache) == kv_length(alone.cache) == fed
        for (keys, values), (keys_alone, values_alone) in zip(batched.cache, alone.cache, strict=True):
            assert torch.allclose(keys, keys_alone, atol=1e-5) and torch.allclose(
                values, values_alone, atol=1e-5
            )


def test_a_batch_generates_what_each_request_generates_alone(model_dir: Path) -> None:
    """Rows whose caches and new tokens differ in length (prefilled alone, then decoded together over a
    right-aligned batch cache) get the ids, log-probs and caches they get alone."""
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    sampling = Sampling(0.0, 1.0, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.eos_token_id)
    shared = PrefixCache().get(model, tokenizer.encode(SYSTEM_PROMPT))
    requests = [
        GenerationRequest(tokenizer.encode(REQUESTS[0]), shared, 9),
        GenerationRequest(tokenizer.encode(REQUESTS[1] + " " + REQUESTS[2]), None, 5),
        GenerationRequest(tokenizer.encode(REQUESTS[2]), shared, 7),
    ]
    _assert_each_row_as_alone(model, requests, sampling)


def test_rows_of_similar_lengths_are_prefilled_together_and_generate_as_alone(model_dir: Path) -> None:
    """Rows whose new tokens are of similar lengths go through one padded prefill (caches of different
    lengths right-aligned, new tokens right-aligned, the pads masked out) and get the ids, log-probs and
    caches they get alone."""
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    sampling = Sampling(0.0, 1.0, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.eos_token_id)
    shared = PrefixCache().get(model, tokenizer.encode(SYSTEM_PROMPT))
    (earlier,) = generate(model, [GenerationRequest(tokenizer.encode(REQUESTS[1]), shared, 6)], sampling)
    texts = [REQUESTS[0], REQUESTS[0] + " Thanks.", "How many copies of book 2 exist?", REQUESTS[0]]
    requests = [GenerationRequest(tokenizer.encode(text), shared, 7) for text in texts[:3]]
    requests.append(GenerationRequest(tokenizer.encode(texts[3]), earlier.cache, 7))  # a longer cache
    assert len({len(r.tokens) for r in requests}) > 1 and len({kv_length(r.cache) for r in requests}) == 2
    fed: list[tuple[int, int]] = []
    hook = model.register_forward_pre_hook(
        lambda _, args, kwargs: fed.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True
    )
    try:
        generate(model, requests, sampling)
    finally:
        hook.remove()
    assert fed[0] == (4, max(len(r.tokens) for r in requests))  # one prefill of every row
    _assert_each_row_as_alone(model, requests, sampling)


def _with_prefix_in_cache(request: GenerationRequest) -> GenerationRequest:
    """The same request, its shared prefix copied into the start of its own cache."""
    if request.prefix is None:
        return request
    cache = (
        request.prefix
        if request.cache is None
        else tuple(
            (torch.cat([pk, k], dim=1), torch.cat([pv, v], dim=1))
            for (pk, pv), (k, v) in zip(request.prefix, request.cache, strict=True)
        )
    )
    return GenerationRequest(request.tokens, cache, request.max_new_tokens)


def test_rows_sharing_prefixes_generate_what_they_generate_with_the_prefix_in_their_cache(
    model_dir: Path,
) -> None:
    """Rows after two different shared prefixes (some with a cache of their own after it, one with none)
    decode together, each prefix read once a step: the same ids, log-probs and caches (after the prefix)
    as with each row's prefix copied into its own cache, including after finished rows leave the batch."""
    model = load_causal_lm(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    no_eos = len(tokenizer)  # every row runs to its limit: rows leave the batch at different steps
    sampling = Sampling(0.0, 1.0, eos_token_id=no_eos, pad_token_id=tokenizer.eos_token_id)
    prefixes = [PrefixCache().get(model, tokenizer.encode(text)) for text in (SYSTEM_PROMPT, REQUESTS[1])]
    (earlier,) = generate(model, [GenerationRequest(tokenizer.encode("Hi"), None, 5, prefixes[0])], sampling)
    requests = [
        GenerationRequest(tokenizer.encode(REQUESTS[0]), None, 3, prefixes[0]),
        GenerationRequest(tokenizer.encode(REQUESTS[2]), earlier.cache, 20, prefixes[0]),
        GenerationRequest(tokenizer.encode(REQUESTS[0]), None, 14, prefixes[1]),
        GenerationRequest(tokenizer.encode(REQUESTS[2]), None, 9),
        GenerationRequest(tokenizer.encode(REQUESTS[0] + " Now."), None, 20, prefixes[1]),
    ]
    shared = generate(model, requests, sampling)
    copied = generate(model, [_with_prefix_in_cache(r) for r in requests], sampling)
    for request, one, other in zip(requests, shared, copied, strict=True):
        assert one.ids == other.ids and len(one.ids) == request.max_new_tokens
        assert max(abs(a - b) for a, b in zip(one.logprobs, other.logprobs, strict=True)) < 1e-4
        skip = kv_length(request.prefix)
        for (keys, values), (all_keys, all_values) in zip(one.cache, other.cache, strict=True):
            assert torch.allclose(keys, all_keys[:, skip:], atol=1e-5)
            assert torch.allclose(values, all_values[:, skip:], atol=1e-5)


def test_a_shared_prefix_needs_a_model_that_reads_it(model_dir: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(model_dir)  # transformers' sdpa ignores shared prefixes
    prefix = PrefixCache().get(model, [5, 6, 7])
    sampling = Sampling(0.0, 1.0, eos_token_id=-1, pad_token_id=0)
    with pytest.raises(ValueError, match="need a model loaded with sdpa_gqa"):
        generate(model, [GenerationRequest([8, 9], None, 2, prefix)], sampling)


def test_prefill_groups_keep_padding_and_size_bounded() -> None:
    cache = ((torch.zeros(1, 3, 2), torch.zeros(1, 3, 2)),)
    lengths = [10, 12, 19, 25, 40, 41, 2000, 5]
    requests = [GenerationRequest([1] * n, None if n == 5 else cache, 4) for n in lengths]
    groups = [[lengths[i] for i in group] for group in _prefill_groups(requests)]
    assert groups == [[5], [10, 12, 19], [25, 40, 41], [2000]]
    many = [GenerationRequest([1] * 300, cache, 4) for _ in range(30)]
    assert [len(g) for g in _prefill_groups(many)] == [13, 13, 4]  # 13 x 300 <= 4096 < 14 x 300


def test_finished_rows_leave_the_batch_and_the_rest_generate_as_alone(model_dir: Path) -> None:
    """Rows that end early (their token limits) are dropped from the decode batch; the rows left keep
    generating exactly what they generate alone, and the dropped rows' caches are whole."""
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    no_eos = len(tokenizer)  # an id never sampled: every row runs to its limit
    sampling = Sampling(0.0, 1.0, eos_token_id=no_eos, pad_token_id=tokenizer.eos_token_id)
    shared = PrefixCache().get(model, tokenizer.encode(SYSTEM_PROMPT))
    limits = (2, 3, 12, 20, 30, 30)
    requests = [
        GenerationRequest(tokenizer.encode(REQUESTS[i % len(REQUESTS)]), shared if i % 2 else None, limit)
        for i, limit in enumerate(limits)
    ]
    rows_fed: list[tuple[int, int]] = []  # (rows, tokens) of each forward call
    hook = model.register_forward_pre_hook(
        lambda _, args, kwargs: rows_fed.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True
    )
    try:
        results = generate(model, requests, sampling)
    finally:
        hook.remove()
    assert [len(result.ids) for result in results] == list(limits)
    decode = [rows for rows, tokens in rows_fed if tokens == 1]  # the prefills feed more tokens
    assert decode[0] == len(requests) and decode[-1] == 2 and decode == sorted(decode, reverse=True)
    assert sum(decode) < len(requests) * (max(limits) - 1)  # fewer row-steps than keeping every row
    _assert_each_row_as_alone(model, requests, sampling)


def test_the_batch_cache_grows_in_place_and_refuses_to_overflow() -> None:
    rows = [[(torch.ones(2, 3, 4), torch.ones(2, 3, 4))], []]
    layer = ReservedLayer(rows, width=3, capacity=5)
    assert layer.get_seq_length() == 3  # before the first update: the rows' caches, right-aligned
    keys, values = layer.update(torch.full((2, 2, 1, 4), 2.0), torch.full((2, 2, 1, 4), 3.0))
    assert keys.shape == (2, 2, 4, 4) and float(keys[1, :, :3].abs().sum()) == 0.0  # row 1 had no cache
    assert float(keys[0, :, :3].sum()) == 24.0 and float(values[:, :, 3].mean()) == 3.0
    grown, _ = layer.update(torch.zeros(2, 2, 1, 4), torch.zeros(2, 2, 1, 4))
    assert grown.data_ptr() == keys.data_ptr() and grown.shape[2] == 5  # the same buffer, not a copy
    with pytest.raises(ValueError, match="holds 5 positions; 6"):
        layer.update(torch.zeros(2, 2, 1, 4), torch.zeros(2, 2, 1, 4))


def test_top_p_samples_only_inside_the_nucleus(model_dir: Path) -> None:
    """A nucleus so narrow that it holds only the top token samples the greedy ids at any temperature;
    without it the same temperature strays from them."""
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    eos = tokenizer.eos_token_id
    requests = [GenerationRequest(tokenizer.encode(request), None, 12) for request in REQUESTS]
    greedy = [r.ids for r in generate(model, requests, Sampling(0.0, 1.0, eos, eos))]
    torch.manual_seed(0)
    narrow = [r.ids for r in generate(model, requests, Sampling(5.0, 1e-6, eos, eos))]
    wide = [r.ids for r in generate(model, requests, Sampling(5.0, 1.0, eos, eos))]
    assert narrow == greedy
    assert wide != greedy


def test_on_a_cpu_bf16_autocast_covers_the_prefill_and_not_the_decode_steps(model_dir: Path) -> None:
    """CPU autocast re-casts every weight at each decode step (3x slower there than float32)."""
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    autocast_on: list[tuple[int, bool]] = []  # (tokens fed, autocast enabled) per forward call
    model.register_forward_pre_hook(
        lambda _, args, kwargs: autocast_on.append(
            (kwargs["input_ids"].shape[1], torch.is_autocast_enabled("cpu"))
        ),
        with_kwargs=True,
    )
    request = GenerationRequest(tokens=list(range(5, 17)), cache=None, max_new_tokens=4)
    sampling = Sampling(temperature=0.0, top_p=1.0, eos_token_id=-1, pad_token_id=0)
    (result,) = generate(model, [request], sampling, torch.autocast("cpu", dtype=torch.bfloat16))
    assert len(result.ids) == 4 and result.cache[0][0].dtype == torch.float32
    assert autocast_on == [(12, True), (1, False), (1, False), (1, False)]


def test_a_bf16_policy_on_a_cpu_generates_on_its_cast_copy_with_bf16_decode_steps(model_dir: Path) -> None:
    """Under bf16 on a CPU the policy generates on a copy whose linear weights are bfloat16 (built once
    per weights, dropped by ``weights_changed``): its prefills compute what autocast on the float32
    model computes, bit for bit, and its decode steps run under autocast too (the float32 model's run
    in float32); the caches stay float32."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = load_causal_lm(model_dir)
    policy = HFPolicy(model, tokenizer, HFPolicyConfig(temperature=0.0, max_new_tokens=6, precision="bf16"))
    copy_ = policy.inference_model()
    assert copy_ is not model and copy_ is policy.inference_model()
    sampling = Sampling(0.0, 1.0, eos_token_id=-1, pad_token_id=0)  # never stops: 6 tokens each
    precision = torch.autocast("cpu", dtype=torch.bfloat16)
    requests = [GenerationRequest(tokenizer.encode(request), None, 6) for request in REQUESTS[:2]]
    calls: dict[str, list[tuple[int, bool]]] = {}  # (tokens fed, autocast on) per forward call
    results = {}
    for name, net in (("copy", copy_), ("float32", model)):
        calls[name] = []
        hook = net.register_forward_pre_hook(
            lambda _, args, kwargs, seen=calls[name]: seen.append(
                (kwargs["input_ids"].shape[1], torch.is_autocast_enabled("cpu"))
            ),
            with_kwargs=True,
        )
        try:
            results[name] = generate(net, requests, sampling, precision)
        finally:
            hook.remove()
    assert all(on for tokens, on in calls["copy"])
    assert [on for tokens, on in calls["float32"] if tokens == 1] == [False] * 5
    for on_copy, on_model in zip(results["copy"], results["float32"], strict=True):
        assert on_copy.ids[0] == on_model.ids[0] and on_copy.logprobs[0] == on_model.logprobs[0]
        assert on_copy.cache[0][0].dtype == torch.float32
    policy.weights_changed()
    assert policy.inference_model() is not copy_
    assert HFPolicy(model, tokenizer, HFPolicyConfig(precision="fp32")).inference_model() is model
