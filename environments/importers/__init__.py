"""Importers for environments from other sources; each registers its name namespace on import."""

from environments.importers import agentworld

__all__ = ["agentworld"]
