"""Agent Arena as a verl (0.9) workload: the ``arena_agent`` agent loop, the EnvPool as a named Ray actor,
the parquet export, and the Hydra launch that composes verl's own ``ppo_trainer`` (docs/cluster.md)."""
