"""Library: a county public library system with a catalogue, copies at branches, loans, holds and fines."""

from . import seed, tools
from .core import TODAY, env

__all__ = ["TODAY", "env", "seed", "tools"]
