"""Agent Arena: runtime, orchestration and the `arena` command line."""
