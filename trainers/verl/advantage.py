"""``arena_grpo``: verl's GRPO outcome advantage, leaving out samples the agent loop masked.

A sample whose ``response_mask`` is all zeros (an infrastructure failure that persisted after retries,
see ``trainers.verl.agent_loop``) carries no score: it is left out of its group's mean and standard
deviation and gets advantage 0, so the other samples of the group are normalised as if it had not run.
Registered with verl's ``register_adv_est``; every Ray worker imports it through the job's
``worker_process_setup_hook`` (``trainers.verl.setup``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from verl.trainer.ppo.core_algos import (
    ADV_ESTIMATOR_REGISTRY,
    compute_grpo_outcome_advantage,
    register_adv_est,
)

NAME = "arena_grpo"


def arena_grpo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
    config: Any = None,
    **_: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO over the scored samples only; masked samples get zeros."""
    if config is not None:
        norm_adv_by_std_in_grpo = bool(config.get("norm_adv_by_std_in_grpo", norm_adv_by_std_in_grpo))
    scored = response_mask.sum(dim=-1) > 0
    advantages = torch.zeros_like(token_level_rewards)
    returns = torch.zeros_like(token_level_rewards)
    if scored.any():
        rows = scored.nonzero(as_tuple=True)[0]
        adv, ret = compute_grpo_outcome_advantage(
            token_level_rewards[rows],
            response_mask[rows],
            np.asarray(index, dtype=object)[rows.cpu().numpy()],
            epsilon=epsilon,
            norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo,
        )
        advantages[rows], returns[rows] = adv, ret
    return advantages, returns


if NAME not in ADV_ESTIMATOR_REGISTRY:
    register_adv_est(NAME)(arena_grpo_advantage)
