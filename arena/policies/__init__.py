"""Policies: everything that can act in an episode (a model endpoint, a local model, a script).

Every kind implements ``Policy`` (``base.py``), so the episode loop never branches on the kind.
"""

from arena.policies.base import (
    Policy,
    PolicyEpisode,
    PolicyTurn,
    PolicyUnavailable,
    TokenTrajectory,
    ToolCall,
)

__all__ = ["Policy", "PolicyEpisode", "PolicyTurn", "PolicyUnavailable", "TokenTrajectory", "ToolCall"]
