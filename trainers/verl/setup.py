"""What every Ray worker of an arena verl job imports first (``runtime_env.worker_process_setup_hook``):
the ``arena_agent`` loop and the ``arena_grpo`` advantage estimator register themselves with verl, the
``hf`` rollout backend (``trainers.verl.hf_rollout``) is registered, and with ``VERL_PLATFORM=cpu`` the CPU
platform (``trainers.verl.cpu_platform``) is installed."""

from __future__ import annotations


def register() -> None:
    """Import the modules whose import registers them with verl; install the CPU platform if selected."""
    import trainers.verl.advantage
    import trainers.verl.agent_loop  # noqa: F401
    from trainers.verl import cpu_platform, hf_rollout

    hf_rollout.register()
    cpu_platform.install()
