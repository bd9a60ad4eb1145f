"""One-machine GRPO for Hugging Face causal LMs (CPU or one GPU): SFT warm start on reference
conversations, then GRPO with rollouts through the arena's episode loop and verl's ``core_algos``."""

from trainers.local.config import StepMetrics, TrainerConfig
from trainers.local.sft import SFTExample
from trainers.local.trainer import GRPOTrainer, Rollout

__all__ = ["GRPOTrainer", "Rollout", "SFTExample", "StepMetrics", "TrainerConfig"]
