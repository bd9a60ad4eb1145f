"""``arena_agent``: verl's agent loop for Agent Arena tasks.

Per trajectory: lease one isolated session of the task's environment from the pool actor, run the shared
episode (``arena.rollout.episode.run_episode``) with ``VerlPolicy`` generating token-in/token-out through
``server_manager``, and return its token trajectory as an ``AgentLoopOutput``: ``reward_score`` is the
verifier's verdict (1.0 solved, 0.0 not), ``extra_fields`` carry the failure mode and the episode metrics.
The session is always released (``run_episode`` leases it in an ``async with``).

An infrastructure failure (dead worker, expired session, rollout server gone) is retried on a fresh
session, ``arena.infra_retries`` times. One that persists is masked, not scored: ``response_mask`` is all
zeros (no policy-gradient, KL or entropy term of verl's actor reads a token of it), ``extra_fields``
carries ``arena_infra_error=1``, and the ``arena_grpo`` advantage estimator (``trainers.verl.advantage``)
leaves the sample out of its group's baseline and gives it advantage 0, so its placeholder score (0.0,
needed because verl builds ``rm_scores`` only when every sample has one) never reaches the loss.

An episode that ends before its first generation (a persistent infrastructure failure, a prompt already
over the response budget) returns one padding token with mask 0 as its response: verl writes the score
on the last response token (``AgentLoopOutput.as_dict``, which ``AgentLoopWorkerTQ`` calls), so an empty
response would fail there with an ``IndexError``.

``extra_fields`` also carry ``min_global_steps``/``max_global_steps``, the versions of the weights that
generated the trajectory (the servers' ``global_steps``), as verl's ``ToolAgentLoop`` keeps them
(tool_agent_loop.py:261-267): verl's v1 trainer reads them as integers for its staleness metrics
(trainer/ppo/v1/trainer_base.py:1897). An episode that generated nothing reports the newest version this
worker has seen (0 before any).

The episode's limits are verl's keys: ``rollout.multi_turn.max_assistant_turns`` (the turn limit) and
``max_tool_response_length``/``tool_response_truncate_side`` (applied by ``VerlPolicy`` to what the
model sees of a tool result); ``arena.max_tokens`` caps generated tokens per episode.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from omegaconf import DictConfig, OmegaConf
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register
from verl.experimental.agent_loop.tool_parser import ToolParser

from arena.rollout.episode import SYSTEM_PROMPT, EpisodeConfig, run_episode
from arena.rollout.records import EpisodeRecord, FailureMode
from arena.runtime.errors import InfrastructureError
from task_synth.model import Task
from trainers.verl.dataset import AGENT_NAME
from trainers.verl.policy import ToolResultLimit, VerlPolicy
from trainers.verl.pool_service import NAMESPACE, POOL_NAME, RemoteSessions, find_pool

logger = logging.getLogger(__name__)

INFRA_FLAG = "arena_infra_error"
_POOLS: dict[tuple[str, str], Any] = {}


def arena_settings(config: DictConfig) -> dict[str, Any]:
    """The ``arena`` section of verl's config (pool actor name, episode limits, retries), with defaults."""
    section = config.get("arena") or {}
    settings = (
        OmegaConf.to_container(section, resolve=True) if isinstance(section, DictConfig) else dict(section)
    )
    return {
        "pool_name": POOL_NAME,
        "pool_namespace": NAMESPACE,
        "max_tokens": None,
        "infra_retries": 1,
        "retry_delay_s": 1.0,
        "system_prompt": SYSTEM_PROMPT,
        **settings,
    }


@register(AGENT_NAME)
class ArenaAgentLoop(AgentLoopBase):
    """One arena task per sample: ``extra_info["task"]`` holds the task (``arena tasks export``)."""

    newest_weights = 0
    """The newest weight version (``global_steps``) a server reported to this worker process."""

    def __init__(self, *args: Any, tools: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.settings = arena_settings(self.config)
        self.response_length = self.rollout_config.response_length
        multi_turn = self.rollout_config.multi_turn
        self.parser = ToolParser.get_tool_parser(multi_turn.format, self.tokenizer)
        self.episode_config = EpisodeConfig(
            max_turns=int(multi_turn.max_assistant_turns or EpisodeConfig.max_turns),
            max_tokens=self.settings["max_tokens"],
            system_prompt=str(self.settings["system_prompt"]),
        )

    @property
    def tool_limit(self) -> ToolResultLimit:
        """How much of a tool result the model sees (verl's ``multi_turn`` keys)."""
        multi_turn = self.rollout_config.multi_turn
        return ToolResultLimit(multi_turn.max_tool_response_length, multi_turn.tool_response_truncate_side)

    def sessions(self) -> RemoteSessions:
        """The pool actor, found by name in this Ray cluster (looked up once per worker process)."""
        key = (str(self.settings["pool_name"]), str(self.settings["pool_namespace"]))
        if key not in _POOLS:
            _POOLS[key] = find_pool(*key)
        return RemoteSessions(_POOLS[key])

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        extra_info = kwargs.get("extra_info") or {}
        if "task" not in extra_info:
            raise ValueError(
                f"{AGENT_NAME} needs extra_info.task (export the data with `arena tasks export`)"
            )
        task = Task.model_validate_json(extra_info["task"])
        attempts = 1 + int(self.settings["infra_retries"])
        for attempt in range(attempts):
            policy = VerlPolicy(self, self.parser, sampling_params, self.response_length, self.tool_limit)
            try:
                sessions = self.sessions()
            except InfrastructureError as exc:  # the pool actor is missing
                record = EpisodeRecord(task.id, task.env, task.difficulty, str(task.kind), attempt)
                record.infra_error = str(exc)
            else:
                record = await run_episode(sessions, task, policy, self.episode_config, repeat=attempt)
            if record.infra_error is None:
                break
            _POOLS.clear()  # look the pool actor up again: it may have been restarted
            logger.warning(
                "infra failure on %s (try %d of %d): %s", task.id, attempt + 1, attempts, record.infra_error
            )
            if attempt + 1 < attempts:
                await asyncio.sleep(float(self.settings["retry_delay_s"]) * (attempt + 1))
        return await self.output(task, record, policy, attempt + 1, list(kwargs.get("raw_prompt") or []))

    async def output(
        self, task: Task, record: EpisodeRecord, policy: VerlPolicy, attempts: int, raw_prompt: list[Any]
    ) -> AgentLoopOutput:
        """The episode as verl's output (a failure before the first turn: the prompt, no response)."""
        episode = policy.episodes[-1] if policy.episodes else None
        trajectory = episode.trajectory() if episode is not None else None
        prompt_ids = trajectory.prompt_ids if trajectory else await self.ct_build_initial_tokens(raw_prompt)
        response_ids = trajectory.response_ids[: self.response_length] if trajectory else []
        mask = trajectory.response_mask[: self.response_length] if trajectory else []
        logprobs = trajectory.response_logprobs[: self.response_length] if trajectory else []
        if not response_ids:  # verl scores the last response token: one padding token, never trained
            pad = self.tokenizer.pad_token_id
            response_ids, mask = [self.tokenizer.eos_token_id if pad is None else pad], [0]
            logprobs = [0.0] if self.rollout_config.calculate_log_probs else []
        infra = record.failure_mode is FailureMode.INFRA_ERROR
        if infra:
            mask = [0] * len(response_ids)
            logprobs = [0.0] * len(response_ids) if logprobs else []
        versions = episode.weight_versions if episode is not None else []
        if versions:
            ArenaAgentLoop.newest_weights = max(ArenaAgentLoop.newest_weights, *versions)
        metrics = record.metrics()
        extra = {
            "task_id": task.id,
            "env": task.env,
            "failure_mode": str(record.failure_mode),
            INFRA_FLAG: int(infra),
            "infra_error": record.infra_error or "",
            "attempts": attempts,
            "episode_metrics": metrics,
            "turn_scores": [],
            "tool_rewards": [],
            "min_global_steps": min(versions, default=ArenaAgentLoop.newest_weights),
            "max_global_steps": max(versions, default=ArenaAgentLoop.newest_weights),
        }
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=response_ids,
            response_mask=mask,
            response_logprobs=logprobs or None,
            reward_score=0.0 if infra else float(bool(record.passed)),
            num_turns=1 + 2 * len(record.turns),
            metrics=AgentLoopMetrics(
                generate_sequences=metrics["policy_s"], tool_calls=metrics["tool_wait_s"]
            ),
            extra_fields=extra,
        )
