"""The ``hf`` rollout backend (``trainers.verl.hf_rollout``): its server generates token-in/token-out from a
tiny model with the log-probs the policy gives those tokens, honours the turn's token budget and stop
tokens, takes new weights (tied names included) and refuses unknown ones; ``rollout.name=hf`` resolves
through verl's two registries. verl's trainer driving it: ``tests/test_verl_train_cpu.py``."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM
from verl.utils.config import omega_conf_to_dataclass
from verl.workers.rollout.base import get_rollout_class
from verl.workers.rollout.replica import get_rollout_replica_class

from arena.policies.tiny import build_tiny
from tests.hf_samples import SIZE
from tests.verl_samples import verl_config
from trainers.verl import hf_rollout
from trainers.verl.hf_rollout import HFReplica, HFRolloutServer, HFServerAdapter

CORPUS = ["How many copies of book 1 exist?", '{"copies": 3}', "get_book returns a book by its id."]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny(tmp_path_factory.mktemp("tiny"), CORPUS, SIZE)


def server(model_dir: Path, *overrides: str) -> HFRolloutServer:
    config = verl_config(
        model_dir, model_dir / "unused.parquet", "unused", "actor_rollout_ref.rollout.name=hf", *overrides
    )
    rollout = omega_conf_to_dataclass(config.actor_rollout_ref.rollout)
    return HFRolloutServer(rollout, config.actor_rollout_ref.model, replica_rank=0)


def forward_log_probs(model: torch.nn.Module, prompt: list[int], response: list[int]) -> torch.Tensor:
    """What verl's actor computes: log p(response token | everything before it)."""
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
    return torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(response)[:, None])[:, 0]


def test_generates_tokens_with_the_policys_log_probs(model_dir: Path) -> None:
    hf = server(model_dir, "actor_rollout_ref.rollout.dtype=float32")
    prompt = [5, 17, 42, 8]
    out = asyncio.run(
        hf.generate(
            "r", prompt_ids=prompt, sampling_params={"temperature": 1.0, "logprobs": True, "max_tokens": 12}
        )
    )
    assert 1 <= len(out.token_ids) <= 12 and len(out.log_probs) == len(out.token_ids)
    assert out.stop_reason == "completed" and out.extra_fields["global_steps"] is None
    expected = forward_log_probs(hf.model, prompt, out.token_ids)
    assert torch.allclose(torch.tensor(out.log_probs), expected, atol=1e-4)
    no_log_probs = asyncio.run(hf.generate("r", prompt_ids=prompt, sampling_params={"max_tokens": 3}))
    assert no_log_probs.log_probs is None and len(no_log_probs.token_ids) <= 3


def test_stops_at_a_stop_token_and_fits_the_context(model_dir: Path) -> None:
    hf = server(model_dir, "actor_rollout_ref.rollout.dtype=float32")
    prompt = [5, 17, 42, 8]
    first = asyncio.run(
        hf.generate("r", prompt_ids=prompt, sampling_params={"temperature": 0, "max_tokens": 6})
    )
    stop = first.token_ids[2]
    stopped = asyncio.run(
        hf.generate(
            "r",
            prompt_ids=prompt,
            sampling_params={"temperature": 0, "max_tokens": 6, "stop_token_ids": [stop]},
        )
    )
    assert stopped.token_ids == first.token_ids[: first.token_ids.index(stop) + 1]  # greedy: same path
    assert hf.max_new_tokens(SIZE.max_position_embeddings - 2, {"max_tokens": 50}) == 2
    with pytest.raises(ValueError, match="no room"):
        hf.max_new_tokens(SIZE.max_position_embeddings, {})


def test_new_weights_move_the_log_probs_and_unknown_names_are_refused(model_dir: Path) -> None:
    hf = server(model_dir, "actor_rollout_ref.rollout.dtype=float32")
    prompt, sampling = [5, 17, 42, 8], {"temperature": 0, "logprobs": True, "max_tokens": 8}
    before = asyncio.run(hf.generate("r", prompt_ids=prompt, sampling_params=sampling))
    trained = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    with torch.no_grad():
        for param in trained.parameters():
            param.add_(0.05 * torch.randn_like(param))
    state = trained.state_dict()
    assert asyncio.run(hf.update_weights(state, global_steps=3)) == len(state)
    after_weights = forward_log_probs(hf.model, prompt, before.token_ids)
    assert torch.allclose(after_weights, forward_log_probs(trained, prompt, before.token_ids), atol=1e-5)
    assert (after_weights - torch.tensor(before.log_probs)).abs().max() > 1e-3
    again = asyncio.run(hf.generate("r", prompt_ids=prompt, sampling_params=sampling))
    assert again.extra_fields["global_steps"] == 3  # what verl reads as the rollout's policy version
    with pytest.raises(KeyError, match=r"no_such\.weight"):
        asyncio.run(hf.update_weights({"no_such.weight": torch.zeros(1)}))


def test_rollout_name_hf_resolves_through_verls_registries() -> None:
    hf_rollout.register()
    assert get_rollout_class("hf", "async") is HFServerAdapter
    assert get_rollout_replica_class("hf") is HFReplica
