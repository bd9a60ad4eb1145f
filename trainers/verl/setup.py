"""What every Ray worker of an arena verl job imports first (``runtime_env.worker_process_setup_hook``):
the ``arena_agent`` loop and the ``arena_grpo`` advantage estimator register themselves with verl."""

from __future__ import annotations


def register() -> None:
    """Import the modules whose import registers them with verl."""
    import trainers.verl.advantage
    import trainers.verl.agent_loop  # noqa: F401
