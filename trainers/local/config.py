"""The local trainer's settings and what each step reports."""

from __future__ import annotations

from dataclasses import dataclass, field

from arena.rollout.records import EpisodeRecord

SFT_LR_DECAYS = ("constant", "linear")


@dataclass(frozen=True)
class TrainerConfig:
    """GRPO after Agent-World (clip-higher 0.2 / 0.28, KL penalty, n rollouts per task, binary reward)
    plus the SFT warm start. ``sft_first_turn_epochs`` epochs on the conversations cut after their first
    assistant turn come before the ``epochs`` on whole conversations: short examples dense in what a
    from-scratch model learns last (copying the request's ids into the first call). ``micro_batch_tokens``
    bounds one forward pass (gradients accumulate); ``mini_batches`` optimizer steps are taken per GRPO
    step (the later ones are off-policy, so the clipped ratio matters). ``precision`` is ``bf16`` (autocast)
    or ``fp32``; ``lora_rank`` > 0 trains LoRA adapters on every linear layer instead of all weights
    (merged into every saved checkpoint); ``train_top_layers`` > 0 trains (or adapts) only that many top
    decoder layers: the backward pass stops below them (0: every layer). ``tool_result_chars`` is the
    policy's cut of tool results in the chat template (None: the template's default). ``sft_lr_decay``
    ``linear``: each SFT call's learning rate falls from ``sft_lr`` towards 0 with the tokens it has
    trained on (``constant``: ``sft_lr`` throughout)."""

    lr: float = 2e-4
    sft_lr: float = 1e-3
    sft_lr_decay: str = "constant"
    n_rollouts: int = 4
    tasks_per_step: int = 8
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.28
    kl_coef: float = 0.001
    kl_type: str = "low_var_kl"
    loss_agg_mode: str = "token-mean"
    mini_batches: int = 2
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 96
    context_limit: int = 4096
    concurrency: int = 16
    epochs: int = 3
    sft_first_turn_epochs: int = 0
    sft_batch_size: int = 8
    micro_batch_tokens: int = 8192
    max_grad_norm: float = 1.0
    seed: int = 0
    device: str = "cpu"
    precision: str = "fp32"
    lora_rank: int = 0
    lora_alpha: float = 32.0
    train_top_layers: int = 0
    tool_result_chars: int | None = None

    def __post_init__(self) -> None:
        if self.sft_lr_decay not in SFT_LR_DECAYS:
            names = ", ".join(SFT_LR_DECAYS)
            raise ValueError(f"sft_lr_decay must be one of {names}, got {self.sft_lr_decay!r}")


@dataclass
class StepMetrics:
    """One GRPO step: what was rolled out, what entered the batch, the update's losses and the times."""

    step: int
    episodes: int
    infra_dropped: int
    batch_episodes: int
    success: float
    pg_loss: float
    kl: float
    clipfrac: float
    grad_norm: float
    response_tokens: int
    update_tokens: int
    rollout_s: float
    update_s: float
    tool_wait_s: float
    episode_wall_s: float
    records: list[EpisodeRecord] = field(default_factory=list, repr=False)
