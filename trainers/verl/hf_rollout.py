"""A verl rollout backend that needs no GPU: Hugging Face ``transformers`` generation, ``rollout.name=hf``.

verl's rollout is two halves (verl 0.9.1, ``workers/rollout``): a ``RolloutReplica`` the driver launches
(replica.py:70), which starts a server actor the agent loop sends token ids to (``generate``, through
``LLMServerClient``, llm_server.py:153), and a ``BaseRollout`` server adapter inside every trainer rank
(base.py:29, built by ``ActorRolloutRefWorker`` from ``_ROLLOUT_REGISTRY``, engine_workers.py:667), which
pushes the actor's weights into the server after each update (``update_weights``, engine_workers.py:728,
called by the ``naive`` checkpoint engine of a hybrid trainer, checkpoint_engine/base.py:518).

Here the server is a Ray actor holding the model as ``transformers`` loads it (``rollout.dtype``): it
generates token-in/token-out with ``model.generate`` and returns each sampled token's log-probability
under the temperature-scaled distribution (what verl's actor computes on the same tokens, so
``rollout_corr`` and the training-vs-rollout log-prob metrics mean the same thing as with vLLM). The
adapter on trainer rank 0 of each replica streams the full (unsharded) parameters to it in buckets of
``rollout.checkpoint_engine.update_weights_bucket_megabytes``. One replica per trainer rank
(tensor/data/pipeline parallel size 1); a CPU trainer uses it, and a GPU one can where vLLM is absent.
``register()`` makes ``hf`` known to verl in the process that calls it (``trainers.verl.setup``).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Iterator
from typing import Any

import ray
import torch
from omegaconf import DictConfig
from verl.plugin.platform import get_platform
from verl.utils.device import get_device_name, get_torch_device
from verl.workers.rollout import base as rollout_base
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, RolloutReplicaRegistry, TokenOutput

NAME = "hf"
SERVER_PREFIX = f"{NAME}_server_"


def server_name(replica_rank: int) -> str:
    """The named Ray actor of one replica's server (the adapter finds it by name, as vLLM's does,
    vllm_rollout/vllm_rollout.py:165)."""
    return f"{SERVER_PREFIX}{replica_rank}"


def _model_path(model_config: Any) -> str:
    from verl.utils.fs import copy_to_local

    return copy_to_local(str(model_config.get("local_path") or model_config.path))


def sampled_log_probs(
    logits: Iterable[torch.Tensor], tokens: torch.Tensor, temperature: float
) -> list[float]:
    """log p(token) of each generated token under its step's logits divided by ``temperature`` (greedy:
    the unscaled logits), as verl's actor scores a response (logits / temperature, log-softmax)."""
    scale = temperature if temperature > 0 else 1.0
    return [
        float(torch.log_softmax(step[0].float() / scale, dim=-1)[token])
        for step, token in zip(logits, tokens.tolist(), strict=False)
    ]


class HFRolloutServer:
    """One replica's server: the policy as ``transformers`` runs it, generating one request at a time
    (``transformers`` keeps no batch across requests) and taking weights from the adapter."""

    def __init__(self, config: Any, model_config: DictConfig, replica_rank: int) -> None:
        from transformers import AutoModelForCausalLM

        self.config, self.replica_rank = config, replica_rank  # verl's RolloutConfig
        overrides = model_config.get("override_config") or {}
        # verl's device where this process sees one (cuda beside the trainer rank), else the CPU
        self.device = torch.device(get_device_name() if get_torch_device().is_available() else "cpu")
        self.model = (
            AutoModelForCausalLM.from_pretrained(
                _model_path(model_config),
                dtype=getattr(torch, str(config.dtype or "float32")),
                attn_implementation=overrides.get("attn_implementation") or "sdpa",
                trust_remote_code=bool(model_config.get("trust_remote_code", False)),
            )
            .to(self.device)
            .eval()
        )
        self.eos = self.model.generation_config.eos_token_id
        # sampling draws from this process's generator: seeded as verl seeds vLLM (rollout.seed)
        torch.manual_seed(int(getattr(config, "seed", 0) or 0) + replica_rank)
        self.lock = asyncio.Lock()
        self.global_steps: int | None = None

    def max_new_tokens(self, prompt_length: int, sampling_params: dict[str, Any]) -> int:
        """The turn's token budget, as verl's vLLM server sets it (vllm_async_server.py:593-617)."""
        budget = sampling_params.get("max_tokens") or sampling_params.get("max_new_tokens")
        if budget is None:
            budget = min(
                self.config.response_length,
                self.config.prompt_length + self.config.response_length - prompt_length,
            )
        room = int(self.config.max_model_len or self.model.config.max_position_embeddings) - prompt_length
        if room < 1:
            raise ValueError(f"the prompt ({prompt_length} tokens) leaves no room in the model's context")
        return max(1, min(int(budget), room))

    def _generate(self, prompt_ids: list[int], sampling_params: dict[str, Any]) -> TokenOutput:
        temperature = float(sampling_params.get("temperature", 1.0))
        stops = [*([self.eos] if isinstance(self.eos, int) else self.eos or [])]
        stops += [t for t in sampling_params.get("stop_token_ids") or [] if t not in stops]
        top_k = int(sampling_params.get("top_k", -1))
        prompt = torch.tensor([prompt_ids], dtype=torch.long, device=self.device)
        with torch.no_grad():
            out = self.model.generate(
                prompt,
                attention_mask=torch.ones_like(prompt),
                do_sample=temperature > 0,
                temperature=temperature if temperature > 0 else None,
                top_p=float(sampling_params.get("top_p", 1.0)) if temperature > 0 else None,
                top_k=top_k if temperature > 0 and top_k > 0 else None,
                max_new_tokens=self.max_new_tokens(len(prompt_ids), sampling_params),
                eos_token_id=stops or None,
                pad_token_id=stops[0] if stops else None,
                output_logits=True,
                return_dict_in_generate=True,
            )
        tokens = out.sequences[0, len(prompt_ids) :]
        log_probs = (
            sampled_log_probs(out.logits, tokens, temperature) if sampling_params.get("logprobs") else None
        )
        return TokenOutput(
            token_ids=tokens.tolist(),
            log_probs=log_probs,
            stop_reason="completed",
            extra_fields={"global_steps": self.global_steps},
        )

    async def generate(
        self,
        request_id: str,
        *,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        image_data: Any = None,
        video_data: Any = None,
        **_: Any,
    ) -> TokenOutput:
        """Token-in/token-out generation (the signature ``LLMServerClient.generate`` calls)."""
        if image_data is not None or video_data is not None:
            raise ValueError("the hf rollout serves text models only")
        async with self.lock:
            return await asyncio.to_thread(self._generate, list(prompt_ids), dict(sampling_params))

    async def update_weights(self, weights: dict[str, torch.Tensor], global_steps: int | None = None) -> int:
        """Copy one bucket of named full tensors into the model; the number of tensors copied."""
        params = dict(self.model.named_parameters(remove_duplicate=False))  # tied names too
        unknown = sorted(set(weights) - set(params))
        if unknown:
            raise KeyError(f"the hf rollout's model has no parameters named {unknown[:5]}")
        async with self.lock:  # never between two tokens of a generation
            with torch.no_grad():
                for name, tensor in weights.items():
                    params[name].copy_(tensor.to(self.device))
        self.global_steps = global_steps
        return len(weights)

    async def wake_up(self) -> None:
        """The model stays in host memory between rollouts: nothing to restore."""

    async def sleep(self) -> None:
        """Nothing to release: ``transformers`` keeps no KV cache between requests."""

    async def clear_kv_cache(self) -> None:
        """No KV cache outlives a request."""

    release_kv_cache = resume_kv_cache = clear_kv_cache

    async def abort_all_requests(self, reject_request: bool = False) -> None:
        """Requests run to completion one at a time; none is left to abort once the lock is free."""
        async with self.lock:
            return None

    async def resume_generation(self) -> None:
        """Generation is never paused."""


class HFReplica(RolloutReplica):
    """The replica verl's ``LLMServerManager`` launches for ``rollout.name=hf`` (llm_server.py:462-485):
    one server actor per replica, on the node of the trainer rank whose weights it receives."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.world_size != 1:
            raise ValueError(
                "rollout.name=hf needs rollout tensor/data/pipeline parallel size 1 "
                f"(got a replica world size of {self.world_size})"
            )

    async def launch_servers(self) -> None:
        node = None
        if self.workers:  # hybrid: beside the trainer rank (replica.py:138)
            node = await self.workers[0].__ray_call__.remote(
                lambda _: ray.get_runtime_context().get_node_id()
            )
        placement = (
            ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(node_id=node, soft=False)
            if node
            else "DEFAULT"
        )
        name = server_name(self.replica_rank)
        server = (
            ray.remote(HFRolloutServer)
            .options(
                # no Ray CPU of its own: a hybrid rollout shares the trainer's cores, turn about with it,
                # as vLLM's server shares the trainer's GPUs (vllm_async_server.py:1377)
                num_cpus=0,
                scheduling_strategy=placement,
                # keep the node's devices visible, as vLLM's server does (vllm_async_server.py:1372-1375)
                runtime_env={"env_vars": {var: "1" for var in get_platform().ray_noset_envvars()}},
                name=name,
                max_concurrency=self.max_concurrency,
            )
            .remote(self.config, self.model_config, self.replica_rank)
        )
        await server.__ray_ready__.remote()
        self.servers = [server]
        self._server_handle, self._server_address = server, name


class HFServerAdapter(BaseRollout):
    """The rollout half inside a trainer rank (``ActorRolloutRefWorker.rollout``): sends the actor's full
    parameters to its replica's server on ``update_weights``; every rank iterates the weights (the FSDP
    all-gathers are collective), the replica's first rank sends them."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, replica_rank: int = -1) -> None:
        super().__init__(config, model_config, device_mesh)
        rank = int(os.environ.get("RANK", "0"))
        self.replica_rank = rank if replica_rank == -1 else replica_rank  # one rank per replica
        self.is_leader_rank = True
        self.bucket_bytes = int(self.config.checkpoint_engine.update_weights_bucket_megabytes) << 20
        self._server: Any = None

    def server(self) -> Any:
        """The replica's server, looked up once it exists (it is launched after the trainer ranks)."""
        if self._server is None:
            self._server = ray.get_actor(server_name(self.replica_rank))
        return self._server

    async def update_weights(
        self,
        weights: Iterator[tuple[str, torch.Tensor]],
        wire_format: str = "named_tensors",
        global_steps: int | None = None,
        peft_config: Any = None,
        **_: Any,
    ) -> int:
        """Stream ``(name, full tensor)`` pairs to the server in buckets; the number of tensors sent."""
        if wire_format != "named_tensors" or peft_config is not None:
            raise NotImplementedError(
                f"the hf rollout takes full named tensors (got wire_format={wire_format!r}"
                f"{', a LoRA adapter: set actor_rollout_ref.model.lora.merge=true' if peft_config else ''})"
            )
        bucket: dict[str, torch.Tensor] = {}
        size = sent = 0
        for name, tensor in weights:
            bucket[name] = tensor.detach().to("cpu", copy=True)
            size += tensor.numel() * tensor.element_size()
            if size >= self.bucket_bytes:
                sent += await self.server().update_weights.remote(bucket, global_steps)
                bucket, size = {}, 0
        if bucket:
            sent += await self.server().update_weights.remote(bucket, global_steps)
        return sent

    async def resume(self, tags: list[str]) -> None:
        """Weights and cache stay resident (``HFRolloutServer.wake_up``)."""

    async def release(self) -> None:
        """Nothing to release (``HFRolloutServer.sleep``)."""


def register() -> None:
    """Make ``rollout.name=hf`` known to verl in this process: its replica (``RolloutReplicaRegistry``,
    replica.py:312) and its server adapter (``_ROLLOUT_REGISTRY``, base.py:89, a module-level table
    ``get_rollout_class`` reads; verl offers no register call for it)."""
    RolloutReplicaRegistry.register(NAME, lambda: HFReplica)
    rollout_base._ROLLOUT_REGISTRY[(NAME, "async")] = f"{__name__}.HFServerAdapter"
